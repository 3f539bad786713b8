"""AdaTest's debugging loop: topic changes by hand, training sets that never touch the
evaluation, reproducible continued training, and the stage end to end on the real MiniLM."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tasks.adaptive.debug import checklist_training_set, tree_training_set
from tasks.adaptive.debug_report import scatter_figure, table1, topic_changes
from tasks.capabilities.checklist_run import sample_suite
from tasks.core.errors import LingtestError

HOTEL = "adatest/imdb_hotel_conversion.csv"


def results_frame(rows: list[tuple[str, str, str, int, str]]) -> pd.DataFrame:
    """(model_id, condition, topic, case number, verdict) → result rows."""
    return pd.DataFrame([{"case_id": f"{topic}-{i}", "model_id": model, "condition": cond,
                          "train_seed": -1 if cond == "before" else int(model[-1]),
                          "set": "checklist", "topic": topic, "verdict": verdict}
                         for model, cond, topic, i, verdict in rows])


def verdicts(model: str, cond: str, topic: str, fails: int, n: int = 20) -> list[tuple]:
    return [(model, cond, topic, i, "fail" if i < fails else "pass") for i in range(n)]


def test_topic_changes_by_hand_fixed_broken_and_unchanged() -> None:
    rows = (verdicts("m", "before", "A", 12) + verdicts("m+x@1", "x", "A", 0)      # 60% → 0%
            + verdicts("m", "before", "B", 0) + verdicts("m+x@1", "x", "B", 15)    # 0% → 75%
            + verdicts("m", "before", "C", 5) + verdicts("m+x@1", "x", "C", 5)     # 25% → 25%
            + verdicts("m", "before", "D", 5) + verdicts("m+x@1", "x", "D", 3)     # 25% → 15%
            + verdicts("m", "before", "E", 4, 4) + verdicts("m+x@1", "x", "E", 0, 4))  # n = 4
    table = topic_changes(results_frame(rows), ["x"], 0.2, 2000, 0.05, seed=0).set_index(
        "topic")
    assert table.loc["A", ["error_before", "error_after", "change_pp"]].tolist() == [
        60.0, 0.0, -60.0]
    assert table["status"].to_dict() == {"A": "fixed", "B": "broken", "C": "", "D": "",
                                         "E": ""}  # E: too few examples for a status
    assert table.loc["A", "p"] == round(2 / 2001, 4) > 0  # never 0: (k + 1) / (n + 1)
    assert table.loc["C", "p"] == 1.0  # nothing changed: no resample can move it
    # D crosses the threshold but 2 of 20 examples is no significant change
    assert table.loc["D", "q"] > 0.05
    # q is Benjamini–Hochberg over the condition's topics (scipy's)
    assert np.allclose(table["q"], stats.false_discovery_control(table["p"]), atol=1e-4)


def test_figure7_has_a_panel_per_condition_and_a_legend_for_every_mark() -> None:
    changes = pd.DataFrame({
        "condition": ["adatest", "adatest", "checklist-data"], "topic": ["a", "b", "a"],
        "examples": [20, 20, 20], "error_before": [40.0, 0.0, 10.0],
        "error_after": [5.0, 30.0, 12.0], "status": ["fixed", "broken", ""]})
    fig = scatter_figure(changes, 0.2)
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 2 and "1 fixed, 1 broken" in panels[0].get_title()
    (legend,) = fig.legends
    labels = [text.get_text() for text in legend.get_texts()]
    assert labels == ["fixed (now passes, significant)", "broken (now fails, significant)",
                      "no significant crossing", "failure threshold (20 %)", "no change"]


def test_seeds_are_averaged_per_example_and_undefined_left_out() -> None:
    rows = (verdicts("m", "before", "A", 10, 10)
            + verdicts("m+x@1", "x", "A", 10, 10) + verdicts("m+x@2", "x", "A", 0, 10))
    rows[0] = ("m", "before", "A", 0, "undefined")  # filtered before: not compared
    table = topic_changes(results_frame(rows), ["x"], 0.2, 1000, 0.05, seed=0)
    assert table["examples"].tolist() == [9]
    assert table["error_after"].tolist() == [50.0]  # two seeds, one fails everything


def test_table1_counts_failing_topics_per_model_and_averages_seeds() -> None:
    rows = (verdicts("m", "before", "A", 10) + verdicts("m", "before", "B", 2)
            + verdicts("m+x@1", "x", "A", 2) + verdicts("m+x@1", "x", "B", 2)
            + verdicts("m+x@2", "x", "A", 10) + verdicts("m+x@2", "x", "B", 10))
    frame = results_frame(rows)
    sst = pd.DataFrame([{"case_id": f"s{i}", "model_id": m, "condition": c, "set": "sst",
                         "topic": "SST-2 validation", "verdict": v}
                        for m, c, i, v in [("m", "before", 0, "pass"), ("m", "before", 1, "fail"),
                                           ("m+x@1", "x", 0, "pass"), ("m+x@1", "x", 1, "pass"),
                                           ("m+x@2", "x", 0, "pass"), ("m+x@2", "x", 1, "fail")]])
    changes = topic_changes(frame, ["x"], 0.2, 500, 0.05, seed=0)
    table = table1(pd.concat([frame, sst]), changes, {"x": 40}, ["x"], 0.2).set_index(
        "condition")
    assert table.loc["before", "topics_failing"] == 1.0   # A at 50%, B at 10%
    assert table.loc["x", "topics_failing"] == 1.0        # seed 1: none; seed 2: both
    assert table.loc["before", "sst2_validation_acc"] == 50.0
    assert table.loc["x", "sst2_validation_acc"] == 75.0   # (100 + 50) / 2
    assert table.loc["x", "sst2_validation_sd"] == pytest.approx(35.36, abs=0.01)
    assert table.loc["x", ["seeds", "training_examples"]].tolist() == [2, 40]


def test_tree_training_set_takes_labelled_tests_of_chosen_topics(mirror: Path) -> None:
    every = tree_training_set(mirror / HOTEL, [], ("neg", "pos"))
    assert len(every) == 190 and set(every["label"]) == {"neg", "pos"}
    rooms = tree_training_set(mirror / HOTEL, ["/Rooms"], ("neg", "pos"))
    assert 0 < len(rooms) < 190 and set(rooms["topic"]) == {"/Rooms"}
    facilities = tree_training_set(mirror / HOTEL, ["/Facilities"], ("neg", "pos"))
    assert set(facilities["topic"]) == {"/Facilities/Pool", "/Facilities/Restaurant"}
    with pytest.raises(LingtestError, match="adaptive.debug.topics.*/Spa"):
        tree_training_set(mirror / HOTEL, ["/Spa"], ("neg", "pos"))


def test_checklist_data_avoids_the_evaluation_sample(table) -> None:
    checklist = table("checklist_suite")
    evaluated = sample_suite(checklist, 30, 42)
    chosen = checklist_training_set(checklist, evaluated, 50, 42)
    assert set(chosen["label"]) == {"neg", "pos"}
    per_test = chosen.groupby("test").size()
    assert (per_test <= 50).all() and per_test.max() == 50
    # only MFT tests with a label a binary model can learn
    mft = checklist[checklist["expectation"].eq("label == labels[i]")]
    assert set(per_test.index) <= set(mft["test"])
    assert "single neutral words" not in per_test.index
    # where a test has examples beyond the sample, training takes them, not sampled ones
    sampled = set(zip(evaluated["test"], evaluated["example_id"]))
    big = [t for t, n in mft.groupby("test").size().items() if n >= 80]
    assert big and not any((t, e) in sampled for t, e in zip(chosen["test"],
                                                              chosen["example_id"]) if t in big)
    assert chosen.equals(checklist_training_set(checklist, evaluated, 50, 42))  # seeded


@pytest.fixture(scope="module")
def base_classifier(tmp_path_factory, table) -> Path:
    from tasks.training.sentiment import train_minilm_sst2

    folder = tmp_path_factory.mktemp("classifier") / "minilm"
    train_minilm_sst2(table("sst"), folder, seed=3, epochs=1, max_train=64, max_test=16,
                      threads=1)
    return folder


@pytest.mark.slow
def test_continued_training_is_reproducible_and_changes_the_weights(base_classifier) -> None:
    from tasks.training.sentiment import continue_training

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
    return [f"adaptive.debug.model={base_classifier}", "adaptive.debug.seeds=2",
            "adaptive.debug.checklist_examples=6", "adaptive.debug.checklist_n=3",
            "adaptive.debug.epochs=1", "adaptive.debug.batch_size=16",
            "adaptive.debug.eval_max=12", "adaptive.debug.bootstrap=200",
            "adaptive.debug.topics=[/Rooms]"]


@pytest.fixture(scope="module")
def debugging_run(data_project, base_classifier):
    """The stage on the small configuration, thread runner, in the session's project."""
    from flows.stage import run_stage
    from tasks.core.config import load_params

    workspace, overrides = data_project
    small = small_debugging(base_classifier)
    return run_stage("adaptive-debug", load_params(workspace.root, overrides + small),
                     workspace)


