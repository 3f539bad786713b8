"""AdaTest suggestion speed: the packaged SmolLM2-135M (baseline) vs Gemma 3 270M, side by side.

Both complete the same prompts: the first ``--prompts`` of one /Rooms round of AdaTest's
prompt builder on the hotel tree (seed 0), ``--completions`` each, through
``generators.make_generator`` (temperature 1.0, top_p 0.95, stop at the quote or a line
break, at most 32 new tokens). Both models are loaded first in this process (their load time,
from the safetensors copies when the cache holds them, is printed too); rounds alternate
(SmolLM2, Gemma, SmolLM2, ...) and the best round per side counts. Tokens are the models'
own (Gemma's vocabulary is 262k, SmolLM2's 49k: a suggestion takes about as many tokens).

Run: ``.venv/bin/python benchmarks/bench_generators.py [--prompts 2] [--completions 12]
[--rounds 2] [--tree data/raw/adatest/imdb_hotel_conversion.csv]``.
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.blind_suggestions import GEMMA, TREE, round_prompts  # noqa: E402
from lingtest.tasks.adaptive.generators import SMOLLM2, make_generator  # noqa: E402
from lingtest.tasks.adaptive.tree import read_tree  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--completions", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tree", default=TREE)
    args = parser.parse_args()
    tree_path = Path(args.tree) if Path(args.tree).is_absolute() else ROOT / args.tree
    texts = round_prompts(read_tree(tree_path), "/Rooms", 0)[:args.prompts]
    sides, loads, memory = {}, {}, {}
    for model_id in (SMOLLM2, GEMMA):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        began = time.perf_counter()
        sides[model_id] = make_generator(model_id, offline=True)
        loads[model_id] = time.perf_counter() - began
        memory[model_id] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1e6
    best: dict[str, tuple[float, int, int]] = {}
    for _ in range(args.rounds):
        for model_id, generator in sides.items():
            began = time.perf_counter()
            got = generator.complete(texts, args.completions, seed=0)
            seconds = time.perf_counter() - began
            tokens = sum(len(generator.lm.tokenizer(t, add_special_tokens=False)["input_ids"])
                         for row in got for t in row)
            if model_id not in best or seconds < best[model_id][0]:
                best[model_id] = (seconds, sum(map(len, got)), tokens)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} at the end; {len(texts)} prompts x {args.completions} "
          f"completions, best of {args.rounds} alternating rounds")
    print("| generator | load s | peak RSS added GB | seconds | completions/s | "
          "suggestion tokens/s | × vs SmolLM2 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    base = best[SMOLLM2][0]
    for model_id, (seconds, count, tokens) in best.items():
        print(f"| {model_id} | {loads[model_id]:.1f} | {memory[model_id]:.2f} | {seconds:.1f} | "
              f"{count / seconds:.2f} | {tokens / seconds:.1f} | ×{base / seconds:.2f} |")


if __name__ == "__main__":
    main()
