"""Whole-text synonym substitution (COSTELLO's CR2 s⁻ and CR3 s⁺ generators).

Why apart from ``mutations.py``: the one-word operators there make one mutant per position;
this rewrite draws, with the caller's generator, a synonym for every replaceable word
(adjective, verb, common noun, adverb; no stop word) at once, as NL-Augmenter's
SynonymSubstitution and COSTELLO's ``sentiSynonymSubstitution`` do.
"""
from __future__ import annotations

from typing import Any, Mapping

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.text.lexicon_lookup import has_pos, inflect, synonym_lemmas, usable
from lingtest.tasks.text.mutations import (Edit, Mutant, Slot, apply_edits, match_case, polarity_of,
                                  slots)

# Word classes the whole-text rewrite may also replace: nouns (singular, or regular plural)
# and plain adverbs.
_PLAIN_CLASSES = {("NOUN", "NN"): "n", ("NOUN", "NNS"): "n", ("ADV", "RB"): "r"}


def _plural(noun: str) -> str:
    """The regular English plural (the only kind the rewrite builds)."""
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def rewrite_slots(doc: Any, wn: Any) -> list[Slot]:
    """:func:`slots` plus common nouns (NN, and NNS with a regular plural) and adverbs (RB);
    stop words excluded."""
    key = ("lingtest.rewrite_slots", id(wn))
    if key not in doc.user_data:
        found = {s.position: s for s in slots(doc, wn)}
        for token in doc:
            pos = _PLAIN_CLASSES.get((token.pos_, token.tag_))
            lemma = token.lemma_.lower() if token.tag_ == "NNS" else token.lower_
            if token.tag_ == "NNS" and _plural(lemma) != token.lower_:
                continue  # an irregular plural: no form we could build for a substitute
            if pos and token.i not in found and usable(lemma) and has_pos(wn, lemma, pos):
                found[token.i] = Slot(token.i, token.lower_, lemma, pos, token.tag_)
        doc.user_data[key] = [found[i] for i in sorted(found) if not doc[i].is_stop]
    return doc.user_data[key]


def _form(wn: Any, lemma: str, slot: Slot) -> str | None:
    if slot.tag == "NNS":
        return _plural(lemma)
    return lemma if slot.pos in ("n", "r") else inflect(wn, lemma, slot.pos, slot.tag)


def synonym_rewrite(doc: Any, wn: Any, rng: Any, probability: float,
                    polarity: Mapping[str, str] | None = None) -> Mutant | None:
    """Synonym substitution over the whole text, as COSTELLO's generators do.

    Without ``polarity`` (NL-Augmenter's SynonymSubstitution, COSTELLO's CR3 s⁺) each
    replaceable word (:func:`rewrite_slots`) with a synonym is replaced with probability
    ``probability`` by one of its synonyms chosen uniformly. With ``polarity``
    (COSTELLO's ``sentiSynonymSubstitution``, CR2 s⁻) only clearly polar words count, each
    synonym of the same polarity is drawn in turn with ``probability`` and the last one drawn
    replaces the word (so a word with k synonyms changes with probability 1 − (1−p)^k).
    ``rng`` is a NumPy generator. None when nothing changed.
    """
    if not 0 < probability <= 1:
        raise LingtestError(f"synonym_rewrite: probability {probability} must be in (0, 1]")
    words = []
    for slot in rewrite_slots(doc, wn):
        need = None
        if polarity is not None:
            need = polarity_of(polarity, slot.word, slot.lemma)
            if need is None:
                continue
        forms = []
        for lemma in synonym_lemmas(wn, slot.lemma, slot.pos):
            form = _form(wn, lemma, slot)
            if form is None or form == slot.word or form in forms:
                continue
            if need is not None and polarity_of(polarity, form, lemma) != need:
                continue
            forms.append(form)
        if not forms:
            continue
        if polarity is not None:
            drawn = [f for f in forms if rng.random() < probability]
            chosen = drawn[-1] if drawn else None
        else:
            chosen = forms[int(rng.integers(len(forms)))] if rng.random() < probability else None
        if chosen is None:
            continue
        original = doc[slot.position].text
        words.append(Edit(slot.position, original, match_case(original, chosen)))
    if not words:
        return None
    text, edits = apply_edits(doc, words)
    operator = "senti_synonym_rewrite" if polarity is not None else "synonym_rewrite"
    return Mutant(operator, text, edits, (("probability", str(probability)),))
