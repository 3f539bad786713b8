"""CheckList runner: each expectation's pass/fail rule, sampling, and the failure table."""
from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.capabilities.checklist_run import (
    TABLE_COLUMNS,
    Check,
    failure_table,
    parse_expectation,
    run_checklist,
    sample_suite,
)
from lingtest.tasks.core.cases import case_id
from lingtest.tasks.core.errors import LingtestError

CLASSES = ("neg", "neutral", "pos")


class TableModel:
    """Probabilities looked up per text; predictions are their argmax."""

    def __init__(self, probs: dict[str, Sequence[float]]):
        self.probs = probs
        self.calls = 0

    def probabilities3(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        return np.array([self.probs[t] for t in texts], dtype=float)

    def predict(self, texts: Sequence[str]) -> list[str]:
        return [CLASSES[int(np.argmax(p))] for p in self.probabilities3(texts)]


class HashModel(TableModel):
    """Any text: probabilities derived from its hash (for the real suite)."""

    def __init__(self):
        super().__init__({})

    def probabilities3(self, texts: Sequence[str]) -> np.ndarray:
        rows = []
        for text in texts:
            raw = np.frombuffer(hashlib.sha256(text.encode()).digest()[:3], np.uint8) + 1.0
            rows.append(raw / raw.sum())
        return np.array(rows)


def row(test: str, kind: str, texts: list[str], expectation: str, label=None,
        example_id: int = 0) -> dict:
    return {"test": test, "type": kind, "capability": "Cap", "description": "",
            "example_id": example_id, "texts": texts, "label": label,
            "expectation": expectation}


def suite(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows).astype({"label": "Int64", "example_id": "int64"})


PROBS = {
    "good": [0.1, 0.1, 0.8], "bad": [0.8, 0.1, 0.1], "meh": [0.2, 0.6, 0.2],
    # INV
    "o1": [0.1, 0.2, 0.7], "o1 flip": [0.7, 0.2, 0.1], "o1 same": [0.2, 0.2, 0.6],
    "o2": [0.5, 0.1, 0.4], "o2 near": [0.42, 0.1, 0.48],
    # DIR
    "d1": [0.2, 0.3, 0.5], "d1 worse": [0.5, 0.3, 0.2], "d1 better": [0.2, 0.25, 0.55],
    "c1": [0.1, 0.2, 0.7], "c1 up": [0.05, 0.1, 0.85], "c1 slight": [0.1, 0.15, 0.75],
    "c1 down": [0.3, 0.2, 0.5],
    "c2": [0.02, 0.03, 0.95], "c2 up": [0.0, 0.0, 1.0],
}
EQ, NEQ = "label == labels[i]", "label != 0"
INV = "INV: prediction must not change"
UP, DOWN = "DIR: P(positive) must not decrease", "DIR: P(negative) must not decrease"
NOT_INC = "DIR: confidence of the original prediction must not increase"
NOT_DEC = "DIR: confidence of the original prediction must not decrease"


def verdicts_of(rows: list[dict], **kwargs) -> list[str]:
    return run_checklist(suite(rows), TableModel(PROBS), **kwargs)["verdict"].tolist()


def test_mft_label_match_and_not_negative():
    rows = [row("t", "MFT", ["good"], EQ, 2), row("t", "MFT", ["bad"], EQ, 2, 1),
            row("n", "MFT", ["meh"], NEQ), row("n", "MFT", ["bad"], NEQ, example_id=1),
            row("n", "MFT", ["good"], NEQ, example_id=2)]
    assert verdicts_of(rows) == ["pass", "fail", "pass", "fail", "pass"]


def test_inv_fails_when_any_variant_changes_prediction():
    rows = [row("i", "INV", ["o1", "o1 same", "o1 flip"], INV),
            row("i", "INV", ["o1", "o1 same"], INV, example_id=1)]
    assert verdicts_of(rows) == ["fail", "pass"]


def test_inv_tolerance_follows_checklist():
    """A flip that moves P(original prediction) by ≤ 0.1 passes CheckList's INV (threshold
    0.1) but fails a strict run."""
    rows = [row("i", "INV", ["o2", "o2 near"], INV)]
    assert verdicts_of(rows) == ["pass"]
    assert verdicts_of(rows, inv_tolerance=0.0) == ["fail"]


def test_dir_positive_and_negative_phrases():
    rows = [row("u", "DIR", ["d1", "d1 worse"], UP), row("u", "DIR", ["d1", "d1 better"], UP, 1),
            row("d", "DIR", ["d1", "d1 worse"], DOWN), row("d", "DIR", ["d1", "d1 better"], DOWN, 1)]
    assert verdicts_of(rows) == ["fail", "pass", "pass", "pass"]
    # a net positive change of 0.05 is within the tolerance 0.1; a stricter one fails it
    rows = [row("d", "DIR", ["d1", "d1 better"], DOWN)]
    assert verdicts_of(rows, dir_tolerance=0.01) == ["fail"]


def test_dir_confidence_not_increasing_and_not_decreasing():
    rows = [row("r", "DIR", ["c1", "c1 up"], NOT_INC),
            row("r", "DIR", ["c1", "c1 slight"], NOT_INC, 1),
            row("r", "DIR", ["c1", "c1 down"], NOT_INC, 2),
            row("r", "DIR", ["c2", "c2 up"], NOT_INC, 3),  # 0.95 ≥ 1 - 0.1: cannot fail
            row("i", "DIR", ["c1", "c1 down"], NOT_DEC),
            row("i", "DIR", ["c1", "c1 up"], NOT_DEC, 1)]
    assert verdicts_of(rows) == ["fail", "pass", "pass", "filtered", "fail", "pass"]


def test_verdict_rows_carry_case_ids_and_predictions():
    rows = [row("i", "INV", ["o1", "o1 flip"], INV)]
    out = run_checklist(suite(rows), TableModel(PROBS))
    first = out.iloc[0]
    assert first["case_id"] == case_id("checklist", ["o1", "o1 flip"], INV)
    assert first["predictions"] == ["pos", "neg"]
    assert first["probabilities"][1] == pytest.approx([0.7, 0.2, 0.1])


def test_failure_table_rates_exclude_filtered_examples():
    rows = [row("r", "DIR", ["c1", "c1 up"], NOT_INC),
            row("r", "DIR", ["c1", "c1 slight"], NOT_INC, 1),
            row("r", "DIR", ["c2", "c2 up"], NOT_INC, 2),
            row("t", "MFT", ["good"], EQ, 2)]
    table = failure_table(run_checklist(suite(rows), TableModel(PROBS)))
    assert list(table.columns) == TABLE_COLUMNS
    r = table.set_index("test").loc["r"]
    assert (r["examples"], r["filtered"], r["failed"]) == (3, 1, 1)
    assert r["failure_rate"] == pytest.approx(50.0)
    assert table.set_index("test").loc["t", "failure_rate"] == 0.0


def test_unknown_expectation_names_the_test():
    with pytest.raises(LingtestError, match="my odd test"):
        run_checklist(suite([row("my odd test", "MFT", ["good"], "label > 3", 2)]),
                      TableModel(PROBS))
    assert parse_expectation("label  !=  1", "x") == Check("neq", 1)


def test_expectation_of_the_wrong_type_and_null_label_are_errors():
    with pytest.raises(LingtestError, match="INV test"):
        run_checklist(suite([row("x", "INV", ["o1", "o1 flip"], EQ, 2)]), TableModel(PROBS))
    with pytest.raises(LingtestError, match="label is null"):
        run_checklist(suite([row("x", "MFT", ["good"], EQ)]), TableModel(PROBS))


def test_model_with_bad_labels_is_an_error():
    class Broken(TableModel):
        def predict(self, texts):
            return ["positive"] * len(texts)

    with pytest.raises(LingtestError, match="positive"):
        run_checklist(suite([row("t", "MFT", ["good"], EQ, 2)]), Broken(PROBS))


def test_sampling_caps_each_test_and_is_seeded():
    rows = [row("a", "MFT", ["good"], EQ, 2, i) for i in range(20)]
    rows += [row("b", "MFT", ["bad"], EQ, 0, i) for i in range(3)]
    table = suite(rows)
    one, two = sample_suite(table, 5, seed=7), sample_suite(table, 5, seed=7)
    assert one["test"].value_counts().to_dict() == {"a": 5, "b": 3}
    assert one["example_id"].tolist() == two["example_id"].tolist()
    assert sample_suite(table, 5, seed=8)["example_id"].tolist() != one["example_id"].tolist()
    out = run_checklist(table, TableModel(PROBS), max_examples_per_test=5, seed=7)
    assert out["example_id"].tolist() == one["example_id"].tolist()


def test_smoke_on_the_released_suite(table):
    full = table("checklist_suite")
    names = ["single positive words", "typos", "add negative phrases"]
    part = pd.concat([full[full["test"] == n].head(5) for n in names])
    assert len(part) == 15
    table = failure_table(run_checklist(part, HashModel()))
    assert table.shape == (3, len(TABLE_COLUMNS))
    assert table["test"].tolist() == names
    assert table["type"].tolist() == ["MFT", "INV", "DIR"]
    assert (table["examples"] == 5).all()
    assert ((table["failed"] >= 0) & (table["failed"] <= 5)).all()
