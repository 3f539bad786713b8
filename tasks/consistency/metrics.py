"""Metrics of combinatorial consistency testing: correctness against the annotation and
agreement of every derived question with the original one (KomMKonLLM).

Input: one row per query, with columns

model_id     str   the model that answered
question_id  str   the original question the row derives from
row          int   covering-array row; 0 is the original question itself
expected     bool  the annotated answer
parsed       str   the oracle's reading: "true" / "false" / "undefined"

Decisions (the "undefined" answer is neither true nor false):

* accuracy counts an undefined answer as wrong;
* precision/recall/F1 are those of the class "true"; undefined counts as not predicted
  true; a ratio with a zero denominator is 0 (``zero_division="zero"``, the guide's) or NaN
  (``"nan"``);
* consistency compares parsed strings, so a derived question answered "undefined" like
  its undefined original counts as consistent, as in the guide; the part of it that is
  such agreement is reported on its own as ``consistent_non_answering`` (consistency =
  ``consistent_answering`` + ``consistent_non_answering``), so a model that never answers
  cannot pass for a consistent one. Derived rows whose question has no row 0 for that
  model are left out of consistency (there is nothing to compare with).

The defaults are the guide's own definitions (KomMKonLLM
``ResultStore/services/OracleService.py``): ``recall_definition="answered"`` is tp / (tp +
fn) with fn = true questions answered "false", so undefined answers drop out;
``consistency_definition="per_question"`` is, per question, the share of all its rows, the
original included, whose answer equals the original's, averaged over questions (each
question weighs the same). lingtest's stricter definitions are the named alternatives
(``all_true``: an undefined answer on a true question is a miss; ``derived_rows``: derived
rows agreeing with the original, pooled); ``model_summary`` reports them beside the chosen
ones (``ALTERNATIVE_COLUMNS``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.stats import cluster_weights, percentile_bounds

COLUMNS = ("model_id", "question_id", "row", "expected", "parsed")
METRICS = ("accuracy", "precision", "recall", "f1", "consistency", "undefined_rate",
           "consistent_non_answering")
_PARSED = {"true", "false", "undefined"}
_BOOLEAN_TEXT = {"true": True, "false": False, "1": True, "0": False}
# Per-question counts from which every metric is a ratio of sums (so resampling questions
# only needs a weighted sum of these).
_STATS = ("n", "correct", "tp", "fp", "fn", "positives", "undefined", "consistent", "derived",
          "question_agreement", "has_original", "consistent_undefined",
          "question_agreement_undefined")
RECALL_DEFINITIONS = {
    "all_true": "recall = tp / true-annotated rows (an undefined answer counts as missed)",
    "answered": "recall = tp / (tp + fn) over rows answered true/false (the guide's)"}
CONSISTENCY_DEFINITIONS = {
    "derived_rows": "consistency = derived rows (row > 0) agreeing with the original "
                    "answer / derived rows, pooled over questions",
    "per_question": "consistency = per question, rows (original included) agreeing with "
                    "the original answer / rows, averaged over questions (the guide's)"}


ZERO_DIVISION = {"zero": "a precision, recall or F1 with a zero denominator is 0 (the "
                          "guide's)",
                 "nan": "a precision, recall or F1 with a zero denominator is NaN"}


def other(definition: str) -> str:
    """The alternative to a recall or consistency definition (guide's ↔ lingtest's)."""
    for known in (RECALL_DEFINITIONS, CONSISTENCY_DEFINITIONS):
        if definition in known:
            return next(name for name in known if name != definition)
    raise LingtestError(f"unknown metric definition {definition!r}")


def alternative_columns(recall_definition: str, consistency_definition: str
                        ) -> dict[str, str]:
    """The columns ``model_summary`` adds for the definitions not chosen (column → metric):
    recall and F1 by the other recall definition, consistency and its non-answering part by
    the other consistency definition."""
    r, c = other(recall_definition), other(consistency_definition)
    return {f"recall_{r}": "recall", f"f1_{r}": "f1", f"consistency_{c}": "consistency",
            f"consistent_non_answering_{c}": "consistent_non_answering"}


def definitions(recall_definition: str = "answered",
                consistency_definition: str = "per_question",
                zero_division: str = "zero") -> str:
    """The metric definitions in words, for table captions and provenance."""
    _check_definitions(recall_definition, consistency_definition, zero_division)
    return (f"{RECALL_DEFINITIONS[recall_definition]}; "
            f"{CONSISTENCY_DEFINITIONS[consistency_definition]}; "
            f"{ZERO_DIVISION[zero_division]}")


def _check_definitions(recall_definition: str, consistency_definition: str,
                       zero_division: str = "zero") -> None:
    for key, value, known in (("recall_definition", recall_definition, RECALL_DEFINITIONS),
                              ("consistency_definition", consistency_definition,
                               CONSISTENCY_DEFINITIONS),
                              ("zero_division", zero_division, ZERO_DIVISION)):
        if value not in known:
            raise LingtestError(f"consistency.{key}: {value!r} is not one of "
                                f"{', '.join(known)}")


def model_summary(results: pd.DataFrame, n_boot: int = 1000, seed: int = 0,
                  recall_definition: str = "answered",
                  consistency_definition: str = "per_question",
                  zero_division: str = "zero") -> pd.DataFrame:
    """One row per model: n, n_questions, each metric of ``METRICS`` and its 95% CI, then
    the metrics by the definitions not chosen (``alternative_columns``, no CI).

    The CI columns ``<metric>_lo``/``<metric>_hi`` are percentile intervals of a cluster
    bootstrap over questions: the rows derived from one question share its wording and
    annotation, so they are not independent and resampling rows would make the intervals
    too narrow. Every model is resampled with a fresh ``default_rng(seed)``, so its
    interval does not depend on which other models are in the table. ``n_boot=0`` skips
    the bootstrap (CI columns NaN). The definitions are those of ``definitions``.
    """
    _check_definitions(recall_definition, consistency_definition, zero_division)
    chosen = (recall_definition, consistency_definition, zero_division)
    alternative = (other(recall_definition), other(consistency_definition), zero_division)
    extra = alternative_columns(recall_definition, consistency_definition)
    results = _validated(results)
    rows = []
    for model_id, group in results.groupby("model_id", sort=True):
        stats = _question_stats(group)
        sums = stats.to_numpy(dtype=float)
        point = _metrics(sums.sum(axis=0, keepdims=True), *chosen)
        second = _metrics(sums.sum(axis=0, keepdims=True), *alternative)
        row: dict[str, object] = {"model_id": model_id, "n": len(group),
                                  "n_questions": len(stats)}
        lo, hi = _bootstrap(sums, n_boot, np.random.default_rng(seed), chosen)
        for name in METRICS:
            row[name] = point[name][0]
            row[f"{name}_lo"], row[f"{name}_hi"] = lo[name], hi[name]
        for column, name in extra.items():
            row[column] = second[name][0]
        rows.append(row)
    columns = ["model_id", "n", "n_questions"]
    columns += [f"{name}{suffix}" for name in METRICS for suffix in ("", "_lo", "_hi")]
    return pd.DataFrame(rows, columns=columns + list(extra))


def question_summary(results: pd.DataFrame,
                     consistency_definition: str = "per_question") -> pd.DataFrame:
    """One row per model and question: n, accuracy, consistency, undefined rate, and the
    original answer (``parsed`` of row 0, None without row 0) beside the annotation.

    ``expected`` is the annotation of the question's lowest row (row 0 when present).
    """
    _check_definitions("all_true", consistency_definition)
    results = _validated(results)
    keys = ["model_id", "question_id"]
    stats = _question_stats(results)
    first = results.sort_values([*keys, "row"]).groupby(keys, sort=True).first()
    metrics = _metrics(stats.to_numpy(dtype=float), "all_true", consistency_definition)
    table = pd.DataFrame({"n": stats["n"].astype(int),
                          "accuracy": metrics["accuracy"],
                          "consistency": metrics["consistency"],
                          "undefined_rate": metrics["undefined_rate"]}, index=stats.index)
    originals = results[results["row"] == 0].set_index(keys)["parsed"]
    table["original"] = originals.reindex(stats.index).astype(object)
    table["original"] = table["original"].where(table["original"].notna(), None)
    table["expected"] = first["expected"]
    return table.reset_index()


def answer_table(results: pd.DataFrame, question_id: str) -> pd.DataFrame:
    """Every derived question of ``question_id`` (row, and text if given) × one column of
    parsed answers per model: how the answers change along the covering array.
    """
    results = _validated(results)
    rows = results[results["question_id"] == question_id]
    if rows.empty:
        known = sorted(results["question_id"].unique(), key=str)[:3]
        raise LingtestError(f"no results for question {question_id!r} (the results hold "
                            f"{', '.join(map(repr, known)) or 'no questions'}, …)")
    index = ["row", "text"] if "text" in rows.columns else ["row"]
    table = rows.pivot(index=index, columns="model_id", values="parsed").sort_index()
    table.columns.name = None
    return table.reset_index()


def _validated(results: pd.DataFrame) -> pd.DataFrame:
    """A copy with checked columns, integer rows and boolean ``expected``."""
    missing = [name for name in COLUMNS if name not in results.columns]
    if missing:
        raise LingtestError(f"results lack the columns {', '.join(missing)} (present: "
                            f"{', '.join(map(str, results.columns))}); run the oracle first")
    results = results.copy()
    bad = sorted(set(results["parsed"]) - _PARSED, key=str)
    if bad:
        raise LingtestError(f"parsed values must be true/false/undefined, found {bad[:5]} "
                            "(classify the responses with `lingtest classify-answers`)")
    results["row"] = results["row"].astype(int)
    results["expected"] = _as_bool(results["expected"])
    duplicated = results.duplicated(["model_id", "question_id", "row"])
    if duplicated.any():
        first = results[duplicated].iloc[0]
        raise LingtestError(f"model {first.model_id!r} answered question "
                            f"{first.question_id!r} row {first.row} more than once "
                            "(keep one answer per model, question and row)")
    return results


def _as_bool(values: pd.Series) -> pd.Series:
    """``expected`` as booleans; CSV files give it as text, where ``astype(bool)`` is wrong."""
    if values.dtype == bool:
        return values
    mapped = values.map(lambda value: _BOOLEAN_TEXT.get(str(value).strip().lower()))
    if mapped.isna().any():
        raise LingtestError(f"expected must be true/false, found {values[mapped.isna()].iloc[0]!r}")
    return mapped.astype(bool)


def _question_stats(results: pd.DataFrame) -> pd.DataFrame:
    """The counts of ``_STATS`` per model and question, in sorted order."""
    keys = ["model_id", "question_id"]
    originals = results[results["row"] == 0].set_index(keys)["parsed"].rename("original")
    frame = results[list(COLUMNS)].join(originals, on=keys)
    predicted_true = frame["parsed"] == "true"
    derived = (frame["row"] > 0) & frame["original"].notna()
    agrees = frame["original"].notna() & (frame["parsed"] == frame["original"])
    undefined = frame["parsed"] == "undefined"
    counts = pd.DataFrame({
        "n": 1,
        "correct": frame["parsed"] == frame["expected"].map({True: "true", False: "false"}),
        "tp": predicted_true & frame["expected"],
        "fp": predicted_true & ~frame["expected"],
        "fn": (frame["parsed"] == "false") & frame["expected"],
        "positives": frame["expected"],
        "undefined": frame["parsed"] == "undefined",
        "consistent": derived & (frame["parsed"] == frame["original"]),
        "derived": derived,
        "agrees": agrees,
        "consistent_undefined": derived & agrees & undefined,
        "agrees_undefined": agrees & undefined,
        "with_original": frame["original"].notna(),
    }, index=frame.index).astype(int)
    sums = counts.join(frame[keys]).groupby(keys, sort=True).sum()
    # Per question (so that a weighted sum over questions gives the guide's macro mean).
    sums["has_original"] = (sums["with_original"] > 0).astype(int)
    with_original = sums["with_original"].where(sums["with_original"] > 0)
    sums["question_agreement"] = (sums["agrees"] / with_original).fillna(0.0)
    sums["question_agreement_undefined"] = (sums["agrees_undefined"] / with_original).fillna(0.0)
    return sums[list(_STATS)]


def _metrics(sums: np.ndarray, recall_definition: str = "answered",
             consistency_definition: str = "per_question",
             zero_division: str = "zero") -> dict[str, np.ndarray]:
    """Every metric from summed counts; ``sums`` has one row per sample, columns _STATS."""
    s = dict(zip(_STATS, sums.T))
    n, correct, tp, fp, positives = s["n"], s["correct"], s["tp"], s["fp"], s["positives"]
    empty = 0.0 if zero_division == "zero" else np.nan
    precision = _ratio(tp, tp + fp, empty)
    recall = _ratio(tp, positives if recall_definition == "all_true" else tp + s["fn"], empty)
    if consistency_definition == "derived_rows":
        consistency = _ratio(s["consistent"], s["derived"])
        non_answering = _ratio(s["consistent_undefined"], s["derived"])
    else:
        consistency = _ratio(s["question_agreement"], s["has_original"])
        non_answering = _ratio(s["question_agreement_undefined"], s["has_original"])
    f1 = _ratio(2 * precision * recall, precision + recall, empty)
    f1 = np.where((precision == 0) & (recall == 0), 0.0, f1)  # NaN stays NaN
    return {"accuracy": _ratio(correct, n), "precision": precision, "recall": recall,
            "f1": f1, "consistency": consistency,
            "undefined_rate": _ratio(s["undefined"], n),
            "consistent_non_answering": non_answering}


def _ratio(numerator: np.ndarray, denominator: np.ndarray,
           empty: float = np.nan) -> np.ndarray:
    """numerator / denominator, ``empty`` where the denominator is 0 (without warnings)."""
    defined = denominator > 0
    return np.where(defined, numerator / np.where(defined, denominator, 1), empty)


def _bootstrap(stats: np.ndarray, n_boot: int, rng: np.random.Generator,
               chosen: tuple[str, str, str] = ("answered", "per_question", "zero"),
               ) -> tuple[dict[str, float], dict[str, float]]:
    """Percentile 95% bounds of every metric over ``n_boot`` resamples of the questions.

    Not ``scipy.stats.bootstrap``: it would resample once per metric, where one shared set
    of resampled questions keeps the metrics' intervals coherent and costs one matrix
    product; and a resample whose ratio is undefined (no true question drawn) must be
    dropped, not turn the whole interval into NaN.
    """
    if n_boot <= 0:
        nan = {name: float("nan") for name in METRICS}
        return nan, dict(nan)
    samples = _metrics(cluster_weights(len(stats), n_boot, rng) @ stats, *chosen)
    lo, hi = {}, {}
    for name in METRICS:
        lo[name], hi[name] = percentile_bounds(samples[name])
    return lo, hi
