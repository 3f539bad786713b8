"""The ``train-sentiment`` and ``capabilities`` stages end to end: two capabilities × two seeds,
a MiniLM fine-tuned on a small SST-2 sample, VADER, the packaged SmolLM2 filling masks."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from lingtest.flows.stage import run_stage
from lingtest.tasks.capabilities.coverage_report import FIGURE4_LINES
from lingtest.tasks.capabilities.method import CapabilitiesMethod
from lingtest.flows.registry import load_params
from lingtest.tasks.core.metrics import check_metrics_shape
from lingtest.tasks.core.method import retest
from lingtest.tasks.core.publish import slug
from lingtest.tasks.core.schema import change_counts, check_cases, check_results, compare_results

TRAIN = ["capabilities.train_sentiment.max_train=96", "capabilities.train_sentiment.max_test=64",
         "capabilities.train_sentiment.batch_size=16"]
SMALL = ["capabilities.capabilities=[LC2,LC9]", "capabilities.seeds_per_lc=2",
         "capabilities.max_masks_per_seed=4", "capabilities.fill_candidates=4",
         "capabilities.pcfg_heldout=10", "capabilities.checklist_max_examples=3",
         "capabilities.coverage_sizes=[4,8]", "capabilities.coverage_repeats=2",
         "capabilities.coverage_max_train=64", "capabilities.bootstrap=200",
         "capabilities.table_layouts=[alict,ase22]"]


def flow_task_runs(flow_run_id: str) -> list:
    """The flow run's task runs, in expected start order."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.sorting import TaskRunSort

    with get_client(sync_client=True) as client:
        return client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
            sort=TaskRunSort.EXPECTED_START_TIME_ASC, limit=200)


def task_states(flow_run_id: str, prefix: str) -> list[str]:
    """State names of the flow run's tasks whose name starts with ``prefix``."""
    return [r.state.name for r in flow_task_runs(flow_run_id) if r.name.startswith(prefix)]


def flow_run_artifacts(flow_run_id: str) -> list:
    """The artifacts one flow run published (their data parsed)."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    for artifact in found:
        if isinstance(artifact.data, str) and artifact.type == "table":
            artifact.data = json.loads(artifact.data)
    return found


def task_spans(flow_run_id: str) -> dict[str, tuple]:
    """Start and end time of the flow run's tasks, by task run name."""
    return {r.name: (r.start_time, r.end_time) for r in flow_task_runs(flow_run_id)}


@pytest.fixture(scope="module")
def capabilities_run(data_project):
    workspace, overrides = data_project
    trained = run_stage("train-sentiment", load_params(workspace.root, overrides + TRAIN),
                        workspace)
    params = load_params(workspace.root, overrides + SMALL)
    first = run_stage("capabilities", params, workspace)
    return workspace, params, trained, first


@pytest.mark.slow
def test_train_sentiment_writes_model_and_metrics(capabilities_run) -> None:
    workspace, _, trained, _ = capabilities_run
    folder = workspace.reports / "train-sentiment"
    metrics = check_metrics_shape(json.loads((folder / "metrics.json").read_text()), "test")
    # the DVC metrics are the result's numbers; this process's seconds and threads are not
    # metrics, and the versions and revisions are provenance
    assert metrics == {"setting": "SST-2 test split", "lingtest/minilm-sst2": {
        "accuracy": trained["accuracy"], "test_size": 64, "train_size": 96,
        "train_loss": trained["train_loss"][-1]}}
    assert 0.0 <= trained["accuracy"] <= 1.0 and "seconds" in trained
    provenance = json.loads((folder / "provenance.json").read_text())
    assert trained["base_revision"] in provenance["base model"]
    assert provenance["torch / transformers"].startswith(trained["torch"])
    assert (workspace.root / "data" / "models" / "minilm-sst2" / "head.safetensors").is_file()


