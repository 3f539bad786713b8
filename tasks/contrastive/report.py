"""COSTELLO's reports: Table 1 (triples per relation), Table 2 (precision per distance and
threshold), the precision-against-threshold figure (the paper's Figure 6), the violation list.

Input is the long results table of the ``contrastive`` stage (one row per case × model ×
distance × threshold; schema in ``tasks/contrastive/validation.py``). P_A / P_B are the shares
of reported violations that the downstream classifiers call buggy under GT_A / GT_B; a cell
with no violation has no precision (blank, not 0). "avg" is the mean over the relations that
have a precision, as in the paper's Table 2.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lingtest.tasks.core.io import atomic_path
from lingtest.tasks.core.metrics import stage_metrics

THRESHOLD_ORDER = ["zero", "min", "mu-2sigma", "mu-sigma"]
THRESHOLD_LABEL = {"zero": "0", "min": "min", "mu-2sigma": "μ−2σ", "mu-sigma": "μ−σ"}
#: The paper's averages over its 42 models (L2 rows and cosine at zero), for reference; shown
#: only beside rows computed with the paper's rule (results column ``rule``: √σ, squared L2,
#: cosine similarity), as the figures came from that code.
PAPER_ROWS = {
    ("l2", "zero", "vocab"): (51.22, 73.37),
    ("l2", "mu-2sigma", "vocab"): (62.00, 80.14),
    ("l2", "mu-sigma", "vocab"): (66.11, 83.39),
    ("cos", "zero", "vocab"): (8.48, 20.64),
}


def _cells_per_model(group: pd.DataFrame, relations: list[str]) -> list[dict[str, float]]:
    """N_V, P_A, P_B per relation of each model's rows of one setting (one distance /
    threshold / dictionary), in model order, from one groupby (a filter per model and
    relation took 30 s of the report over 42 models); a precision without a violation is
    NaN."""
    fail = group["verdict"] == "fail"
    flags = pd.DataFrame({"model_id": group["model_id"], "relation": group["relation"],
                          "fail": fail, "gt_a": group["gt_a"].astype(float).where(fail),
                          "gt_b": group["gt_b"].astype(float).where(fail)})
    found = flags.groupby(["model_id", "relation"]).agg(
        n=("fail", "sum"), a=("gt_a", "mean"), b=("gt_b", "mean")).to_dict("index")
    per_model = []
    for model in sorted(group["model_id"].unique()):
        cells: dict[str, float] = {}
        for relation in relations:
            one = found.get((model, relation), {"n": 0, "a": np.nan, "b": np.nan})
            cells[f"{relation} N_V"] = float(one["n"])
            cells[f"{relation} P_A"] = float(one["a"] * 100)
            cells[f"{relation} P_B"] = float(one["b"] * 100)
        per_model.append(cells)
    return per_model


def _nanmean(values: list[float]) -> float:
    values = [v for v in values if not np.isnan(v)]
    return float(np.mean(values)) if values else np.nan


def table2(results: pd.DataFrame, model_id: str | None = None) -> pd.DataFrame:
    """The paper's Table 2 layout for one model, or over all models when ``model_id`` is None.

    Rows: distance × threshold (× dictionary); per relation N_V, P_A, P_B (%); averages over
    the relations. Over several models, as in the paper: each cell is the mean over models
    of the per-model figure (N_V: mean count; P_A / P_B: mean of the models' precisions,
    models without a violation having none), and N_M per relation counts the models with at
    least one violation.
    """
    frame = results if model_id is None else results[results["model_id"] == model_id]
    relations = sorted(frame["relation"].unique())
    several = model_id is None and frame["model_id"].nunique() > 1
    rows = []
    keys = ["distance", "threshold_kind", "dictionary"]
    for (distance, kind, dictionary), group in frame.groupby(keys, sort=False):
        row: dict[str, object] = {"distance": distance, "threshold": THRESHOLD_LABEL[kind],
                                  "dictionary": dictionary,
                                  "θ": float(group["threshold"].mean())}
        per_model = _cells_per_model(group, relations)
        for relation in relations:
            if several:
                row[f"{relation} N_M"] = sum(c[f"{relation} N_V"] > 0 for c in per_model)
                row[f"{relation} N_V"] = float(np.mean([c[f"{relation} N_V"]
                                                        for c in per_model]))
            else:
                row[f"{relation} N_V"] = int(per_model[0][f"{relation} N_V"])
            for measure in ("P_A", "P_B"):
                row[f"{relation} {measure}"] = _nanmean([c[f"{relation} {measure}"]
                                                         for c in per_model])
        row["avg N_V"] = float(np.mean([row[f"{r} N_V"] for r in relations]))
        row["avg P_A"] = _nanmean([row[f"{r} P_A"] for r in relations])
        row["avg P_B"] = _nanmean([row[f"{r} P_B"] for r in relations])
        # the paper's figures only beside rows computed with the paper's rule
        same_rule = "rule" in group and (group["rule"] == "paper").all()
        paper = PAPER_ROWS.get((distance, kind, dictionary)) if same_rule else None
        row["paper avg P_A"], row["paper avg P_B"] = paper if paper else (np.nan, np.nan)
        rows.append(row)
    table = pd.DataFrame(rows)
    order = {k: i for i, k in enumerate(THRESHOLD_LABEL[t] for t in THRESHOLD_ORDER)}
    table["_d"] = table["dictionary"].map({"vocab": 0, "dataset": 1, "user": 2})
    table["_t"] = table["threshold"].map(order)
    table["_m"] = table["distance"].map({"l1": 0, "l2": 1, "cos": 2})
    paper_columns = ["paper avg P_A", "paper avg P_B"]
    if table[paper_columns].isna().all().all():  # no row used the paper's rule: no empty columns
        table = table.drop(columns=paper_columns)
    return table.sort_values(["_d", "_m", "_t"]).drop(columns=["_d", "_t", "_m"]).reset_index(drop=True)


#: The setting of the violation list and of the DVC metrics (``headline_metrics``).
HEADLINE = {"distance": "l2", "threshold_kind": "mu-sigma", "dictionary": "vocab"}


def headline_metrics(results: pd.DataFrame,
                     tables: dict[str, pd.DataFrame] | None = None) -> dict:
    """For ``dvc exp show``: per model and relation N_V, P_A, P_B (``CR2.P_A``) at the
    headline setting (L2 distance, θ = μ−σ, vocabulary dictionary — the setting of the
    violation list); a precision with no violation is left out. ``tables``: each model's
    ``table2`` when already made."""
    out: dict[str, dict] = {}
    relations = sorted(results["relation"].unique())
    for model_id in results["model_id"].unique():
        table = (tables or {}).get(model_id)
        table = table2(results, model_id) if table is None else table
        row = table[(table["distance"] == HEADLINE["distance"]) &
                    (table["dictionary"] == HEADLINE["dictionary"]) &
                    (table["threshold"] == THRESHOLD_LABEL[HEADLINE["threshold_kind"]])]
        if row.empty:
            continue
        cells = row.iloc[0]
        out[str(model_id)] = {rel: {m: round(float(cells[f"{rel} {m}"]), 4)
                                    for m in ("N_V", "P_A", "P_B")
                                    if not pd.isna(cells[f"{rel} {m}"])} for rel in relations}
    return stage_metrics(" ".join(HEADLINE.values()), out)  # "l2 mu-sigma vocab"


def headline_violations(violations: pd.DataFrame) -> pd.DataFrame:
    """The published violation list: the headline setting's rows of ``violation_list``."""
    keep = np.ones(len(violations), dtype=bool)
    for column, value in HEADLINE.items():
        keep &= (violations[column] == value).to_numpy()
    return violations[keep]


