"""S²LCT expansion volume and time: the default settings against the earlier ones, side by side.

Both sides expand the same seed cases with the pipeline's own code
(``expansion.expand_capability``): ``--seeds`` seeds of every built-in capability, searched,
transformed and parsed as the capabilities stage does, from this project's processed tables
(``data/processed``: run ``lingtest run data`` first) and its induced PCFG
(``data/interim/capabilities/pcfg.json``: a capabilities run writes it).

- baseline: the settings before the volume change — 4 masked sentences per seed, up to 2
  inserted words of any tag, 5 words per mask from the causal LM's top-50 left-context
  proposals, the masked tag required exactly, every valid fill re-scored whole, 5 kept;
- ours: ``params.yaml``'s capabilities settings (one-word modifier insertions proposed from
  the seed's single forward pass, in-context tags, the LM budget, 20 kept).

Printed per side: seconds, seeds, expansions, expansions per seed, seconds per seed, and the
expansion time projected for the default run (510 seeds on 2 worker processes). Seconds are
one process on one thread: run it on an otherwise idle machine.

Run: ``.venv/bin/python benchmarks/bench_expansion_volume.py --seeds 3`` (about 5 min).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lingtest.tasks.capabilities import expansion, grammar, search  # noqa: E402
from lingtest.tasks.capabilities.fill import load_fill_model, tag_lexicon  # noqa: E402
from lingtest.tasks.capabilities.masks import reference_cfg  # noqa: E402
from lingtest.tasks.capabilities.specs import BUILTIN_SPECS, load_specs  # noqa: E402
from lingtest.flows.registry import load_params  # noqa: E402
from lingtest.tasks.core.paths import PACKAGE_ROOT  # noqa: E402
from lingtest.tasks.models.nlp import load_spacy  # noqa: E402

BASELINE = {"max_masks_per_seed": 4, "fill_candidates": 5, "max_expansions_per_seed": 5,
            "max_inserted_words": 2, "insert_tags": None, "pos_check": "exact"}
DEFAULT_SEEDS, WORKERS = 510, 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per capability")
    parser.add_argument("--root", type=Path, default=PACKAGE_ROOT, help="project root")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    params = load_params(args.root)
    c = params.capabilities
    processed = args.root / "data" / "processed"
    nlp = load_spacy(params.models.spacy, offline=True)
    tagged = search.tag_sst(pd.read_parquet(processed / "sst.parquet"), nlp)
    polarity = search.load_word_polarity(
        "lexicon", pd.read_parquet(processed / "word_polarity.parquet"),
        args.root / "data" / "raw" / "nltk_data")
    specs = load_specs(BUILTIN_SPECS)
    seeds, _ = search.seed_cases(specs, tagged, polarity, c.seeds_per_lc, params.seed)
    pcfg = grammar.Grammar.load(args.root / "data" / "interim" / "capabilities" / "pcfg.json")
    treebank = pd.read_parquet(processed / "ptb_trees.parquet")["tree"].tolist()
    cfg = reference_cfg(treebank)
    tags = tag_lexicon([grammar.gold_tags_words(t)[::-1] for t in treebank]
                       + list(zip(tagged["tokens"], tagged["tag"])))
    model = load_fill_model(c.fill_model)
    ours = {key: getattr(c, key) for key in (*BASELINE, "mask_sampling", "top_productions",
                                             "min_logprob_per_word",
                                             "min_right_context_logprob")}
    work = []
    for spec in specs:
        cases = seeds[seeds["capability"] == spec.id].head(args.seeds).reset_index(drop=True)
        work.append((spec, cases, expansion.parse_texts(cases["text"].tolist(), nlp, pcfg)))
    print(f"{sum(len(w[1]) for w in work)} seed cases ({args.seeds} per capability), "
          f"fill model {c.fill_model}, 1 thread")
    print("| side | seconds | seeds | expansions | per seed | s / seed | projected min "
          f"({DEFAULT_SEEDS} seeds, {WORKERS} workers) |\n|---|---:|---:|---:|---:|---:|---:|")
    for name, settings in (("baseline (earlier settings)", {**ours, **BASELINE}),
                           ("ours (params.yaml)", ours)):
        began, kept, n = time.perf_counter(), 0, 0
        for spec, cases, trees in work:
            frame, _ = expansion.expand_capability(spec, cases, trees, cfg, model, c.fill_model,
                                                   nlp, polarity, settings, params.seed, tags)
            kept, n = kept + len(frame), n + len(cases)
        seconds = time.perf_counter() - began
        print(f"| {name} | {seconds:.1f} | {n} | {kept} | {kept / n:.2f} | {seconds / n:.2f} "
              f"| {seconds / n * DEFAULT_SEEDS / WORKERS / 60:.1f} |")


if __name__ == "__main__":
    main()
