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

import numpy as np
import pandas as pd

from lingtest.tasks.capabilities.masks import MASK, PTB_TAGS, Cfg, Masked
from lingtest.tasks.capabilities.search import WordPolarity
from lingtest.tasks.capabilities.validation import REASONS, Tagged, validate
from lingtest.tasks.capabilities.wellformed import below_floor, context_drops, is_whole_word
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.data.sst import detokenize
from lingtest.tasks.models.causal_lm import CausalLM, TextPass, load_causal_lm
from lingtest.tasks.models.registry import ALIASES, KNOWN, hub_offline, resolve, transformers_classes

OVERSAMPLE = 10  # causal-LM proposals looked at per kept one when a tag lexicon narrows them
CONTEXT_TOKENS = 8  # tokens after a one-word insertion scored anew (``in_context_scores``)
SCORED_PER_KEPT = 3  # valid fills LM-scored per expansion a seed may keep (``expand``)
# A fill whose word alone, after its left context, costs this many nats more than the
# confidence floor is refused unscored: what follows it would have to gain that much. On
# 599 scored fills of LC7 this skipped 55 (a tenth of the LM time) and lost 1 that passed.
UNSCORED_MARGIN = 3.0
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
    proposals: int = 1  # the (masked sentence, word) proposals that gave this text


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


def in_context_path(masked: Sequence[Masked], model: FillModel) -> bool:
    """Whether a seed's masked sentences take the one-pass path (``propose_in_context``): a
    causal LM, every sentence inserting one word into the seed's exact text."""
    return isinstance(model, CausalLM) and bool(masked) and all(
        len(m.mask_positions) == 1 and m.surface is not None for m in masked)


def _eligible(model: CausalLM, sentence_start: bool, symbol: str, tags: TagLexicon | None,
              memo: dict) -> tuple[np.ndarray, list[str]]:
    """Vocabulary ids (and words) that may fill a mask of ``symbol``: whole words the tag
    lexicon has seen with that tag, lower-case inside a sentence (the lexicon is
    lower-cased, so "New" would pass as "new": "The New film"); computed once per
    capability (``memo``)."""
    key = (sentence_start, symbol)
    if key not in memo:
        ids, words = model.word_table(sentence_start)
        keep = [i for i, w in enumerate(words) if _can_be(w, symbol, tags)
                and (sentence_start or w.islower())]
        memo[key] = (ids[keep], [words[i] for i in keep])
    return memo[key]


def propose_in_context(masked: Sequence[Masked], seed_pass: TextPass, k: int,
                       tags: TagLexicon | None, memo: dict | None = None) -> list[Candidate]:
    """Per one-word masked sentence of a seed, the k whole words of the masked tag most
    probable after the words before the gap (score: that log-probability), over the whole
    vocabulary, read from the seed's single forward pass (``TextPass``).

    Why: looking past the model's top words to every word of the tag finds k proposals at
    every gap, where a top-50 cut left most gaps with one or none, at no extra model cost."""
    if k < 1:
        raise LingtestError(f"capabilities.fill_candidates must be >= 1 (got {k})")
    model, memo = seed_pass.model, {} if memo is None else memo
    out: list[Candidate] = []
    for m in masked:
        (gap,) = m.gaps
        cut = m.surface.spans[gap - 1][1] if gap > 0 else 0
        logp = seed_pass.next_logprobs(cut)
        if logp is None:  # the prefix tokenises apart from the seed: a pass of its own
            prefix = m.surface.text[:cut].rstrip()
            if not prefix:
                continue
            logp = model.text_pass(prefix).logp[-1].cpu().numpy()
        ids, words = _eligible(model, gap == 0, m.mask_symbols[0], tags, memo)
        if not len(ids):
            continue
        values = logp[ids]
        top = np.argsort(-values, kind="stable")[:k]
        out += [Candidate(m, (words[i],), float(values[i])) for i in top]
    return out


