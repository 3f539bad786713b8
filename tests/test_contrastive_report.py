"""COSTELLO Table 2 over several models: per-model figures averaged, as the paper does."""
import pandas as pd
import pytest

from lingtest.tasks.contrastive.report import table2


def _rows(model: str, relation: str, verdicts: list[str], gt_a: list[bool]) -> pd.DataFrame:
    n = len(verdicts)
    return pd.DataFrame({
        "model_id": model, "relation": relation, "case_id": [f"{model}{relation}{i}" for i in range(n)],
        "distance": "l2", "threshold_kind": "zero", "dictionary": "vocab", "threshold": 0.0,
        "verdict": verdicts, "gt_a": gt_a, "gt_b": [True] * n})


def test_all_models_table_averages_per_model_figures():
    # model a: 4 CR1 violations, 1 buggy (P_A 25%); model b: 1 violation, buggy (P_A 100%)
    # pooled would say N_V 5 and P_A 2/5 = 40%; the paper's mean: N_V 2.5, P_A 62.5%
    a = _rows("a", "CR1", ["fail"] * 4 + ["pass"], [True, False, False, False, True])
    b = _rows("b", "CR1", ["fail", "pass", "pass", "pass", "pass"], [True] * 5)
    # CR2: only model a has a violation; b has none, so it has no precision to average
    a2 = _rows("a", "CR2", ["fail", "pass"], [False, False])
    b2 = _rows("b", "CR2", ["pass", "pass"], [True, True])
    row = table2(pd.concat([a, b, a2, b2], ignore_index=True)).iloc[0]
    assert row["CR1 N_V"] == pytest.approx(2.5)
    assert row["CR1 P_A"] == pytest.approx(62.5)
    assert row["CR1 N_M"] == 2 and row["CR2 N_M"] == 1
    assert row["CR2 N_V"] == pytest.approx(0.5) and row["CR2 P_A"] == pytest.approx(0.0)
    assert row["avg P_A"] == pytest.approx(31.25)
    one = table2(pd.concat([a, b], ignore_index=True), "a").iloc[0]
    assert one["CR1 N_V"] == 4 and one["CR1 P_A"] == pytest.approx(25.0)
    assert "CR1 N_M" not in one.index
