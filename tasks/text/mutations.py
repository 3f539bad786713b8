"""Mutation operators: pure functions from a spaCy Doc (or text) to mutants, for any method.

A :class:`Mutant` records the ``operator``, its ``edits`` (token ``position``, ``original``,
``replacement``; the first edit is also exposed as ``position``/``original``/``replacement``)
and the mutated ``text``. A text is the Doc's text with the edited tokens' characters
replaced, so spacing and everything else stay as they were.

- :func:`synonyms` / :func:`antonyms`: substitute an adjective (spaCy ADJ tagged JJ) or a
  verb (spaCy VERB, so never an auxiliary) by a WordNet synonym/antonym of the same part of
  speech, inflected to the token's PTB tag (``tasks/text/lexicon_lookup.py`` says how; a form
  it cannot build with confidence is skipped). With ``polarity`` (from
  :func:`~lingtest.tasks.text.lexicon_lookup.polarity_lookup`) a seed word must be clearly polar and a
  synonym share that polarity, an antonym have the opposite one. Every candidate is returned,
  ordered by position, then by WordNet rank (most frequent sense first).
- ``tasks/text/rewrite.py``'s ``synonym_rewrite``: synonym substitution over the whole text
  (COSTELLO's CR2 s⁻ and CR3 s⁺), built on this module's slots and edits.
- :func:`replace_lemma`: one substitute for every occurrence of a lemma (pairs of sentences).
- :func:`gender_swap`: pronouns and gendered nouns by the pair table, first names by a name
  map (:func:`~lingtest.tasks.text.lexicon_lookup.name_swaps`), in both directions, case kept.
- :func:`invert`: semantic inversion by looking the text up in the contrast sets.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.text.lexicon_lookup import (VERB_TAGS, antonym_lemmas, contrast_lookup, has_pos,
                                       indefinite_article, inflect, name_swaps, pair_swaps,
                                       synonym_lemmas, usable, verb_lemma)

_OPPOSITE = {"pos": "neg", "neg": "pos"}
# With PTB tags the pronoun "her" splits: PRP$ → his (the table's swap), PRP → him; and a
# predicative "his" (PRP) → hers. This makes pronoun swaps round-trip when a Doc is given.
_TAGGED_SWAPS = {("her", "PRP"): "him", ("his", "PRP"): "hers"}
_WORDS = re.compile(r"ma'am|[A-Za-z]+(?:-[A-Za-z]+)*", re.IGNORECASE)


@dataclass(frozen=True)
class Edit:
    """One replaced token: its index (None: the whole text), the old and the new string."""

    position: int | None
    original: str
    replacement: str


@dataclass(frozen=True)
class Mutant:
    """A mutated text and how it was made (``detail``: operator-specific facts, e.g. lemmas)."""

    operator: str
    text: str
    edits: tuple[Edit, ...]
    detail: tuple[tuple[str, str], ...] = ()

    @property
    def position(self) -> int | None:
        return self.edits[0].position

    @property
    def original(self) -> str:
        return self.edits[0].original

    @property
    def replacement(self) -> str:
        return self.edits[0].replacement

    def as_dict(self) -> dict[str, Any]:
        """Plain data for provenance JSON."""
        return {"operator": self.operator, "edits": [asdict(e) for e in self.edits],
                **dict(self.detail)}


@dataclass(frozen=True)
class Slot:
    """A token that synonym/antonym substitution may replace."""

    position: int
    word: str  # lowercased surface form
    lemma: str
    pos: str  # WordNet part of speech: "a" or "v"
    tag: str  # PTB tag


def match_case(template: str, word: str) -> str:
    """``word`` in the case pattern of ``template``: KING → QUEEN, He → She, he → she."""
    if len(template) > 1 and template.isupper():
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def _rebuild(doc: Any, replacements: Mapping[int, str]) -> str:
    """The Doc's text with the tokens at the given positions replaced (by slicing)."""
    text, pieces, cursor = doc.text, [], 0
    for position in sorted(replacements):
        token = doc[position]
        pieces += [text[cursor:token.idx], replacements[position]]
        cursor = token.idx + len(token.text)
    return "".join(pieces) + text[cursor:]


def _article_edit(doc: Any, position: int, replacement: str) -> Edit | None:
    """The a/an change a new word needs after an indefinite article (a good → an evil)."""
    if position == 0:
        return None
    before = doc[position - 1]
    if before.lower_ not in ("a", "an"):
        return None
    wanted = match_case(before.text, indefinite_article(replacement))
    return None if wanted == before.text else Edit(position - 1, before.text, wanted)


