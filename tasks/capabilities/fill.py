"""S²LCT fill-in and validation (the paper's step 6): masked seeds → expansions.

Why: Algorithm 1 (``masks.py``) only says *which* POS tag may be inserted where; a language
model has to propose the word, and only words that keep the tag, carry no sentiment and (for
LC1/LC2) keep the seed inside its search rule leave the expected label unchanged.

Two proposal paths, chosen from the registry's kind of ``capabilities.fill_model``:

- ``causal_lm`` (offline default, SmolLM2): for each mask, left to right, the top-k next whole
  words after the left context (``CausalLM.next_token_candidates``) — with a tag lexicon
  (``tag_lexicon``: words seen with each PTB tag in SST and the treebank), only words seen
  with the mask's tag, from the top 10·k; with several masks a beam
  of width k (ranked by the summed proposal log-probs) carries the partial fills. Every
  fill that passes validation is then **re-scored on the whole sentence** with
  ``CausalLM.score``, alone in its forward pass, so the right context (the words after the
  mask) counts too and the score depends on the text alone.
- ``masked_lm`` (the paper's BERT): transformers ``pipeline("fill-mask")`` with the model's
  own mask token, masks filled left to right with the same beam; the score is the summed
  log-probability the pipeline gives each word. Offline, hub ids resolve to ``missing`` in
  the registry and loading fails with its error and fix.

Score choice: the **total** (not length-normalised) log-probability of the filled sentence.
The candidates of one masked sentence share every other word, so ranking by log P(sentence)
is ranking by P(fill | left and right context) — what a fill-mask score estimates. Across the
masked sentences of one seed the total also prefers expansions that insert fewer, more
probable words, which is the conservative direction for label-preserving expansions.

Proposals are whole words: a causal LM's word-start token must be a word of the tag lexicon
(when one is given) and longer than one letter unless it is "a" or "I" (no "made out o").

Validation (``validation.py``, with the checks in ``wellformed.py``) keeps a candidate only
when its words keep the masked tags, carry no sentiment, keep LC1/LC2 inside their search rule
and break no agreement or structure; ``expand`` then applies the two language-model checks —
the confidence floor per inserted word and the right-context check (the words after the
insertion must stay about as probable as in the seed) — and drops duplicates.

The expansion's text is the seed's exact text with the words inserted when the masked
sentence carries a ``Surface`` (the pipeline's case); else the tokens are detokenised.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from tasks.capabilities.masks import MASK, PTB_TAGS, Masked
from tasks.capabilities.search import WordPolarity
from tasks.capabilities.validation import REASONS, Tagged, validate
from tasks.capabilities.wellformed import below_floor, context_drops, is_whole_word
from tasks.core.errors import LingtestError
from tasks.data.sst import detokenize
from tasks.models.causal_lm import CausalLM, load_causal_lm
from tasks.models.registry import ALIASES, KNOWN, hub_offline, resolve, transformers_classes

OVERSAMPLE = 10  # causal-LM proposals looked at per kept one when a tag lexicon narrows them
TagLexicon = Mapping[str, frozenset[str]]  # lowercased word → PTB tags it was seen with


@dataclass(frozen=True)
class Candidate:
    """One proposed fill of a masked sentence: a word per mask, and its confidence."""

    masked: Masked
    words: tuple[str, ...]
    score: float  # total natural-log probability of the filled sentence (higher: better)

    @property
    def tokens(self) -> list[str]:
        return self.masked.fill(self.words)

    @property
    def text(self) -> str:
        surface = self.masked.surface
        if surface is not None:
            return surface.insert(self.masked.gaps, self.words)
        return detokenize(self.tokens)


def seed_text(masked: Masked) -> str:
    """The seed a masked sentence was made from (its exact text when known)."""
    if masked.surface is not None:
        return masked.surface.text
    return detokenize([t for t in masked.tokens if t != MASK])


@dataclass(frozen=True)
class Expansion:
    """A validated expansion of a seed (one kept candidate)."""

    text: str
    tokens: tuple[str, ...]
    words: tuple[str, ...]
    symbols: tuple[str, ...]
    score: float
    production: tuple[str, tuple[str, ...], tuple[str, ...]]
    masked_text: str


class Expansions(list):
    """``expand``'s kept expansions (a list) plus why the other candidates were dropped."""

    def __init__(self, kept: Sequence[Expansion] = (), proposed: int = 0,
                 rejected: Counter | None = None):
        super().__init__(kept)
        self.proposed = proposed  # candidates proposed over all masked sentences of the seed
        self.rejected: Counter = rejected if rejected is not None else Counter()
        self.valid = 0  # candidates that passed every check, before the max_keep cut

    def report(self) -> dict[str, int]:
        """Counts for the capability report: proposed, valid, kept, rejected per reason."""
        return {"proposed": self.proposed, "valid": self.valid, "kept": len(self),
                **{f"rejected_{r}": int(self.rejected.get(r, 0)) for r in REASONS}}