@pytest.mark.slow
def test_debugging_stage_end_to_end(data_project, base_classifier, debugging_run) -> None:
    from tasks.core.config import load_params

    workspace, overrides = data_project
    small = small_debugging(base_classifier)
    summary = debugging_run
    out, reports = workspace.interim / "adaptive-debug", workspace.reports / "adaptive-debug"
    suite = pd.read_parquet(out / "suite.parquet")
    results = pd.read_parquet(out / "results.parquet")
    t1 = pd.read_csv(reports / "adatest-debug-table1.csv").set_index("condition")
    training = pd.read_csv(reports / "adatest-debug-training.csv")
    # five models: the checkpoint, two seeds × two conditions, each on every case
    assert summary["models"] == 5 and len(results) == 5 * len(suite)
    assert results.groupby("model_id")["revision"].first().nunique() == 5
    assert set(suite["set"]) == {"checklist", "sst2-validation", "imdb-contrast"}
    assert (suite["set"] == "sst2-validation").sum() == 12
    assert (suite["set"] == "imdb-contrast").sum() == 24  # 12 pairs, both sides
    # the adatest condition trained on /Rooms only, 1:1 with SST-2; none of it is evaluated
    rooms = training[training["condition"] == "adatest"]
    assert rooms["topic"].tolist() == ["/Rooms"]
    assert t1.loc["adatest", "training_examples"] == 2 * rooms["examples"].sum()
    cl = training[training["condition"] == "checklist-data"]
    assert (cl["examples"] <= 3).all()
    assert t1.loc["checklist-data", "training_examples"] == 2 * cl["examples"].sum()
    evaluated = {t for texts in suite.loc[suite["set"] == "checklist", "texts"]
                 for t in json.loads(texts)}
    from tasks.adaptive.debug import DebuggingLoop
    loop = DebuggingLoop(load_params(workspace.root, overrides + small), workspace)
    loop.build_suite()
    assert not evaluated & {t for f in loop.training.values() for t in f["text"]}
    # one figure checked by hand: SST-2 accuracy of the checkpoint from the result rows
    before = results[(results["condition"] == "before")
                     & (results["topic"] == "SST-2 validation")]
    assert t1.loc["before", "sst2_validation_acc"] == round(
        100 * before["verdict"].eq("pass").mean(), 2)
    assert t1.loc["adatest", "seeds"] == 2
    assert (reports / "adatest-debug-figure7.png").stat().st_size > 10_000
    provenance = json.loads((reports / "provenance.json").read_text())
    assert "training_seeds" in json.dumps(provenance)


