"""S²LCT validation of proposed fills (the paper's step 6): which candidates stay.

Why a module of its own: proposing words (``fill.py``) needs a language model, judging them
needs spaCy's tags and the lexicons; the checks themselves live in ``wellformed.py``.

Each rejected candidate is counted under its first failed reason, in this order:
``pos`` (spaCy's PTB tag of the filled word, tagged in the filled sentence, must equal the
masked symbol — or, given the reference CFG, make another reference production: ``realised``), ``polarity`` (the word is absent from the polarity source or ``neutral``,
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
``budget`` (one-word insertions with a causal LM: valid fills beyond three per expansion the
seed may keep, the least probable after their left context, are not scored by the LM) and
the last three are applied in ``fill.expand``.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from lingtest.tasks.capabilities.masks import PTB_TAGS, SKIP_SYMBOLS, embeddings
from lingtest.tasks.capabilities.search import LexiconPolarity, WordPolarity, search_seeds
from lingtest.tasks.capabilities.specs import CapabilitySpec
from lingtest.tasks.capabilities.wellformed import NOT_NEUTRAL, agreement_error, structure_error
from lingtest.tasks.data.sst import detokenize
from lingtest.tasks.models.nlp import pipe as nlp_pipe

if TYPE_CHECKING:
    from lingtest.tasks.capabilities.fill import Candidate
    from lingtest.tasks.capabilities.masks import Cfg, Masked

REASONS = ("pos", "polarity", "rule", "agreement", "structure", "budget", "confidence",
           "context", "duplicate")
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


def realised(masked: "Masked", tags: Sequence[str], cfg: "Cfg | None",
             allowed: frozenset[str] | None = None) -> "Masked | None":
    """``masked`` as its fill was tagged in context: itself when every filled word carries the
    masked tag; with ``cfg``, the same insertion under the observed tags when that is also a
    reference production (the PTB has lhs → the new right-hand side); else None.

    Why: a word the lexicon has seen as NN may read as JJ in its sentence ("the light
    film"); that insertion is still one real English uses, so it is kept under the rule it
    realises instead of being rejected (ALiCT tags the word alone, out of context)."""
    observed = tuple(tags[p] for p in masked.mask_positions)
    if observed == masked.mask_symbols:
        return masked
    if cfg is None or any(t in SKIP_SYMBOLS or t not in (allowed or PTB_TAGS)
                          for t in observed):
        return None
    lhs, seed_rhs, ref_rhs = masked.production
    counts = cfg.get(lhs, {})
    swaps = dict(zip(masked.mask_symbols, observed))
    if len(swaps) != len(observed):
        return None  # two masks of one symbol tagged apart: no single production says which
    for at in _inserted_at(seed_rhs, ref_rhs, masked.mask_symbols):
        alt = tuple(swaps[s] if i in at else s for i, s in enumerate(ref_rhs))
        if counts.get(alt, 0) > 0:
            return replace(masked, mask_symbols=observed, production=(lhs, seed_rhs, alt),
                           ref_count=int(counts[alt]))
    return None


def _inserted_at(seed_rhs: Sequence[str], ref_rhs: Sequence[str],
                 symbols: Sequence[str]) -> list[set[int]]:
    """The index sets of ``ref_rhs`` that may hold the inserted ``symbols``: the complements
    of each way ``seed_rhs`` embeds in it, when they carry exactly those symbols."""
    out = []
    for embedded in embeddings(seed_rhs, ref_rhs):
        rest = [i for i in range(len(ref_rhs)) if i not in embedded]
        if sorted(ref_rhs[i] for i in rest) == sorted(symbols):
            out.append(set(rest))
    return out


def check(candidate: "Candidate", tagged: Tagged, polarity: WordPolarity,
          still_matches: Callable[[Tagged], bool] | None = None, strict: bool = True,
          cfg: "Cfg | None" = None, allowed: frozenset[str] | None = None,
          plurals: frozenset[str] | None = None) -> "str | Masked":
    """The first failed reason (``pos`` … ``structure``), or the realised masked sentence
    (``realised``; ``allowed``: the tags an insertion may realise) when it is valid."""
    masked = realised(candidate.masked, tagged.tag, cfg, allowed)
    if masked is None:
        return "pos"
    for p, word in zip(masked.mask_positions, candidate.words):
        if (strict and word.lower() in NOT_NEUTRAL) or polarity(word, tagged.pos[p]) not in (None, NEUTRAL):
            return "polarity"
    if still_matches is not None and not still_matches(tagged):
        return "rule"
    if strict and agreement_error(tagged, masked.mask_positions, plurals):
        return "agreement"
    if strict and structure_error(tagged, masked.mask_positions):
        return "structure"
    return masked


def validate(candidates: list["Candidate"], nlp: Any, polarity: WordPolarity | pd.DataFrame,
             still_matches: Callable[[Tagged], bool] | None = None, strict: bool = True,
             cfg: "Cfg | None" = None, allowed: frozenset[str] | None = None,
             plurals: frozenset[str] | None = None) -> tuple[list["Candidate"], Counter]:
    """The valid candidates (input order; each carrying the masked sentence its fill
    realised, see ``realised``) and the count of rejections per reason. ``cfg``: the
    reference CFG, which lets a fill tagged otherwise in context stand (None: the tag must
    equal the masked symbol); ``plurals``: the words seen tagged NNS (``agreement_error``)."""
    polarity = as_polarity(polarity)
    rejected: Counter = Counter()
    kept = []
    for cand, tagged in zip(candidates, tag([c.tokens for c in candidates], nlp)):
        found = check(cand, tagged, polarity, still_matches, strict, cfg, allowed, plurals)
        if isinstance(found, str):
            rejected[found] += 1
        else:
            kept.append(cand if found is cand.masked else replace(cand, masked=found))
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
