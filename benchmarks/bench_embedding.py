"""Embedding throughput: the pipeline path (``embed_texts``) against the tools a user would use.

Every side embeds the same ~2000 SST sentences with the same packaged MiniLM on CPU:

- sentence-transformers: ``SentenceTransformer.encode(batch_size=64)`` (it sorts by length
  itself and pads each batch to its longest text): the tool a user would pick instead;
- file order: padded batches of 32 consecutive sentences (a plain loop over the tokenizer and
  the model, the code before length sorting);
- pipeline: ``embed_texts`` with a fresh store (dedup, exact-length passes without padding,
  sha256 keys, shard files written), then a rerun on a new store object (warm: no model call);
- ceiling: one long pass of texts of a single length (no padding, no fill-up copies), the
  one-core fp32 limit in tokens/s, measured in the same run.

The sample is every row of SST whose text occurs more than once (the natural duplicates)
plus seeded random rows up to ``--n``, kept in file order. Each side runs ``--rounds`` times,
alternating; the table gives the best round.
Run: ``.venv/bin/python benchmarks/bench_embedding.py``.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from lingtest.tasks.contrastive.embedding import EmbeddingStore, embed_texts  # noqa: E402
from lingtest.tasks.models.encoders import load_encoder, pass_rows, pool  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def sample_sentences(n: int, seed: int) -> list[str]:
    """All duplicated SST rows plus random others up to n, in file order."""
    sst = pd.read_parquet(ROOT / "data" / "processed" / "sst.parquet", columns=["text"])
    dup = sst.index[sst.text.duplicated(keep=False)]
    rest = sst.index.difference(dup)
    picked = np.random.default_rng(seed).choice(rest, n - len(dup), replace=False)
    return sst.text.loc[sorted([*dup, *picked])].tolist()


def padded_tokens(lengths: np.ndarray, batch: int) -> int:
    """Tokens the model runs on when consecutive ``batch``-sized groups are padded to their
    longest."""
    return int(sum(lengths[i:i + batch].max() * len(lengths[i:i + batch])
                   for i in range(0, len(lengths), batch)))


def pass_tokens(lengths: np.ndarray, floor: int) -> int:
    """Tokens the exact-length passes (``floor`` tokens or more each) run on, fill-up copies
    included."""
    total = 0
    for length, count in Counter(lengths.tolist()).items():
        rows = pass_rows(length, floor)
        total += -(-count // rows) * rows * length
    return total


def file_order_loop(encoder, texts: list[str], batch: int) -> np.ndarray:
    """Padded batches of ``batch`` consecutive texts, mean pooling + L2 norm (MiniLM's own)."""
    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch):
            inputs = encoder.tokenizer(texts[start:start + batch], padding=True, truncation=True,
                                       max_length=encoder.max_length, return_tensors="pt")
            hidden = encoder.model(**inputs).last_hidden_state
            pooled = pool(hidden, inputs["attention_mask"], "mean")
            out.append(torch.nn.functional.normalize(pooled, p=2, dim=1).numpy())
    return np.concatenate(out)


