"""Encoder paths: fp32 torch (the baseline, measured in the same run), bf16 autocast and ONNX
Runtime (``runtime.encoder_precision`` / ``runtime.encoder_backend``): speed, closeness to
fp32, and the effect on the two methods' results.

- Speed, 1 thread: MiniLM (all-MiniLM-L6-v2) on ``--speed-texts`` distinct texts of the
  committed contrastive suite (seeded sample), and the MiniLM-SST2 classifier on the
  capability suite's texts; best of ``--rounds``, the paths' order reversed each round.
  Also: each path's vectors at 2 threads = at 1 thread (byte-for-byte)?
- Closeness: min / median cosine of each path's vectors to fp32's (all texts embedded below).
- COSTELLO N_V: for each path, the contrastive stage's own steps on the committed suite
  (``data/interim/contrastive/suite.parquet``): every text and dictionary word embedded,
  θ from the nearest-neighbour distances of each (distance, dictionary), verdicts by
  ``pipeline.validate``; violations per relation at every distance and θ, and the verdicts
  that differ from fp32's. The downstream ground truth (14 classifier banks per path) is not
  recomputed: N_V does not depend on it. fp32's N_V is checked against the stage's
  ``results.parquet``.
- S²LCT: ``lingtest/minilm-sst2`` (``data/models/minilm-sst2``) through ``run_suite`` on the
  committed capability suite (``data/interim/capabilities/suite.parquet``), and on the SST
  test sentences: labels and verdicts that differ from fp32's, out of N.

Reads the project's data folders only (nothing is written there); the ONNX graphs go to
``$LINGTEST_CACHE/onnx``. Run: ``.venv/bin/python benchmarks/bench_encoder_paths.py``.
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

from lingtest.tasks.capabilities.model_tasks import run_suite  # noqa: E402
from lingtest.tasks.contrastive import embedding_tasks, validation  # noqa: E402
from lingtest.tasks.contrastive import thresholds  # noqa: E402
from lingtest.flows.registry import load_params  # noqa: E402
from lingtest.tasks.models.encoders import load_encoder  # noqa: E402
from lingtest.tasks.models.sentiment import MINILM_SST2_ID, load_sentiment_model  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
PATHS = {"fp32 torch (baseline)": ("fp32", "torch"), "bf16 autocast": ("bf16", "torch"),
         "ONNX Runtime": ("fp32", "onnx")}
BASE = "fp32 torch (baseline)"


def timed(fn, texts: list[str]) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = fn(texts)
    return time.perf_counter() - start, out


def speeds(models: dict, texts: list[str], rounds: int, run) -> dict[str, float]:
    """Best seconds per path; the paths' order reverses each round (load drifts)."""
    best = {name: float("inf") for name in models}
    names = list(models)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            best[name] = min(best[name], timed(run(models[name]), texts)[0])
    return best


def two_threads_same(path: tuple[str, str], texts: list[str], one: np.ndarray) -> bool:
    """The path's vectors from a fresh encoder at 2 threads (ONNX: a 2-thread session)."""
    torch.set_num_threads(2)
    try:
        enc = load_encoder(MINILM, offline=True, device="cpu", precision=path[0],
                           backend=path[1])
        return bool(np.array_equal(enc.encode(texts), one))
    finally:
        torch.set_num_threads(1)


def embed_all(enc, suite: pd.DataFrame, params) -> tuple[dict, embedding_tasks.Embedded]:
    """What the stage's ``embed`` task embeds (triples, vocabulary and dataset dictionaries,
    each deduplicated by normal form), without the store."""
    c = params.contrastive
    extra = {"dataset": thresholds.dictionary_from_dataset(suite["seed"].drop_duplicates())}
    words = {"vocab": thresholds.vocabulary_dictionary(enc, c.dictionary_max_words,
                                                       params.seed), **extra}
    words = {name: thresholds.distinct_forms(ws, enc.normal_forms(ws))
             for name, ws in words.items()}
    texts = validation.needed_texts(suite, {}, [], c.paraphrase_features)
    everything = list(dict.fromkeys([*texts, *(w for ws in words.values() for w in ws)]))
    info = {"model_id": enc.model_id, "revision": enc.revision, "pooling": enc.pooling,
            "dictionaries": words}
    return info, embedding_tasks.Embedded(everything, enc.encode(everything))


