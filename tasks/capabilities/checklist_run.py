"""Run CheckList's released sentiment suite on a 3-way sentiment model (S²LCT's comparison baseline).

The ``checklist_suite`` table keeps each test's expectation as text; this module maps those
texts onto a small set of checks that reproduce CheckList's own pass/fail rules
(``checklist/expect.py``, ``checklist/test_types.py``), so failure rates are comparable
with the ones CheckList reports.

Expectation text → check (``TOL`` = 0.1 unless overridden, CheckList's defaults):

============================================================  ===============================
``label == labels[i]``                                        MFT: prediction == the label
``label != k`` (k in 0, 1, 2)                                 MFT: prediction != k
``INV: prediction must not change``                           each variant: same prediction as
                                                              the original, or P(orig pred)
                                                              moved by ≤ TOL (``INV`` default
                                                              threshold 0.1)
``DIR: P(positive) must not decrease``                        each variant: ΔP(pos) − ΔP(neg)
                                                              ≥ −TOL (the suite's ``diff_up``)
``DIR: P(negative) must not decrease``                        each variant: ΔP(pos) − ΔP(neg)
                                                              ≤ TOL (the suite's ``diff_down``)
``DIR: confidence of the original prediction must not         each variant: ΔP(orig pred) ≥
decrease``                                                    −TOL; no verdict when
                                                              P(orig pred) ≤ TOL (can't fail)
``DIR: confidence of the original prediction must not         each variant: ΔP(orig pred) ≤
increase``                                                    TOL; no verdict when
                                                              P(orig pred) ≥ 1 − TOL
============================================================  ===============================

An INV/DIR example fails when any of its variants fails; variants without a verdict are
dropped and an example none of whose variants has a verdict is ``filtered`` (CheckList's
``None``). Failure rate per test = failed / (examples run − filtered), as CheckList prints.

A model may answer ``undefined`` for a text (an LLM classifier that named no label; its
probability row NaN). Such a text is never read as a label: an example whose original text
(an MFT's only text, an INV/DIR's first) is undefined is ``undefined``; an INV/DIR variant
that is undefined is dropped and the example judged on its other variants (``undefined``
when every variant is). Undefined examples are counted apart and left out of the rate.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from lingtest.tasks.core.cases import case_id
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.schema import UNDEFINED

CLASSES = ("neg", "neutral", "pos")
_INDEX = {name: i for i, name in enumerate(CLASSES)}
TOLERANCE = 0.1  # CheckList's INV threshold and the suite's DIR tolerance
VERDICTS = ("pass", "fail", "filtered", UNDEFINED)
VERDICT_COLUMNS = ["case_id", "test", "type", "capability", "example_id", "verdict",
                   "predictions", "probabilities"]
TABLE_COLUMNS = ["test", "type", "capability", "examples", "filtered", "failed",
                 "failure_rate"]


class SentimentModel(Protocol):
    """What the runner needs: 3-way probabilities (neg, neutral, pos) and labels. A model
    whose ``per_text`` attribute is true (``lingtest.tasks.models.sentiment``: a text's output depends
    on that text alone) gets every text in one call and batches them itself."""

    def probabilities3(self, texts: Sequence[str]) -> np.ndarray: ...

    def predict(self, texts: Sequence[str]) -> list[str]: ...


@dataclass(frozen=True)
class Check:
    """One parsed expectation: ``kind`` in eq / neq / inv / net_up / net_down / conf_up /
    conf_down; ``label`` is the class index for neq."""

    kind: str
    label: int | None = None


_FIXED = {
    "label == labels[i]": Check("eq"),
    "INV: prediction must not change": Check("inv"),
    "DIR: P(positive) must not decrease": Check("net_up"),
    "DIR: P(negative) must not decrease": Check("net_down"),
    "DIR: confidence of the original prediction must not decrease": Check("conf_up"),
    "DIR: confidence of the original prediction must not increase": Check("conf_down"),
}
_NEQ = re.compile(r"^label\s*!=\s*([012])$")
_KIND_TYPES = {"eq": "MFT", "neq": "MFT", "inv": "INV", "net_up": "DIR", "net_down": "DIR",
               "conf_up": "DIR", "conf_down": "DIR"}


def parse_expectation(expectation: str, test: str) -> Check:
    """The check an expectation text stands for; unknown text is an error naming the test."""
    text = " ".join(str(expectation).split())
    if text in _FIXED:
        return _FIXED[text]
    match = _NEQ.match(text)
    if match:
        return Check("neq", int(match.group(1)))
    known = sorted(_FIXED) + ["label != k"]
    raise LingtestError(f"CheckList test {test!r}: unknown expectation {expectation!r} "
                        f"(known: {', '.join(known)}); extend checklist_run.parse_expectation")


def sample_suite(suite: pd.DataFrame, max_examples_per_test: int | None,
                 seed: int) -> pd.DataFrame:
    """At most ``max_examples_per_test`` examples of each test, drawn without replacement.

    Each test draws from its own generator seeded by (seed, test name), so one test's sample
    does not depend on which other tests are in the table.
    """
    if max_examples_per_test is None:
        return suite.reset_index(drop=True)
    if max_examples_per_test < 1:
        raise LingtestError(f"max_examples_per_test={max_examples_per_test}: must be ≥ 1")
    parts = []
    for test, group in suite.groupby("test", sort=False):
        if len(group) > max_examples_per_test:
            key = np.frombuffer(str(test).encode("utf-8"), dtype=np.uint8).tolist()
            rng = np.random.default_rng([seed, *key])
            keep = np.sort(rng.choice(len(group), max_examples_per_test, replace=False))
            group = group.iloc[keep]
        parts.append(group)
    return pd.concat(parts).reset_index(drop=True)


def _predict(model: SentimentModel, texts: list[str],
             batch_size: int) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """Labels and probabilities of each distinct text. A ``per_text`` model gets them all in
    one call (its own exact-length batches need no padding); any other model gets calls of
    ``batch_size`` texts in sorted order, so the suite's row order cannot change its batches."""
    distinct = sorted(set(texts), key=lambda t: (len(t), t))
    size = len(distinct) if getattr(model, "per_text", False) else batch_size
    labels: dict[str, str] = {}
    probs: dict[str, np.ndarray] = {}
    for start in range(0, len(distinct), max(size, 1)):
        batch = distinct[start:start + size]
        both = getattr(model, "predict_with_probabilities3", None)  # one pass, not two
        y, p = both(batch) if both else (model.predict(batch), model.probabilities3(batch))
        p, y = np.asarray(p, dtype=np.float64), list(y)
        if p.shape != (len(batch), 3):
            raise LingtestError(f"probabilities3 returned shape {p.shape} for {len(batch)} "
                                "texts; expected (n, 3) over (neg, neutral, pos)")
        if len(y) != len(batch) or any(label not in _INDEX and label != UNDEFINED
                                       for label in y):
            bad = sorted({str(label) for label in y if label not in _INDEX
                          and label != UNDEFINED})
            raise LingtestError(f"predict returned {len(y)} labels for {len(batch)} texts "
                                f"(unknown labels: {bad}); expected one of "
                                f"{(*CLASSES, UNDEFINED)} each")
        for text, label, row in zip(batch, y, p):
            labels[text], probs[text] = label, row
    return labels, probs


