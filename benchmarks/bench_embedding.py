"""Embedding throughput: the pipeline path (``embed_texts``) against a bare encoder loop.

Both sides embed the same ~2000 SST sentences with the same packaged MiniLM on CPU:

- baseline: ``encoder.encode`` on consecutive slices of 32 sentences, in file order;
- pipeline: ``embed_texts`` with a fresh store (dedup, longest-first batches of 32, sha256
  keys, shard files written), then a rerun on a new store object (warm cache: no model call).

The sample is every row of SST whose text occurs more than once (the natural duplicates)
plus seeded random rows up to ``--n``, kept in file order. Each side runs ``--rounds`` times,
alternating; the table gives the best round. Run: ``.venv/bin/python benchmarks/bench_embedding.py``.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from tasks.contrastive.embedding import EmbeddingStore, embed_texts, length_order  # noqa: E402
from tasks.models.encoders import load_encoder  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def sample_sentences(n: int, seed: int) -> list[str]:
    """All duplicated SST rows plus random others up to n, in file order."""
    sst = pd.read_parquet(ROOT / "data" / "processed" / "sst.parquet", columns=["text"])
    dup = sst.index[sst.text.duplicated(keep=False)]
    rest = sst.index.difference(dup)
    picked = np.random.default_rng(seed).choice(rest, n - len(dup), replace=False)
    return sst.text.loc[sorted([*dup, *picked])].tolist()


def padded_tokens(tokenizer, texts: list[str], batch: int, max_length: int) -> tuple[int, int]:
    """(real tokens, tokens after padding each batch to its longest) for these batches."""
    lengths = np.array([len(ids) for ids in tokenizer(texts, truncation=True,
                                                      max_length=max_length)["input_ids"]])
    padded = sum(lengths[i:i + batch].max() * len(lengths[i:i + batch])
                 for i in range(0, len(lengths), batch))
    return int(lengths.sum()), int(padded)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    texts = sample_sentences(args.n, seed=0)
    distinct = list(dict.fromkeys(texts))
    encoder = load_encoder(MINILM, offline=True, device="cpu")
    encoder.encode(texts[:64], batch_size=args.batch_size)  # warm-up, not timed

    baseline, pipeline, warm = [], [], []
    for _ in range(args.rounds):
        start = time.perf_counter()
        bare = np.concatenate([encoder.encode(texts[i:i + args.batch_size], args.batch_size)
                               for i in range(0, len(texts), args.batch_size)])
        baseline.append(time.perf_counter() - start)
        with tempfile.TemporaryDirectory(prefix="bench-embed-") as tmp:
            store = EmbeddingStore.for_encoder(Path(tmp), encoder)
            start = time.perf_counter()
            ours = embed_texts(encoder, texts, store, batch_size=args.batch_size)
            pipeline.append(time.perf_counter() - start)
            start = time.perf_counter()
            again = embed_texts(encoder, texts, EmbeddingStore.for_encoder(Path(tmp), encoder),
                                batch_size=args.batch_size)
            warm.append(time.perf_counter() - start)
        assert np.array_equal(ours, again)

    real, pad_file = padded_tokens(encoder.tokenizer, texts, args.batch_size, encoder.max_length)
    ordered = [distinct[i] for i in length_order(distinct)]
    real_d, pad_sorted = padded_tokens(encoder.tokenizer, ordered, args.batch_size,
                                       encoder.max_length)
    best = {"baseline": min(baseline), "pipeline": min(pipeline), "warm": min(warm)}
    n = len(texts)
    print(f"# bench_embedding  {time.strftime('%Y-%m-%d')}  {platform.machine()}, "
          f"{os.cpu_count()} cores, torch {torch.__version__} ({args.threads} threads); "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"model {encoder.model_id} ({encoder.revision}), batch {args.batch_size}")
    print(f"sentences {n}, distinct {len(distinct)}; tokens {real} "
          f"(distinct {real_d}); best of {args.rounds} rounds\n")
    print(f"| {'side':<42} | {'seconds':>8} | {'sentences/s':>11} | {'tokens incl. padding':>20} |")
    print(f"|{'-' * 44}|{'-' * 10}|{'-' * 13}|{'-' * 22}|")
    rows = [("baseline: bare encode loop, file order", best["baseline"], pad_file),
            ("pipeline: embed_texts, fresh store", best["pipeline"], pad_sorted),
            ("pipeline rerun: warm store, no model call", best["warm"], 0)]
    for name, secs, pad in rows:
        print(f"| {name:<42} | {secs:>8.2f} | {n / secs:>11.0f} | {pad:>20} |")
    print(f"\nbaseline / pipeline time: x{best['baseline'] / best['pipeline']:.2f} (fresh store), "
          f"x{best['baseline'] / best['warm']:.0f} (warm store); padding tokens "
          f"x{pad_file / pad_sorted:.2f} fewer")
    print(f"all rounds (s): baseline {[round(t, 2) for t in baseline]}, pipeline "
          f"{[round(t, 2) for t in pipeline]}, warm {[round(t, 3) for t in warm]}")
    print(f"max |pipeline - baseline| over all vectors: {np.abs(ours - bare).max():.2e} "
          f"(padding differs between the batches)")


if __name__ == "__main__":
    main()
