"""Reports of combinatorial consistency testing (KomMKonLLM): per-model summary with 95%
bootstrap CIs, per-question summary, the guide's Table 4 (derived questions × models), bar
charts, the flat results export and the DVC metrics.

Input is the run's results table (``tasks/consistency/store_tasks.py``, ``collect_results``):
one row per model × covering-array row with at least model_id, revision, question_id,
array_row, derived_text, expected, raw_text, error, parsed (null when the model never answered
the row: every call failed) and correct.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from lingtest.tasks.consistency import metrics
from lingtest.tasks.core.io import atomic_path
from lingtest.tasks.core.metrics import stage_metrics

RESULT_EXPORT = ["model_id", "revision", "question_id", "array_row", "row_values",
                 "derived_text", "prompt", "expected", "raw_text", "error", "parsed", "correct"]
SUMMARY_COUNTS = ["n_asked", "n_responded", "n_answered", "n_undefined", "n_errors"]
GUIDE = {"recall_definition": "answered", "consistency_definition": "per_question"}
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


def counts(results: pd.DataFrame, min_answered_share: float = 0.5) -> pd.DataFrame:
    """Per model: rows asked (covering-array rows), rows with a response, rows answered
    true/false, rows answered undefined, rows whose every call failed (errors: not counted
    in the metrics); ``answered_share`` = answered / asked, and ``low_answered_share`` when
    it is below ``min_answered_share``: every headline metric of such a model rests on few
    of the questions asked (3 failed calls of 4 leave an accuracy of 1.0 from one answer)."""
    frame = pd.DataFrame({"model_id": results["model_id"].astype(str),
                          "n_asked": 1,
                          "n_responded": results["parsed"].notna().astype(int),
                          "n_answered": results["parsed"].isin(["true", "false"]).astype(int),
                          "n_undefined": (results["parsed"] == "undefined").astype(int),
                          "n_errors": (results["parsed"].isna()
                                       & results["error"].notna()).astype(int)})
    table = frame.groupby("model_id", sort=True)[SUMMARY_COUNTS].sum().reset_index()
    table["answered_share"] = table["n_answered"] / table["n_asked"]
    table["low_answered_share"] = table["answered_share"] < min_answered_share
    return table


def summary(results: pd.DataFrame, n_boot: int = 1000, seed: int = 0,
            recall_definition: str = "answered",
            consistency_definition: str = "per_question", zero_division: str = "zero",
            min_answered_share: float = 0.5) -> pd.DataFrame:
    """One row per model: counts (``counts``), then accuracy, precision, recall, F1 (class
    true), consistency, undefined rate and consistent non-answering, each with its 95%
    cluster-bootstrap CI (over questions), by the chosen definitions
    (``metrics.definitions``), then recall, F1 and consistency by the other definitions
    (``metrics.alternative_columns``)."""
    table = counts(results, min_answered_share)
    rows = answered(results)
    if rows.empty:
        return table
    scores = metrics.model_summary(rows, n_boot=n_boot, seed=seed,
                                   recall_definition=recall_definition,
                                   consistency_definition=consistency_definition,
                                   zero_division=zero_division)
    return table.merge(scores.drop(columns="n"), on="model_id", how="left")


def _by(row: dict, name: str, definition: str, chosen: str) -> object:
    """A metric by ``definition``: the headline column when it is the chosen one."""
    return row.get(name) if definition == chosen else row.get(f"{name}_{definition}")


def flag_note(table: pd.DataFrame, min_answered_share: float) -> str:
    """The models whose answered share is below the threshold, named with their counts:
    their metrics rest on few of the questions asked."""
    low = table[table["low_answered_share"]]
    if low.empty:
        return (f"Every model answered true/false on at least {min_answered_share:.0%} of "
                "the rows asked.")
    names = "; ".join(f"{row.model_id} ({int(row.n_answered)} / {int(row.n_asked)})"
                      for row in low.itertuples())
    return (f"LOW ANSWERED SHARE (below {min_answered_share:.0%} of the rows asked answered "
            f"true/false; the metrics rest on the few answers): {names}.")


def side_by_side(table: pd.DataFrame, recall_definition: str = "answered",
                 consistency_definition: str = "per_question") -> pd.DataFrame:
    """Per model the guide's definitions beside lingtest's stricter ones, with the rows
    answered of those asked and the low-answered-share flag: the summary to read first."""
    rows = []
    for row in table.to_dict(orient="records"):
        out = {"model_id": row["model_id"],
               "answered / asked": f"{int(row['n_answered'])} / {int(row['n_asked'])}",
               "low answered share": bool(row["low_answered_share"]),
               "accuracy": row.get("accuracy"), "precision": row.get("precision")}
        for name, definition in (("recall", "recall_definition"), ("f1", "recall_definition"),
                                 ("consistency", "consistency_definition"),
                                 ("consistent_non_answering", "consistency_definition")):
            chosen = recall_definition if definition == "recall_definition" \
                else consistency_definition
            guide, strict = GUIDE[definition], metrics.other(GUIDE[definition])
            out[f"{name} (guide: {guide})"] = _by(row, name, guide, chosen)
            out[f"{name} (lingtest: {strict})"] = _by(row, name, strict, chosen)
        out["undefined_rate"] = row.get("undefined_rate")
        rows.append(out)
    return pd.DataFrame(rows)


def question_table(results: pd.DataFrame, questions: pd.DataFrame,
                   consistency_definition: str = "per_question") -> pd.DataFrame:
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


GUIDE_QUERIES = ["id", "sentence_id", "sentence", "correct_answer_label", "query_id",
                 "modified_question", "new_response", "result"]
GUIDE_RUNS = ["id", "sentence", "date", "correct_answer_label", "model_name", "note",
              "strength"]


def guide_export(results: pd.DataFrame, questions: pd.DataFrame, strength: int
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run in the guide's layout (KomMKonLLM ``example/queries.csv`` and
    ``test_runs.csv``), so its notebook (``ResultStore/Visualisation.ipynb``) reads
    lingtest's answers: one test sentence per model × question (``sentence_id``; its
    ``note`` names the model, as the guide's does), one query per covering-array row that
    got a response (the guide stores no failed call), query ids rising with the row so the
    original has the sentence's lowest, as the guide's consistency expects; ``result`` is
    the oracle's reading. ``date`` is left empty (the export does not depend on the day)."""
    rows = results[results["parsed"].notna()].sort_values(
        ["model_id", "question_id", "array_row"], kind="stable")
    texts = dict(zip(questions["question_id"], questions["question"]))
    runs, queries = [], []
    for sentence_id, ((model, question_id), group) in enumerate(
            rows.groupby(["model_id", "question_id"], sort=False), start=1):
        label = "true" if bool(group["expected"].iloc[0]) else "false"
        runs.append((sentence_id, texts[question_id], "", label, "LINGTEST", str(model),
                     strength))
        for prompt, response, parsed in zip(group["prompt"], group["raw_text"],
                                            group["parsed"]):
            queries.append((len(queries), sentence_id, texts[question_id], label,
                            len(queries) + 1, prompt, response, parsed))
    return (pd.DataFrame(queries, columns=GUIDE_QUERIES).astype({"new_response": object}),
            pd.DataFrame(runs, columns=GUIDE_RUNS))


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


