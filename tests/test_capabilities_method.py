"""S²LCT as a ``Method``: its units, the contract of its cases and results, sharding that
does not change the results, and a re-test diffed by case (VADER: no weights, no files)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from lingtest.tasks.capabilities.method import CapabilitiesMethod
from lingtest.tasks.capabilities.model_tasks import RESULT_COLUMNS
from lingtest.tasks.core.cases import case_id, provenance_json
from lingtest.flows.registry import load_params
from lingtest.tasks.core.method import Unit, retest
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.schema import change_counts, check_cases, check_results, compare_results

pytest.importorskip("vaderSentiment")
ROOT = Path(__file__).resolve().parents[1]
TEXTS = [("LC2", "The acting in this long film is good.", "pos"),
         ("LC2", "The plot of this long film is bad.", "neg"),
         ("LC1", "The film is two hours long.", "neutral"),
         ("LC4", "This is not a terrible film.", "neutral|pos"),
         ("LC2", "A wonderful, moving story.", "pos")]


def suite() -> pd.DataFrame:
    rows = [{"case_id": case_id("capabilities", [text], expectation), "method": "capabilities",
             "capability": lc, "seed_id": f"test-{i:05d}", "text": text,
             "expectation": expectation, "label_source": "sst",
             "provenance": provenance_json(generator="test"), "kind": "seed",
             "parent_case_id": ""} for i, (lc, text, expectation) in enumerate(TEXTS)]
    return check_cases(pd.DataFrame(rows), CapabilitiesMethod.contract)


def method(shards: int) -> CapabilitiesMethod:
    params = load_params(ROOT, ["capabilities.models=[vader]", f"runtime.shards={shards}"])
    return CapabilitiesMethod(params, Workspace(ROOT))


def run_cases(m: CapabilitiesMethod, cases: pd.DataFrame) -> pd.DataFrame:
    runs = [m.run_unit(cases, unit) for unit in m.units(cases) if unit.part == "cases"]
    return m.collect(cases, runs)


def test_units_per_model_shards_then_checklist_no_coverage_without_hidden_states() -> None:
    names = [unit.name for unit in method(2).units(suite())]
    assert names == ["cases-vader-1of2", "cases-vader-2of2", "checklist-vader"]


def test_results_follow_the_contract_and_do_not_depend_on_shards() -> None:
    cases = suite()
    whole, sharded = run_cases(method(1), cases), run_cases(method(2), cases)
    pd.testing.assert_frame_equal(whole, sharded)
    check_results(whole, CapabilitiesMethod.contract)
    assert list(whole.columns) == RESULT_COLUMNS
    assert whole["case_id"].tolist() == cases["case_id"].tolist()  # suite order
    assert whole["output"].tolist() == ["pos", "neg", "neutral", "pos", "pos"]
    assert (whole["verdict"] == "pass").all()
    assert whole["revision"].str.startswith("vaderSentiment==").all()
    # score: P(expected label) from VADER's proportions; LC4 sums neutral and pos
    row = whole.iloc[3]
    assert row["score"] == pytest.approx(row["p_neutral"] + row["p_pos"], abs=1e-6)


def test_retest_of_the_same_model_changes_nothing() -> None:
    m, cases = method(2), suite()
    before = run_cases(m, cases)
    diff = compare_results(before, retest(m, cases, "vader"))
    assert change_counts(diff) == {"fixed": 0, "broken": 0, "unchanged": len(cases),
                                   "added": 0, "removed": 0}


def test_unknown_model_fails_before_the_suite_is_built() -> None:
    from lingtest.tasks.core.errors import LingtestError

    params = load_params(ROOT, ["capabilities.models=[no-such/model-xyz]"])
    with pytest.raises(LingtestError, match="no-such/model-xyz"):
        CapabilitiesMethod(params, Workspace(ROOT)).hidden_states()
    with pytest.raises(LingtestError, match="unknown unit part"):
        method(1).run_unit(suite(), Unit("vader", "nonsense"))
