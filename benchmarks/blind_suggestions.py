"""Material for a blind reading of AdaTest suggestion quality, one generator against another.

Issue #25 ("Suggestion quality"): does a larger offline generator write better test inputs
than the packaged SmolLM2-135M? For each topic, AdaTest's prompt builder
(``prompts.build_prompts`` + ``prompt_texts``, the tree's own ``model score`` column, the
packaged MiniLM for prompt diversity, ``--seed``) makes one round's prompts (AdaTest's plan:
8 prompts × 12 completions); every generator completes the *same* prompts
(``generators.make_generator``: temperature 1.0, top_p 0.95, stop at the quote, seeded per
prompt), the completions are deduplicated against each other and the topic's tests
(``generators.dedupe``), and ``--per-cell`` of them are drawn at random (``--seed``) per
(generator, topic). The rows are shuffled (``--seed``) and numbered, then written as two files:

- ``suggestions.csv``: ``item, topic, suggestion`` only (what a reader judges, blind);
- ``key.csv``: ``item, generator, topic, prompt_id`` (kept away from the reader until done).

``timing.json`` beside them records, per generator, the wall time of its load and of each
topic's round, the completions it wrote and how many were left after dedupe (no text). The
printed table compares the generators' speed on the same prompts.

Run (from the checkout root; about 5 min on 2 idle cores, most of it Gemma's sampling;
20 min on the shared machine of 2026-11-27):
``.venv/bin/python benchmarks/blind_suggestions.py --out blind-reading``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np
import pandas as pd

from lingtest.tasks.adaptive.generators import SMOLLM2, dedupe, make_generator, suggestions_frame
from lingtest.tasks.adaptive.prompts import PromptSettings, build_prompts, minilm_embed, prompt_texts, \
    suggestion_plan
from lingtest.tasks.adaptive.tree import read_tree
from lingtest.tasks.core.errors import LingtestError

GEMMA = "google/gemma-3-270m"
TREE = "data/raw/adatest/imdb_hotel_conversion.csv"


def round_prompts(tree, topic: str, seed: int) -> list[str]:
    """One round's prompt texts for ``topic`` (AdaTest's defaults), the same for every
    generator."""
    settings = PromptSettings()
    items = build_prompts(tree, topic, np.random.default_rng(seed), settings,
                          embed=minilm_embed())
    return prompt_texts(items, topic)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=TREE, help="AdaTest tree (default: the hotel tree)")
    parser.add_argument("--topic", action="append", dest="topics",
                        help="tree topic (repeatable; default /Rooms and /Service)")
    parser.add_argument("--generator", action="append", dest="generators",
                        help=f"generator id (repeatable; default {SMOLLM2} and {GEMMA})")
    parser.add_argument("--per-cell", type=int, default=40,
                        help="suggestions drawn per (generator, topic)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="blind", help="folder for the three files")
    args = parser.parse_args()
    topics = args.topics or ["/Rooms", "/Service"]
    generators = args.generators or [SMOLLM2, GEMMA]
    tree_path = Path(args.tree) if Path(args.tree).is_absolute() else ROOT / args.tree
    tree = read_tree(tree_path)
    missing = [t for t in topics if t not in set(tree.frame["topic"])]
    if missing:
        raise LingtestError(f"{tree_path}: no topic {missing}; topics: {tree.topics()}")
    prompts = {topic: round_prompts(tree, topic, args.seed) for topic in topics}
    n = suggestion_plan()[1]

    drawn, timing = [], {}
    for model_id in generators:
        began = time.perf_counter()
        generator = make_generator(model_id, offline=True)
        timing[model_id] = {"generator_id": generator.generator_id,
                            "load_seconds": round(time.perf_counter() - began, 1), "topics": {}}
        for topic in topics:
            began = time.perf_counter()
            texts = prompts[topic]
            made = suggestions_frame(texts, generator.complete(texts, n, args.seed),
                                     generator.generator_id, args.seed)
            seconds = time.perf_counter() - began
            unique = dedupe(made, tree, topic)
            if len(unique) < args.per_cell:
                print(f"warning: {model_id} {topic}: only {len(unique)} distinct suggestions "
                      f"for {args.per_cell} draws; all kept", file=sys.stderr)
            pick = unique.sample(n=min(args.per_cell, len(unique)), random_state=args.seed)
            drawn.append(pick.assign(generator=model_id, topic=topic))
            timing[model_id]["topics"][topic] = {
                "prompts": len(texts), "completions_asked": len(texts) * n,
                "completions": len(made), "after_dedupe": len(unique), "drawn": len(pick),
                "seconds": round(seconds, 1),
                "completions_per_second": round(len(made) / seconds, 2)}
        timing[model_id]["total_seconds"] = round(
            timing[model_id]["load_seconds"]
            + sum(t["seconds"] for t in timing[model_id]["topics"].values()), 1)

    rows = pd.concat(drawn, ignore_index=True)
    rows = rows.sample(frac=1.0, random_state=args.seed).reset_index(drop=True)
    rows["item"] = np.arange(1, len(rows) + 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows.rename(columns={"input": "suggestion"})[["item", "topic", "suggestion"]].to_csv(
        out / "suggestions.csv", index=False)
    rows[["item", "generator", "topic", "prompt_id"]].to_csv(out / "key.csv", index=False)
    machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
               "load_average_end": round(os.getloadavg()[0], 1), "seed": args.seed,
               "tree": str(tree_path), "topics": topics, "per_cell": args.per_cell}
    (out / "timing.json").write_text(json.dumps({"run": machine, "generators": timing},
                                                indent=2) + "\n")
    print(f"{machine['cpu']}, {machine['cores']} cores, load average "
          f"{machine['load_average_end']} at the end; {len(rows)} rows in {out}")
    print("| generator | load s | topic | completions | distinct | seconds | completions/s |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for model_id, record in timing.items():
        for topic, t in record["topics"].items():
            print(f"| {model_id} | {record['load_seconds']} | {topic} | {t['completions']} | "
                  f"{t['after_dedupe']} | {t['seconds']} | {t['completions_per_second']} |")


if __name__ == "__main__":
    main()
