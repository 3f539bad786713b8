"""Floor of tokens per exact-length pass: speed of small and large calls against byte-identity.

For each floor (``--floors``, tokens per forward pass; rows = ceil(floor / token count)) the
MiniLM SST-2 classifier (``data/models/minilm-sst2``) and the MiniLM encoder run the first 40,
300 and 2,000 of 2,000 distinct SST sentences (seeded sample; the smaller calls are prefixes of
the larger, so each text is also seen in other company), at 1 thread, best of ``--rounds``.
Then it checks, per floor and model, byte-for-byte:

- company: each of the first 40 texts alone (one call each) = its row in the 40, 300 and 2,000
  calls;
- threads: the 40, 300 and 2,000 calls at 2 threads = the same calls at 1 thread;
- floor: the 2,000 call at 1 thread = the same call at the largest floor.

The baseline, measured in the same run, is the code before exact-length passes: padded batches
of 32 texts in call order. Run: ``.venv/bin/python benchmarks/bench_pass_tokens.py``.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from lingtest.tasks.models.encoders import load_encoder, pool  # noqa: E402
from lingtest.tasks.models.sentiment import MINILM_SST2_DIR, load_minilm_classifier  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SIZES = (40, 300, 2000)


def sample_texts(n: int, seed: int) -> list[str]:
    """n distinct SST sentences, seeded order."""
    sst = pd.read_parquet(ROOT / "data" / "processed" / "sst.parquet", columns=["text"])
    return sst.text.drop_duplicates().sample(n, random_state=seed).tolist()


class Side:
    """One model with a settable floor and the old padded path for the baseline."""

    def __init__(self, name: str, run, padded, set_floor):
        self.name, self.run, self.padded, self.set_floor = name, run, padded, set_floor


def classifier_side() -> Side:
    clf = load_minilm_classifier(ROOT / MINILM_SST2_DIR)

    def padded(texts: list[str]) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), 32):
                inputs = clf.tokenizer(texts[start:start + 32], padding=True, truncation=True,
                                       max_length=clf.max_length, return_tensors="pt")
                out.append(torch.softmax(clf.model(**inputs).float(), dim=-1).double().numpy())
        return np.concatenate(out)

    return Side("classifier minilm-sst2", clf.predict_proba, padded,
                lambda floor: setattr(clf, "pass_tokens", floor))


def encoder_side() -> Side:
    enc = load_encoder(MINILM, offline=True, device="cpu")

    def padded(texts: list[str]) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), 32):
                inputs = enc.tokenizer(texts[start:start + 32], padding=True, truncation=True,
                                       max_length=enc.max_length, return_tensors="pt")
                hidden = enc.model(**inputs).last_hidden_state
                pooled = pool(hidden, inputs["attention_mask"], "mean")
                out.append(torch.nn.functional.normalize(pooled, p=2, dim=1).numpy())
        return np.concatenate(out)

    return Side("encoder all-MiniLM-L6-v2", enc.encode, padded,
                lambda floor: setattr(enc, "pass_tokens", floor))


def timed(fn, texts: list[str], rounds: int) -> tuple[float, np.ndarray]:
    best, out = float("inf"), None
    for _ in range(rounds):
        start = time.perf_counter()
        out = fn(texts)
        best = min(best, time.perf_counter() - start)
    return best, out


def measure(side: Side, texts: list[str], floors: list[int], rounds: int) -> list[str]:
    rows = []
    torch.set_num_threads(1)
    side.run(texts[:20])  # warm-up, not timed
    base = [timed(side.padded, texts[:n], rounds)[0] for n in SIZES]
    rows.append(f"| {side.name} | padded batches of 32 (before) | "
                + " | ".join(f"{t:.2f}" for t in base) + " | – | – | – |")
    top = None
    for floor in sorted(floors, reverse=True):
        side.set_floor(floor)
        torch.set_num_threads(1)
        times, outs = zip(*(timed(side.run, texts[:n], rounds) for n in SIZES))
        alone = np.concatenate([side.run([t]) for t in texts[:SIZES[0]]])
        company = all(np.array_equal(o[:SIZES[0]], alone) for o in outs)
        torch.set_num_threads(2)
        threads = all(np.array_equal(side.run(texts[:n]), o) for n, o in zip(SIZES, outs))
        torch.set_num_threads(1)
        top = outs[-1] if top is None else top
        same_floor = np.array_equal(outs[-1], top)
        mark = {True: "same", False: "**differ**"}
        rows.append(f"| {side.name} | exact-length, {floor} tokens/pass | "
                    + " | ".join(f"{t:.2f}" for t in times)
                    + f" | {mark[company]} | {mark[threads]} | {mark[same_floor]} |")
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--floors", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    texts = sample_texts(SIZES[-1], seed=0)
    table = []
    for make in (classifier_side, encoder_side):
        table += measure(make(), texts, args.floors, args.rounds)
    print(f"\n# bench_pass_tokens  {time.strftime('%Y-%m-%d')}  {platform.machine()}, "
          f"{os.cpu_count()} cores, torch {torch.__version__}; timings at 1 thread, best of "
          f"{args.rounds}; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print("\n| model | passes | 40 texts s | 300 texts s | 2,000 texts s | alone = in company "
          "| 1 = 2 threads | = largest floor |")
    print("|---|---|---:|---:|---:|---|---|---|")
    print("\n".join(table))


if __name__ == "__main__":
    main()