def classifier_summary(accuracy: pd.DataFrame) -> pd.DataFrame:
    """Test accuracy of each model's downstream classifiers per task: mean, min, max, count
    (``accuracy``: one row per classifier, ``classifiers.spec_table`` with model_id, task)."""
    return (accuracy.groupby(["model_id", "task"])["accuracy"]
            .agg(["mean", "min", "max", "count"]).reset_index())


def violation_list(results: pd.DataFrame, suite: pd.DataFrame) -> pd.DataFrame:
    """Every reported violation with its triple, margin and ground-truth verdicts."""
    failed = results[results["verdict"] == "fail"]
    columns = ["case_id", "relation", "seed", "positive", "negative"]
    merged = failed.merge(suite[columns], on=["case_id", "relation"], how="left")
    keep = ["model_id", "distance", "threshold_kind", "dictionary", "threshold", "relation",
            "case_id", "d_pos", "d_neg", "margin", "gt_a", "gt_b", "p_greater", "p_less",
            "seed", "positive", "negative"]
    return merged[keep].sort_values(["model_id", "distance", "threshold_kind", "dictionary",
                                     "relation", "margin"], ascending=[True] * 5 + [False])


FIGURE6_LINES = [f"{d} {p}" for d in ("l1", "l2", "cos") for p in ("P_A", "P_B")]


