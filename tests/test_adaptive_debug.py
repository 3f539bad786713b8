"""AdaTest's debugging experiment: topic splits that never touch the held-out tests, the
nearest-example oracle on real MiniLM embeddings, label corrections of the hotel tree,
topic changes (fixed / broken / worsened) and Figure 7 by hand, reproducible continued
training, and the stage end to end on a tiny real configuration (1 topic, 1 round)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lingtest.tasks.adaptive.corrections import apply_corrections, read_corrections
from lingtest.tasks.adaptive.debug import tree_training_set
from lingtest.tasks.adaptive.debug_protocol import checklist_sample, split_topic
from lingtest.tasks.adaptive.debug_report import (FIGURE7_LINES, figure7_figure, figure7_table,
                                         topic_changes)
from lingtest.tasks.capabilities.checklist_run import sample_suite
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.metrics import check_metrics_shape
from lingtest.tasks.core.paths import PACKAGE_ROOT

HOTEL = "adatest/imdb_hotel_conversion.csv"
CORRECTIONS = PACKAGE_ROOT / "inputs" / "adatest-label-corrections.csv"
USED_TO = "used to, but now"
NEGATION = "Hard: Negation of positive with neutral stuff in the middle (should be negative)"


def results_frame(rows: list[tuple[str, str, str, int, str]]) -> pd.DataFrame:
    """(model_id, condition, topic, case number, verdict) → result rows (variant t1)."""
    return pd.DataFrame([{"case_id": f"{topic}-{i}", "model_id": model, "condition": cond,
                          "variant": "" if cond == "before" else "t1",
                          "train_seed": -1 if cond == "before" else int(model[-1]),
                          "set": "checklist", "topic": topic, "verdict": verdict}
                         for model, cond, topic, i, verdict in rows])


def verdicts(model: str, cond: str, topic: str, fails: int, n: int = 20) -> list[tuple]:
    return [(model, cond, topic, i, "fail" if i < fails else "pass") for i in range(n)]


def test_topic_changes_by_hand_fixed_broken_worsened_and_unchanged() -> None:
    rows = (verdicts("m", "before", "A", 12) + verdicts("m+x@1", "x", "A", 0)      # 60% → 0%
            + verdicts("m", "before", "B", 0) + verdicts("m+x@1", "x", "B", 15)    # 0% → 75%
            + verdicts("m", "before", "C", 5) + verdicts("m+x@1", "x", "C", 5)     # 25% → 25%
            + verdicts("m", "before", "D", 5) + verdicts("m+x@1", "x", "D", 3)     # 25% → 15%
            + verdicts("m", "before", "W", 8) + verdicts("m+x@1", "x", "W", 18)    # 40% → 90%
            + verdicts("m", "before", "E", 4, 4) + verdicts("m+x@1", "x", "E", 0, 4))  # n = 4
    table = topic_changes(results_frame(rows), 0.2, 2000, 0.05, seed=0).set_index("topic")
    assert table.loc["A", ["error_before", "error_after", "change_pp"]].tolist() == [
        60.0, 0.0, -60.0]
    # W failed before and fails more, significantly: worsened (not fixed, not broken)
    assert table["status"].to_dict() == {"A": "fixed", "B": "broken", "C": "", "D": "",
                                         "E": "", "W": "worsened"}
    assert table.loc["A", "p"] == round(2 / 2001, 4) > 0  # never 0: (k + 1) / (n + 1)
    assert table.loc["C", "p"] == 1.0  # nothing changed: no resample can move it
    assert table.loc["D", "q"] > 0.05  # 2 of 20 examples is no significant change
    assert np.allclose(table["q"], stats.false_discovery_control(table["p"]), atol=1e-4)


def test_seeds_are_averaged_per_example_and_undefined_left_out() -> None:
    rows = (verdicts("m", "before", "A", 10, 10)
            + verdicts("m+x@1", "x", "A", 10, 10) + verdicts("m+x@2", "x", "A", 0, 10))
    rows[0] = ("m", "before", "A", 0, "undefined")  # filtered before: not compared
    table = topic_changes(results_frame(rows), 0.2, 1000, 0.05, seed=0)
    assert table["examples"].tolist() == [9]
    assert table["error_after"].tolist() == [50.0]  # two seeds, one fails everything


def test_figure7_counts_trained_and_other_topics_per_k() -> None:
    def change(cond, variant, topic, before, after, status=""):
        return {"condition": cond, "variant": variant, "topic": f"CheckList: {topic}",
                "examples": 30, "error_before": before, "error_after": after,
                "status": status}

    changes = pd.DataFrame([
        change("adatest", "t1", "a", 80.0, 10.0, "fixed"), change("adatest", "t1", "b", 60.0, 50.0),
        change("adatest", "t1", "c", 0.0, 30.0, "broken"),
        change("adatest", "k2", "a", 80.0, 20.0), change("adatest", "k2", "b", 60.0, 10.0),
        change("adatest", "k2", "c", 0.0, 10.0),
        change("adatest", "t2", "a", 80.0, 70.0), change("adatest", "t2", "b", 60.0, 5.0),
        change("adatest", "t2", "c", 0.0, 0.0)])
    table = figure7_table(changes, ["a", "b"]).set_index(["condition", "k"])
    assert table.loc[("before", 0), ["trained_error", "others_error"]].tolist() == [80.0, 30.0]
    assert table.loc[("adatest", 1), ["trained_error", "others_error", "broken"]].tolist() == [
        10.0, 40.0, 1]  # others: b 50 %, c 30 %
    assert table.loc[("adatest", 2), ["trained_error", "others_error"]].tolist() == [15.0, 10.0]
    assert table.loc[("adatest", 2), "base_trained_error"] == 70.0
    fig = figure7_figure(table.reset_index())
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_xlabel() for ax in panels] == ["number of topics trained on"] * 2
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "AdaTest (5 seeds + fix rounds)", "base model (same topics)"]


def test_topic_split_keeps_held_out_tests_out_of_seeds_and_pool(table) -> None:
    checklist = table("checklist_suite")
    held_out = sample_suite(checklist, 30, 42)
    split = split_topic(checklist, held_out, USED_TO, 5, 42)
    assert len(split.seeds) == 5 and split.held_out == 30
    held_texts = {t for texts in held_out["texts"] for t in texts}
    trained = set(split.seeds["text"]) | set(split.pool["text"])
    assert not trained & held_texts
    assert not set(split.seeds["text"]) & set(split.pool["text"])
    own = held_out[held_out["test"] == USED_TO]["example_id"]
    assert not set(own) & (set(split.seeds["example_id"]) | set(split.pool["example_id"]))
    assert set(split.seeds["label"]) <= {"neg", "pos"}
    again = split_topic(checklist, held_out, USED_TO, 5, 42)
    assert again.seeds.equals(split.seeds)  # seeded
    assert not split_topic(checklist, held_out, USED_TO, 5, 43).seeds.equals(split.seeds)
    chosen = checklist_sample(split, 50, 42)
    assert len(chosen) == 50 and set(chosen["text"]) <= set(split.pool["text"])
    with pytest.raises(LingtestError, match="adaptive.debug.topics.*no CheckList MFT"):
        split_topic(checklist, held_out, "single neutral words", 5, 42)  # neutral only
    with pytest.raises(LingtestError, match="adaptive.debug.topics"):
        split_topic(checklist, held_out, "no such test", 5, 42)


def test_nearest_example_oracle_labels_on_topic_text_and_refuses_the_rest(table) -> None:
    from lingtest.tasks.adaptive.debug_protocol import NearestExampleOracle
    from lingtest.tasks.adaptive.prompts import minilm_embed
    from lingtest.tasks.adaptive.review import ABSTAIN

    checklist = table("checklist_suite")
    split = split_topic(checklist, sample_suite(checklist, 30, 42), NEGATION, 5, 42)
    from lingtest.tasks.training.common import torch_threads

    with torch_threads(1):
        oracle = NearestExampleOracle(split, minilm_embed(True), 42, reference=40)
        pool_text = split.pool["text"].iloc[-1]  # beyond the 40 compared with, seeded
        answers = oracle.expect("/x", [pool_text, "The pool was closed for the season.",
                                       "very very very"])
    # the topic's single label; a hotel complaint is off topic; a non-test is refused
    assert answers[0] == "neg"
    assert answers[1] is None
    assert answers[2] in (None, ABSTAIN)


def test_corrections_fix_the_hotel_tree_and_refuse_stale_rows(mirror: Path, tmp_path) -> None:
    corrections = read_corrections(CORRECTIONS)
    raw, _ = tree_training_set(mirror / HOTEL, [], ("neg", "pos"))
    fixed, applied = tree_training_set(mirror / HOTEL, [], ("neg", "pos"), corrections)
    assert len(raw) == 190 and len(fixed) == 189 and len(applied) == 2
    label = fixed.set_index("text")["label"]
    assert raw.set_index("text").loc["Expensive for what you get", "label"] == "pos"
    assert label["Expensive for what you get"] == "neg"
    assert "New test" not in label.index
    stale = corrections.assign(old_label="neg")
    with pytest.raises(LingtestError, match="reads pos, not neg"):
        apply_corrections(raw, stale.iloc[:1], mirror / HOTEL)
    bad = tmp_path / "c.csv"
    bad.write_text("tree,topic,input,old_label,new_label,reason\nx,/a,b,pos,maybe,r\n")
    with pytest.raises(LingtestError, match="line 2"):
        read_corrections(bad)
    with pytest.raises(LingtestError, match="adaptive.debug.tree_topics.*/Spa"):
        tree_training_set(mirror / HOTEL, ["/Spa"], ("neg", "pos"))


@pytest.fixture(scope="module")
def base_classifier(tmp_path_factory, table) -> Path:
    from lingtest.tasks.training.sentiment import train_minilm_sst2

    folder = tmp_path_factory.mktemp("classifier") / "minilm"
    train_minilm_sst2(table("sst"), folder, seed=3, epochs=1, max_train=64, max_test=16,
                      threads=1)
    return folder


@pytest.mark.slow
def test_continued_training_is_reproducible_and_changes_the_weights(base_classifier) -> None:
    from lingtest.tasks.training.sentiment import continue_training

    texts = ["The room was spotless.", "The pool was filthy.", "Great staff.", "Rude staff."]
    labels = pd.Series(["pos", "neg", "pos", "neg"])

    def train(seed: int):
        return continue_training(base_classifier, texts, labels, seed, epochs=1,
                                 batch_size=2, lr=1e-4, threads=1)

    first, again, other = train(1), train(1), train(2)
    assert first.revision == again.revision != other.revision
    base = first.revision.split("+ft@")[0]
    assert base.startswith("local@sha256:") and "+ft@sha256:" in first.revision
    assert np.allclose(first.predict_proba(texts), again.predict_proba(texts), atol=0)
    with pytest.raises(LingtestError, match="not in"):
        continue_training(base_classifier, texts, pd.Series(["pos"] * 3 + ["meh"]), 1,
                          epochs=1, batch_size=2, lr=1e-4)


def small_debugging(base_classifier) -> list[str]:
    return [f"adaptive.debug.model={base_classifier}", "adaptive.debug.seeds=1",
            f"adaptive.debug.topics=[{json.dumps(NEGATION)}]", "adaptive.debug.rounds=1",
            "adaptive.debug.prompts=1", "adaptive.debug.completions=4",
            "adaptive.debug.checklist_examples=5", "adaptive.debug.checklist_n=8",
            "adaptive.debug.epochs=1", "adaptive.debug.batch_size=16",
            "adaptive.debug.eval_max=8", "adaptive.debug.bootstrap=200",
            "adaptive.debug.conditions=[adatest, checklist-data, adatest-tree]",
            "adaptive.debug.tree_topics=[/Price]"]


@pytest.fixture(scope="module")
def debugging_run(data_project, base_classifier):
    """The stage on the tiny configuration, thread runner, in the session's project."""
    from lingtest.flows.stage import run_stage
    from lingtest.flows.registry import load_params

    workspace, overrides = data_project
    target = workspace.root / "inputs" / CORRECTIONS.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(CORRECTIONS.read_bytes())
    small = small_debugging(base_classifier)
    return run_stage("adaptive-debug", load_params(workspace.root, overrides + small),
                     workspace)