# --------------------------------------------------------------------------- models

class MaskedFiller:
    """A transformers fill-mask pipeline with its mask token (the paper's BERT path)."""

    def __init__(self, model_id: str, pipe: Any):
        self.model_id = model_id
        self.pipe = pipe
        self.mask_token: str = pipe.tokenizer.mask_token

    def top_words(self, text: str, k: int) -> list[list[tuple[str, float]]]:
        """Per mask in ``text`` (left to right), the top-k whole words with log-probabilities."""
        out = self.pipe(text, top_k=k)
        per_mask = out if out and isinstance(out[0], list) else [out]
        return [[(str(d["token_str"]).strip(), math.log(max(float(d["score"]), 1e-300)))
                 for d in preds if str(d["token_str"]).strip().isalpha()] for preds in per_mask]


FillModel = CausalLM | MaskedFiller


def fill_kind(model_id: str) -> str:
    """``causal_lm`` or ``masked_lm``: the registry's kind of ``model_id`` (a local folder:
    its config's architecture). Why: the two need different proposal code."""
    folder = Path(model_id).expanduser()
    if folder.is_dir():
        try:
            arch = " ".join(json.loads((folder / "config.json").read_text())["architectures"])
        except (OSError, KeyError, ValueError) as exc:
            raise LingtestError(f"fill_model {model_id}: no readable config.json "
                                f"architectures ({exc})") from exc
        if "MaskedLM" in arch or "CausalLM" in arch:
            return "masked_lm" if "MaskedLM" in arch else "causal_lm"
        raise LingtestError(f"fill_model {model_id}: architecture {arch} is neither a masked "
                            f"nor a causal LM")
    spec = KNOWN.get(ALIASES.get(model_id, model_id))
    if spec is None:
        raise LingtestError(f"capabilities.fill_model `{model_id}` is not a registered model; "
                            f"use a masked or causal LM from `lingtest models`, or a local "
                            f"model folder")
    for kind in ("masked_lm", "causal_lm"):
        if kind in spec.kinds:
            return kind
    raise LingtestError(f"capabilities.fill_model `{model_id}` is registered as "
                        f"{' / '.join(spec.kinds)}, not as a masked or causal LM")


def load_fill_model(model_id: str, offline: bool = True) -> FillModel:
    """The fill-in model for ``capabilities.fill_model`` (causal LMs cached per process)."""
    if fill_kind(model_id) == "causal_lm":
        return load_causal_lm(model_id, offline=offline)
    res = resolve(model_id, "masked_lm", offline=offline).require()
    (pipeline,) = transformers_classes("pipeline")
    source = res.path if res.source != "hub" else res.model_id
    try:
        with hub_offline(offline):
            pipe = pipeline("fill-mask", model=source, tokenizer=source, device=-1)
    except (OSError, ValueError) as exc:
        raise LingtestError(f"fill_model `{model_id}` ({res.source}) failed to load: "
                            f"{exc}") from exc
    return MaskedFiller(res.model_id, pipe)


# --------------------------------------------------------------------------- proposals

def _prefix(tokens: Sequence[str]) -> str:
    return detokenize(list(tokens))


def _can_be(word: str, symbol: str, tags: TagLexicon | None, whole: bool = True) -> bool:
    """Whether ``word`` is a whole word seen with the POS tag ``symbol`` (the tag is not
    checked without a lexicon or for a phrase-level symbol, which no single tag decides)."""
    if whole and not is_whole_word(word, tags):
        return False
    if tags is None or symbol not in PTB_TAGS:
        return True
    return symbol in tags.get(word.lower(), ())