def apply_edits(doc: Any, words: Sequence[Edit]) -> tuple[str, tuple[Edit, ...]]:
    """Text and edits for word replacements plus the article fixes they need (after them)."""
    articles = [a for a in (_article_edit(doc, e.position, e.replacement) for e in words) if a]
    edits = tuple(words) + tuple(articles)
    return _rebuild(doc, {e.position: e.replacement for e in edits}), edits


def slots(doc: Any, wn: Any) -> list[Slot]:
    """Adjectives (JJ) and verbs (VB*) WordNet knows in that role, light verbs excluded.

    Cached in ``doc.user_data`` (per WordNet reader): every operator on a Doc reads them.
    """
    key = ("lingtest.slots", id(wn))
    if key not in doc.user_data:
        doc.user_data[key] = _find_slots(doc, wn)
    return doc.user_data[key]


def _find_slots(doc: Any, wn: Any) -> list[Slot]:
    found = []
    for token in doc:
        if token.pos_ == "ADJ" and token.tag_ == "JJ":
            pos, lemma = "a", token.lower_
        elif token.pos_ == "VERB" and token.tag_ in VERB_TAGS:
            pos = "v"
            lemma = verb_lemma(wn, token.lower_, token.lemma_.lower(), token.tag_) or ""
        else:
            continue
        if not usable(lemma) or not has_pos(wn, lemma, pos):
            continue
        found.append(Slot(token.i, token.lower_, lemma, pos, token.tag_))
    return found


def polarity_of(polarity: Mapping[str, str], *words: str) -> str | None:
    for word in words:
        label = polarity.get(word)
        if label in _OPPOSITE:
            return label
    return None


def _substitutions(doc: Any, wn: Any, kind: str, polarity: Mapping[str, str] | None,
                   positions: Iterable[int] | None) -> list[Mutant]:
    wanted = None if positions is None else set(positions)
    lookup = synonym_lemmas if kind == "synonym" else antonym_lemmas
    mutants = []
    for slot in slots(doc, wn):
        if wanted is not None and slot.position not in wanted:
            continue
        need = None
        if polarity is not None:
            seed_polarity = polarity_of(polarity, slot.word, slot.lemma)
            if seed_polarity is None:
                continue
            need = seed_polarity if kind == "synonym" else _OPPOSITE[seed_polarity]
        for rank, lemma in enumerate(lookup(wn, slot.lemma, slot.pos)):
            form = inflect(wn, lemma, slot.pos, slot.tag)
            if form is None or form == slot.word:
                continue
            if need is not None and polarity_of(polarity, form, lemma) != need:
                continue
            original = doc[slot.position].text
            replacement = match_case(original, form)
            detail = (("lemma", slot.lemma), ("substitute", lemma), ("pos", slot.pos),
                      ("tag", slot.tag), ("rank", str(rank)))
            if need is not None:
                detail += (("polarity", need),)
            text, edits = apply_edits(doc, [Edit(slot.position, original, replacement)])
            mutants.append(Mutant(kind, text, edits, detail))
    return mutants


def synonyms(doc: Any, wn: Any, polarity: Mapping[str, str] | None = None,
             positions: Iterable[int] | None = None) -> list[Mutant]:
    """Every single-word synonym substitution of an ADJ/VERB (sentiment-guided with ``polarity``)."""
    return _substitutions(doc, wn, "synonym", polarity, positions)


def antonyms(doc: Any, wn: Any, polarity: Mapping[str, str] | None = None,
             positions: Iterable[int] | None = None) -> list[Mutant]:
    """Every single-word antonym substitution (with ``polarity``: opposite clear polarity)."""
    return _substitutions(doc, wn, "antonym", polarity, positions)


def replace_lemma(doc: Any, wn: Any, lemma: str, pos: str, substitute: str,
                  operator: str) -> Mutant | None:
    """Replace every slot of ``lemma``/``pos`` by ``substitute`` in each token's form.

    None when the lemma does not occur or ``substitute`` cannot take one of the forms, so a
    pair of sentences is only ever mutated alike.
    """
    words = []
    for slot in slots(doc, wn):
        if slot.lemma != lemma or slot.pos != pos:
            continue
        form = inflect(wn, substitute, pos, slot.tag)
        if form is None or form == slot.word:
            return None
        original = doc[slot.position].text
        words.append(Edit(slot.position, original, match_case(original, form)))
    if not words:
        return None
    text, edits = apply_edits(doc, words)
    detail = (("lemma", lemma), ("substitute", substitute), ("pos", pos))
    return Mutant(operator, text, edits, detail)


_SWAPPABLE_POS = frozenset({"PRON", "NOUN", "PROPN", "ADJ", "DET", "X"})
_NAME_PARTICLES = frozenset({"de", "del", "della", "di", "da", "du", "la", "le", "van",
                             "von", "der", "den", "st"})