@pytest.mark.slow
def test_suite_results_and_table3(capabilities_run) -> None:
    workspace, _, _, first = capabilities_run
    out, reports = workspace.interim / "capabilities", workspace.reports / "capabilities"
    suite = pd.read_parquet(out / "suite.parquet")
    seeds = suite[suite["kind"] == "seed"]
    assert seeds.groupby("capability").size().to_dict() == {"LC2": 2, "LC9": 2}
    exps = suite[suite["kind"] == "expansion"]
    assert first["expansions"] == len(exps) > 0 and first["seeds"] == 4
    assert set(exps["parent_case_id"]) <= set(seeds["case_id"])
    # an expansion keeps its seed's expectation and adds words to it
    parents = seeds.set_index("case_id")
    for row in exps.itertuples():
        parent = parents.loc[row.parent_case_id]
        assert row.expectation == parent.expectation
        assert len(row.text.split()) > len(parent.text.split())
    lines = (out / "suite.jsonl").read_text().splitlines()
    assert [json.loads(line)["case_id"] for line in lines] == suite["case_id"].tolist()

    results = pd.read_parquet(out / "results.parquet")
    assert set(results["model_id"]) == {"lingtest/minilm-sst2", "vader"}
    assert len(results) == 2 * len(suite)
    passed = results.apply(lambda r: r.output in r.expectation.split("|"), axis=1)
    assert (passed == (results["verdict"] == "pass")).all()
    # the written tables keep the case/result contract, in model order then suite order
    contract = CapabilitiesMethod.contract
    check_cases(suite, contract)
    check_results(results, contract)
    assert results["case_id"].tolist() == 2 * suite["case_id"].tolist()
    examples = pd.read_csv(reports / "capabilities-examples.csv")  # published headers unchanged
    assert {"expected", "prediction vader", "verdict vader"} <= set(examples.columns)
    for model in ("lingtest-minilm-sst2", "vader"):  # the files stay one per model
        table = pd.read_csv(reports / f"capabilities-table3-{model}.csv")
        assert table["capability"].tolist() == ["LC2", "LC9"]
        assert table["seeds"].tolist() == [2, 2]
        rows = results[results["model_id"].str.replace("/", "-") == model]
        lc2 = rows[(rows["capability"] == "LC2") & (rows["kind"] == "seed")]
        assert table.loc[0, "seed_fail_%"] == pytest.approx(
            100 * (lc2["verdict"] == "fail").mean())
        assert table.loc[0, "paper_seed_fail_% BERT"] == 4.0
        # the ASE'22 layout, one trial: one failure rate over the seeds and expansions
        ase22 = pd.read_csv(reports / f"capabilities-ase22-{model}.csv").set_index("capability")
        lc2_all = rows[rows["capability"] == "LC2"]
        assert ase22.loc["LC2", "test_cases (median)"] == len(lc2_all)
        assert ase22.loc["LC2", "fail_% (median)"] == pytest.approx(
            100 * (lc2_all["verdict"] == "fail").mean(), abs=0.01)
        assert ase22.loc["LC2", "trials"] == 1
    text = (reports / "capabilities-table3-vader.md").read_text()
    assert "Substitutes:" in text and "## Provenance" in text


@pytest.mark.slow
def test_checklist_coverage_and_metrics(capabilities_run) -> None:
    workspace, _, _, _ = capabilities_run
    reports = workspace.reports / "capabilities"
    checklist = pd.read_csv(reports / "capabilities-checklist.csv")
    assert len(checklist) == 38  # every released test, 3 examples each
    assert {"fail % lingtest/minilm-sst2", "fail % vader"} <= set(checklist.columns)
    curve = pd.read_csv(reports / "capabilities-coverage.csv")
    assert set(curve["suite"]) == {"S²LCT", "CheckList"}
    assert set(curve["model_id"]) == {"lingtest/minilm-sst2"}  # VADER has no hidden states
    assert sorted(curve["size"].unique())[0] == 4  # sizes above the smaller suite are dropped
    assert curve["boundcov"].between(0, 1).all() and curve["sactcov"].between(0, 1).all()
    figure4 = reports / "capabilities-figure4-coverage"
    assert (figure4 / "lingtest-minilm-sst2.png").stat().st_size > 5000
    plotted = pd.read_csv(figure4 / "lingtest-minilm-sst2.csv")  # what `dvc plots` draws
    assert list(plotted.columns) == ["size", *FIGURE4_LINES]
    assert plotted["size"].tolist() == sorted(curve["size"].unique())
    largest = curve[(curve["size"] == curve["size"].max()) & (curve["suite"] == "CheckList")]
    assert plotted["CheckList boundcov"].iloc[-1] == pytest.approx(
        100 * largest["boundcov"].iloc[0], abs=1e-4)
    by_lc = pd.read_csv(reports / "capabilities-coverage-by-lc.csv")
    assert by_lc["capability"].tolist() == ["LC2", "LC9"]
    assert by_lc["checklist_test"].tolist() == ["Sentiment-laden words in context", "Q & A: yes"]
    assert (by_lc["size"] == by_lc[["s2lct_texts", "checklist_texts"]].min(axis=1)).all()
    lengths = pd.read_csv(reports / "capabilities-lengths.csv")
    assert {"S²LCT", "CheckList", "LC2 (S²LCT)"} <= set(lengths["suite"])
    metrics = check_metrics_shape(json.loads((reports / "metrics.json").read_text()), "test")
    assert set(metrics) == {"setting", "all", "lingtest/minilm-sst2", "vader"}
    assert 0.3 < metrics["all"]["pcfg_bracket_f1"] <= 1.0
    assert metrics["all"]["cases.seeds"] == 4
    assert metrics["lingtest/minilm-sst2"]["coverage.CheckList.size"] == curve["size"].max()
    assert not any(k.startswith("coverage.") for k in metrics["vader"])  # no hidden states
    assert metrics["vader"]["pass_to_fail"] >= metrics["vader"]["pass_to_fail_seeds"]