def _beams_causal(masked: Sequence[Masked], model: CausalLM, k: int,
                  tags: TagLexicon | None = None, whole: bool = True) -> list[list[tuple[tuple[str, ...], float]]]:
    """Per masked sentence, partial fills left to right; each step keeps the k best by summed
    proposal log-prob. One batched forward pass per step serves every sentence's beam.

    With a tag lexicon, the model's top ``OVERSAMPLE × k`` next words are narrowed to those
    seen with the mask's POS tag before the k best are taken: the causal LM does not know
    the tag, and most of its raw proposals would fail the POS check later."""
    beams: list[list[tuple[tuple[str, ...], float]]] = [[((), 0.0)] for _ in masked]
    wanted = k * OVERSAMPLE if tags is not None else k
    for i in range(max((len(m.mask_positions) for m in masked), default=0)):
        jobs = []
        for index, m in enumerate(masked):
            if i >= len(m.mask_positions):
                continue
            for words, logp in beams[index]:
                left = list(m.tokens[:m.mask_positions[i]])
                for j, w in zip(m.mask_positions[:i], words):
                    left[j] = w
                jobs.append((index, words, logp, _prefix(left)))
        proposals = model.next_token_candidates_batch([job[3] for job in jobs], wanted)
        grown: dict[int, list[tuple[tuple[str, ...], float]]] = {}
        for (index, words, logp, _), found in zip(jobs, proposals):
            symbol = masked[index].mask_symbols[i]
            fits = [(word, lp) for word, lp in found if _can_be(word, symbol, tags, whole)]
            grown.setdefault(index, []).extend((words + (w,), logp + lp) for w, lp in fits[:k])
        for index, items in grown.items():
            items.sort(key=lambda c: (-c[1], c[0]))
            beams[index] = items[:k]
    return beams


def _beam_masked(masked: Masked, model: MaskedFiller, k: int) -> list[tuple[tuple[str, ...], float]]:
    """Fill-mask beam: the leftmost open mask is filled from the pipeline's top-k each step."""
    beam: list[tuple[tuple[str, ...], float]] = [((), 0.0)]
    for i in range(len(masked.mask_positions)):
        grown = []
        for words, logp in beam:
            toks = list(masked.tokens)
            for j, pos in enumerate(masked.mask_positions):
                toks[pos] = words[j] if j < i else model.mask_token
            for word, lp in model.top_words(detokenize(toks), k)[0]:
                grown.append((words + (word,), logp + lp))
        grown.sort(key=lambda c: (-c[1], c[0]))
        beam = grown[:k]
    return beam


def rescore(candidates: list[Candidate], model: CausalLM, batched: bool = True) -> list[Candidate]:
    """Candidates with ``score`` = total log P(filled sentence); one ``score`` call for all
    when ``batched`` (the default), else one call per candidate (the benchmark's baseline)."""
    texts = [c.text for c in candidates]
    if batched:
        scores = list(model.score(texts)) if texts else []
    else:
        scores = [float(model.score([t])[0]) for t in texts]
    return [Candidate(c.masked, c.words, float(s)) for c, s in zip(candidates, scores)]


def _ranked(candidates: list[Candidate]) -> list[Candidate]:
    """Best score first; ties broken by the words, so the order is deterministic."""
    return sorted(candidates, key=lambda c: (-c.score, c.masked.tokens, c.words))


def propose_unscored(masked: Masked, model: FillModel, k: int,
                     tags: TagLexicon | None = None) -> list[Candidate]:
    """The beam's fills (score: summed proposal log-probs), before any re-scoring."""
    return propose_all_unscored([masked], model, k, tags)


def propose_all_unscored(masked: Sequence[Masked], model: FillModel, k: int,
                         tags: TagLexicon | None = None, whole: bool = True) -> list[Candidate]:
    if k < 1:
        raise LingtestError(f"capabilities.fill_candidates must be >= 1 (got {k})")
    for m in masked:
        if not m.mask_positions:
            raise LingtestError(f"nothing to fill: no {MASK} in {m.text}")
    beams = ([_beam_masked(m, model, k) for m in masked] if isinstance(model, MaskedFiller)
             else _beams_causal(masked, model, k, tags, whole))
    return [Candidate(m, words, logp) for m, beam in zip(masked, beams) for words, logp in beam]


def propose(masked: Masked, model: FillModel, k: int, batched: bool = True,
            tags: TagLexicon | None = None) -> list[Candidate]:
    """Up to k fills of ``masked``, most confident first (causal LM: re-scored on the whole
    sentence; masked LM: the pipeline's own log-probabilities). ``tags``: see _beams_causal."""
    return propose_all([masked], model, k, batched, tags)