@pytest.mark.slow
def test_debugging_stage_on_two_dask_workers_trains_the_same_models(
        data_project, base_classifier, debugging_run, tmp_path) -> None:
    """The fine-tunings (one unit per condition × seed) on two worker processes, each with
    its own torch generator, give the thread run's revisions and result rows. One training
    seed here (three units; the thread run has two seeds): each unit seeds itself, so the
    first seed's models are the thread run's, byte for byte."""
    pytest.importorskip("prefect_dask")
    from flows.stage import run_stage
    from tasks.core.config import load_params
    from projects import dask_overrides, sibling_project

    threads, overrides = data_project
    dask = sibling_project(threads, tmp_path / "dask")
    one_seed = [*small_debugging(base_classifier), "adaptive.debug.seeds=1"]
    run_stage("adaptive-debug", load_params(dask.root, [
        *overrides, *one_seed, *dask_overrides(tmp_path / "results")]), dask)
    expected, found = (pd.read_parquet(w.interim / "adaptive-debug" / "results.parquet")
                       for w in (threads, dask))
    assert found["revision"].nunique() == 3
    expected = expected[expected["model_id"].isin(set(found["model_id"]))]
    assert len(expected) == len(found)
    pd.testing.assert_frame_equal(expected.reset_index(drop=True), found, check_exact=True)
    name = "adatest-debug-training.csv"  # the first seed's training sets, row for row
    assert ((dask.reports / "adaptive-debug" / name).read_bytes()
            == (threads.reports / "adaptive-debug" / name).read_bytes()), name
