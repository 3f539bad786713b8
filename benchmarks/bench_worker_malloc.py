"""The same work on a Dask worker under Dask's default environment and under lingtest's.

Dask's nanny starts every worker with ``MALLOC_TRIM_THRESHOLD_=65536``; a set threshold turns
off glibc's dynamic mmap threshold, so each large buffer is mapped and unmapped again.
``lingtest.flows.dask_runner.WORKER_ENVIRON`` unsets it. This script runs, on a one-worker local
cluster (1 thread), the stages' two kinds of model work, first with Dask's default
environment (the baseline), then with lingtest's, each cluster started from a fresh Python
process (a nanny leaves the variable in its parent's environment), and prints wall, user and
kernel seconds and the ratio:

- **answers**: the first ``--prompts`` consistency prompts of the committed suite, SmolLM2 on
  CTranslate2 float32, greedy, 256 new tokens, batches of 32 (the consistency stage's work);
- **embedding**: ``--texts`` SST sentences through MiniLM in the pipeline's exact-length
  passes (the contrastive and capabilities stages' work).

Run: ``nice -n 10 .venv/bin/python benchmarks/bench_worker_malloc.py`` (~5 min); needs the
committed consistency outputs and ``data/processed/sst.parquet``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def answers(prompts: int) -> None:
    """bench_answer_batch's work at the stage's batch size (32)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_answer_batch import local_llm, suite_prompts

    local_llm(32).answer(suite_prompts(prompts))


def embedding(texts: int) -> None:
    import pandas as pd

    from lingtest.tasks.models.encoders import load_encoder

    sst = pd.read_parquet(ROOT / "data" / "processed" / "sst.parquet")
    chosen = list(dict.fromkeys(sst["text"]))[:texts]
    load_encoder("sentence-transformers/all-MiniLM-L6-v2", offline=True,
                 device="cpu").encode(chosen)


def on_worker(work: str, size: int) -> dict:
    """Runs in the worker: the work once, timed in this process."""
    import torch

    sys.path.insert(0, str(ROOT))
    torch.set_num_threads(1)
    fn = {"answers": answers, "embedding": embedding}[work]
    before, began = os.times(), time.perf_counter()
    fn(size)
    after = os.times()
    return {"wall": time.perf_counter() - began, "user": after.user - before.user,
            "sys": after.system - before.system,
            "MALLOC_TRIM_THRESHOLD_": os.environ.get("MALLOC_TRIM_THRESHOLD_")}


def child(side: str, work: str, size: int) -> None:
    """One cluster in this fresh process; prints the worker's figures as JSON."""
    import dask
    from distributed import Client, LocalCluster

    sys.path.insert(0, str(ROOT))
    from lingtest.flows.dask_runner import WORKER_ENVIRON

    config = WORKER_ENVIRON if side == "lingtest" else {}
    with dask.config.set(config), LocalCluster(n_workers=1, threads_per_worker=1,
                                               dashboard_address=None) as cluster, \
            Client(cluster) as client:
        print(json.dumps(client.submit(on_worker, work, size, pure=False).result()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_TRIM_THRESHOLD_"}
    load = os.getloadavg()[0]
    rows = []
    for work, size in (("answers", args.prompts), ("embedding", args.texts)):
        for side in ("dask default", "lingtest"):
            out = subprocess.run([sys.executable, __file__, "--child", side.split()[0], work,
                                  str(size)], env=env, check=True, capture_output=True,
                                 text=True).stdout
            rows.append((work, size, side, json.loads(out.strip().splitlines()[-1])))
    print(f"bench_worker_malloc  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  "
          f"{platform.machine()}, {os.cpu_count()} cores; one Dask worker, 1 thread; load "
          f"average {load:.2f} before, {os.getloadavg()[0]:.2f} after\n")
    print("| work | size | worker environment | MALLOC_TRIM_THRESHOLD_ | wall s | user s | "
          "kernel s | × vs Dask's default |")
    print("|---|---:|---|---|---:|---:|---:|---:|")
    for index, (work, size, side, got) in enumerate(rows):
        base = rows[index - index % 2][3]["wall"]
        print(f"| {work} | {size} | {side} | {got['MALLOC_TRIM_THRESHOLD_']} | "
              f"{got['wall']:.1f} | {got['user']:.1f} | {got['sys']:.1f} | "
              f"×{base / got['wall']:.2f} |")


if __name__ == "__main__":
    main()