def in_context_scores(candidates: Sequence[Candidate], seed_pass: TextPass,
                      after: int | None = CONTEXT_TOKENS) -> tuple[list[float], list[float]]:
    """Per candidate, log P(filled sentence) and what the words after the insertion lost
    against the same words in the seed (nats, ≤ 0 when they became less likely), from the
    seed's cached pass: the whole-sentence score and ``context_drops`` in one forward.

    ``after``: the tokens after the insertion that are scored anew (beyond them the seed's
    own log-probabilities stand in); None: every token to the end. Why: an inserted word
    changes how probable the next few words are, hardly the rest, and scoring each fill's
    whole tail cost 6× the time on long seeds."""
    base = seed_pass.token_logprobs()  # base[i] scores seed token i + 1
    base_ids = seed_pass.ids
    scores, drops = [], []
    found = seed_pass.variants([c.text for c in candidates], after)
    for ids, n, lp in found:
        grown = len(ids) - len(base_ids)
        if grown > 0 and ids[n + grown:] == base_ids[n:]:  # the seed with words inserted
            covered = len(lp) - grown  # seed tokens re-scored after the insertion
            after_lp = lp[grown:].sum()
            seed_part = base[n - 1:n - 1 + covered].sum()
            scores.append(float(base[:n - 1].sum() + lp.sum() + base[n - 1 + covered:].sum()))
            drops.append(float(after_lp - seed_part))
            continue
        tail = 0  # otherwise: the longest common token suffix, scored whole
        while (tail < min(len(ids), len(base_ids)) - n and tail < len(ids) - n - 1
               and ids[-1 - tail] == base_ids[-1 - tail]):
            tail += 1
        scores.append(float(base[:n - 1].sum() + lp.sum()))
        drops.append(float(lp[len(lp) - tail:].sum() - base[len(base) - tail:].sum())
                     if tail else 0.0)
    return scores, drops


def tag_lexicon(tagged_sentences: Iterable[tuple[Sequence[str], Sequence[str]]]) -> dict:
    """Lowercased word → the PTB tags it carries in (words, tags) sentences (SST as spaCy
    tags it, the treebank's gold preterminals): which words can fill a mask of a tag."""
    seen: dict[str, set[str]] = {}
    for words, tags in tagged_sentences:
        for word, tag in zip(words, tags):
            seen.setdefault(str(word).lower(), set()).add(str(tag))
    return {word: frozenset(tags) for word, tags in seen.items()}


