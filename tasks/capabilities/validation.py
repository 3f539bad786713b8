"""S²LCT validation of proposed fills (the paper's step 6): which candidates stay.

Why a module of its own: proposing words (``fill.py``) needs a language model, judging them
needs spaCy's tags and the lexicons; the checks themselves live in ``wellformed.py``.

Each rejected candidate is counted under its first failed reason, in this order:
``pos`` (spaCy's PTB tag of the filled word, tagged in the filled sentence, must equal the
masked symbol), ``polarity`` (the word is absent from the polarity source or ``neutral``,
and is no negator, diminisher or focus word: ``NOT_NEUTRAL``), ``rule`` (the optional
``still_matches`` callback on the tagged expansion), ``agreement`` (an inserted word breaks
a/an or determiner–noun number agreement — "An Same guy", "one performances" — or dangles:
a determiner before no nominal, a preposition before a verb), ``structure`` (an inserted
word repeats a neighbour — "of of", "convey and convey" —, modifies a proper name — "the
Gollum's" —, opens a prepositional phrase at the start of the sentence or right after a
complementiser "that", swallows the subject of the following verb — "by you could" —, or is a
preconjunction without its partner), ``confidence`` (causal LM only: the expansion's
log-probability, less the seed's own, per inserted word, is below ``min_logprob_per_word``),
``context`` (causal LM only: the words after the last insertion lose more than
``min_right_context_logprob`` nats against the same words in the seed: the insertion broke
what follows it), ``duplicate`` (an expansion text already kept for this seed, or the seed).
The last three are applied in ``fill.expand``.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from tasks.capabilities.search import LexiconPolarity, WordPolarity, search_seeds
from tasks.capabilities.specs import CapabilitySpec
from tasks.capabilities.wellformed import NOT_NEUTRAL, agreement_error, structure_error
from tasks.data.sst import detokenize
from tasks.models.nlp import pipe as nlp_pipe

if TYPE_CHECKING:
    from tasks.capabilities.fill import Candidate

REASONS = ("pos", "polarity", "rule", "agreement", "structure", "confidence", "context",
           "duplicate")
NEUTRAL = "neutral"


@dataclass(frozen=True)
class Tagged:
    """A filled sentence as spaCy tags it: coarse ``pos`` (search rules) and PTB ``tag``."""

    tokens: list[str]
    pos: list[str]
    tag: list[str]


def as_polarity(polarity: WordPolarity | pd.DataFrame) -> WordPolarity:
    """A ``word_polarity`` table or any ``WordPolarity`` callable, as a callable."""
    return LexiconPolarity(polarity) if isinstance(polarity, pd.DataFrame) else polarity


def tag(token_lists: list[list[str]], nlp: Any) -> list[Tagged]:
    """spaCy tags of pre-tokenised sentences (one tag per token, as ``search.tag_sst``)."""
    from spacy.tokens import Doc

    docs = (Doc(nlp.vocab, words=[detokenize([t]) or t for t in toks]) for toks in token_lists)
    return [Tagged(list(toks), [t.pos_ for t in doc], [t.tag_ for t in doc])
            for toks, doc in zip(token_lists, nlp_pipe(nlp, docs))]


def check(candidate: "Candidate", tagged: Tagged, polarity: WordPolarity,
          still_matches: Callable[[Tagged], bool] | None = None, strict: bool = True) -> str | None:
    """The first failed reason (``pos`` … ``structure``), or None when it is valid."""
    masked = candidate.masked
    if any(tagged.tag[p] != s for p, s in zip(masked.mask_positions, masked.mask_symbols)):
        return "pos"
    for p, word in zip(masked.mask_positions, candidate.words):
        if (strict and word.lower() in NOT_NEUTRAL) or polarity(word, tagged.pos[p]) not in (None, NEUTRAL):
            return "polarity"
    if still_matches is not None and not still_matches(tagged):
        return "rule"
    if strict and agreement_error(tagged, masked.mask_positions):
        return "agreement"
    if strict and structure_error(tagged, masked.mask_positions):
        return "structure"
    return None


def validate(candidates: list["Candidate"], nlp: Any, polarity: WordPolarity | pd.DataFrame,
             still_matches: Callable[[Tagged], bool] | None = None, strict: bool = True
             ) -> tuple[list["Candidate"], Counter]:
    """The valid candidates (input order) and the count of rejections per reason."""
    polarity = as_polarity(polarity)
    rejected: Counter = Counter()
    kept = []
    for cand, tagged in zip(candidates, tag([c.tokens for c in candidates], nlp)):
        reason = check(cand, tagged, polarity, still_matches, strict)
        if reason is None:
            kept.append(cand)
        else:
            rejected[reason] += 1
    return kept, rejected


def spec_still_matches(spec: CapabilitySpec, label: str,
                       polarity: WordPolarity | pd.DataFrame) -> Callable[[Tagged], bool]:
    """``still_matches`` for LC1/LC2: the expansion, with the seed's label, meets one of the
    spec's search rules (through the public ``search_seeds`` on a one-row table)."""
    polarity = as_polarity(polarity)

    def still_matches(tagged: Tagged) -> bool:
        row = pd.DataFrame({"sentence_id": [0], "split": [""], "tokens": [tagged.tokens],
                            "text": [detokenize(tagged.tokens)], "label": [label],
                            "pos": [tagged.pos]})
        return not search_seeds(spec, row, polarity).empty

    return still_matches
