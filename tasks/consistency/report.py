"""Reports of combinatorial consistency testing (KomMKonLLM): per-model summary with 95%
bootstrap CIs, per-question summary, the guide's Table 4 (derived questions × models), bar
charts, the flat results export and the DVC metrics.

Input is the run's results table (``tasks/consistency/pipeline.py``, ``collect_results``):
one row per model × covering-array row with at least model_id, question_id, array_row,
derived_text, expected, raw_text, error, parsed (null when the model never answered the row:
every call failed) and correct.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.consistency import metrics
from tasks.core.io import atomic_path

RESULT_EXPORT = ["model_id", "model_key", "question_id", "array_row", "row_values",
                 "derived_text", "prompt", "expected", "raw_text", "error", "parsed", "correct"]
SUMMARY_COUNTS = ["n_queries", "n_answered", "n_undefined", "n_errors"]
CHART_METRICS = (("f1", "F1 (class true)"), ("consistency", "consistency"),
                 ("undefined_rate", "undefined rate"))


def answered(results: pd.DataFrame) -> pd.DataFrame:
    """Rows the oracle has read, in the columns ``metrics`` expects (row, text)."""
    rows = results[results["parsed"].notna()]
    return pd.DataFrame({"model_id": rows["model_id"].astype(str),
                         "question_id": rows["question_id"].astype(str),
                         "row": rows["array_row"].astype(int),
                         "text": rows["derived_text"].astype(str),
                         "expected": rows["expected"].astype(bool),
                         "parsed": rows["parsed"].astype(str)})


def counts(results: pd.DataFrame) -> pd.DataFrame:
    """Per model: array rows, rows answered, answered undefined, and rows whose every call
    failed (errors: not counted in the metrics)."""
    frame = pd.DataFrame({"model_id": results["model_id"].astype(str),
                          "n_queries": 1,
                          "n_answered": results["parsed"].notna().astype(int),
                          "n_undefined": (results["parsed"] == "undefined").astype(int),
                          "n_errors": (results["parsed"].isna()
                                       & results["error"].notna()).astype(int)})
    return frame.groupby("model_id", sort=True)[SUMMARY_COUNTS].sum().reset_index()


def summary(results: pd.DataFrame, n_boot: int = 1000, seed: int = 0,
            recall_definition: str = "all_true",
            consistency_definition: str = "derived_rows") -> pd.DataFrame:
    """One row per model: counts, then accuracy, precision, recall, F1 (class true),
    consistency and undefined rate, each with its 95% cluster-bootstrap CI (over questions);
    recall and consistency as ``metrics.definitions`` names them."""
    table = counts(results)
    rows = answered(results)
    if rows.empty:
        return table
    scores = metrics.model_summary(rows, n_boot=n_boot, seed=seed,
                                   recall_definition=recall_definition,
                                   consistency_definition=consistency_definition)
    return table.merge(scores.drop(columns="n"), on="model_id", how="left")


def question_table(results: pd.DataFrame, questions: pd.DataFrame,
                   consistency_definition: str = "derived_rows") -> pd.DataFrame:
    """Per model and question: n, accuracy, consistency, undefined rate, the answer to the
    original question beside the annotation, and the question itself."""
    table = metrics.question_summary(answered(results), consistency_definition)
    info = questions[["question_id", "source", "question"]]
    return table.merge(info, on="question_id", how="left")


def table4(results: pd.DataFrame) -> pd.DataFrame:
    """The guide's Table 4 for every question: question_id, row, derived question, one
    column of parsed answers per model (row 0 is the original question)."""
    rows = answered(results)
    parts = [metrics.answer_table(rows, qid).assign(question_id=qid)
             for qid in sorted(rows["question_id"].unique())]
    if not parts:
        return pd.DataFrame(columns=["question_id", "row", "text"])
    table = pd.concat(parts, ignore_index=True)
    models = [c for c in table.columns if c not in ("question_id", "row", "text")]
    return table[["question_id", "row", "text", *models]].rename(
        columns={"text": "derived question"})


def export(results: pd.DataFrame) -> pd.DataFrame:
    """The flat results table (one row per model × derived question) for ``results.csv``."""
    return results[RESULT_EXPORT].reset_index(drop=True)


def chart(table: pd.DataFrame, path: Path, title: str) -> Path:
    """Bar charts of F1, consistency and undefined rate per model with 95% CI error bars.

    Uses a bare ``Figure`` on the Agg canvas: no pyplot state, safe in worker threads.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4 + 1.2 * len(table) * len(CHART_METRICS) / 2, 3.8), dpi=120)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(CHART_METRICS), sharey=True)
    x = np.arange(len(table))
    labels = [str(m).split("/")[-1] for m in table["model_id"]]
    for ax, (name, label) in zip(np.atleast_1d(axes), CHART_METRICS):
        values = table[name].to_numpy(dtype=float) if name in table else np.full(len(x), np.nan)
        lo = table.get(f"{name}_lo", pd.Series(np.nan, index=table.index)).to_numpy(float)
        hi = table.get(f"{name}_hi", pd.Series(np.nan, index=table.index)).to_numpy(float)
        err = np.vstack([np.clip(values - lo, 0, None), np.clip(hi - values, 0, None)])
        err = np.where(np.isnan(err), 0.0, err)
        ax.bar(x, np.nan_to_num(values), yerr=err, capsize=4, color="tab:blue", alpha=0.8)
        for xi, v in zip(x, values):
            ax.annotate("n/a" if np.isnan(v) else f"{v:.2f}", (xi, 0 if np.isnan(v) else v),
                        ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points")
        ax.set_title(label, fontsize=10)
        ax.set_xticks(x, labels, rotation=20, ha="right", fontsize=8)
        ax.set_ylim(0, 1.05)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    return path


def model_line(record: dict, run: dict, key_env: str | None = None,
               root: str | None = None) -> str:
    """One model's provenance: display name, spec, the revision actually tested, what ran
    it, store key and output budget. A local model adds source, file, dtype; an HTTP model
    its endpoint (no credentials), the *name* of its key's variable and whether it was set
    (never the key), digest and system fingerprints; a ``python:`` model its file (relative
    to the project root ``root``) and protocol. ``record``: ``pipeline.model_record``;
    ``run``: the unit's extras (``name``, ``model_key``, ``system_fingerprints``)."""
    from tasks.consistency.contract import revision

    backend = record.get("backend")
    spec = record.get("spec") or record["model_id"]
    if backend == "transformers":
        what = (f"{record.get('source')}, {record.get('gguf_file') or '-'}, "
                f"{record.get('dtype')}, transformers")
    elif backend == "python":
        file = str(record.get("file") or "-")
        if root and Path(file).is_absolute():  # shown relative to the project, if inside
            with contextlib.suppress(ValueError):
                file = "<root>/" + Path(file).resolve().relative_to(root).as_posix()
        what = f"python {record.get('protocol')}, {file}"
    else:
        what = f"{backend}{endpoint_note(record, run)}{key_note(backend, key_env)}"
    name = run.get("name") or record["model_id"]
    named = spec if name == spec else f"{name}: {spec}"  # the spec once when it is the name
    return (f"{named} @ {revision(record)} ({what}, "
            f"model key {run['model_key']}, max_new_tokens "
            f"{record.get('max_new_tokens', record.get('max_tokens'))})")


def key_note(backend: str | None, key_env: str | None) -> str:
    """Which variable an HTTP model's key came from and whether it was set; the value
    never. Ollama sends a key only when the spec names one (``#key_env=``)."""
    if backend == "ollama" and not key_env:
        return ", no API key"
    name = key_env or "OPENAI_API_KEY"
    return f", key ${name} ({'set' if os.environ.get(name) else 'unset'})"


def endpoint_note(record: dict, run: dict) -> str:
    """Where an HTTP model answered: base URL, digest, system fingerprints seen this run."""
    if not record.get("base_url"):
        return ""
    note = f", endpoint {record['base_url']}"
    if record.get("digest"):
        note += f", digest {record['digest']}"
    if run.get("system_fingerprints"):
        note += f", system_fingerprint {'/'.join(run['system_fingerprints'])}"
    return note


def metrics_json(table: pd.DataFrame, totals: dict[str, int]) -> dict:
    """For ``dvc metrics show``: per model the headline metrics and the prompts answered in
    all (not the prompts this process sent: a counter of one run is no metric of the
    results; ``last-run.json`` keeps it)."""
    out: dict[str, dict] = {}
    for row in table.to_dict(orient="records"):
        model = str(row["model_id"])
        entry = {name: _number(row.get(name)) for name in
                 ("accuracy", "f1", "consistency", "undefined_rate")}
        entry.update({"n_queries": int(row["n_queries"]), "n_errors": int(row["n_errors"]),
                      "prompts_total": int(totals.get(model, 0))})
        out[model] = entry
    return {"models": out}


def _number(value: object) -> float | None:
    """JSON-safe float: NaN/None become null."""
    if value is None:
        return None
    value = float(value)
    return None if np.isnan(value) else round(value, 6)
