"""Covering-array size and time: the built-in generator against allpairspy, same run.

Models are mixed alphabets 3^k 2^m. For each strength t and model the table gives the rows and
seconds of ``generate`` (optimised, seed 0), of one plain IPOG/OA run (``optimise=False``), and of
``allpairspy.AllPairs(n=t)``; every array is verified with ``missing_tuples`` (allpairspy's
``n=3`` does not guarantee 3-way coverage, so its missing tuples are reported, not hidden).
"lower bound" is the product of the t largest alphabets; "best known" cites only sizes that are
certain: orthogonal arrays meeting that bound, and CAN(2,13,3) <= 15 (Colbourn's covering array
tables). Run: ``.venv/bin/python benchmarks/bench_covering.py [--quick]``.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from math import prod
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np
from allpairspy import AllPairs

from lingtest.tasks.consistency.covering import generate, missing_tuples

BEST_KNOWN = {((3,) * 4, 2): "9 (OA)", ((3,) * 4, 3): "27 (OA)", ((3,) * 13, 2): "15 (CA tables)"}
ALLPAIRS_T3_MAX_K = 13  # allpairspy n=3 is cheap but not a true 3-way generator; keep it small


def timed(make, *args, **kwargs) -> tuple[np.ndarray, float]:
    """(array, seconds) for one call."""
    start = time.perf_counter()
    array = make(*args, **kwargs)
    return array, time.perf_counter() - start


def allpairs(levels: list[int], t: int) -> np.ndarray:
    """allpairspy's rows as value indices."""
    return np.array(list(AllPairs([list(range(v)) for v in levels], n=t)), dtype=np.int64)


def cell(array: np.ndarray, seconds: float, levels: list[int], t: int) -> str:
    """Rows, seconds, and a warning if tuples are missing."""
    missing = missing_tuples(array, levels, t)
    return f"{len(array)} ({seconds:.2f} s)" + (f", **{missing} missing**" if missing else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="k in 4,13,20 and m in 0,5 only")
    args = parser.parse_args()
    ks = [4, 13, 20] if args.quick else [4, 6, 8, 10, 13, 16, 20]
    ms = [0, 5] if args.quick else [0, 2, 5]
    print(f"# {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} cores, "
          f"numpy {np.__version__}, load average {os.getloadavg()[0]:.1f}\n")
    print("| t | model | lower bound | best known | ours: rows (s) | plain IPOG/OA | allpairspy |")
    print("|---|---|---:|---|---:|---:|---:|")
    for t in (2, 3):
        for k in ks:
            for m in ms:
                levels = [3] * k + [2] * m
                ours = cell(*timed(generate, levels, t), levels, t)
                plain = cell(*timed(generate, levels, t, optimise=False), levels, t)
                theirs = ("–" if t == 3 and k > ALLPAIRS_T3_MAX_K
                          else cell(*timed(allpairs, levels, t), levels, t))
                model = f"3^{k}" + (f" 2^{m}" if m else "")
                best = BEST_KNOWN.get((tuple(levels), t), "")
                print(f"| {t} | {model} | {prod(sorted(levels)[-t:])} | {best} | {ours} "
                      f"| {plain} | {theirs} |", flush=True)


if __name__ == "__main__":
    main()
