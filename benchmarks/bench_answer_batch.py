"""The consistency stage's local answering at several batch sizes (issue #38), one run.

The stage answers its prompts greedily in batches of ``consistency.batch_size`` (8); a batch
runs as many decoding steps as its longest answer, and on a memory-bound CPU a step costs
about the same for 8 rows as for 32. This script answers the first ``--prompts`` prompts of
the committed suite (``data/interim/consistency/queries.parquet``, in the stage's order) on
one engine at each ``--batches`` size, the first size being the baseline, and prints per
size: seconds, decoding steps (the sum over batches of the longest answer, in tokens),
answered tokens, tokens/s, × vs the baseline, and how many answers are the same text as
the baseline's and as the committed answer store's.

Run: ``nice -n 10 .venv/bin/python benchmarks/bench_answer_batch.py [--threads 1]``; needs
the committed consistency outputs (``dvc pull`` or ``make run``).
"""
from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd
import torch

from lingtest.tasks.models.llm import DEFAULT_LOCAL_MODEL, LLMSettings, load_llm

QUERIES = ROOT / "data" / "interim" / "consistency" / "queries.parquet"
STORE = ROOT / "data" / "consistency" / "results.sqlite"


def stored_answers(engine: str) -> dict[str, str]:
    """prompt → the committed store's answer from a model record of this backend."""
    with sqlite3.connect(f"file:{STORE}?mode=ro", uri=True) as db:
        rows = db.execute(
            "select q.prompt, r.raw_text from responses r join queries q on q.id = r.query_id "
            "join models m on m.id = r.model_id where r.raw_text is not null and "
            "json_extract(m.params, '$.backend') = ?", (engine,)).fetchall()
    return dict(rows)


def suite_prompts(count: int) -> list[str]:
    """The committed suite's first ``count`` distinct prompts, in the stage's order."""
    return list(dict.fromkeys(pd.read_parquet(QUERIES)["prompt"]))[:count]


def local_llm(batch_size: int, engine: str = "ctranslate2", new_tokens: int = 256):
    """The packaged SmolLM2 as the consistency stage loads it (greedy, on the CPU)."""
    return load_llm(DEFAULT_LOCAL_MODEL, LLMSettings(
        max_new_tokens=new_tokens, batch_size=batch_size, device="cpu", lm_engine=engine))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--engine", default="ctranslate2",
                        choices=["ctranslate2", "transformers"])
    parser.add_argument("--new-tokens", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    prompts = suite_prompts(args.prompts)
    stored = stored_answers(args.engine)
    load = os.getloadavg()[0]
    rows, baseline = [], None
    for size in args.batches:
        llm = local_llm(size, args.engine, args.new_tokens)
        tokenizer = llm.lm.tokenizer
        began = time.perf_counter()
        answers = [r.text or "" for r in llm.answer(prompts)]
        seconds = time.perf_counter() - began
        lengths = [len(tokenizer(a, add_special_tokens=False)["input_ids"]) for a in answers]
        steps = sum(max(lengths[i:i + size]) for i in range(0, len(lengths), size))
        baseline = baseline or (seconds, answers)
        rows.append((size, seconds, steps, sum(lengths), baseline[0] / seconds,
                     sum(a == b for a, b in zip(answers, baseline[1])),
                     sum(stored.get(p) == a for p, a in zip(prompts, answers))))
    print(f"bench_answer_batch  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  "
          f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; "
          f"{args.engine}, {args.threads} thread(s), {len(prompts)} prompts, "
          f"{args.new_tokens} new tokens; load average {load:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after\n")
    print("| batch | seconds | steps | tokens | tokens/s | × vs first | same as first | "
          "same as store |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size, seconds, steps, tokens, ratio, same, same_store in rows:
        print(f"| {size} | {seconds:.1f} | {steps} | {tokens} | {tokens / seconds:.0f} | "
              f"×{ratio:.2f} | {same}/{len(prompts)} | {same_store}/{len(prompts)} |")


if __name__ == "__main__":
    main()