@pytest.mark.slow
def test_debugging_stage_runs_the_protocol_end_to_end(data_project, debugging_run) -> None:
    workspace, _ = data_project
    summary = debugging_run
    out, reports = workspace.interim / "adaptive-debug", workspace.reports / "adaptive-debug"
    suite = pd.read_parquet(out / "suite.parquet")
    results = pd.read_parquet(out / "results.parquet")
    tests = pd.read_csv(reports / "adaptive-debug-training-tests.csv")
    rounds = pd.read_csv(reports / "adaptive-debug-rounds.csv")
    t1 = pd.read_csv(reports / "adaptive-debug-table1.csv")
    # the base model + one model per condition (one topic, one seed): each on every case
    assert summary["models"] == 4 and len(results) == 4 * len(suite)
    assert results.groupby("model_id")["revision"].first().nunique() == 4
    # adatest starts from the topic's 5 seed tests; the one round stops the loop
    adatest = tests[tests["condition"] == "adatest"]
    assert (adatest["source"] == "seed").sum() == 5
    assert set(adatest["topic"]) == {NEGATION} and set(adatest["round"]) <= {0, 1}
    assert rounds["round"].tolist() == [1] and rounds["stopped"].tolist() == ["after 1 rounds"]
    assert rounds["fixes"].tolist() == [1]
    cl = tests[tests["condition"] == "checklist-data"]
    assert len(cl) == 8 and set(cl["source"]) == {"checklist-pool"}
    # the hotel tree's /Price tests with the curated correction applied
    tree = tests[tests["condition"] == "adatest-tree"]
    assert tree.set_index("text").loc["Expensive for what you get", "label"] == "neg"
    assert "adaptive-debug-corrections" in {p.stem for p in reports.glob("*.csv")}
    # held-out tests are never trained on: no evaluated text is in any training set
    evaluated = {t for texts in suite.loc[suite["set"] == "checklist", "texts"]
                 for t in json.loads(texts)}
    assert not evaluated & set(tests["text"])
    assert (suite["test"] == NEGATION).sum() > 0  # the fixed topic's own held-out tests
    # Table 1: the fixed topic per condition, significance against the base model
    assert set(t1["condition"]) == {"adatest", "checklist-data"}
    assert {"base_error", "error", "vs_base", "q", "status", "rounds", "others_broken",
            "others_worsened", "sst2_acc", "base_sst2_acc"} <= set(t1.columns)
    before = results[(results["condition"] == "before")
                     & (results["topic"] == f"CheckList: {NEGATION}")]
    base_error = 100 * before["verdict"].eq("fail").sum() / before["verdict"].isin(
        ["pass", "fail"]).sum()
    assert t1["base_error"].iloc[0] == pytest.approx(base_error, abs=0.01)
    fig7 = pd.read_csv(reports / "adaptive-debug-figure7.csv")
    assert {"condition", "k", "trained_error", "others_error"} <= set(fig7.columns)
    assert set(fig7["k"]) == {0, 1}
    assert (reports / "adaptive-debug-figure7.png").stat().st_size > 10_000
    lines = pd.read_csv(reports / "adaptive-debug-figure7-lines.csv")  # what `dvc plots` draws
    assert list(lines.columns) == ["k", *FIGURE7_LINES] and lines["k"].tolist() == [1]
    adatest = fig7[fig7["condition"] == "adatest"].iloc[0]
    assert lines.loc[0, "adatest trained_error"] == adatest["trained_error"]
    assert lines.loc[0, "base others_error"] == adatest["base_others_error"]
    metrics = check_metrics_shape(json.loads((reports / "metrics.json").read_text()), "test")
    base = results.loc[results["condition"] == "before", "model_id"].iloc[0]
    assert {f"{base}+adatest", f"{base}+checklist-data"} <= set(metrics)
    assert all(key == "setting" or key.startswith(f"{base}+") for key in metrics)
    assert metrics["setting"] == "1 topic(s), mean over 1 training seed(s)"
    assert summary[f"{base}+adatest own_topic_fixed"] == \
        metrics[f"{base}+adatest"]["own_topic_fixed"]
    provenance = json.loads((reports / "provenance.json").read_text())
    assert "training_seeds" in json.dumps(provenance)
    assert "oracle labelling each suggestion like the k nearest" in provenance["substitutes"]


