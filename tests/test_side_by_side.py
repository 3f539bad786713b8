"""The comparison ``lingtest test`` publishes: fail % per group beside the baseline (only
cases every model answered), and per-case fixed / broken counts."""
from __future__ import annotations

import pandas as pd
import pytest

from lingtest.tasks.core.schema import Contract
from lingtest.tasks.core.side_by_side import case_changes, changed_cases, side_by_side

CONTRACT = Contract(method="capabilities", group="capability", texts=("text",))
SUITE = pd.DataFrame({"case_id": list("abcde"), "capability": ["LC10", "LC2", "LC2", "LC1",
                                                               "LC1"],
                      "text": ["t-a", "t-b", "t-c", "t-d", "t-e"]})


def rows(model: str, verdicts: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({"case_id": list(verdicts), "model_id": model,
                         "verdict": list(verdicts.values())})


RESULTS = pd.concat([
    rows("mine", {"a": "fail", "b": "pass", "c": "pass", "d": "undefined", "e": "pass"}),
    rows("base", {"a": "pass", "b": "fail", "c": "pass", "d": "fail"}),  # e never answered
], ignore_index=True)


def test_groups_in_natural_order_with_an_overall_row_on_shared_cases():
    table = side_by_side(RESULTS, SUITE, CONTRACT, ["mine", "base"])
    assert table["capability"].tolist() == ["LC1", "LC2", "LC10", "all"]
    overall = table.set_index("capability").loc["all"]
    # 4 shared cases; mine decided 3 of them (d undefined): 1 fail of 3; base 2 of 4
    assert overall["cases"] == 4
    assert overall["mine fail %"] == pytest.approx(33.33)
    assert overall["base fail %"] == pytest.approx(50.0)
    lc1 = table.set_index("capability").loc["LC1"]
    assert lc1["cases"] == 1 and pd.isna(lc1["mine fail %"]) and lc1["base fail %"] == 100


def test_fixed_and_broken_against_each_baseline_model():
    changes = case_changes(RESULTS, CONTRACT, ["mine"], ["base"]).iloc[0]
    assert (changes["fixed"], changes["broken"], changes["unchanged"]) == (1, 1, 2)
    assert changes["added"] == 1  # e: only mine answered
    cases = changed_cases(RESULTS, SUITE, CONTRACT, "mine", "base")
    assert cases.set_index("case_id")["change"].to_dict() == {"a": "broken", "b": "fixed"}
    assert cases.set_index("case_id").loc["b", "text"] == "t-b"