def expand(seed_masked: Sequence[Masked], model: FillModel, nlp: Any,
           polarity: WordPolarity | pd.DataFrame, k: int, max_keep: int | None,
           still_matches: Callable[[Tagged], bool] | None = None,
           batched: bool = True, tags: TagLexicon | None = None,
           min_logprob_per_word: float | None = None, strict: bool = True,
           min_right_context_logprob: float | None = None,
           rescore_first: bool = False, cfg: Cfg | None = None,
           memo: dict | None = None, allowed: frozenset[str] | None = None) -> Expansions:
    """The ``max_keep`` most confident valid expansions over all masked sentences of a seed
    (None: every valid one).

    One-word insertions with a causal LM (``in_context_path``) take one forward pass of the
    seed: its next-token distributions propose the words (``propose_in_context``), identical
    texts are proposed once, and only the fills that pass validation are scored on the
    seed's cached pass (``in_context_scores``: the whole-sentence score and the
    right-context drop together). Otherwise a causal LM's proposals come from the beam
    (``propose_all_unscored``), are validated first and only the valid ones re-scored on the
    whole sentence, each text in a pass of its own; ``rescore_first=True`` is the earlier
    order — every proposal re-scored before validation — kept as the fill benchmark's
    baseline. ``min_logprob_per_word``: the confidence floor relative to the seed's own
    score (in context, a fill whose word alone falls ``UNSCORED_MARGIN`` below it is refused
    unscored); ``min_right_context_logprob``: the most the words after the last insertion may
    lose against the seed (both causal LM only; None: no check). ``strict=False`` is the
    earlier selection (word pieces allowed, no negator list, no agreement or structure
    check): the quality benchmark's baseline. ``cfg``: see ``validation.validate``.
    """
    if max_keep is not None and max_keep < 1:
        raise LingtestError(f"capabilities.max_expansions_per_seed must be >= 1 or null "
                            f"(got {max_keep})")
    seed = seed_text(seed_masked[0]) if seed_masked else ""
    rejected: Counter = Counter()
    drops: list[float] | None = None
    seed_score: float | None = None
    plurals = None
    if tags is not None and memo is not None:
        if "plurals" not in memo:
            memo["plurals"] = frozenset(w for w, t in tags.items() if "NNS" in t)
        plurals = memo["plurals"]
    in_context = not rescore_first and strict and in_context_path(seed_masked, model)
    if in_context:
        seed_pass = model.text_pass(seed)
        proposed = propose_in_context(seed_masked, seed_pass, k, tags, memo)
        times = Counter(c.text for c in proposed)
        unique = list({c.text: c for c in reversed(proposed)}.values())[::-1]
        rejected["duplicate"] += len(proposed) - len(unique)
        valid, found = validate(unique, nlp, polarity, still_matches, strict, cfg, allowed,
                                plurals)
        rejected += found
        if min_logprob_per_word is not None:
            hopeless = [c.score < min_logprob_per_word - UNSCORED_MARGIN for c in valid]
            rejected["confidence"] += sum(hopeless)
            valid = [c for c, drop in zip(valid, hopeless) if not drop]
        if max_keep is not None and len(valid) > SCORED_PER_KEPT * max_keep:
            # the LM budget: the fills most probable after their left context are scored
            order = sorted(range(len(valid)), key=lambda i: (-valid[i].score, valid[i].text))
            chosen = sorted(order[:SCORED_PER_KEPT * max_keep])
            rejected["budget"] += len(valid) - len(chosen)
            valid = [valid[i] for i in chosen]
        scores, drops = in_context_scores(valid, seed_pass)
        valid = [Candidate(c.masked, c.words, sc) for c, sc in zip(valid, scores)]
        seed_score = float(seed_pass.token_logprobs().sum())
    elif rescore_first or not isinstance(model, CausalLM):
        proposed = propose_all(seed_masked, model, k, batched, tags, whole=strict)
        valid, rejected = validate(proposed, nlp, polarity, still_matches, strict, cfg,
                                     allowed, plurals)
    else:
        proposed = propose_all_unscored(seed_masked, model, k, tags, whole=strict)
        valid, rejected = validate(proposed, nlp, polarity, still_matches, strict, cfg,
                                     allowed, plurals)
        valid = _grouped(seed_masked, rescore(valid, model, batched=False))
    if not in_context:
        times = Counter(c.text for c in valid)
    seen = {seed_text(m) for m in seed_masked}  # the seed
    if valid and min_logprob_per_word is not None and isinstance(model, CausalLM):
        if seed_score is None:
            [seed_score] = model.score([seed])
        low = below_floor(valid, float(seed_score), min_logprob_per_word)
        rejected["confidence"] += sum(low)
        drops = None if drops is None else [d for d, drop in zip(drops, low) if not drop]
        valid = [c for c, drop in zip(valid, low) if not drop]
    if valid and min_right_context_logprob is not None and isinstance(model, CausalLM):
        if drops is None:
            drops = context_drops(model, seed, [c.text for c in valid])
        broken = [d < min_right_context_logprob for d in drops]
        rejected["context"] += sum(broken)
        valid = [c for c, drop in zip(valid, broken) if not drop]
    kept: list[Expansion] = []
    duplicates_before = rejected["duplicate"]
    for cand in _ranked(valid):
        text = cand.text
        if text in seen:
            rejected["duplicate"] += 1
            continue
        seen.add(text)
        if max_keep is None or len(kept) < max_keep:
            kept.append(Expansion(text, tuple(cand.tokens), cand.words, cand.masked.mask_symbols,
                                  cand.score, cand.masked.production, cand.masked.text,
                                  times[text]))
    out = Expansions(kept, len(proposed), rejected)
    out.valid = len(valid) - (rejected["duplicate"] - duplicates_before)
    return out
