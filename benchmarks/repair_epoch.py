"""Repair fine-tuning: seconds per epoch for MiniLM at the default budget, 1 vs 2 torch threads.

The training triples are the repair stage's (``data/interim/contrastive`` at the default
setting, L2 / μ−2σ / vocabulary, training split by seed sentence); each round trains one
capped epoch (``repair.max_steps_per_epoch`` micro-batches of 4 violated + 4 benign triples)
from the original weights, alternating the thread counts. Printed: seconds per epoch and per
micro-batch for each count (1 thread is the baseline), the ratio, and the uncapped epoch
(the paper's: the benign set once) extrapolated from the measured micro-batch time.

    .venv/bin/python benchmarks/repair_epoch.py [--rounds 2] [--steps 12]
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from lingtest.flows.registry import load_params
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.repair import stage
from lingtest.tasks.repair import triples as tr
from lingtest.tasks.training.embedding_repair import repair_encoder


def one_epoch(params, model_id, buggy, benign, targets, theta, threads: int) -> float:
    encoder = stage.load_tested_encoder(params, model_id)
    p = params.repair.model_copy(update={"epochs": 1})
    started = time.perf_counter()
    repair_encoder(encoder, buggy, benign, targets, theta, p, params.seed, lambda embed: 0,
                   threads=threads)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None,
                        help="micro-batches per epoch (default: repair.max_steps_per_epoch)")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    params = load_params(root)
    if args.steps:
        params = params.model_copy(update={"repair": params.repair.model_copy(
            update={"max_steps_per_epoch": args.steps})})
    workspace = Workspace(root)
    model_id, _, labelled = stage.select_triples.fn(params, workspace)
    train = labelled[labelled["split"] == "train"]
    buggy = tr.triples_of(train[train["verdict"] == "fail"])
    benign = tr.triples_of(train[train["verdict"] == "pass"])
    encoder = stage.load_tested_encoder(params, model_id)
    flat = [t for trip in benign for t in trip]
    targets = encoder.encode(flat).reshape(len(benign), 3, -1)
    theta = float(labelled["threshold"].iloc[0])
    steps = params.repair.max_steps_per_epoch
    full = max(math.ceil(len(buggy) / 4), math.ceil(len(benign) / 4))
    times: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for threads in (1, 2):
            times[threads].append(one_epoch(params, model_id, buggy, benign, targets, theta,
                                            threads))
    print(f"training triples: {len(buggy)} violated, {len(benign)} benign; "
          f"{steps} micro-batches per capped epoch, {full} uncapped")
    print("| torch threads | seconds per epoch (best) | all rounds | s per micro-batch | "
          "uncapped epoch, extrapolated |")
    print("|---:|---:|---|---:|---:|")
    best = {k: min(v) for k, v in times.items()}
    for threads, values in times.items():
        per_step = best[threads] / steps
        print(f"| {threads} | {best[threads]:.1f} | {', '.join(f'{v:.1f}' for v in values)} | "
              f"{per_step:.2f} | {per_step * full / 60:.1f} min |")
    print(f"ratio 1 thread / 2 threads: ×{best[1] / best[2]:.2f}")
    print(f"micro-batch texts per step: 12 violated + 12 benign sentences; mean benign "
          f"length {np.mean([len(t) for t in flat]):.0f} characters")


if __name__ == "__main__":
    main()
