"""Lexical look-ups behind the mutation operators: WordNet synonyms/antonyms, verb inflection,
word polarity, gender swaps and the contrast-set table, each built once and cached.

Choices (see ``tasks/text/mutations.py`` for how the operators use them):

- **Substitutes** are WordNet lemma names of the same part of speech (adjective satellites
  count as adjectives), most frequent sense first. Multi-word lemmas (``chip_in``) are
  *skipped*, not spaced out: a phrase cannot take the token's inflection and often changes the
  syntax around it. Capitalised lemmas (proper nouns), lemmas with digits and the light verbs
  be/have/do are skipped too.
- **Antonyms** are WordNet's lexical antonyms of the word's own lemmas; for an adjective
  satellite (``wonderful``), also the indirect antonyms through its head adjective
  (``similar_tos``), as WordNet's adjective clusters intend. Derivational links are not used.
- **Inflection** turns a verb lemma into the token's PTB tag (VB, VBP, VBZ, VBD, VBN, VBG) from
  WordNet's exception list (irregular and consonant-doubling forms) and the regular spelling
  rules; a form that is ambiguous (sang/sung both unmarked) yields None, so the operator skips
  that substitute rather than writing a wrong form. Adjectives substitute only in the plain
  JJ form (comparatives and superlatives are skipped). The seed verb's lemma is checked
  against WordNet (:func:`verb_lemma`: hated → hate, where the tagger said "hat"). It reads
  nltk's parsed ``verb.exc`` (``_exception_map``) and ``_morphy``, private but stable in nltk 3.
- **Articles**: a substitute after "a"/"an" gets the article its spelling needs
  (:func:`indefinite_article`: an evil, a unique, an honest).
- **Polarity**: a word is *clearly* polar when the ``word_polarity`` table marks it pos/neg
  with |strength| ≥ ``CLEAR_STRENGTH`` (0.25, the table's own neutral band).
- **Names**: a first name listed under one gender only maps to one of the ``NAME_POOL`` most
  frequent CheckList names of the other gender, picked by a sha256 of the name: the same name
  always gets the same swap, in every run and process, with no RNG state to thread through.
"""
from __future__ import annotations

import functools
import hashlib
import re
from typing import Any

import pandas as pd

from lingtest.tasks.core.errors import LingtestError

CLEAR_STRENGTH = 0.25
NAME_POOL = 200  # replacement names: the most frequent CheckList names of the other gender
LIGHT_VERBS = frozenset({"be", "have", "do"})
_WORD = re.compile(r"^[a-z]+(?:-[a-z]+)*$")
# Past tense equal to the lemma, where WordNet's exception list has no entry to say so.
_SAME_PAST = frozenset({
    "beat", "bid", "broadcast", "burst", "cast", "cost", "cut", "forecast", "hit", "hurt",
    "let", "put", "quit", "read", "rid", "set", "shed", "shut", "slit", "split", "spread",
    "thrust", "upset", "wet"})
# Past participle equal to the lemma while the past tense is irregular (ran, came).
_PARTICIPLE_IS_LEMMA = frozenset({
    "become", "come", "overcome", "outrun", "overrun", "rerun", "run"})
_PARTICIPLE_ENDINGS = ("en", "wn", "ne", "rn", "ain")
VERB_TAGS = frozenset({"VB", "VBP", "VBZ", "VBD", "VBN", "VBG"})


# --------------------------------------------------------------------------- WordNet

def usable(name: str) -> bool:
    """A lemma name we can put in a sentence: lowercase letters, hyphens allowed."""
    return bool(_WORD.match(name)) and name not in LIGHT_VERBS


@functools.lru_cache(maxsize=None)
def has_pos(wn: Any, lemma: str, pos: str) -> bool:
    """WordNet knows ``lemma`` as part of speech ``pos`` (``a`` or ``v``)."""
    return bool(wn.synsets(lemma, pos=pos))


@functools.lru_cache(maxsize=None)
def synonym_lemmas(wn: Any, lemma: str, pos: str) -> tuple[str, ...]:
    """Usable single-word synonyms of ``lemma`` (``pos`` ``a``/``v``), most frequent sense first."""
    found: dict[str, None] = {}
    for synset in wn.synsets(lemma, pos=pos):
        for name in synset.lemma_names():
            if name != lemma and usable(name):
                found.setdefault(name, None)
    return tuple(found)