def precision_data(table: pd.DataFrame) -> pd.DataFrame:
    """What Figure 6 plots, wide: one row per threshold (in order), the average P_A / P_B
    of each distance on the vocabulary dictionary (``FIGURE6_LINES``; blank: none)."""
    vocab = table[table["dictionary"] == "vocab"]
    labels = [THRESHOLD_LABEL[t] for t in THRESHOLD_ORDER if THRESHOLD_LABEL[t] in
              set(vocab["threshold"])]
    out = pd.DataFrame({"threshold": labels})
    for distance in ("l1", "l2", "cos"):
        rows = vocab[vocab["distance"] == distance].set_index("threshold").reindex(labels)
        for p in ("P_A", "P_B"):
            out[f"{distance} {p}"] = rows[f"avg {p}"].to_numpy(dtype=float)
    return out


def precision_figure(table: pd.DataFrame, path: Path, title: str) -> Path:
    """Average P_A (solid) and P_B (dashed) against the threshold, one line per distance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    vocab = table[table["dictionary"] == "vocab"]
    labels = [THRESHOLD_LABEL[t] for t in THRESHOLD_ORDER if THRESHOLD_LABEL[t] in
              set(vocab["threshold"])]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for distance, colour in (("l1", "tab:blue"), ("l2", "tab:orange"), ("cos", "tab:green")):
        rows = vocab[vocab["distance"] == distance].set_index("threshold").reindex(labels)
        if rows["avg P_A"].notna().any():
            ax.plot(labels, rows["avg P_A"], "-o", color=colour, label=f"{distance} P_A")
        if rows["avg P_B"].notna().any():
            ax.plot(labels, rows["avg P_B"], "--s", color=colour, label=f"{distance} P_B")
    ax.set_xlabel("threshold θ (vocabulary dictionary)")
    ax.set_ylabel("precision of reported violations (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_lines():
        ax.legend(fontsize=7, ncol=3)
    else:
        ax.text(0.5, 0.5, "no violation reported at any threshold", ha="center",
                transform=ax.transAxes)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return path


def usage_text(usage: dict) -> str:
    """One embedding service's counts in words (``EndpointEncoder.usage`` + from_store)."""
    return (f"{usage['requests']} requests, {usage['input_tokens']} input tokens "
            f"({usage['tokens']}), {usage['from_store']} vectors from the embedding store")


def endpoint_usage(infos: list[dict]) -> pd.DataFrame:
    """Per embedding service of the run: its endpoint (public URL), the revision the server
    stated, the requests made, input tokens (server-stated, estimated, or no source when no
    request was made), vectors embedded now and served from the store. A rerun on the same
    texts shows 0 requests."""
    rows = [{"model_id": i["model_id"], "endpoint": u["endpoint"], "revision": u["revision"],
             "requests": u["requests"], "input_tokens": u["input_tokens"],
             "tokens": u["tokens"], "embedded_now": u["embedded_now"],
             "from_store": u["from_store"],
             "system_fingerprints": ", ".join(u["fingerprints"]) or ""}
            for i in infos if (u := i.get("endpoint"))]
    return pd.DataFrame(rows)