def verdicts(suite: pd.DataFrame, info: dict, embedded: embedding_tasks.Embedded,
             params) -> pd.DataFrame:
    """``pipeline.validate``'s rows (θ as ``ContrastiveMethod._thresholds`` derives it); the
    ground-truth columns are left empty."""
    c = params.contrastive
    thetas = {}
    for metric in c.distances:
        for name, words in info["dictionaries"].items():
            if name == "dataset" and metric != "l2":
                continue
            nn = thresholds.nearest_neighbour_distances(embedded(words), metric, c.block_size)
            nn = thresholds.rule_distances(nn, metric, c.threshold_rule)
            kinds = [k for k in c.thresholds if name == "vocab" or k != "zero"]
            thetas[(metric, name)] = thresholds.thresholds(nn, kinds, c.threshold_rule)
    truth = pd.DataFrame({"p_greater": np.nan, "p_less": np.nan, "gt_a": False, "gt_b": False},
                         index=suite.index)
    return validation.validate(suite, embedded, info, c, thetas, truth)


def n_v(rows: pd.DataFrame) -> pd.Series:
    keys = ["distance", "dictionary", "threshold_kind", "relation"]
    return rows.assign(fail=rows["verdict"].eq("fail")).groupby(keys)["fail"].sum()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a.astype(np.float64) * b).sum(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speed-texts", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    load_before = os.getloadavg()
    torch.set_num_threads(1)
    params = load_params(ROOT)
    suite = pd.read_parquet(ROOT / "data" / "interim" / "contrastive" / "suite.parquet")
    stage = pd.read_parquet(ROOT / "data" / "interim" / "contrastive" / "results.parquet")
    lines = []

    # ------------------------------------------------------------------ encoder
    encs = {name: load_encoder(MINILM, offline=True, device="cpu", precision=p, backend=b)
            for name, (p, b) in PATHS.items()}
    distinct = list(dict.fromkeys(validation.needed_texts(suite, {}, [], "joint")))
    sample = [distinct[i] for i in np.sort(np.random.default_rng(0).choice(
        len(distinct), min(args.speed_texts, len(distinct)), replace=False))]
    for enc in encs.values():
        enc.encode(sample[:20])  # warm-up (ONNX: the export or cache load), not timed
    enc_s = speeds(encs, sample, args.rounds, lambda e: e.encode)
    one = {name: enc.encode(sample) for name, enc in encs.items()}
    threads = {name: two_threads_same(PATHS[name], sample, one[name]) for name in encs}
    full, results, seconds = {}, {}, {}
    for name, enc in encs.items():
        started = time.perf_counter()
        info, embedded = embed_all(enc, suite, params)
        seconds[name] = time.perf_counter() - started
        full[name] = embedded.matrix
        results[name] = verdicts(suite, info, embedded, params)
        print(f"{name}: {len(embedded.row)} texts embedded in {seconds[name]:.0f} s", flush=True)
    counts = {name: n_v(r) for name, r in results.items()}
    staged = n_v(stage)
    same_as_stage = bool(counts[BASE].reindex(staged.index).eq(staged).all())

    lines.append("\n### Speed and closeness (MiniLM encoder, 1 thread)\n")
    lines.append(f"| path | {len(sample)} suite texts s | texts/s | × fp32 | all {len(distinct)} "
                 f"texts + dictionaries s | min cos to fp32 | median cos | 1 = 2 threads |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---|")
    for name in encs:
        cos = cosines(full[name], full[BASE])
        lines.append(f"| {name} | {enc_s[name]:.2f} | {len(sample) / enc_s[name]:.0f} | "
                     f"{enc_s[BASE] / enc_s[name]:.2f} | {seconds[name]:.0f} | {cos.min():.6f} | "
                     f"{np.median(cos):.7f} | {'same' if threads[name] else '**differ**'} |")

    lines.append(f"\n### COSTELLO N_V per relation at L2, θ = μ−σ, vocabulary dictionary "
                 f"({len(suite)} triples; fp32 here = the stage's results.parquet: "
                 f"{'yes' if same_as_stage else '**no**'})\n")
    relations = sorted(suite["relation"].unique())
    lines.append("| path | " + " | ".join(relations) + " | verdicts ≠ fp32 |")
    lines.append("|---|" + "---:|" * (len(relations) + 1))
    for name, count in counts.items():
        at = count.loc[("l2", "vocab", "mu-sigma")]
        rows = results[name].query("distance == 'l2' and dictionary == 'vocab' and "
                                   "threshold_kind == 'mu-sigma'")
        base = results[BASE].query("distance == 'l2' and dictionary == 'vocab' and "
                                   "threshold_kind == 'mu-sigma'")
        lines.append(f"| {name} | " + " | ".join(str(int(at.get(r, 0))) for r in relations)
                     + f" | {int((rows['verdict'].to_numpy() != base['verdict'].to_numpy()).sum())} |")

    lines.append("\n### COSTELLO N_V (all relations) at every distance, dictionary and θ; "
                 "in brackets: verdicts ≠ fp32\n")
    settings = counts[BASE].groupby(level=[0, 1, 2]).sum().index
    lines.append("| distance | dictionary | θ | " + " | ".join(encs) + " |")
    lines.append("|---|---|---|" + "---:|" * len(encs))
    for setting in settings:
        cells = []
        for name in encs:
            total = int(counts[name].groupby(level=[0, 1, 2]).sum().loc[setting])
            mask = ((results[name]["distance"] == setting[0])
                    & (results[name]["dictionary"] == setting[1])
                    & (results[name]["threshold_kind"] == setting[2]))
            differ = int((results[name].loc[mask, "verdict"].to_numpy()
                          != results[BASE].loc[mask, "verdict"].to_numpy()).sum())
            cells.append(f"{total}" + ("" if name == BASE else f" ({differ})"))
        lines.append(f"| {setting[0]} | {setting[1]} | {setting[2]} | " + " | ".join(cells) + " |")

    # ------------------------------------------------------------------ classifier
    band = tuple(params.capabilities.neutral_band)
    clfs = {name: load_sentiment_model(MINILM_SST2_ID, band, root=ROOT, precision=p, backend=b)
            for name, (p, b) in PATHS.items()}
    cap_suite = pd.read_parquet(ROOT / "data" / "interim" / "capabilities" / "suite.parquet")
    sst = pd.read_parquet(ROOT / "data" / "processed" / "sst.parquet", columns=["split", "text"])
    sst_test = sst.loc[sst["split"] == "test", "text"].drop_duplicates().tolist()
    for clf in clfs.values():
        clf.predict_proba(sst_test[:20])  # warm-up / export
    cap_texts = cap_suite["text"].tolist()
    clf_s = speeds(clfs, cap_texts, args.rounds, lambda m: m.predict_proba)
    runs = {name: run_suite.fn(clf, cap_suite) for name, clf in clfs.items()}
    sst_labels = {name: clf.predict(sst_test) for name, clf in clfs.items()}
    revision = clfs[BASE].revision
    lines.append(f"\n### S²LCT: lingtest/minilm-sst2 ({revision}), 1 thread\n")
    lines.append(f"| path | {len(cap_texts)} suite texts s | × fp32 | suite fails | labels ≠ fp32 "
                 f"(suite) | verdicts ≠ fp32 (suite) | labels ≠ fp32 ({len(sst_test)} SST test) "
                 f"| max abs ΔP(pos) |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, frame in runs.items():
        base = runs[BASE]
        flips = int((frame["output"] != base["output"]).sum())
        verdict_flips = int((frame["verdict"] != base["verdict"]).sum())
        sst_flips = sum(a != b for a, b in zip(sst_labels[name], sst_labels[BASE]))
        gap = float((frame["p_pos"] - base["p_pos"]).abs().max())
        lines.append(f"| {name} | {clf_s[name]:.2f} | {clf_s[BASE] / clf_s[name]:.2f} | "
                     f"{int(frame['verdict'].eq('fail').sum())}/{len(frame)} | {flips}/{len(frame)}"
                     f" | {verdict_flips}/{len(frame)} | {sst_flips}/{len(sst_test)} | {gap:.1e} |")

    print(f"\n# bench_encoder_paths  {time.strftime('%Y-%m-%d %H:%M %Z')}  {platform.machine()}, "
          f"{os.cpu_count()} cores, torch {torch.__version__}, onnxruntime "
          f"{__import__('onnxruntime').__version__}; 1 thread, best of {args.rounds}; load "
          f"average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