@functools.lru_cache(maxsize=None)
def antonym_lemmas(wn: Any, lemma: str, pos: str) -> tuple[str, ...]:
    """Direct antonyms of ``lemma``'s own lemmas, then (adjectives) indirect ones via heads."""
    direct: dict[str, None] = {}
    indirect: dict[str, None] = {}
    for synset in wn.synsets(lemma, pos=pos):
        for own in synset.lemmas():
            if own.name() != lemma:
                continue
            for ant in own.antonyms():
                direct.setdefault(ant.name(), None)
        if synset.pos() == "s":
            for head in synset.similar_tos():
                for head_lemma in head.lemmas():
                    for ant in head_lemma.antonyms():
                        indirect.setdefault(ant.name(), None)
    ordered = list(direct) + [name for name in indirect if name not in direct]
    return tuple(name for name in ordered if name != lemma and usable(name))


# --------------------------------------------------------------------------- inflection

@functools.lru_cache(maxsize=8)
def _exception_forms(wn: Any) -> dict[str, tuple[str, ...]]:
    """Verb lemma → its forms in WordNet's verb.exc (irregular and doubled forms)."""
    forms: dict[str, list[str]] = {}
    for form, lemmas in wn._exception_map["v"].items():  # nltk's parsed verb.exc
        for lemma in lemmas:
            forms.setdefault(lemma, []).append(form)
    return {lemma: tuple(sorted(found)) for lemma, found in forms.items()}


def _regular(lemma: str, tag: str) -> str:
    consonant_y = len(lemma) > 1 and lemma.endswith("y") and lemma[-2] not in "aeiou"
    if tag == "VBZ":
        if lemma.endswith(("s", "x", "z", "ch", "sh", "o")):
            return lemma + "es"
        return lemma[:-1] + "ies" if consonant_y else lemma + "s"
    if tag in ("VBD", "VBN"):
        if lemma.endswith("e"):
            return lemma + "d"
        return lemma[:-1] + "ied" if consonant_y else lemma + "ed"
    if lemma.endswith("ie"):
        return lemma[:-2] + "ying"
    if lemma.endswith("e") and not lemma.endswith(("ee", "ye", "oe")) and len(lemma) > 2:
        return lemma[:-1] + "ing"
    return lemma + "ing"


def _past(lemma: str, forms: tuple[str, ...], participle: bool) -> str | None:
    past = [f for f in forms if not f.endswith(("ing", "s"))]
    if participle:
        if lemma in _PARTICIPLE_IS_LEMMA:
            return lemma
        marked = [f for f in past if f.endswith(_PARTICIPLE_ENDINGS)]
        if len(marked) > 1:
            return None
        if marked:
            return marked[0]
    if lemma in _SAME_PAST:
        return lemma
    unmarked = [f for f in past if not f.endswith(_PARTICIPLE_ENDINGS)]
    if len(unmarked) > 1:
        return None
    if unmarked:
        return unmarked[0]
    doubled = lemma + lemma[-1] + "ing"
    if doubled in forms:  # hitting, setting: doubled stem without a listed past → past = lemma
        return lemma
    return _regular(lemma, "VBD")


@functools.lru_cache(maxsize=None)
def inflect_verb(wn: Any, lemma: str, tag: str) -> str | None:
    """``lemma`` in the form of PTB ``tag``, or None when unsure (then the caller skips it)."""
    if tag not in VERB_TAGS or lemma in LIGHT_VERBS:
        return None
    if tag in ("VB", "VBP"):
        return lemma
    forms = _exception_forms(wn).get(lemma, ())
    if tag == "VBG":
        ing = [f for f in forms if f.endswith("ing")]
        form = ing[0] if len(ing) == 1 else (None if ing else _regular(lemma, tag))
    elif tag == "VBZ":
        ends_s = [f for f in forms if f.endswith("s")]
        form = ends_s[0] if len(ends_s) == 1 else (None if ends_s else _regular(lemma, tag))
    else:
        form = _past(lemma, forms, participle=tag == "VBN")
    if form is None or lemma not in wn._morphy(form, "v"):
        return None
    return form


def inflect(wn: Any, lemma: str, pos: str, tag: str) -> str | None:
    """A substitute lemma in the token's form: verbs inflected, adjectives only as JJ."""
    if pos == "a":
        return lemma if tag == "JJ" else None
    return inflect_verb(wn, lemma, tag)


