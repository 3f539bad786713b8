"""The shared shape: the case/result contract, the revision diff, the statistics module,
the report publisher and the generic method flow (suite → a task per (model, shard) →
validated results → published report)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from lingtest.tasks.core import stats
from lingtest.tasks.core.cases import case_id, provenance_json
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.method import Method, Unit, UnitResult, retest
from lingtest.tasks.core.metrics import lookup, stage_metrics
from lingtest.tasks.core.publish import Figure, Report, publish, slug
from lingtest.tasks.core.schema import (Contract, change_counts, check_cases, check_results,
                               compare_results, write_cases)

CONTRACT = Contract(method="polarity", group="topic", texts=("text",))
TEXTS = {"praise": ["What a wonderful, delightful film.", "I love this great cast."],
         "complaint": ["A terrible, boring mess.", "I hate this awful script."]}


def _cases() -> pd.DataFrame:
    rows = []
    for topic, texts in TEXTS.items():
        expectation = "pos" if topic == "praise" else "neg"
        for text in texts:
            rows.append({"case_id": case_id("polarity", [text], expectation),
                         "method": "polarity", "topic": topic, "text": text,
                         "expectation": expectation,
                         "provenance": provenance_json(generator="test", topic=topic)})
    return pd.DataFrame(rows)


def _result(case: str, verdict: str, model: str = "m", score: float = 0.5) -> dict:
    return {"case_id": case, "method": "polarity", "model_id": model, "revision": "r1",
            "output": "pos", "verdict": verdict, "score": score}


# -- the contract -------------------------------------------------------------------------

def test_valid_cases_pass_the_contract():
    frame = _cases()
    assert check_cases(frame, CONTRACT).equals(frame)


@pytest.mark.parametrize("breakage, column", [
    (lambda f: f.drop(columns="case_id"), "case_id"),
    (lambda f: f.assign(case_id="not-a-hash"), "case_id"),
    (lambda f: pd.concat([f, f.iloc[:1]], ignore_index=True), "case_id"),  # duplicate id
    (lambda f: f.assign(method="capability"), "method"),
    (lambda f: f.assign(expectation=""), "expectation"),
    (lambda f: f.assign(provenance="{not json"), "provenance"),
    (lambda f: f.drop(columns="topic"), "topic"),
    (lambda f: f.assign(text=None), "text"),
])
def test_broken_cases_are_refused_naming_the_column(breakage, column):
    with pytest.raises(LingtestError, match=column):
        check_cases(breakage(_cases()), CONTRACT)


def test_results_need_a_known_verdict_a_float_score_and_one_row_per_key():
    ids = _cases()["case_id"]
    good = pd.DataFrame([_result(ids[0], "pass"), _result(ids[1], "undefined", score=np.nan)])
    check_results(good, CONTRACT)
    with pytest.raises(LingtestError, match="verdict"):
        check_results(good.assign(verdict="maybe"), CONTRACT)
    with pytest.raises(LingtestError, match="score"):
        check_results(good.assign(score="high"), CONTRACT)
    with pytest.raises(LingtestError, match="case_id|model_id"):
        check_results(pd.concat([good, good.iloc[:1]]), CONTRACT)
    keyed = Contract("polarity", "topic", ("text",), result_keys=("threshold",))
    two_settings = pd.concat([good.iloc[:1].assign(threshold="a"),
                              good.iloc[:1].assign(threshold="b")])
    check_results(two_settings, keyed)  # one row per case, model *and* setting


def test_a_table_that_breaks_the_contract_is_never_written(tmp_path: Path):
    target = tmp_path / "suite.parquet"
    with pytest.raises(LingtestError):
        write_cases(target, _cases().assign(method="other"), CONTRACT)
    assert not target.exists() and not list(tmp_path.iterdir())
    write_cases(target, _cases(), CONTRACT)
    assert pd.read_parquet(target).equals(_cases())


def test_compare_results_by_case_id():
    before = pd.DataFrame([_result("a", "pass"), _result("b", "fail"), _result("c", "fail"),
                           _result("d", "pass"), _result("e", "undefined")])
    after = pd.DataFrame([_result("a", "fail"), _result("b", "pass"), _result("c", "undefined"),
                          _result("e", "pass"), _result("f", "fail")])
    diff = compare_results(before, after).set_index("case_id")["change"].to_dict()
    assert diff == {"a": "broken", "b": "fixed", "c": "unchanged", "d": "removed",
                    "e": "fixed", "f": "added"}
    assert change_counts(compare_results(before, after)) == {
        "fixed": 2, "broken": 1, "unchanged": 1, "added": 1, "removed": 1}
    with pytest.raises(LingtestError, match="several rows"):
        compare_results(pd.concat([before, before]), after)


# -- statistics ---------------------------------------------------------------------------

def test_fdr_is_benjamini_hochberg_worked_by_hand():
    # sorted p 0.01, 0.03, 0.04, 0.5 (m = 4): p·m/rank = 0.04, 0.06, 0.0533, 0.5, then the
    # running minimum from the top: 0.04, 0.0533, 0.0533, 0.5
    adjusted = stats.fdr([0.01, 0.04, 0.03, 0.5, np.nan])
    np.testing.assert_allclose(adjusted[:4], [0.04, 0.16 / 3, 0.16 / 3, 0.5])
    assert np.isnan(adjusted[4])
    assert stats.significant([0.01, 0.04, 0.03, 0.5, np.nan], alpha=0.05).tolist() == [
        True, False, False, False, False]


def test_rate_interval_is_scipys_percentile_bootstrap():
    flags = np.array([1, 0, 0, 1, 1, 0, 1, 1, 0, 1])
    rate, low, high = stats.rate_interval(flags, 500, np.random.default_rng(3))
    ci = scipy_stats.bootstrap((flags.astype(float),), np.mean, n_resamples=500,
                               method="percentile", random_state=np.random.default_rng(3)
                               ).confidence_interval
    assert (rate, low, high) == (60.0, 100 * ci.low, 100 * ci.high)
    assert stats.rate_interval([1, 1, 1], 100, np.random.default_rng(0)) == (100.0,) * 3
    assert np.isnan(stats.rate_interval([1], 100, np.random.default_rng(0))[1])


def test_cluster_bootstrap_bounds():
    weights = stats.cluster_weights(5, 200, np.random.default_rng(1))
    assert weights.shape == (200, 5) and (weights.sum(axis=1) == 5).all()
    samples = np.array([np.nan, *np.linspace(0, 1, 101)])
    assert stats.percentile_bounds(samples) == tuple(np.percentile(samples[1:], [2.5, 97.5]))


# -- the publisher ------------------------------------------------------------------------

def _report(figure=None) -> Report:
    report = Report(stage="polarity", provenance={"seed": 7}, substitutes="Substitute: X → Y.",
                    metrics={"setting": "all cases", "vader": {"fail": np.int64(2)}})
    report.add("polarity-table", pd.DataFrame({"a": [1, 2]}), "A table", notes="Read me.")
    report.add("polarity-slice", pd.DataFrame({"a": [1]}), "Artifact only", files=False)
    report.figures["figure/vader.png"] = Figure(
        figure or (lambda path: path.write_bytes(b"png")), pd.DataFrame({"x": [1], "y": [2]}))
    report.frames["rows.csv"] = pd.DataFrame({"b": ["x"]})
    return report


def test_publish_writes_every_part_of_a_report(tmp_path: Path):
    from lingtest.tasks.core.paths import Workspace

    workspace = Workspace(tmp_path)
    folder = publish(_report(), workspace)
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) \
        == ["figure/vader.csv", "figure/vader.png", "metrics.json", "polarity-table.csv",
            "polarity-table.md", "provenance.json", "rows.csv"]
    md = (folder / "polarity-table.md").read_text()
    assert "Read me." in md and "Substitute: X → Y." in md and "**seed**: `7`" in md
    assert json.loads((folder / "provenance.json").read_text())["substitutes"] == \
        "Substitute: X → Y."
    assert json.loads((folder / "metrics.json").read_text()) == {
        "setting": "all cases", "vader": {"fail": 2}}  # inside the folder, numpy made plain
    assert pd.read_csv(folder / "figure" / "vader.csv").to_dict("records") == [{"x": 1, "y": 2}]
    assert not (tmp_path / "reports" / "polarity-metrics.json").exists()


@pytest.mark.parametrize("metrics, named", [
    ({"vader": {"fail": 2}}, "'setting'"),
    ({"setting": "s", "vader": {"definition": "per_question"}}, "vader.definition"),
    ({"setting": "s", "vader": {"low": True}}, "vader.low"),
    ({"setting": "s", "vader": {"fail": float("nan")}}, "vader.fail"),
    ({"setting": "s", "vader": {"cr": {"N_V": 1}}}, "vader.cr"),
    ({"setting": "s", "vader": 3}, "'vader'"),
    ({"setting": "s", "vader": {}}, "'vader'"),
])
def test_a_metric_that_is_no_number_fails_the_publish_naming_it(tmp_path: Path, metrics,
                                                                 named):
    from lingtest.tasks.core.paths import Workspace

    report = _report()
    report.metrics = metrics
    with pytest.raises(LingtestError, match="polarity: metrics.json") as caught:
        publish(report, Workspace(tmp_path))
    assert named in str(caught.value) and "provenance" in str(caught.value)
    assert not (tmp_path / "reports" / "polarity").exists()  # nothing written


def test_stage_metrics_flattens_drops_missing_and_keeps_all_apart():
    metrics = stage_metrics("l2 mu-sigma vocab", {
        "org/m-1.5": {"CR2": {"N_V": np.int64(3), "P_A": 66.7, "P_B": None},
                      "CR4": {"P_A": float("nan")}},
        "silent": {"fail_%": None}}, {"cases": {"seeds": 4}})
    assert metrics == {"setting": "l2 mu-sigma vocab",
                       "org/m-1.5": {"CR2.N_V": 3, "CR2.P_A": 66.7}, "all": {"cases.seeds": 4}}
    assert type(metrics["org/m-1.5"]["CR2.N_V"]) is int
    # a model or metric name holding dots is still found (alerts' FILE:KEY)
    assert lookup(metrics, "org/m-1.5.CR2.P_A") == 66.7
    assert lookup(metrics, "all.cases.seeds") == 4
    assert lookup(metrics, "org/m-1.5.CR9.P_A") is None


def test_a_per_model_family_is_one_artifact_and_a_file_per_model(tmp_path: Path):
    from lingtest.tasks.core.paths import Workspace

    report = Report(stage="family")
    table = report.add_per_model("fam-t3", {"org/a": pd.DataFrame({"x": [1, 2]}),
                                            "b": pd.DataFrame({"x": [3]})},
                                 "Table 3 for {model}")
    assert table.key == "fam-t3" and not table.files and table.title == "Table 3 for each model"
    assert table.frame.to_dict("records") == [{"model_id": "org/a", "x": 1},
                                              {"model_id": "org/a", "x": 2},
                                              {"model_id": "b", "x": 3}]
    assert [(t.key, t.artifact, t.files) for t in report.tables[:2]] == [
        ("fam-t3-org-a", False, True), ("fam-t3-b", False, True)]
    folder = publish(report, Workspace(tmp_path))
    assert sorted(p.name for p in folder.iterdir()) == [
        "fam-t3-b.csv", "fam-t3-b.md", "fam-t3-org-a.csv", "fam-t3-org-a.md", "provenance.json"]
    assert "# Table 3 for org/a" in (folder / "fam-t3-org-a.md").read_text()


def test_two_parts_writing_one_file_are_refused(tmp_path: Path):
    from lingtest.tasks.core.paths import Workspace

    report = _report()
    report.figures["polarity-table.png"] = Figure(lambda path: None, pd.DataFrame())
    with pytest.raises(LingtestError, match="polarity-table.csv"):
        publish(report, Workspace(tmp_path))


def test_a_failing_report_leaves_the_previous_one(tmp_path: Path):
    from lingtest.tasks.core.paths import Workspace

    workspace = Workspace(tmp_path)
    folder = publish(_report(), workspace)
    before = {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    def broken(path):
        raise RuntimeError("plot failed")

    with pytest.raises(RuntimeError):
        publish(_report(broken), workspace)
    assert {p.name: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before


def test_slug():
    assert slug("sentence-transformers/all_MiniLM-L6-v2") == "sentence-transformers-all-minilm-l6-v2"


# -- the generic flow ---------------------------------------------------------------------

class Polarity(Method):
    """A real, small method for the generic flow: VADER's polarity against the topic's."""

    stage = "polarity"
    contract = CONTRACT
    units_run: list[Unit] = []

    def build_suite(self) -> pd.DataFrame:
        return _cases()

    def model_ids(self) -> list[str]:
        return ["vader"]

    def run_unit(self, suite: pd.DataFrame, unit: Unit) -> UnitResult:
        from lingtest.tasks.models.sentiment import VaderModel

        type(self).units_run.append(unit)
        part = unit.take(suite)
        model = VaderModel()
        labels, probs = model.predict_with_probabilities3(part["text"].tolist())
        verdict = ["pass" if got == want else "fail"
                   for got, want in zip(labels, part["expectation"])]
        return UnitResult(unit, pd.DataFrame({
            "case_id": part["case_id"].to_numpy(), "method": "polarity",
            "model_id": unit.model_id, "revision": "nltk-vader", "output": labels,
            "verdict": verdict, "score": probs.max(axis=1).astype(float)}))

    def collect(self, suite, runs):
        order = {cid: i for i, cid in enumerate(suite["case_id"])}
        frame = super().collect(suite, runs)
        return frame.sort_values("case_id", key=lambda s: s.map(order)).reset_index(drop=True)

    def report(self, suite, results, runs) -> Report:
        report = Report(self.stage, provenance={"seed": self.params.seed})
        report.add("polarity-results", results, "Results")
        return report


@pytest.fixture()
def polarity_project(tmp_path: Path, monkeypatch, mirror: Path):
    from lingtest.flows.registry import load_params
    from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace

    monkeypatch.setenv("NLTK_DATA", str(mirror / "nltk_data"))
    (tmp_path / "params.yaml").write_bytes((PACKAGE_ROOT / "params.yaml").read_bytes())
    return Workspace(tmp_path), load_params


def test_method_flow_runs_one_task_per_model_and_shard(polarity_project, prefect_harness):
    from lingtest.flows.method import method_flow

    workspace, load_params = polarity_project
    flow = method_flow(Polarity)
    assert flow.name == "polarity"
    Polarity.units_run = []
    flow(params=load_params(workspace.root, ["runtime.shards=2"]), root=str(workspace.root))
    assert sorted((u.shard, u.shards) for u in Polarity.units_run) == [(0, 2), (1, 2)]
    sharded = pd.read_parquet(workspace.interim / "polarity" / "results.parquet")
    assert len(sharded) == 4 and set(sharded["verdict"]) <= {"pass", "fail"}
    assert (workspace.reports / "polarity" / "polarity-results.csv").is_file()
    check_cases(pd.read_parquet(workspace.interim / "polarity" / "suite.parquet"), CONTRACT)

    Polarity.units_run = []
    flow(params=load_params(workspace.root, []), root=str(workspace.root))
    assert [u.shards for u in Polarity.units_run] == [1]
    whole = pd.read_parquet(workspace.interim / "polarity" / "results.parquet")
    pd.testing.assert_frame_equal(whole, sharded)  # shards do not change results

    method = Polarity(load_params(workspace.root, []), workspace)
    again = retest(method, _cases(), "vader")
    assert change_counts(compare_results(whole, again))["unchanged"] == 4


def test_method_flow_refuses_results_that_break_the_contract(polarity_project, prefect_harness):
    from lingtest.flows.method import method_flow

    class Broken(Polarity):
        def collect(self, suite, runs):
            return super().collect(suite, runs).assign(verdict="maybe")

    workspace, load_params = polarity_project
    with pytest.raises(LingtestError, match="verdict"):
        method_flow(Broken)(params=load_params(workspace.root, []), root=str(workspace.root))
    assert not (workspace.interim / "polarity" / "results.parquet").exists()
    assert not (workspace.reports / "polarity").exists()
