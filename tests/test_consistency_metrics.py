"""Metrics of consistency testing on hand-made results whose values are computed by hand."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.consistency.metrics import (
    METRICS,
    answer_table,
    model_summary,
    question_summary,
)
from lingtest.tasks.core.errors import LingtestError


def _results(rows: list[tuple[str, str, int, bool, str]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["model_id", "question_id", "row", "expected", "parsed"])
    frame["text"] = [f"{q} variant {r}" for q, r in zip(frame["question_id"], frame["row"])]
    return frame


@pytest.fixture
def results() -> pd.DataFrame:
    """m1: q1 (true) rows 0-3, q2 (false) rows 0-2, q3 (true) rows 0-1; m2: q2 only.

    m1 by hand: 9 queries, correct q1 r0 r1, q2 r0 r1 → accuracy 4/9; predicted true
    q1 r0 r1 (TP) and q2 r2 (FP), 6 true queries → precision 2/3, recall 1/3, F1 4/9;
    derived rows agreeing with row 0: q1 1 of 3, q2 1 of 2, q3 1 of 1 (undefined ==
    undefined) → consistency 3/6; undefined q1 r3, q3 r0 r1 → 3/9.
    """
    return _results([
        ("m1", "q1", 0, True, "true"), ("m1", "q1", 1, True, "true"),
        ("m1", "q1", 2, True, "false"), ("m1", "q1", 3, True, "undefined"),
        ("m1", "q2", 0, False, "false"), ("m1", "q2", 1, False, "false"),
        ("m1", "q2", 2, False, "true"),
        ("m1", "q3", 0, True, "undefined"), ("m1", "q3", 1, True, "undefined"),
        ("m2", "q2", 0, False, "false"), ("m2", "q2", 1, False, "false"),
        ("m2", "q2", 2, False, "false"),
    ])


LINGTEST = {"recall_definition": "all_true", "consistency_definition": "derived_rows",
            "zero_division": "nan"}


def test_model_summary_by_hand(results) -> None:
    """lingtest's stricter definitions as the headline; the guide's beside them."""
    summary = model_summary(results, n_boot=200, **LINGTEST).set_index("model_id")
    m1 = summary.loc["m1"]
    assert (m1["n"], m1["n_questions"]) == (9, 3)
    assert m1["accuracy"] == pytest.approx(4 / 9)
    assert m1["precision"] == pytest.approx(2 / 3)
    assert m1["recall"] == pytest.approx(1 / 3)
    assert m1["f1"] == pytest.approx(4 / 9)
    assert m1["consistency"] == pytest.approx(0.5)
    assert m1["undefined_rate"] == pytest.approx(1 / 3)
    # of the 3 agreeing derived rows one is q3's undefined matching its undefined original
    assert m1["consistent_non_answering"] == pytest.approx(1 / 6)
    # the guide's definitions, in the alternative columns (see test_guide_definitions_by_hand)
    assert m1["recall_answered"] == pytest.approx(2 / 3)
    assert m1["f1_answered"] == pytest.approx(2 / 3)
    assert m1["consistency_per_question"] == pytest.approx((1 / 2 + 2 / 3 + 1) / 3)
    assert m1["consistent_non_answering_per_question"] == pytest.approx(1 / 3)


def test_degenerate_model_gives_nan_not_crash(results) -> None:
    """m2 never says true and sees no true question: precision, recall and F1 undefined
    (NaN), or 0 as the guide returns them (``zero_division="zero"``, the default)."""
    m2 = model_summary(results, n_boot=50, **LINGTEST).set_index("model_id").loc["m2"]
    assert (m2["accuracy"], m2["consistency"], m2["undefined_rate"]) == (1.0, 1.0, 0.0)
    for name in ("precision", "recall", "f1", "f1_lo", "f1_hi"):
        assert math.isnan(m2[name])
    guide = model_summary(results, n_boot=50).set_index("model_id").loc["m2"]
    assert (guide["precision"], guide["recall"], guide["f1"]) == (0.0, 0.0, 0.0)
    assert guide["consistent_non_answering"] == 0.0


def test_all_undefined_consistency_is_all_non_answering() -> None:
    """A model that never answers agrees with itself everywhere: consistency 1.0, all of
    it consistent non-answering, under both definitions."""
    frame = _results([("m", "q", r, True, "undefined") for r in range(3)]
                     + [("m", "p", r, False, "undefined") for r in range(2)])
    row = model_summary(frame, n_boot=0).iloc[0]
    assert row["consistency"] == row["consistent_non_answering"] == 1.0
    assert row["consistency_derived_rows"] == row["consistent_non_answering_derived_rows"] == 1.0
    assert (row["precision"], row["recall"], row["accuracy"]) == (0.0, 0.0, 0.0)


def test_f1_is_zero_when_no_true_answer_is_right() -> None:
    frame = _results([("m", "q", 0, True, "false"), ("m", "q", 1, False, "true")])
    row = model_summary(frame, n_boot=0).iloc[0]
    assert (row["precision"], row["recall"], row["f1"]) == (0.0, 0.0, 0.0)
    assert math.isnan(row["accuracy_lo"])


def test_columns(results) -> None:
    columns = list(model_summary(results, n_boot=10).columns)
    assert columns[:3] == ["model_id", "n", "n_questions"]
    assert columns[3:-4] == [f"{m}{s}" for m in METRICS for s in ("", "_lo", "_hi")]
    assert columns[-4:] == ["recall_all_true", "f1_all_true", "consistency_derived_rows",
                            "consistent_non_answering_derived_rows"]


def _random_results(n_questions: int = 40, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_questions):
        expected = bool(rng.integers(2))
        for r in range(5):
            parsed = rng.choice(["true", "false", "undefined"], p=[0.5, 0.4, 0.1])
            rows.append(("m", f"q{q:02d}", r, expected, str(parsed)))
    return _results(rows)


def test_ci_contains_point_estimate() -> None:
    row = model_summary(_random_results(), n_boot=500).iloc[0]
    for name in METRICS:
        assert row[f"{name}_lo"] <= row[name] <= row[f"{name}_hi"], name
        assert row[f"{name}_lo"] < row[f"{name}_hi"], name


def test_identical_questions_give_zero_width() -> None:
    """Questions are resampled whole: copies of one mixed question leave nothing to vary
    (resampling single rows would not)."""
    pattern = [(0, True, "true"), (1, True, "false"), (2, True, "undefined"),
               (3, True, "true")]
    frame = _results([("m", f"q{q}", r, e, p) for q in range(12) for r, e, p in pattern])
    row = model_summary(frame, n_boot=300).iloc[0]
    for name in METRICS:
        assert row[f"{name}_lo"] == row[name] == row[f"{name}_hi"], name
    assert row["consistency"] == pytest.approx(2 / 4)  # the guide's: row 0 and row 3 agree
    assert row["consistency_derived_rows"] == pytest.approx(1 / 3)  # row 3 of rows 1-3


def test_deterministic_for_a_seed(results) -> None:
    frame = _random_results()
    pd.testing.assert_frame_equal(model_summary(frame, seed=3), model_summary(frame, seed=3))
    assert not model_summary(frame, seed=3).equals(model_summary(frame, seed=4))


def test_model_interval_independent_of_other_models(results) -> None:
    alone = model_summary(results[results["model_id"] == "m1"], n_boot=200)
    together = model_summary(results, n_boot=200)
    pd.testing.assert_frame_equal(alone, together.iloc[[0]])


def test_question_summary(results) -> None:
    rows = results[~((results["model_id"] == "m2") & (results["row"] == 0))]
    table = question_summary(rows, "derived_rows").set_index(["model_id", "question_id"])
    q1 = table.loc[("m1", "q1")]
    assert (q1["n"], q1["accuracy"], q1["undefined_rate"]) == (4, 0.5, 0.25)
    assert q1["consistency"] == pytest.approx(1 / 3)
    guide = question_summary(rows).set_index(["model_id", "question_id"])
    assert guide.loc[("m1", "q1"), "consistency"] == pytest.approx(2 / 4)
    assert math.isnan(guide.loc[("m2", "q2"), "consistency"])
    assert (q1["original"], q1["expected"]) == ("true", True)
    q3 = table.loc[("m1", "q3")]
    assert (q3["original"], q3["consistency"], q3["expected"]) == ("undefined", 1.0, True)
    headless = table.loc[("m2", "q2")]  # no row 0: nothing to compare with
    assert headless["original"] is None and math.isnan(headless["consistency"])
    assert not headless["expected"]


def test_answer_table(results) -> None:
    table = answer_table(results, "q2")
    assert list(table.columns) == ["row", "text", "m1", "m2"]
    assert table["row"].tolist() == [0, 1, 2]
    assert table["text"].tolist() == ["q2 variant 0", "q2 variant 1", "q2 variant 2"]
    assert table["m1"].tolist() == ["false", "false", "true"]
    assert table["m2"].tolist() == ["false", "false", "false"]
    no_text = answer_table(results.drop(columns="text"), "q1")
    assert list(no_text.columns) == ["row", "m1"]
    with pytest.raises(LingtestError, match="no results for question 'q9'"):
        answer_table(results, "q9")


def test_expected_read_from_csv_text(results) -> None:
    as_text = results.assign(expected=results["expected"].map({True: "True", False: "False"}))
    pd.testing.assert_frame_equal(model_summary(as_text, n_boot=20),
                                  model_summary(results, n_boot=20))


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r.drop(columns="parsed"), "lack the columns parsed"),
    (lambda r: r.assign(parsed=r["parsed"].replace("undefined", "maybe")), "'maybe'"),
    (lambda r: pd.concat([r, r.iloc[[0]]]), "more than once"),
    (lambda r: r.assign(expected="perhaps"), "expected must be true/false"),
])
def test_bad_results_are_rejected(results, change, message) -> None:
    with pytest.raises(LingtestError, match=message):
        model_summary(change(results))


def test_guide_definitions_by_hand(results) -> None:
    """The guide's recall leaves undefined answers out: m1 has tp 2 (q1 r0 r1) and fn 1
    (q1 r2 answered false; q1 r3 and q3 are undefined) → 2/3, F1 with precision 2/3 → 2/3.
    Its consistency counts row 0 too and averages per question: q1 2/4, q2 2/3, q3 2/2."""
    m1 = model_summary(results, n_boot=0, recall_definition="answered",
                       consistency_definition="per_question").set_index("model_id").loc["m1"]
    assert m1["recall"] == pytest.approx(2 / 3)
    assert m1["f1"] == pytest.approx(2 / 3)
    assert m1["consistency"] == pytest.approx((1 / 2 + 2 / 3 + 1) / 3)
    assert m1["accuracy"] == pytest.approx(4 / 9)  # the other metrics do not change
    per_question = question_summary(results, consistency_definition="per_question")
    q1 = per_question.set_index(["model_id", "question_id"]).loc[("m1", "q1")]
    assert q1["consistency"] == pytest.approx(0.5)


def test_guide_definitions_bootstrap_and_bad_names(results) -> None:
    from lingtest.tasks.consistency.metrics import definitions

    row = model_summary(results, n_boot=200, consistency_definition="per_question").iloc[0]
    assert row["consistency_lo"] <= row["consistency"] <= row["consistency_hi"]
    assert "the guide's" in definitions("answered", "per_question")
    assert definitions() == definitions("answered", "per_question", "zero")
    assert "the guide's" not in definitions("all_true", "derived_rows", "nan")
    with pytest.raises(LingtestError, match="recall_definition.*all_true, answered"):
        model_summary(results, recall_definition="answered_only")