def ceiling(encoder, texts: list[str], lengths: np.ndarray, tokens: int, rounds: int
            ) -> tuple[float, int, int]:
    """Tokens/s of one pass of ~``tokens`` tokens of the most common length (real texts
    of that length, repeated as needed): best of ``rounds``."""
    length = Counter(lengths.tolist()).most_common(1)[0][0]
    same = [t for t, n in zip(texts, lengths) if n == length]
    rows = -(-tokens // length)
    ids = encoder.tokenizer((same * rows)[:rows], truncation=True,
                            max_length=encoder.max_length, return_tensors="pt")
    best = float("inf")
    with torch.inference_mode():
        encoder.model(**ids)  # warm-up
        for _ in range(rounds):
            start = time.perf_counter()
            encoder.model(**ids)
            best = min(best, time.perf_counter() - start)
    return rows * length / best, rows, length


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="pipeline and file order")
    parser.add_argument("--st-batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    texts = sample_sentences(args.n, seed=0)
    distinct = list(dict.fromkeys(texts))
    encoder = load_encoder(MINILM, offline=True, device="cpu")
    st = SentenceTransformer(encoder.resolution.path, device="cpu")
    lengths = np.array(encoder.token_counts(texts))
    distinct_lengths = np.array(encoder.token_counts(distinct))
    encoder.encode(texts[:64], batch_size=args.batch_size)  # warm-ups, not timed
    st.encode(texts[:64], batch_size=args.st_batch_size)

    times: dict[str, list[float]] = {"st": [], "file": [], "pipeline": [], "warm": []}
    for _ in range(args.rounds):
        start = time.perf_counter()
        theirs = st.encode(texts, batch_size=args.st_batch_size, convert_to_numpy=True)
        times["st"].append(time.perf_counter() - start)
        start = time.perf_counter()
        plain = file_order_loop(encoder, texts, args.batch_size)
        times["file"].append(time.perf_counter() - start)
        with tempfile.TemporaryDirectory(prefix="bench-embed-") as tmp:
            store = EmbeddingStore.for_encoder(Path(tmp), encoder)
            start = time.perf_counter()
            ours = embed_texts(encoder, texts, store, batch_size=args.batch_size)
            times["pipeline"].append(time.perf_counter() - start)
            start = time.perf_counter()
            again = embed_texts(encoder, texts, EmbeddingStore.for_encoder(Path(tmp), encoder),
                                batch_size=args.batch_size)
            times["warm"].append(time.perf_counter() - start)
        assert np.array_equal(ours, again)
    limit, limit_rows, limit_length = ceiling(encoder, texts, lengths, 4096, 3 * args.rounds)

    by_chars = np.argsort([-len(t) for t in texts], kind="stable")  # sentence-transformers' order
    real = int(lengths.sum())
    best = {k: min(v) for k, v in times.items()}
    n = len(texts)
    print(f"# bench_embedding  {time.strftime('%Y-%m-%d')}  {platform.machine()}, "
          f"{os.cpu_count()} cores, torch {torch.__version__} ({args.threads} threads); "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"model {encoder.model_id} ({encoder.revision})")
    print(f"sentences {n}, distinct {len(distinct)}; real tokens {real} (distinct "
          f"{int(distinct_lengths.sum())}); best of {args.rounds} rounds\n")
    print(f"| {'side':<52} | {'seconds':>8} | {'sentences/s':>11} | {'real tokens/s':>13} "
          f"| {'tokens run':>10} |")
    print(f"|{'-' * 54}|{'-' * 10}|{'-' * 13}|{'-' * 15}|{'-' * 12}|")
    rows = [(f"sentence-transformers encode, batch {args.st_batch_size}", best["st"],
             padded_tokens(lengths[by_chars], args.st_batch_size)),
            (f"file order, padded batches of {args.batch_size}", best["file"],
             padded_tokens(lengths, args.batch_size)),
            (f"pipeline: embed_texts, fresh store ({encoder.pass_tokens} tokens/pass)",
             best["pipeline"], pass_tokens(distinct_lengths, encoder.pass_tokens)),
            ("pipeline rerun: warm store, no model call", best["warm"], 0)]
    for name, secs, run in rows:
        print(f"| {name:<52} | {secs:>8.2f} | {n / secs:>11.0f} | {real / secs:>13.0f} "
              f"| {run:>10} |")
    print(f"\nceiling: one pass of {limit_rows} texts x {limit_length} tokens, no padding: "
          f"{limit:.0f} tokens/s ({args.threads} thread(s), fp32); pipeline at "
          f"{real / best['pipeline'] / limit:.0%} of it")
    print(f"pipeline vs sentence-transformers time: x{best['st'] / best['pipeline']:.2f}; "
          f"vs file order: x{best['file'] / best['pipeline']:.2f}; warm store "
          f"x{best['st'] / best['warm']:.0f}")
    print("all rounds (s): " + ", ".join(f"{k} {[round(t, 3) for t in v]}"
                                         for k, v in times.items()))
    print(f"max |pipeline - sentence-transformers| {np.abs(ours - theirs).max():.2e}, "
          f"|pipeline - file order| {np.abs(ours - plain).max():.2e} (padding moves vectors)")


if __name__ == "__main__":
    main()