@pytest.mark.slow
def test_one_run_publishes_a_handful_of_artifact_keys(capabilities_run) -> None:
    """Per-model tables are one artifact each (a model_id column), not one key per model."""
    workspace, _, _, first = capabilities_run
    artifacts = {a.key: a for a in flow_run_artifacts(first["flow_run_id"])}
    # (the comparison with the last recorded run: only where git has one)
    assert set(artifacts) - {"capabilities-comparison"} == {
        "capabilities-suite", "capabilities-table3", "capabilities-ase22", "capabilities-neutral-share",
        "capabilities-checklist", "capabilities-examples", "capabilities-pcfg", "capabilities-lengths", "capabilities-coverage",
        "capabilities-coverage-by-lc"}
    for key in ("capabilities-table3", "capabilities-ase22"):
        rows = pd.DataFrame(artifacts[key].data)
        assert rows.columns[0] == "model_id"
        for model in ("lingtest/minilm-sst2", "vader"):  # every model's rows, as its file
            own = pd.read_csv(workspace.reports / "capabilities" /
                              f"{key}-{slug(model)}.csv")
            assert rows.loc[rows["model_id"] == model, "capability"].tolist() == \
                own["capability"].tolist() == ["LC2", "LC9"]


@pytest.mark.slow
def test_rerun_at_three_shards_is_cached_and_identical(capabilities_run) -> None:
    """A rerun reuses the suite's cached steps, and ``runtime.shards`` changes no result
    row or table (each model's rows come back in case order)."""
    from projects import changed_tables, report_tables

    workspace, params, _, _ = capabilities_run
    out = workspace.interim / "capabilities"
    before = pd.read_parquet(out / "results.parquet")
    tables = report_tables(workspace, "capabilities")
    sharded = params.model_copy(update={"runtime": params.runtime.model_copy(
        update={"shards": 3})})
    second = run_stage("capabilities", sharded, workspace)
    pd.testing.assert_frame_equal(before, pd.read_parquet(out / "results.parquet"))
    assert "capabilities-table3-vader.csv" in tables
    assert changed_tables(tables, report_tables(workspace, "capabilities")) == []
    assert task_states(second["flow_run_id"], "expand-") == ["Cached", "Cached"]
    assert task_states(second["flow_run_id"], "tag-sst") == ["Cached"]


@pytest.mark.slow
def test_retest_of_the_fine_tuned_model_changes_nothing(capabilities_run) -> None:
    workspace, params, _, _ = capabilities_run
    out = workspace.interim / "capabilities"
    suite, results = (pd.read_parquet(out / f"{name}.parquet") for name in ("suite", "results"))
    model_id = "lingtest/minilm-sst2"
    again = retest(CapabilitiesMethod(params, workspace), suite, model_id)
    diff = compare_results(results[results["model_id"] == model_id], again)
    assert change_counts(diff)["unchanged"] == len(suite) == len(diff)


@pytest.mark.slow
def test_on_two_dask_workers_the_expansion_is_spread_and_the_suite_is_the_same(
        capabilities_run, tmp_path) -> None:
    """On Dask each capability's expansion is its own task on a worker process, and the units
    that read no S²LCT case (CheckList, the coverage bounds) run while the flow still tags
    SST; the suite (seeds and expansions, byte for byte), both models' results and CheckList
    verdicts and every report table are the thread run's."""
    import shutil

    pytest.importorskip("prefect_dask")
    from projects import sibling_project

    workspace, params, _, _ = capabilities_run
    dask = sibling_project(workspace, tmp_path / "dask")
    shutil.copytree(workspace.data / "models", dask.data / "models")
    overrides = [f"data.mirror={params.data.mirror}", "data.online=false", *SMALL,
                 "runtime.task_runner=auto", f"runtime.result_storage={tmp_path / 'results'}"]
    summary = run_stage("capabilities", load_params(dask.root, overrides), dask)

    threads_out, dask_out = workspace.interim / "capabilities", dask.interim / "capabilities"
    assert (dask_out / "suite.jsonl").read_bytes() == (threads_out / "suite.jsonl").read_bytes()
    for name in ("suite.parquet", "results.parquet", "checklist_verdicts.parquet"):
        ours, theirs = (pd.read_parquet(out / name) for out in (threads_out, dask_out))
        assert len(ours) > 0
        pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
    assert set(pd.read_parquet(dask_out / "results.parquet")["model_id"]) == {
        "lingtest/minilm-sst2", "vader"}
    tables = sorted(p.name for p in (workspace.reports / "capabilities").glob("*.csv"))
    assert "capabilities-coverage.csv" in tables and "capabilities-checklist.csv" in tables
    for name in tables:
        assert ((dask.reports / "capabilities" / name).read_bytes()
                == (workspace.reports / "capabilities" / name).read_bytes()), name
    spans = task_spans(summary["flow_run_id"])
    tagged = [end for name, (_, end) in spans.items() if name.startswith("tag-sst")]
    assert spans["bounds-lingtest/minilm-sst2"][0] < tagged[0]  # submitted before the suite