def propose_all(masked: Sequence[Masked], model: FillModel, k: int, batched: bool = True,
                tags: TagLexicon | None = None, whole: bool = True) -> list[Candidate]:
    """``propose`` over a seed's masked sentences at once (shared batches), grouped by
    masked sentence in input order, each group most confident first."""
    found = propose_all_unscored(masked, model, k, tags, whole)
    if isinstance(model, CausalLM):
        found = rescore(found, model, batched)
    return _grouped(masked, found)


def _grouped(masked: Sequence[Masked], found: list[Candidate]) -> list[Candidate]:
    """``found`` grouped by masked sentence in input order, each group best first."""
    groups: dict[int, list[Candidate]] = {}
    index = {id(m): i for i, m in enumerate(masked)}
    for cand in found:
        groups.setdefault(index[id(cand.masked)], []).append(cand)
    return [c for i in sorted(groups) for c in _ranked(groups[i])]


def tag_lexicon(tagged_sentences: Iterable[tuple[Sequence[str], Sequence[str]]]) -> dict:
    """Lowercased word → the PTB tags it carries in (words, tags) sentences (SST as spaCy
    tags it, the treebank's gold preterminals): which words can fill a mask of a tag."""
    seen: dict[str, set[str]] = {}
    for words, tags in tagged_sentences:
        for word, tag in zip(words, tags):
            seen.setdefault(str(word).lower(), set()).add(str(tag))
    return {word: frozenset(tags) for word, tags in seen.items()}


def expand(seed_masked: Sequence[Masked], model: FillModel, nlp: Any,
           polarity: WordPolarity | pd.DataFrame, k: int, max_keep: int,
           still_matches: Callable[[Tagged], bool] | None = None,
           batched: bool = True, tags: TagLexicon | None = None,
           min_logprob_per_word: float | None = None, strict: bool = True,
           min_right_context_logprob: float | None = None,
           rescore_first: bool = False) -> Expansions:
    """The ``max_keep`` most confident valid expansions over all masked sentences of a seed.

    A causal LM's proposals are validated first and only the valid ones re-scored on the
    whole sentence, each text in a pass of its own: the checks do not read the score, about
    nine in ten proposals fail them, and a score then depends on its text alone (in a shared
    batch the padding changes its last bits). ``rescore_first=True`` is the earlier order —
    every proposal re-scored (one ``score`` call per seed, or one per candidate with
    ``batched=False``) before validation — kept as the fill benchmark's baseline.
    ``min_logprob_per_word``: the confidence floor relative to the seed's own score;
    ``min_right_context_logprob``: the most the words after the last insertion may lose
    against the seed (both causal LM only; None: no check). ``strict=False`` is the earlier
    selection (word pieces allowed, no negator list, no agreement or structure check): the
    quality benchmark's baseline.
    """
    if max_keep < 1:
        raise LingtestError(f"capabilities.max_expansions_per_seed must be >= 1 (got {max_keep})")
    if rescore_first or not isinstance(model, CausalLM):
        proposed = propose_all(seed_masked, model, k, batched, tags, whole=strict)
        valid, rejected = validate(proposed, nlp, polarity, still_matches, strict)
    else:
        proposed = propose_all_unscored(seed_masked, model, k, tags, whole=strict)
        valid, rejected = validate(proposed, nlp, polarity, still_matches, strict)
        valid = _grouped(seed_masked, rescore(valid, model, batched=False))
    seed = seed_text(seed_masked[0])
    seen = {seed_text(m) for m in seed_masked}  # the seed
    if valid and min_logprob_per_word is not None and isinstance(model, CausalLM):
        [seed_score] = model.score([seed])
        low = below_floor(valid, float(seed_score), min_logprob_per_word)
        rejected["confidence"] += sum(low)
        valid = [c for c, drop in zip(valid, low) if not drop]
    if valid and min_right_context_logprob is not None and isinstance(model, CausalLM):
        drops = context_drops(model, seed, [c.text for c in valid])
        broken = [d < min_right_context_logprob for d in drops]
        rejected["context"] += sum(broken)
        valid = [c for c, drop in zip(valid, broken) if not drop]
    kept: list[Expansion] = []
    for cand in _ranked(valid):
        text = cand.text
        if text in seen:
            rejected["duplicate"] += 1
            continue
        seen.add(text)
        if len(kept) < max_keep:
            kept.append(Expansion(text, tuple(cand.tokens), cand.words, cand.masked.mask_symbols,
                                  cand.score, cand.masked.production, cand.masked.text))
    out = Expansions(kept, len(proposed), rejected)
    out.valid = len(valid) - rejected["duplicate"]
    return out