def _variant_ok(check: Check, orig: int, p0: np.ndarray, pred: int, p: np.ndarray,
                inv_tol: float, dir_tol: float) -> bool | None:
    """One variant against the original: True pass, False fail, None cannot be judged."""
    if check.kind == "inv":
        return pred == orig or abs(p[orig] - p0[orig]) <= inv_tol
    if check.kind in ("net_up", "net_down"):
        change = (p[2] - p0[2]) - (p[0] - p0[0])
        return change >= -dir_tol if check.kind == "net_up" else change <= dir_tol
    if check.kind == "conf_up":
        return None if p0[orig] <= dir_tol else p[orig] - p0[orig] >= -dir_tol
    return None if p0[orig] >= 1 - dir_tol else p[orig] - p0[orig] <= dir_tol


def _judge(check: Check, row, preds: list[int | None], probs: list[np.ndarray],
           inv_tol: float, dir_tol: float) -> str:
    """An example's verdict under its check; a text the model gave no label (pred None, or
    probabilities that are not numbers where the check reads them) is never judged."""
    if preds[0] is None or (check.kind not in ("eq", "neq") and not np.isfinite(probs[0]).all()):
        return UNDEFINED
    if check.kind in ("eq", "neq"):
        if check.kind == "eq":
            if pd.isna(row.label):
                raise LingtestError(f"CheckList test {row.test!r} example {row.example_id}: "
                                    "expectation `label == labels[i]` but the label is null")
            ok = preds[0] == int(row.label)
        else:
            ok = preds[0] != check.label
        return "pass" if ok else "fail"
    answered = [(pred, p) for pred, p in zip(preds[1:], probs[1:])
                if pred is not None and np.isfinite(p).all()]
    if preds[1:] and not answered:
        return UNDEFINED
    results = [_variant_ok(check, preds[0], probs[0], pred, p, inv_tol, dir_tol)
               for pred, p in answered]
    results = [r for r in results if r is not None]
    if not results:
        return "filtered"
    return "pass" if all(results) else "fail"


