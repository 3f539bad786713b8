"""An LLM classifier's label read on a local LM: one row per longest token prefix of the label
spellings (lingtest's) against one row per prefix (the baseline, lingtest's before), one run.

SmolLM2-135M-Instruct, its default template, the six spellings (negative / neutral / positive,
as written and capitalised; "Neutral" is two tokens), ``--texts`` SST sentences (seed 0) in
batches of 8, 1 thread, on transformers and on CTranslate2 float32. Prints seconds, forward
rows, × vs the baseline, and the largest |Δ| of the label probabilities between the two.

Run: ``nice -n 10 .venv/bin/python benchmarks/bench_label_read.py`` (~3 min); needs
``data/processed/sst.parquet``.
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

import numpy as np
import pandas as pd
import torch

from lingtest.tasks.models.causal_lm import load_causal_lm
from lingtest.tasks.models.llm import DEFAULT_LOCAL_MODEL
from lingtest.tasks.models.llm_classifier import DEFAULT_TEMPLATE, label_rows, spelled_logprobs
from lingtest.tasks.models.lm_engines import on_engine

WORDS = {"neg": "negative", "neutral": "neutral", "pos": "positive"}


def spellings(lm) -> list[tuple[str, tuple[int, ...]]]:
    return [(label, tuple(lm.tokenizer(v, add_special_tokens=False)["input_ids"]))
            for label, w in WORDS.items() for v in (w, w.capitalize())]


def label_probs(logp: dict[tuple, dict[tuple, np.ndarray]], heads, spelled) -> np.ndarray:
    """(texts, labels) probabilities from each text's next-token log-probs per prefix."""
    out = []
    for n in range(len(heads)):
        per = np.array(list(spelled_logprobs(logp[n], spelled).values()))
        out.append(np.exp(per - np.logaddexp.reduce(per)))
    return np.array(out)


def per_prefix(lm, heads, spelled, batch):
    """The baseline: one forward row per prompt and prefix, its last position read."""
    prefixes = list(dict.fromkeys(ids[:j] for _, ids in spelled for j in range(len(ids))))
    logp, rows = [], 0
    for s in range(0, len(heads), batch):
        chunk = heads[s:s + batch]
        nexts = lm.next_logprobs([h + list(p) for h in chunk for p in prefixes])
        rows += len(chunk) * len(prefixes)
        logp += [{p: nexts[n * len(prefixes) + k].numpy() for k, p in enumerate(prefixes)}
                 for n in range(len(chunk))]
    return label_probs(logp, heads, spelled), rows


def per_longest(lm, heads, spelled, batch):
    """lingtest's: one row per prompt and longest prefix, its last positions read."""
    longest, last, read_at = label_rows([ids for _, ids in spelled])
    logp, rows = [], 0
    for s in range(0, len(heads), batch):
        chunk = heads[s:s + batch]
        reads = lm.last_logprobs([h + list(m) for h in chunk for m in longest], last)
        rows += len(chunk) * len(longest)
        logp += [{p: reads[n * len(longest) + k, at].numpy() for p, (k, at) in read_at.items()}
                 for n in range(len(chunk))]
    return label_probs(logp, heads, spelled), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sst = pd.read_parquet(ROOT / "data" / "processed" / "sst.parquet")
    texts = sst["text"].drop_duplicates().sample(args.texts, random_state=0).tolist()
    base = load_causal_lm(DEFAULT_LOCAL_MODEL, offline=True, device="cpu")
    load = os.getloadavg()[0]
    table = []
    for engine in ("transformers", "ctranslate2"):
        lm = on_engine(base, engine, "float32")
        spelled = spellings(lm)
        heads = [lm._prompt_ids(DEFAULT_TEMPLATE.replace("{text}", t), True, None)
                 for t in texts]
        lm.next_logprobs(heads[:2])  # warm-up, not timed
        sides = {}
        for name, read in (("one row per prefix (baseline)", per_prefix),
                           ("one row per longest prefix", per_longest)):
            began = time.perf_counter()
            probs, rows = read(lm, heads, spelled, args.batch)
            sides[name] = (time.perf_counter() - began, rows, probs)
        base_s, _, base_p = sides["one row per prefix (baseline)"]
        for name, (seconds, rows, probs) in sides.items():
            table.append((engine, name, seconds, rows, base_s / seconds,
                          float(np.abs(probs - base_p).max())))
    print(f"bench_label_read  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  "
          f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}; "
          f"{args.threads} thread(s), {len(texts)} SST texts, batches of {args.batch}; load "
          f"average {load:.2f} before, {os.getloadavg()[0]:.2f} after\n")
    print("| engine | read | seconds | rows | × vs baseline | max abs Δ probability |")
    print("|---|---|---:|---:|---:|---:|")
    for engine, name, seconds, rows, ratio, delta in table:
        print(f"| {engine} | {name} | {seconds:.1f} | {rows} | ×{ratio:.2f} | {delta:.1e} |")


if __name__ == "__main__":
    main()
