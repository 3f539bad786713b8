"""Input parameter models (IPMs) for combinatorial consistency testing (KomMKonLLM, step 2).

Two builders (``consistency.ipm``):

``guide`` (the default) is the guide's ``generate_synonyms`` (KomMKonLLM
``meta-runner/src/payload_generator/payload_generator.py``): every spaCy token is a
parameter; a PROPN/NOUN, VERB or ADJ token's values are the token, then the lemma names of
``wordnet.synsets(token, pos)`` (PROPN and NOUN as nouns; multi-word lemmas included, ``_``
read as a space), all lower-cased, duplicates dropped, the first ``max_values`` kept (the
guide's 3). A derived question is its tokens' values joined by single spaces, so the
original (row 0) is the lower-cased tokens: ``is st. stephen 's cathedral in vienna ?``.

``lingtest`` is the narrower model below. Each token of a question is a parameter; its values are the token itself first, then up to
``max_values - 1`` WordNet synonyms of the same part of speech, so that a covering-array row
(one value index per parameter) derives a question and the all-zero row gives the original
back, character for character. Choices:

- **Which tokens vary**: spaCy tags the question in context; only NOUN, VERB, ADJ and ADV
  tokens get synonyms (WordNet n, v, a with satellites, r). Stop words (spaCy's list, which
  also covers determiners, auxiliaries, pronouns, conjunctions), numbers (NUM or ``like_num``),
  punctuation, proper nouns (PROPN: a name has no synonyms, and swapping "Vienna" would change
  the question's facts) and words WordNet does not know keep one value. BoolQ questions are
  lowercase, so a lowercase name the tagger takes for a common noun can still get synonyms;
  a word the tagger puts in a part of speech WordNet does not know it in keeps one value
  (en_core_web_sm tags "red" in "Is the car red?" VBN, and "red" is no WordNet verb).
- **Synonyms** come from :func:`lingtest.tasks.text.lexicon_lookup.synonym_lemmas`: single-word lemma
  names only (multi-word lemmas such as ``railway_car`` are skipped, as for the mutation
  operators: a phrase cannot take the token's inflection), no capitalised or digit-bearing
  lemmas, in WordNet synset order (most frequent sense first) then lemma order, with no extra
  frequency re-ranking. A synonym equal to the token (case-insensitive) or to an earlier value
  is dropped.
- **Inflection**: a substitute takes the token's form or is skipped. Verbs go through
  :func:`~lingtest.tasks.text.lexicon_lookup.inflect` (all PTB verb tags; the token's lemma is checked
  by :func:`~lingtest.tasks.text.lexicon_lookup.verb_lemma`); adjectives and adverbs vary in the plain
  JJ / RB form only (comparatives and superlatives keep one value); singular nouns (NN) take
  the lemma and plural nouns (NNS) the plural from WordNet's ``noun.exc`` (children, knives)
  or the regular spelling rules, checked by ``morphy``; lemmas ending in "man" (humans /
  women) are skipped as unsure. An "a"/"an" before a substituted noun is *not* adjusted: it
  is a parameter of its own, and a row must derive exactly the values it names.
- **Surface**: a value keeps the token's case pattern (:func:`~lingtest.tasks.text.mutations.match_case`:
  Car → Auto, CAR → AUTO) and the token's trailing whitespace is kept in ``Parameter.whitespace``.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.text.lexicon_lookup import (
    VERB_TAGS,
    has_pos,
    inflect,
    synonym_lemmas,
    usable,
    verb_lemma,
)
from lingtest.tasks.models.nlp import NO_PARSE
from lingtest.tasks.models.nlp import pipe as nlp_pipe
from lingtest.tasks.text.mutations import match_case

# spaCy UPOS → WordNet part of speech, with the one PTB tag (or tags) that may vary.
_WORDNET_POS = {"NOUN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}
_VARYING_TAGS = {"n": frozenset({"NN", "NNS"}), "v": VERB_TAGS, "a": frozenset({"JJ"}),
                 "r": frozenset({"RB"})}
# Tagging needs tok2vec, tagger, attribute_ruler and lemmatizer only.


@dataclass(frozen=True)
class Parameter:
    """One token of a question and the values a derived question may put in its place."""

    token: str  # as in the question
    pos: str  # spaCy coarse tag (pos_: NOUN, VERB, ADJ, ADV, DET, ...)
    values: tuple[str, ...]  # values[0] == token
    whitespace: str  # the token's trailing whitespace

    def __post_init__(self) -> None:
        if not self.values or self.values[0] != self.token:
            raise LingtestError(f"IPM parameter {self.token!r}: the first value must be the "
                                f"token itself, found {list(self.values)!r}")


@dataclass(frozen=True)
class IPM:
    """A question's input parameter model: its tokens (in order) with their values."""

    question_id: str
    question: str
    parameters: tuple[Parameter, ...]

    def __post_init__(self) -> None:
        rebuilt = "".join(p.token + p.whitespace for p in self.parameters)
        if rebuilt != self.question:
            raise LingtestError(f"IPM {self.question_id}: the tokens rebuild {rebuilt!r}, not the "
                                f"question {self.question!r}")

    def levels(self) -> list[int]:
        """Number of values per parameter (the covering array's alphabet sizes)."""
        return [len(p.values) for p in self.parameters]

    def derive(self, row: Sequence[int]) -> str:
        """The question with each parameter set to the value ``row`` indexes (zeros: original)."""
        if len(row) != len(self.parameters):
            raise LingtestError(f"IPM {self.question_id}: a row needs {len(self.parameters)} "
                                f"value indices, got {len(row)}")
        pieces = []
        for index, parameter in zip(row, self.parameters):
            if not 0 <= index < len(parameter.values):
                raise LingtestError(f"IPM {self.question_id}: value index {index} out of range "
                                    f"for {parameter.token!r} ({len(parameter.values)} values)")
            pieces += [parameter.values[index], parameter.whitespace]
        return "".join(pieces)

    def to_json(self) -> dict[str, Any]:
        """KomMKonLLM-like export: the question and its named parameters with their values."""
        return {
            "question_id": self.question_id,
            "question": self.question,
            "parameters": [{"name": f"p{i}", "token": p.token, "pos": p.pos,
                            "whitespace": p.whitespace, "values": list(p.values)}
                           for i, p in enumerate(self.parameters)],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> IPM:
        """The IPM :meth:`to_json` exported (LingtestError when it does not fit together)."""
        try:
            parameters = tuple(Parameter(p["token"], p["pos"], tuple(p["values"]),
                                         p["whitespace"]) for p in obj["parameters"])
            return cls(obj["question_id"], obj["question"], parameters)
        except (KeyError, TypeError) as error:
            raise LingtestError(f"IPM JSON is missing or mistypes {error}; expected "
                                "question_id, question and parameters with token, pos, "
                                "whitespace and values") from None


@functools.lru_cache(maxsize=8)
def _noun_plurals(wn: Any) -> dict[str, tuple[str, ...]]:
    """Noun lemma → its plurals in WordNet's noun.exc (children, knives, potatoes)."""
    plurals: dict[str, list[str]] = {}
    for form, lemmas in wn._exception_map["n"].items():  # nltk's parsed noun.exc
        for lemma in lemmas:
            plurals.setdefault(lemma, []).append(form)
    return {lemma: tuple(sorted(forms)) for lemma, forms in plurals.items()}


@functools.cache
def _plural(wn: Any, lemma: str) -> str | None:
    """The plural of noun ``lemma``, or None when unsure (the substitute is then skipped)."""
    irregular = _noun_plurals(wn).get(lemma, ())
    if len(irregular) > 1 or (not irregular and lemma.endswith("man")):
        return None
    if irregular:
        form = irregular[0]
    elif lemma.endswith(("s", "x", "z", "ch", "sh")):
        form = lemma + "es"
    elif len(lemma) > 1 and lemma.endswith("y") and lemma[-2] not in "aeiou":
        form = lemma[:-1] + "ies"
    else:
        form = lemma + "s"
    return form if lemma in wn._morphy(form, "n") else None


def _form(wn: Any, lemma: str, pos: str, tag: str) -> str | None:
    """Substitute ``lemma`` in the form PTB ``tag`` names, or None when it cannot be built."""
    if pos == "n":
        return _plural(wn, lemma) if tag == "NNS" else lemma
    if pos == "r":
        return lemma
    return inflect(wn, lemma, pos, tag)


def _lemma(wn: Any, token: Any, pos: str) -> str | None:
    """The WordNet lemma whose synonyms ``token`` may take, or None when it keeps one value."""
    word = token.lower_
    if token.tag_ not in _VARYING_TAGS[pos] or not usable(word):
        return None
    if pos == "v":
        return verb_lemma(wn, word, token.lemma_.lower(), token.tag_)
    if token.tag_ == "NNS":
        lemma = token.lemma_.lower()
        return lemma if lemma != word and lemma in wn._morphy(word, "n") else None
    return word if has_pos(wn, word, pos) else None


@functools.cache
def _substitutes(wn: Any, word: str, lemma: str, pos: str, tag: str) -> tuple[str, ...]:
    """Lowercase same-POS synonyms of ``lemma`` in ``word``'s form, WordNet order, no repeats."""
    seen, found = {word}, []
    for synonym in synonym_lemmas(wn, lemma, pos):
        form = _form(wn, synonym, pos, tag)
        if form is not None and form not in seen:
            seen.add(form)
            found.append(form)
    return tuple(found)


def _values(token: Any, wn: Any, max_values: int) -> tuple[str, ...]:
    pos = _WORDNET_POS.get(token.pos_)
    if pos is None or token.is_stop or token.like_num or max_values == 1:
        return (token.text,)
    lemma = _lemma(wn, token, pos)
    if lemma is None:
        return (token.text,)
    synonyms = _substitutes(wn, token.lower_, lemma, pos, token.tag_)[:max_values - 1]
    return (token.text,) + tuple(match_case(token.text, s) for s in synonyms)


def _check(max_values: int) -> None:
    if max_values < 1:
        raise LingtestError(f"consistency.max_values must be at least 1 (the token itself), "
                            f"got {max_values}; fix it in params.yaml")


def _ipm(question_id: str, doc: Any, wn: Any, max_values: int) -> IPM:
    parameters = tuple(Parameter(t.text, t.pos_, _values(t, wn, max_values), t.whitespace_)
                       for t in doc)
    return IPM(question_id, doc.text, parameters)


def _docs(nlp: Any, texts: Iterable[str]) -> Iterable[Any]:
    """Tagged Docs, skipping the parser and NER (tags, lemmas and stop words do not need them)."""
    return nlp_pipe(nlp, texts, NO_PARSE, batch_size=64)


def build_ipm(question_id: str, question: str, nlp: Any, wn: Any, max_values: int = 3) -> IPM:
    """The IPM of one question (``nlp``: a spaCy pipeline with PTB tags; ``wn``: WordNet)."""
    _check(max_values)
    return _ipm(question_id, next(iter(_docs(nlp, [question]))), wn, max_values)


def build_ipms(questions: pd.DataFrame, nlp: Any, wn: Any, max_values: int = 3) -> list[IPM]:
    """IPMs for a ``questions`` table (columns question_id, question), in its row order."""
    _check(max_values)
    ids = questions["question_id"].tolist()
    docs = _docs(nlp, questions["question"].tolist())
    return [_ipm(qid, doc, wn, max_values) for qid, doc in zip(ids, docs)]


# The guide's accepted tokens and their WordNet parts of speech (``accept_token``,
# ``convert_type``).
_GUIDE_POS = {"PROPN": "n", "NOUN": "n", "VERB": "v", "ADJ": "a"}


def _guide_values(token: Any, wn: Any, max_values: int) -> tuple[str, ...]:
    values = [token.text]
    pos = _GUIDE_POS.get(token.pos_)
    if pos is not None:
        values += [lemma.name() for synset in wn.synsets(token.text, pos=pos)
                   for lemma in synset.lemmas()]
    values = list(dict.fromkeys(value.lower() for value in values))[:max_values]
    return tuple(value.replace("_", " ") for value in values)


def _guide_ipm(question_id: str, doc: Any, wn: Any, max_values: int) -> IPM:
    tokens = list(doc)
    parameters = tuple(Parameter(values[0], t.pos_, values, " " if i < len(tokens) - 1 else "")
                       for i, t in enumerate(tokens)
                       for values in [_guide_values(t, wn, max_values)])
    return IPM(question_id, " ".join(p.token for p in parameters), parameters)


def build_guide_ipms(questions: pd.DataFrame, nlp: Any, wn: Any,
                     max_values: int = 3) -> list[IPM]:
    """The guide's IPMs (see the module docstring) for a ``questions`` table, in row order;
    an IPM's ``question`` is the guide's row 0 (lower-cased tokens, single spaces)."""
    _check(max_values)
    ids = questions["question_id"].tolist()
    # The parser stays: spaCy's attribute ruler reads the parse (the guide's "have" in
    # "… you have to …" is VERB with it, AUX without).
    docs = nlp_pipe(nlp, questions["question"].tolist(), ("ner",), batch_size=64)
    return [_guide_ipm(qid, doc, wn, max_values) for qid, doc in zip(ids, docs)]


def derive_prompt(text: str, prefix: str, suffix: str, join: str = "space") -> str:
    """``prefix text suffix`` with single spaces, leaving out parts that are blank.

    Only the joins are normalised (each part is stripped), so the question itself reaches
    the model as derived: ``derive_prompt("Is it?", "", "Return a JSON Boolean.")``.
    ``join="none"`` concatenates the parts verbatim, as the guide's meta-runner does
    (``prepare_prompt``: prefix + query + postfix).
    """
    if join == "none":
        return f"{prefix}{text}{suffix}"
    if join != "space":
        raise LingtestError(f"consistency.prompt_join: {join!r} is not one of space, none")
    return " ".join(part.strip() for part in (prefix, text, suffix) if part.strip())
