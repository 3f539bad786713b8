"""Fill-in throughput (S²LCT step 6): candidates and valid expansions per second.

Seeds: ``--seeds`` (default 20) short SST test sentences (4–``--max-tokens`` tokens, sampled
with seed 0), tagged by en_core_web_sm, parsed by the offline PCFG (``induce_pcfg`` on the PTB
sample), masked by Algorithm 1 (``masked_sentences`` with the PTB reference CFG, at most
``--masks`` masked sentences per seed, the run's numpy seed 0). Fill model: SmolLM2-135M
(the offline default), ``--k`` candidates per mask, the word_polarity table, no rule callback.

Every side runs the whole step (proposal + whole-sentence re-scoring + validation via
``expand``) on the same masked sentences; proposals are batched across a seed's masks in all:

- baseline: ``expand(..., batched=False, rescore_first=True)``: every proposal re-scored,
  one ``CausalLM.score`` call per candidate, then validated;
- batched: ``expand(..., batched=True, rescore_first=True)``: one ``score`` call (batches of
  16) per seed; it must keep the same expansions as the baseline;
- batched + tag lexicon (the earlier pipeline): proposals narrowed to words seen with the
  mask's POS tag (``tag_lexicon`` over the treebank and the tagged seeds) before the top k;
  it proposes other candidates, so compare valid expansions per second;
- validate first (the pipeline): the same proposals validated before any re-scoring, then
  only the valid ones re-scored, each alone in its pass; it must keep the earlier
  pipeline's expansions (scores may differ in the last bits: no shared batch).

Rounds alternate (baseline, ours) ``--repeats`` times; the best time of each side is shown.
Run: ``.venv/bin/python benchmarks/bench_fill.py`` (about 3–6 min on 2 shared cores).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lingtest.tasks.capabilities.fill import expand, load_fill_model, tag_lexicon  # noqa: E402
from lingtest.tasks.capabilities.grammar import gold_tags_words, induce_pcfg  # noqa: E402
from lingtest.tasks.capabilities.masks import Masked, masked_sentences, reference_cfg  # noqa: E402
from lingtest.tasks.core.paths import PACKAGE_ROOT  # noqa: E402
from lingtest.tasks.models.nlp import load_spacy  # noqa: E402

PROCESSED = PACKAGE_ROOT / "data" / "processed"
SMOLLM = "HuggingFaceTB/SmolLM2-135M-Instruct"


def masked_seeds(n: int, max_tokens: int, masks: int, nlp) -> tuple[list[list[Masked]], dict]:
    """Masked sentences of ``n`` short SST test seeds that Algorithm 1 can expand, and the
    tag lexicon of the treebank plus every SST test sentence looked at."""
    trees = pd.read_parquet(PROCESSED / "ptb_trees.parquet")["tree"]
    grammar, cfg = induce_pcfg(trees), reference_cfg(trees)
    sst = pd.read_parquet(PROCESSED / "sst.parquet")
    texts = sst[sst["split"] == "test"]["text"].sample(frac=1.0, random_state=0)
    rng = np.random.default_rng(0)
    out: list[list[Masked]] = []
    tagged = [gold_tags_words(t)[::-1] for t in trees]
    for doc in nlp.pipe(texts, batch_size=64):
        toks = [t for t in doc if not t.is_space]
        tagged.append(([t.text for t in toks], [t.tag_ for t in toks]))
        if not 4 <= len(toks) <= max_tokens:
            continue
        parse = grammar.parse([t.tag_ for t in toks], [t.text for t in toks])
        if parse.fallback:
            continue
        found = masked_sentences(parse.tree, cfg, masks, rng)
        if found:
            out.append(found)
            if len(out) == n:
                break
    return out, tag_lexicon(tagged)


def run(seeds: list[list[Masked]], model, nlp, polarity, k: int, keep: int,
        batched: bool, tags: dict | None = None,
        rescore_first: bool = True) -> tuple[float, Counter, list]:
    """Seconds, summed ``Expansions.report()`` counts, and the kept expansions per seed."""
    began = time.perf_counter()
    totals: Counter = Counter()
    kept = []
    for masked in seeds:
        result = expand(masked, model, nlp, polarity, k, keep, batched=batched, tags=tags,
                        rescore_first=rescore_first)
        totals.update(result.report())
        kept.append(list(result))
    return time.perf_counter() - began, totals, kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--masks", type=int, default=3, help="masked sentences per seed")
    ap.add_argument("--k", type=int, default=10, help="candidates per mask (fill_candidates)")
    ap.add_argument("--keep", type=int, default=5, help="max_expansions_per_seed")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (shared machine)")
    args = ap.parse_args()

    import torch
    torch.set_num_threads(args.threads)
    nlp = load_spacy("en_core_web_sm")
    seeds, tags = masked_seeds(args.seeds, args.max_tokens, args.masks, nlp)
    n_masked = sum(len(s) for s in seeds)
    n_two = sum(len(m.mask_positions) > 1 for s in seeds for m in s)
    model = load_fill_model(SMOLLM, offline=True)
    polarity = pd.read_parquet(PROCESSED / "word_polarity.parquet")
    run(seeds[:1], model, nlp, polarity, args.k, args.keep, True)  # warm-up (tables, caches)

    sides = {"baseline: one score() call per candidate": (False, None, True),
             "batched score() per seed": (True, None, True),
             "batched + tag lexicon (earlier)": (True, tags, True),
             "validate first (pipeline)": (True, tags, False)}
    best = dict.fromkeys(sides, float("inf"))
    counts, kept = {}, {}
    for _ in range(args.repeats):
        for name, (batched, lexicon, first) in sides.items():
            secs, proposed, result = run(seeds, model, nlp, polarity, args.k, args.keep,
                                         batched, lexicon, first)
            best[name] = min(best[name], secs)
            counts[name], kept[name] = proposed, result
    names = list(sides)

    def kept_texts(name: str) -> list:
        return [[(e.text, e.words) for e in s] for s in kept[name]]

    same = kept_texts(names[0]) == kept_texts(names[1])
    same_order = kept_texts(names[2]) == kept_texts(names[3])

    print(f"{len(seeds)} seeds, {n_masked} masked sentences ({n_two} with two masks), "
          f"k={args.k}, keep={args.keep}; torch threads {args.threads}; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'side':<36} {'seconds':>8} {'candidates':>10} {'cand/s':>7} {'valid':>6} "
          f"{'valid/s':>8}")
    for name in names:
        c = counts[name]
        print(f"{name:<36} {best[name]:8.2f} {c['proposed']:10d} "
              f"{c['proposed'] / best[name]:7.1f} {c['valid']:6d} {c['valid'] / best[name]:8.2f}")
    print(f"time ratio baseline / batched: x{best[names[0]] / best[names[1]]:.2f} (same "
          f"expansions kept: {same}); valid/s, pipeline vs baseline: x"
          f"{(counts[names[3]]['valid'] / best[names[3]]) / (counts[names[0]]['valid'] / best[names[0]]):.2f}")
    print(f"time ratio earlier pipeline / validate first: x{best[names[2]] / best[names[3]]:.2f} "
          f"(same expansions kept: {same_order})")


if __name__ == "__main__":
    main()
