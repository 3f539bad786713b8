"""Failure scores: how strongly a model fails each adaptive case (higher = worse, 0..1).

AdaTest ranks tests by a per-model failure score; its prompt builder reads the score column
as "the larger, the more this test fails" (``score_max``: an unscored test counts 1 if
labelled fail, else 0). The scores here follow the code:

- **should output y / should not output y** — the probability mass the model puts on failing
  outputs: ``1 − P(y)`` and ``P(y)``. This is v0.3.5's ``ClassifierScorer._score_test``
  (Σ over outputs of P(output) × P(fail | output)) with the fail probability known from the
  expectation instead of guessed by the per-topic label model. v0.2's *margin* scores
  (``p_y − p_second`` and friends) rank tests the same way for a two-class model, where
  mass = (1 + margin) / 2; the mass is kept because it is the current code's and because it
  is a probability, on the scale the prompt builder multiplies by topic weights.
- **invariance** — v0.2's ``equality_score`` margin ``m`` in [−1, 1] (when the two top
  outputs differ: the least total probability shift that would make them agree; when they
  agree: minus the smaller top-vs-runner-up gap), reported as ``(1 + m) / 2`` so it shares
  the 0..1 scale (above 0.5 exactly when the top outputs differ); the raw margin is kept.

- **should score below t** (a raw-score model, ``tested_models``) — the model's own failure
  score (AdaTest's ``RawScorer``; for a generation model, its scoring function's score of the
  generated text).

The verdict is the model's own answer (``predict``: VADER's compound rule, CheckList's
neutral band for binary models; a classifier over its own labels: the most probable label;
a raw-score model: fail when its score reaches t): ``pass`` when the answer meets the
expectation, ``fail`` otherwise, ``undefined`` when the expectation names a label the model
cannot give, asks a classifier for a score (or a raw-score model for a label), or the
model gave no answer: its label ``undefined`` (an LLM classifier that named no label) or
probabilities (or a raw score) that are not numbers. An undefined verdict has score NaN and
is counted apart, never as a pass or a fail. VADER's probabilities are its neg/neu/pos
proportions, so for VADER the score and the verdict can disagree (see ``lingtest.tasks.models
.sentiment``).

Table ``results`` (one row per case and model): the contract columns ``case_id``, ``method``,
``model_id``, ``revision``, ``output`` (the answer; ``a|b`` for invariance, AdaTest's
joined-outputs convention), ``verdict``, ``score``; plus ``topic``, ``margin`` (invariance:
the raw margin, else NaN) and ``probabilities`` (JSON: the model's labels per input; a
raw-score model: ``{"score": s}``).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from lingtest.tasks.adaptive.cases import INPUT_B, METHOD, parse_expectation
from lingtest.tasks.adaptive.tested_models import as_tested
from lingtest.tasks.adaptive.tree import TestTree
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.schema import UNDEFINED
from lingtest.tasks.models.label_maps import LABELS3

RESULT_COLUMNS = ["case_id", "method", "model_id", "revision", "output", "verdict", "score",
                  "topic", "margin", "probabilities"]


def failure_mass(probs: np.ndarray, label: str, negated: bool,
                 labels: tuple[str, ...] = LABELS3) -> float:
    """P(failing output) for "should output label" (negated: "should not output label")."""
    p_label = float(probs[labels.index(label)])
    return p_label if negated else 1.0 - p_label


def equality_margin(probs_a: np.ndarray, probs_b: np.ndarray) -> float:
    """AdaTest v0.2's ``equality_score``: > 0 when the top outputs differ (the smallest
    Σ over both inputs of how far some shared class is below each top), ≤ 0 when they agree
    (minus the smaller gap between top and runner-up)."""
    top_a, top_b = int(np.argmax(probs_a)), int(np.argmax(probs_b))
    if top_a != top_b:
        shift = (np.maximum(0, probs_a[top_a] - probs_a) + np.maximum(0, probs_b[top_b] - probs_b))
        return float(shift.min())
    gap_a = probs_a[top_a] - np.delete(probs_a, top_a).max()
    gap_b = probs_b[top_b] - np.delete(probs_b, top_b).max()
    return float(-min(gap_a, gap_b))


def answered(answer: str, probs: np.ndarray) -> bool:
    """Whether the model answered a text: a label other than ``undefined`` and probabilities
    (or a raw score) that are all numbers."""
    return answer != UNDEFINED and bool(np.isfinite(probs).all())


def verdict(answer: str, kind: str, label: str, answer_b: str | None = None) -> str:
    """pass / fail of one answer (or pair of answers) against a parsed expectation."""
    if kind == "invariance":
        return "pass" if answer == answer_b else "fail"
    meets = answer == label
    return "pass" if meets == (kind == "output") else "fail"


def score_cases(cases: pd.DataFrame, model) -> pd.DataFrame:
    """Run ``model`` (a tested model, or a sentiment model) once over every distinct text of
    ``cases`` and score each case."""
    model = as_tested(model)
    expectations = [parse_expectation(e) for e in cases["expectation"]]
    second = cases[INPUT_B] if INPUT_B in cases.columns else pd.Series("", index=cases.index)
    texts = list(dict.fromkeys([*cases["input"], *[t for t in second if t]]))
    if model.kind == "raw":
        answers, raw = model.outputs_and_scores(texts) if texts else ([], np.empty(0))
        probs = np.asarray(raw, float).reshape(-1, 1)
    else:
        answers, probs = (model.predict_with_probabilities(texts) if texts
                          else ([], np.empty((0, len(model.labels)))))
    where = {text: i for i, text in enumerate(texts)}
    rows = []
    for (_, case), expect, text_b in zip(cases.iterrows(), expectations, second):
        i = where[case["input"]]
        p_a = probs[i]
        row = {"case_id": case["case_id"], "method": METHOD, "model_id": model.model_id,
               "revision": str(model.revision), "topic": case["topic"], "margin": np.nan,
               "output": answers[i], "probabilities": json.dumps(_named(p_a, model))}
        if expect.kind == "invariance":
            if not text_b:
                raise LingtestError(f"case {case['case_id']}: an invariance case needs "
                                    "input_b; fill in the second input")
            j = where[text_b]
            p_b = probs[j]
            row["output"] = f"{answers[i]}|{answers[j]}"
            row["probabilities"] = json.dumps([_named(p_a, model), _named(p_b, model)])
            if model.kind == "raw" or not (answered(answers[i], p_a)
                                           and answered(answers[j], p_b)):
                row.update(verdict="undefined", score=np.nan)
            else:
                margin = equality_margin(p_a, p_b)
                row.update(verdict=verdict(answers[i], "invariance", "", answers[j]),
                           score=(1.0 + margin) / 2.0, margin=margin)
        elif expect.kind == "score_below":
            if model.kind != "raw" or not np.isfinite(p_a).all():  # output: generated text
                row.update(verdict="undefined", score=np.nan)
            else:
                score = float(p_a[0])
                row.update(verdict="pass" if score < float(expect.label) else "fail",
                           score=score)
        elif (model.kind == "raw" or expect.label not in model.labels
              or not answered(answers[i], p_a)):
            row.update(verdict="undefined", score=np.nan)
        else:
            row.update(verdict=verdict(answers[i], expect.kind, expect.label),
                       score=failure_mass(p_a, expect.label, expect.kind == "not_output",
                                          model.labels))
        rows.append(row)
    frame = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    frame["score"] = frame["score"].astype(float)
    frame["margin"] = frame["margin"].astype(float)
    return frame


def _named(probs: np.ndarray, model) -> dict[str, float]:
    labels = ("score",) if model.kind == "raw" else model.labels
    return {label: round(float(p), 6) if np.isfinite(p) else None  # no NaN in JSON text
            for label, p in zip(labels, probs)}


def score_column(model_id: str) -> str:
    """The tree column holding a model's scores (AdaTest: ``<model> score``)."""
    return f"{model_id} score"


def scores_to_tree(tree: TestTree, cases: pd.DataFrame, results: pd.DataFrame) -> TestTree:
    """A copy of ``tree`` with each model's scores in its ``<model> score`` column (text, as
    AdaTest writes floats; rows without a result keep their cell, a new column starts "")."""
    row_of = dict(zip(cases["case_id"], cases["tree_id"]))
    frame = tree.frame.copy()
    for model_id, scored in results.groupby("model_id", sort=False):
        column = score_column(str(model_id))
        if column not in frame.columns:
            frame[column] = ""
        for cid, value in zip(scored["case_id"], scored["score"]):
            if cid not in row_of or row_of[cid] not in frame.index:
                raise LingtestError(f"scores_to_tree: case {cid} has no row in {tree.source}; "
                                    "score the cases read from this tree")
            frame.at[row_of[cid], column] = "" if pd.isna(value) else repr(float(value))
    return TestTree(frame, tree.source, tree.lineterminator, tree.index_name)
