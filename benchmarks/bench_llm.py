"""Local LLM query throughput for consistency testing: SmolLM2 batch size 1 (baseline) vs 8.

The prompts are the stage's own: KomMKonLLM questions turned into IPMs (spaCy + WordNet,
``--max-values``), covering arrays of strength 2, derived questions + "Return a JSON
Boolean.", the first ``--prompts`` of them (file order). Both sides run the same prompts
through ``LocalLLM.answer`` (greedy, ``--max-new-tokens``) on one loaded model, after one
warm-up call; rounds alternate (1, 8, 1, 8, ...) and the best round counts. The table also
gives how many answers agree between the two batch sizes (left padding may change float32
logits, hence a greedy answer) and the oracle's undefined count.

Run: ``.venv/bin/python benchmarks/bench_llm.py [--prompts 32] [--rounds 2]``; needs
``data/processed/questions.parquet`` (``lingtest run data``) and the packaged SmolLM2.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd
import torch

from lingtest.tasks.consistency.covering import covering_array
from lingtest.tasks.consistency.ipm import build_ipms, derive_prompt
from lingtest.tasks.consistency.oracle import parse_answer
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.models.llm import DEFAULT_LOCAL_MODEL, LLMSettings, LocalLLM


def prompts(n: int, max_values: int) -> list[str]:
    from lingtest.tasks.models.nlp import load_spacy
    from lingtest.tasks.text.wordnet import wordnet

    workspace = Workspace(ROOT)
    table = pd.read_parquet(workspace.processed / "questions.parquet")
    questions = table[table["source"] == "kommkonllm"]
    ipms = build_ipms(questions, load_spacy("en_core_web_sm"), wordnet(workspace.nltk_data),
                      max_values)
    out: list[str] = []
    for ipm in ipms:
        for row in covering_array(ipm.levels(), 2, seed=0):
            out.append(derive_prompt(ipm.derive(row.tolist()), "", "Return a JSON Boolean."))
            if len(out) == n:
                return out
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--max-values", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from lingtest.tasks.models.causal_lm import load_causal_lm

    batch = prompts(args.prompts, args.max_values)
    began = time.perf_counter()
    lm = load_causal_lm(DEFAULT_LOCAL_MODEL, offline=True, device="cpu")
    load_s = time.perf_counter() - began
    backends = {size: LocalLLM(DEFAULT_LOCAL_MODEL, lm, LLMSettings(
        max_new_tokens=args.max_new_tokens, batch_size=size, device="cpu"))
        for size in args.batch_sizes}
    backends[args.batch_sizes[0]].answer(batch[:2])  # warm-up
    best: dict[int, float] = {}
    answers: dict[int, list[str | None]] = {}
    for _ in range(args.rounds):
        for size, backend in backends.items():
            start = time.perf_counter()
            out = backend.answer(batch)
            seconds = time.perf_counter() - start
            best[size] = min(best.get(size, float("inf")), seconds)
            answers[size] = [r.text for r in out]

    base = args.batch_sizes[0]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{len(batch)} prompts, max_new_tokens {args.max_new_tokens}, torch "
          f"{torch.__version__}, {args.threads} threads, {os.cpu_count()} cores, "
          f"{platform.processor() or platform.machine()}, load average {load:.1f}; "
          f"model load {load_s:.1f} s; best of {args.rounds} rounds\n")
    print("| batch size | seconds | queries/s | × vs batch 1 | same answer as batch 1 "
          "| undefined |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size in args.batch_sizes:
        same = sum(a == b for a, b in zip(answers[size], answers[base]))
        undefined = sum(parse_answer(a) == "undefined" for a in answers[size])
        print(f"| {size}{' (baseline)' if size == base else ''} | {best[size]:.2f} | "
              f"{len(batch) / best[size]:.2f} | ×{best[base] / best[size]:.2f} | "
              f"{same}/{len(batch)} | {undefined}/{len(batch)} |")


if __name__ == "__main__":
    main()