@functools.lru_cache(maxsize=None)
def _frequency(wn: Any, lemma: str, pos: str) -> int:
    return sum(l.count() for s in wn.synsets(lemma, pos=pos) for l in s.lemmas()
               if l.name() == lemma)


@functools.lru_cache(maxsize=None)
def verb_lemma(wn: Any, word: str, proposed: str, tag: str) -> str | None:
    """The verb lemma of ``word`` (lowercased) with PTB ``tag``, checked against WordNet.

    A base form (VB/VBP) is its own lemma. Otherwise the tagger's ``proposed`` lemma must be
    one of WordNet's readings of ``word``; among several readings the most frequent one wins
    (hated → hate, not hat; found → find), and the word itself only when nothing else fits
    (hit, set). None when WordNet does not know ``word`` as a verb form of ``proposed``.
    """
    readings = list(dict.fromkeys(wn._morphy(word, "v")))
    if tag in ("VB", "VBP"):
        return word if word in readings else None
    if proposed not in readings:
        return None
    others = [r for r in readings if r != word] or readings
    if proposed not in others:
        return None
    return max(others, key=lambda r: (_frequency(wn, r, "v"), r == proposed))


_AN_EXCEPTIONS = ("unique", "unit", "univers", "uniform", "union", "unif", "unilateral",
                  "unison", "unicorn", "use", "usu", "uti", "ure", "uran", "eu", "ewe", "one",
                  "once", "ubiq", "utop")
_AN_SILENT_H = ("hon", "hour", "heir")


def indefinite_article(word: str) -> str:
    """``a`` or ``an`` before ``word``, by spelling with the common exceptions (a unique,
    an honest)."""
    low = word.lower()
    if low.startswith(_AN_SILENT_H):
        return "an"
    if low.startswith(_AN_EXCEPTIONS):
        return "a"
    return "an" if low[:1] in "aeiou" else "a"


# --------------------------------------------------------------------------- tables

def polarity_lookup(word_polarity: pd.DataFrame,
                    min_strength: float = CLEAR_STRENGTH) -> dict[str, str]:
    """Lowercased word → ``pos``/``neg`` for clearly polar words only (others are absent)."""
    clear = word_polarity[(word_polarity["polarity"] != "neutral")
                          & (word_polarity["strength"].abs() >= min_strength)]
    return dict(zip(clear["word"].str.lower(), clear["polarity"]))


def pair_swaps(gender_pairs: pd.DataFrame) -> dict[str, str]:
    """Lowercased gendered word → its counterpart (one swap per word, as the table gives)."""
    return dict(zip(gender_pairs["word"].str.lower(), gender_pairs["swap"].str.lower()))


def _pick(name: str, pool: list[str]) -> str:
    """The pool entry a stable hash of ``name`` points at: same name, same swap, every run."""
    digest = int(hashlib.sha256(name.encode("utf-8")).hexdigest()[:12], 16)
    return pool[digest % len(pool)]


def name_swaps(names: pd.DataFrame, pool_size: int = NAME_POOL) -> dict[str, str]:
    """Lowercased first name → a name of the other gender, chosen by a hash of the name.

    Names listed under both genders (by any source) are left out: their swap is undefined.
    Replacements come from the ``pool_size`` most frequent CheckList names of the other gender.
    """
    genders = names.groupby(names["name"].str.lower())["gender"].agg(lambda g: set(g))
    clear = {name: next(iter(g)) for name, g in genders.items() if len(g) == 1}
    pools: dict[str, list[str]] = {}
    for gender in ("male", "female"):
        ranked = names[(names["source"] == "checklist") & (names["gender"] == gender)]["name"]
        pool = [n for n in dict.fromkeys(ranked) if clear.get(n.lower()) == gender]
        pools[gender] = pool[:pool_size]
        if not pools[gender]:
            raise LingtestError(f"the names table has no unambiguous {gender} CheckList names "
                                "(rerun `lingtest run data`)")
    other = {"male": "female", "female": "male"}
    return {name: _pick(name, pools[other[g]]) for name, g in clear.items()}


def contrast_lookup(contrast_pairs: pd.DataFrame) -> dict[str, str]:
    """Original review → its contrast (inverted) review, from the ``contrast_pairs`` table."""
    return dict(zip(contrast_pairs["original"], contrast_pairs["contrast"]))