@pytest.mark.slow
def test_debugging_stage_on_two_dask_workers_trains_the_same_models(
        data_project, base_classifier, debugging_run, tmp_path, dask_cluster) -> None:
    """The AdaTest loop (a task per topic and seed, on a worker while the suite is built)
    and the units (one fine-tuning per model: ``runtime.shards=3`` splits none) on two
    worker processes give the thread run's revisions, result rows, training tests and
    tables byte for byte."""
    pytest.importorskip("prefect_dask")
    from lingtest.flows.stage import run_stage
    from lingtest.flows.registry import load_params
    from projects import changed_tables, dask_overrides, report_tables, sibling_project

    threads, overrides = data_project
    dask = sibling_project(threads, tmp_path / "dask")
    (dask.root / "inputs").mkdir(parents=True, exist_ok=True)
    (dask.root / "inputs" / CORRECTIONS.name).write_bytes(CORRECTIONS.read_bytes())
    params = load_params(dask.root, [*overrides, *small_debugging(base_classifier),
                                     "runtime.shards=3",
                                     *dask_overrides(tmp_path / "results", dask_cluster)])
    from lingtest.tasks.adaptive.debug import DebuggingLoop
    units = DebuggingLoop(params, dask).units(pd.DataFrame())
    assert len(units) == 4 and {unit.shards for unit in units} == {1}  # no model trained twice
    from test_contrastive_flow import latest_states

    loops_before = len(latest_states("loop-t1@42", 100))  # the thread run's, in turn
    run_stage("adaptive-debug", params, dask)
    assert latest_states("loop-t1@42", 100)[loops_before:] == ["Completed"]
    expected, found = (pd.read_parquet(w.interim / "adaptive-debug" / "results.parquet")
                       for w in (threads, dask))
    assert found["revision"].nunique() == 4
    pd.testing.assert_frame_equal(expected.reset_index(drop=True),
                                  found.reset_index(drop=True), check_exact=True)
    tables = report_tables(threads, "adaptive-debug")
    assert "adaptive-debug-training-tests.csv" in tables
    assert changed_tables(tables, report_tables(dask, "adaptive-debug")) == []