def _tokens(text_or_doc: Any, names: Mapping[str, str]
            ) -> tuple[str, list[tuple[int, int, int, str, str, bool, bool]]]:
    """(text, [(position, start, end, token, tag, may_swap_word, starts_name)]).

    A Doc gives its tokens; a gendered word is swappable unless tagged as a verb, adverb etc.
    (to miss ≠ Miss). A name starts a PERSON entity when the Doc has NER, else it is a PROPN
    not preceded by a PROPN. Plain text is split into words by a regex; a name is a
    capitalised word not preceded by a known name or a capitalised word other than the first.
    """
    found = []
    if isinstance(text_or_doc, str):
        text = text_or_doc
        previous = False
        for i, m in enumerate(_WORDS.finditer(text)):
            word = m.group()
            capital = word[:1].isupper()
            found.append((i, m.start(), m.end(), word, "", True, capital and not previous))
            previous = capital and (i > 0 or word.lower() in names)
        return text, found
    doc = text_or_doc
    with_ner = doc.has_annotation("ENT_IOB")
    for t in doc:
        if with_ner:
            starts = t.ent_iob_ == "B" and t.ent_type_ == "PERSON"
        else:
            starts = t.pos_ == "PROPN" and (t.i == 0 or doc[t.i - 1].pos_ != "PROPN")
        may_swap = not t.pos_ or t.pos_ in _SWAPPABLE_POS
        found.append((t.i, t.idx, t.idx + len(t.text), t.text, t.tag_, may_swap,
                      starts and t.text[:1].isupper()))
    return doc.text, found


def gender_swap(text_or_doc: Any, pairs: Mapping[str, str] | pd.DataFrame,
                names: Mapping[str, str] | pd.DataFrame) -> Mutant | None:
    """Swap gendered words and first names; None when the text has none.

    ``pairs``: lowercased word → counterpart (:func:`~lingtest.tasks.text.lexicon_lookup.pair_swaps`);
    ``names``: lowercased first name → replacement (:func:`~...name_swaps`). Case is kept
    (He → She, KING → QUEEN, a trailing period too: Mr. → Mrs.). Only the first word of a name
    is swapped ("Tim Allen": Tim, not the surname); name particles (De, Van) never are. What
    counts as a name start is said in :func:`_tokens`. With a Doc, ``position`` is the token
    index; with a string, the index among its words. The ``gender_pairs`` and ``names``
    tables are accepted too, but building the maps costs ~0.1 s: build them once for loops.
    """
    if isinstance(pairs, pd.DataFrame):
        pairs = pair_swaps(pairs)
    if isinstance(names, pd.DataFrame):
        names = name_swaps(names)
    text, tokens = _tokens(text_or_doc, names)
    edits, pieces, cursor = [], [], 0
    for position, start, end, token, tag, may_swap, starts_name in tokens:
        core = token[:-1] if token.endswith(".") and len(token) > 1 else token
        key = core.lower()
        swap = None
        if may_swap:
            swap = _TAGGED_SWAPS.get((key, tag)) or pairs.get(key)
        if swap is None and starts_name and key not in _NAME_PARTICLES:
            swap = names.get(key)
        if swap is None:
            continue
        replacement = match_case(core, swap) + token[len(core):]
        edits.append(Edit(position, token, replacement))
        pieces += [text[cursor:start], replacement]
        cursor = end
    if not edits:
        return None
    return Mutant("gender_swap", "".join(pieces) + text[cursor:], tuple(edits))


def invert(text: str, lookup: Mapping[str, str] | pd.DataFrame) -> Mutant:
    """The contrast-set twin of ``text`` (semantic inversion); LingtestError when unknown.

    ``lookup``: original → contrast (:func:`~lingtest.tasks.text.lexicon_lookup.contrast_lookup`) or
    the ``contrast_pairs`` table; a text that differs only in whitespace still matches.
    """
    if isinstance(lookup, pd.DataFrame):
        lookup = contrast_lookup(lookup)
    contrast = lookup.get(text)
    if contrast is None:
        squeezed = " ".join(text.split())
        contrast = next((c for o, c in lookup.items() if " ".join(o.split()) == squeezed), None)
    if contrast is None:
        preview = text if len(text) <= 60 else text[:57] + "..."
        raise LingtestError(f"invert: {preview!r} is not an original review of the contrast "
                            "sets; only texts in the contrast_pairs table can be inverted")
    return Mutant("invert", contrast, (Edit(None, text, contrast),))


def first_per_position(mutants: Sequence[Mutant]) -> dict[int, Mutant]:
    """The best-ranked mutant at each position (mutants arrive ranked per position)."""
    best: dict[int, Mutant] = {}
    for mutant in mutants:
        best.setdefault(mutant.position, mutant)  # type: ignore[arg-type]
    return best
