"""Nearest-neighbour distances for the adaptive threshold: blocked against the full matrix.

Dictionary: ``--words`` words (default 8000) sampled with seed 0 from MiniLM's whole-word
vocabulary, each embedded alone (through the embedding store). For l2 and cos:

- ours: ``nearest_neighbour_distances`` in row blocks (float32 products pick each word's
  neighbour, float64 recomputes the distance), at two block sizes;
- baseline A: the same formula on the full |V|×|V| float32 matrix (numpy, one product);
- baseline B: the full float64 ``scipy.spatial.distance.cdist`` matrix (exact; the
  reference every row's max |Δ| is measured against).

l1 has no matrix-product form, so both sides use cdist: per block vs the full matrix, on a
smaller subset (``--l1-words``, default 3000). Time: best of ``--repeats`` untraced runs.
Peak memory: ``tracemalloc`` (numpy and scipy register their arrays with it) in a separate
run, above what was allocated before; BLAS scratch space is not seen by it.
Run: ``.venv/bin/python benchmarks/bench_threshold.py [--full]`` (``--full`` also times ours
on the whole vocabulary, whose full float64 matrix would need |V|²·8 bytes).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Callable

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from lingtest.tasks.contrastive.embedding import EmbeddingStore, embed_texts  # noqa: E402
from lingtest.tasks.contrastive.thresholds import (  # noqa: E402
    naive_nearest_neighbour_distances, nearest_neighbour_distances, vocabulary_dictionary,
)
from lingtest.tasks.models.encoders import load_encoder  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
MIB = 1 << 20


def numpy_full(x: np.ndarray, metric: str) -> np.ndarray:
    """Baseline A: the whole |V|×|V| float32 matrix at once, then each row's minimum."""
    x = x.astype(np.float32)
    if metric == "cos":
        unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
        full = 1.0 - unit @ unit.T
    else:
        squares = np.einsum("ij,ij->i", x, x)
        full = np.sqrt(np.maximum(squares[:, None] + squares[None, :] - 2.0 * (x @ x.T), 0.0))
    np.fill_diagonal(full, np.inf)
    return full.min(axis=1).astype(np.float64)


def measure(fn: Callable[[], np.ndarray], repeats: int) -> tuple[float, float, np.ndarray]:
    """(best seconds, peak MiB under tracemalloc, result)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    del result
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    result = fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return min(times), peak / MIB, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=8000)
    parser.add_argument("--l1-words", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=None,
                        help="embedding store root (default: a temporary folder)")
    parser.add_argument("--full", action="store_true",
                        help="also time ours on the whole vocabulary (l2, cos)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    encoder = load_encoder(MINILM, offline=True, device="cpu")
    vocab = encoder.vocabulary()
    words = vocabulary_dictionary(encoder, args.words, seed=0)
    with tempfile.TemporaryDirectory(prefix="bench-thr-") as tmp:
        store = EmbeddingStore.for_encoder(args.cache or Path(tmp), encoder)
        start = time.perf_counter()
        emb = embed_texts(encoder, vocab if args.full else words, store, batch_size=64)
        embed_s = time.perf_counter() - start
        x = store.get(words)

    rows = []
    for metric, subset in (("l2", x), ("cos", x), ("l1", x[:args.l1_words])):
        secs, peak, exact = measure(lambda: naive_nearest_neighbour_distances(subset, metric),
                                    args.repeats)
        n = len(subset)
        rows.append((metric, n, "B: scipy cdist, full float64 matrix", secs, peak, 0.0))
        if metric != "l1":
            secs, peak, got = measure(lambda: numpy_full(subset, metric), args.repeats)
            rows.append((metric, n, "A: numpy, full float32 matrix", secs, peak,
                         np.abs(got - exact).max()))
        for block in (256, 1024):
            secs, peak, got = measure(
                lambda: nearest_neighbour_distances(subset, metric, block), args.repeats)
            rows.append((metric, n, f"ours: blocked, block {block}", secs, peak,
                         np.abs(got - exact).max()))
    if args.full:
        for metric in ("l2", "cos"):
            start = time.perf_counter()
            nearest_neighbour_distances(emb, metric, 1024)
            rows.append((metric, len(emb), "ours: blocked, block 1024 (whole vocab)",
                         time.perf_counter() - start, float("nan"), float("nan")))

    print(f"# bench_threshold  {time.strftime('%Y-%m-%d')}  {platform.machine()}, "
          f"{os.cpu_count()} cores, numpy {np.__version__}; load average {load_before:.1f} "
          f"before, {os.getloadavg()[0]:.1f} after")
    print(f"model {encoder.model_id}: {len(vocab)} whole-word tokens, {len(words)} sampled "
          f"(seed 0); embedding {len(emb)} words took {embed_s:.1f} s")
    print(f"time: best of {args.repeats}; peak: tracemalloc, MiB above the inputs\n")
    print(f"| metric | {'|V|':>5} | {'method':<41} | {'seconds':>7} | {'peak MiB':>8} | "
          f"{'max |Δ| vs B':>12} |")
    print(f"|--------|-------|{'-' * 43}|---------|----------|--------------|")
    for metric, n, name, secs, peak, diff in rows:
        print(f"| {metric:<6} | {n:>5} | {name:<41} | {secs:>7.2f} | {peak:>8.1f} | "
              f"{diff:>12.1e} |")
    print()
    for metric in ("l2", "cos", "l1"):
        mine = [r for r in rows if r[0] == metric and r[2] == "ours: blocked, block 1024"][0]
        for base in (r for r in rows if r[0] == metric and r[2][:2] in ("A:", "B:")):
            print(f"{metric}: baseline {base[2][:1]} / ours (block 1024): time "
                  f"x{base[3] / mine[3]:.2f}, peak memory x{base[4] / mine[4]:.1f}  "
                  f"(> 1: ours is faster / smaller)")


if __name__ == "__main__":
    main()