def run_checklist(suite: pd.DataFrame, model: SentimentModel, *,
                  max_examples_per_test: int | None = None, seed: int = 0,
                  batch_size: int = 64, inv_tolerance: float = TOLERANCE,
                  dir_tolerance: float = TOLERANCE) -> pd.DataFrame:
    """Per-example verdicts of ``model`` on the (optionally sampled) CheckList suite.

    Columns: case_id (``case_id("checklist", texts, expectation)``), test, type,
    capability, example_id, verdict (pass / fail / filtered / undefined), predictions (labels of the
    example's texts) and probabilities (their (neg, neutral, pos) rows). Expectations are
    parsed before the model runs, so an unknown one fails fast. ``batch_size`` is the number
    of texts per model call for a model that is not ``per_text`` (see ``_predict``).
    """
    missing = {"test", "type", "capability", "example_id", "texts", "label",
               "expectation"} - set(suite.columns)
    if missing:
        raise LingtestError(f"CheckList suite table lacks columns {sorted(missing)}")
    if batch_size < 1:
        raise LingtestError(f"batch_size={batch_size}: must be ≥ 1")
    table = sample_suite(suite, max_examples_per_test, seed)
    checks: dict[tuple[str, str], Check] = {}
    for test, kind, expectation in table[["test", "type", "expectation"]].drop_duplicates(
            ).itertuples(index=False):
        check = parse_expectation(expectation, test)
        if _KIND_TYPES[check.kind] != kind:
            raise LingtestError(f"CheckList test {test!r}: a {kind} test with the "
                                f"{_KIND_TYPES[check.kind]} expectation {expectation!r}")
        checks[(test, expectation)] = check
    distinct = list(dict.fromkeys(t for texts in table["texts"] for t in texts))
    labels, probs = _predict(model, distinct, batch_size)
    rows = []
    for row in table.itertuples(index=False):
        texts = [str(t) for t in row.texts]
        preds = [_INDEX.get(labels[t]) for t in texts]  # None: undefined
        conf = [probs[t] for t in texts]
        verdict = _judge(checks[(row.test, row.expectation)], row, preds, conf,
                         inv_tolerance, dir_tolerance)
        rows.append((case_id("checklist", texts, row.expectation), row.test, row.type,
                     row.capability, int(row.example_id), verdict,
                     [labels[t] for t in texts], [c.round(6).tolist() for c in conf]))
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def failure_table(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Per test: examples run, filtered, failed and failure rate in % of judged examples.

    The rate is NaN for a test whose examples were all filtered (nothing was judged).
    Undefined examples are not judged either: when there are any, an ``undefined`` column
    (after ``filtered``) counts them; without, the table keeps ``TABLE_COLUMNS``.
    """
    unknown = set(verdicts["verdict"]) - set(VERDICTS)
    if unknown:
        raise LingtestError(f"verdicts {sorted(unknown)} are not among {VERDICTS}")
    grouped = verdicts.groupby(["test", "type", "capability"], sort=False)["verdict"]
    table = grouped.agg(examples="size", filtered=lambda v: int((v == "filtered").sum()),
                        undefined=lambda v: int((v == UNDEFINED).sum()),
                        failed=lambda v: int((v == "fail").sum())).reset_index()
    judged = (table["examples"] - table["filtered"] - table["undefined"]).astype(float)
    table["failure_rate"] = (100.0 * table["failed"] / judged.where(judged > 0)).round(2)
    columns = list(TABLE_COLUMNS)
    if verdicts["verdict"].eq(UNDEFINED).any():
        columns.insert(columns.index("filtered") + 1, UNDEFINED)
    return table[columns].astype({c: "int64" for c in ("examples", "filtered", UNDEFINED,
                                                        "failed") if c in columns})