def model_line(record: dict, run: dict, key_env: str | None = None) -> str:
    """One model's provenance: display name, spec, the revision actually tested, what ran
    it and output budget; never the store's model key (a counter local to one answer store:
    identical runs on two stores would differ). A local model adds source, file, dtype; an
    HTTP model its endpoint (no credentials), the *name* of its key's variable and whether
    it was set (never the key), digest and system fingerprints; a ``python:`` model its file
    (``publish`` writes it relative to the project root) and protocol. ``record``:
    ``store_tasks.model_record``; ``run``: the unit's extras (``name``,
    ``system_fingerprints``)."""
    from lingtest.tasks.consistency.contract import revision

    backend = record.get("backend")
    spec = record.get("spec") or record["model_id"]
    if backend in ("transformers", "transformers-seq2seq", "ctranslate2"):
        engine = (f"{record.get('engine')}, {record.get('engine_reason')}"
                  if backend == "ctranslate2" else backend)  # lingtest.tasks.models.lm_engines
        what = (f"{record.get('source')}, {record.get('gguf_file') or '-'}, "
                f"{record.get('dtype')}, {engine}")
    elif backend == "python":
        what = f"python {record.get('protocol')}, {record.get('file') or '-'}"
    else:
        what = f"{backend}{endpoint_note(record, run)}{key_note(backend, key_env)}"
    name = run.get("name") or record["model_id"]
    named = spec if name == spec else f"{name}: {spec}"  # the spec once when it is the name
    return (f"{named} @ {revision(record)} ({what}, max_new_tokens "
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


HEADLINE = ("accuracy", "precision", "recall", "f1", "consistency", "undefined_rate",
            "consistent_non_answering")


def metrics_json(table: pd.DataFrame, totals: dict[str, int],
                 recall_definition: str = "answered",
                 consistency_definition: str = "per_question") -> dict:
    """For ``dvc metrics show``: per model the headline metrics (by the chosen definitions,
    named in ``setting``), the same metrics by the other definitions (``recall_all_true``,
    …), the rows answered true/false of those asked, ``low_answered_share`` (1: flagged),
    and the prompts answered in all (not the prompts this process sent: a counter of one
    run is no metric of the results; ``last-run.json`` keeps it)."""
    extra = metrics.alternative_columns(recall_definition, consistency_definition)
    out: dict[str, dict] = {}
    for row in table.to_dict(orient="records"):
        model = str(row["model_id"])
        entry = {name: _number(row.get(name)) for name in (*HEADLINE, *extra)}
        entry.update({"n_answered": int(row["n_answered"]), "n_asked": int(row["n_asked"]),
                      "answered_share": _number(row["answered_share"]),
                      "low_answered_share": int(bool(row["low_answered_share"])),
                      "n_errors": int(row["n_errors"]),
                      "prompts_total": int(totals.get(model, 0))})
        out[model] = entry
    return stage_metrics(f"recall={recall_definition} consistency={consistency_definition}",
                         out)


def chart_data(table: pd.DataFrame) -> pd.DataFrame:
    """What the chart plots, wide: one row per model, each ``CHART_METRICS`` column with
    its 95% CI bounds (blank: undefined)."""
    out = pd.DataFrame({"model_id": table["model_id"].astype(str)})
    for name, _ in CHART_METRICS:
        for column in (name, f"{name}_lo", f"{name}_hi"):
            out[column] = (table[column].to_numpy(dtype=float) if column in table
                           else np.nan)
    return out


def _number(value: object) -> float | None:
    """JSON-safe float: NaN/None become null."""
    if value is None:
        return None
    value = float(value)
    return None if np.isnan(value) else round(value, 6)
