"""The consistency result database on SQLite and PostgreSQL: round trip, idempotence, resume."""
from __future__ import annotations

import importlib.util
import sys
import uuid
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import create_engine, select, text

from lingtest.tasks.consistency.store import RESULT_COLUMNS, Store, open_store
from lingtest.tasks.consistency.store_schema import Run
from lingtest.tasks.core.errors import LingtestError

# Loaded by path: tests/ is not a package, and conftest.py is not ours to extend.
_spec = importlib.util.spec_from_file_location("pg_server", Path(__file__).with_name("pg_server.py"))
pg_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pg_server)
postgres_url = pg_server.postgres_url

PARAMS = {"temperature": 0.0, "max_new_tokens": 8, "prompt": {"prefix": "Q: ", "suffix": " A:"}}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path: Path) -> str:
    """A URL of an empty database: a SQLite file in a new folder, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/nested/folder/results.sqlite"
    server = request.getfixturevalue("postgres_url")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return server.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def store(url: str):
    with open_store(url) as opened:
        yield opened


def questions() -> pd.DataFrame:
    return pd.DataFrame({
        "question_id": ["q1", "q2"], "source": ["boolq", "kommkonllm"],
        "question": ["is the sky blue", "is ice hot"], "answer": [True, False],
        "passage": ["The sky is blue.", None]})


def queries() -> pd.DataFrame:
    """Rows 1 and 2 of q1 swap in synonyms that coincide: one prompt for two rows."""
    derived = [("q1", 0, [0, 0], "is the sky blue"), ("q1", 1, [1, 0], "is the heaven blue"),
               ("q1", 2, [1, 1], "is the heaven blue"), ("q2", 0, [0], "is ice hot"),
               ("q2", 1, [1], "is ice warm")]
    return pd.DataFrame([{"question_id": q, "array_row": r, "row_values": v, "derived_text": d,
                          "prompt": f"Q: {d}? A:"} for q, r, v, d in derived])


def filled(store: Store) -> tuple[int, int, pd.DataFrame]:
    """Questions and queries in place; returns (run, model key, pending queries)."""
    store.upsert_questions(questions())
    store.add_queries(queries())
    run = store.start_run({"consistency": {"seed": 1}}, seed=1, git_commit="abc123")
    model = store.upsert_model("smollm2", PARAMS)
    return run, model, store.pending(model)


def answer(pending: pd.DataFrame, texts: dict[str, str]) -> list[dict]:
    """Responses whose text is looked up by derived text."""
    return [{"query_id": q, "text": texts[d], "error": None, "latency_s": 0.5, "attempts": 1}
            for q, d in zip(pending["query_id"], pending["derived_text"]) if d in texts]


def test_queries_dedupe_prompts_and_keep_every_row(store: Store):
    _, _, pending = filled(store)
    assert pending["derived_text"].tolist() == [
        "is the sky blue", "is the heaven blue", "is ice hot", "is ice warm"]
    assert pending["prompt"].tolist()[0] == "Q: is the sky blue? A:"
    assert pending["question_id"].tolist() == ["q1", "q1", "q2", "q2"]
    assert store.counts() == {"runs": 1, "models": 1, "questions": 2, "queries": 4,
                              "query_rows": 5, "responses": 0, "verdicts": 0,
                              "classifier_answers": 0}


def test_round_trip_to_results(store: Store):
    run, model, pending = filled(store)
    texts = {"is the sky blue": "Yes.", "is the heaven blue": "yes", "is ice hot": "No",
             "is ice warm": "Maybe"}
    store.save_responses(run, model, answer(pending, texts))
    judged = store.unjudged("v1")
    assert judged["raw_text"].tolist() == ["Yes.", "yes", "No", "Maybe"]
    assert judged["expected"].tolist() == [True, True, False, False]
    parsed = {"Yes.": "true", "yes": "true", "No": "false", "Maybe": "undefined"}
    store.save_verdicts([{"response_id": r, "parsed": parsed[t],
                          "correct": parsed[t] == str(e).lower()}
                         for r, t, e in judged.itertuples(index=False)], oracle_version="v1")
    store.finish_run(run, "completed")

    results = store.results(oracle_version="v1")
    assert list(results.columns) == list(RESULT_COLUMNS)
    expected = pd.DataFrame({
        "model_id": ["smollm2"] * 5, "model_key": [model] * 5,
        "question_id": ["q1", "q1", "q1", "q2", "q2"], "array_row": [0, 1, 2, 0, 1],
        "derived_text": ["is the sky blue", "is the heaven blue", "is the heaven blue",
                         "is ice hot", "is ice warm"],
        "expected": [True, True, True, False, False],
        "raw_text": ["Yes.", "yes", "yes", "No", "Maybe"], "error": [None] * 5,
        "parsed": ["true", "true", "true", "false", "undefined"],
        "correct": pd.array([True, True, True, True, False], dtype="boolean"),
        "row_values": [[0, 0], [1, 0], [1, 1], [0], [1]]})
    pd.testing.assert_frame_equal(results[expected.columns], expected)
    assert results["prompt"][3] == "Q: is ice hot? A:"
    # the two rows with one prompt share the query and its single response
    assert results["query_id"][1] == results["query_id"][2]
    assert results["response_id"][1] == results["response_id"][2]
    with store.engine.connect() as conn:
        status, finished = conn.execute(select(Run.status, Run.finished_at)).one()
    assert status == "completed" and finished is not None
    assert store.counts()["verdicts"] == 4


def test_upserts_are_idempotent(store: Store):
    filled(store)
    before = store.counts()
    store.upsert_questions(questions())
    store.add_queries(queries())
    store.add_queries(queries().iloc[[2, 1]])
    reordered = {"prompt": {"suffix": " A:", "prefix": "Q: "}, "max_new_tokens": 8.0,
                 "temperature": 0}
    assert store.upsert_model("smollm2", reordered) == store.upsert_model("smollm2", PARAMS)
    assert store.counts() == before


def test_resume_sends_only_what_is_left(store: Store, url: str):
    run, model, pending = filled(store)
    store.save_responses(run, model, answer(pending, {"is the sky blue": "Yes", "is ice hot": "No"}))
    failed = int(pending["query_id"][1])
    store.save_responses(run, model, [{"query_id": failed, "text": None, "error": "timeout",
                                       "latency_s": 30.0, "attempts": 3}])
    store.close()

    with open_store(url) as again:  # the interrupted run starts again
        assert again.upsert_model("smollm2", PARAMS) == model
        left = again.pending(model)
        assert left["derived_text"].tolist() == ["is the heaven blue", "is ice warm"]
        assert again.pending(model, question_ids=["q2"])["derived_text"].tolist() == ["is ice warm"]
        # only the failure so far: reported with its error
        row = again.results(question_ids=["q1"]).set_index("array_row").loc[1]
        assert pd.isna(row["raw_text"]) and row["error"] == "timeout"

        rerun = again.start_run({}, seed=1, git_commit="abc123")
        again.save_responses(rerun, model, answer(left, {"is the heaven blue": "Yes",
                                                         "is ice warm": "No"}))
        assert again.pending(model).empty
        # a late duplicate answer is ignored: the first answer stays
        again.save_responses(rerun, model, answer(pending, {"is the sky blue": "No!"}))
        assert again.counts()["responses"] == 5
        results = again.results()
        assert results["raw_text"].tolist() == ["Yes", "Yes", "Yes", "No", "No"]
        assert results["error"].isna().all()


def test_other_parameters_are_another_model(store: Store):
    run, model, pending = filled(store)
    store.save_responses(run, model, answer(pending, dict.fromkeys(pending["derived_text"], "Yes")))
    assert store.pending(model).empty
    hotter = store.upsert_model("smollm2", {**PARAMS, "temperature": 0.7})
    assert hotter != model
    assert store.pending(hotter)["query_id"].tolist() == pending["query_id"].tolist()
    assert store.results(model_keys=[hotter]).empty
    assert set(store.results(model_keys=[model])["model_key"]) == {model}
    with pytest.raises(ValueError, match="no model key"):
        store.pending(hotter + 100)


def test_new_oracle_version_judges_again(store: Store):
    run, model, pending = filled(store)
    store.save_responses(run, model, answer(pending, dict.fromkeys(pending["derived_text"], "Yes")))
    first = store.unjudged("v1")
    store.save_verdicts([{"response_id": r, "parsed": "undefined", "correct": False}
                         for r in first["response_id"]], oracle_version="v1")
    assert store.unjudged("v1").empty
    second = store.unjudged("v2")
    assert second["response_id"].tolist() == first["response_id"].tolist()
    store.save_verdicts([{"response_id": r, "parsed": "true", "correct": e}  # numpy bools
                         for r, e in zip(second["response_id"], second["expected"].to_numpy())],
                        "v2")
    # the same version again keeps the first verdicts
    store.save_verdicts([{"response_id": r, "parsed": "false", "correct": True}
                         for r in first["response_id"]], oracle_version="v1")

    assert set(store.results(oracle_version="v1")["parsed"]) == {"undefined"}
    v2 = store.results(oracle_version="v2")
    assert v2["correct"].tolist() == v2["expected"].tolist()
    unjudged = store.results()
    assert unjudged["parsed"].isna().all() and unjudged["correct"].isna().all()
    assert store.counts()["verdicts"] == 8


def test_malformed_rows_are_refused(store: Store):
    run, model, pending = filled(store)
    query = int(pending["query_id"][0])
    with pytest.raises(ValueError, match="exactly one of text and error"):
        store.save_responses(run, model, [{"query_id": query, "text": "Yes", "error": "boom"}])
    with pytest.raises(ValueError, match="parsed must be one of"):
        store.save_verdicts([{"response_id": 1, "parsed": "yes", "correct": True}], "v1")
    with pytest.raises(ValueError, match="unknown question ids"):
        store.add_queries(queries().assign(question_id="q9"))
    with pytest.raises(ValueError, match="no run 999"):
        store.finish_run(999, "failed")
    assert store.counts()["responses"] == 0


def test_sqlite_file_uses_wal_and_foreign_keys(tmp_path: Path):
    with open_store(f"sqlite:///{tmp_path}/results.sqlite") as store, store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar_one() == "wal"
        assert conn.execute(text("PRAGMA foreign_keys")).scalar_one() == 1


@pytest.mark.parametrize("url, shown", [
    ("not a url", "'not a url'"),
    ("mysql://root:s3cret@db/lingtest", "mysql://root:***@db/lingtest"),
    ("postgresql://lingtest:s3cret@127.0.0.1:1/lingtest",
     "postgresql://lingtest:***@127.0.0.1:1/lingtest"),
    ("postgresql+psycopg2://lingtest:s3cret@127.0.0.1:1/lingtest",
     "postgresql+psycopg2://lingtest:***@127.0.0.1:1/lingtest"),
])
def test_bad_urls_name_the_url_without_password(url: str, shown: str):
    with pytest.raises(LingtestError) as caught:
        open_store(url)
    message = str(caught.value)
    assert shown in message and "consistency.database_url" in message
    assert "s3cret" not in message


def test_unwritable_sqlite_folder_is_a_user_error(tmp_path: Path):
    (tmp_path / "file").write_text("")
    with pytest.raises(LingtestError, match="cannot create its folder"):
        open_store(f"sqlite:///{tmp_path}/file/results.sqlite")


def test_server_binaries_come_from_the_venv_wheel():
    """The bundled PostgreSQL (pgserver, in the test extra) wins over the system's: no apt, no root."""
    bundled = pg_server.bundled_bin_dir()
    if sys.version_info < (3, 13):  # pgserver 0.1.4 has wheels for CPython 3.9-3.12
        assert bundled is not None, "pgserver is not installed: pip install -e '.[test]'"
    if bundled is not None:
        assert pg_server.find_bin_dir() == bundled


def test_a_sqlite_url_in_the_home_folder_is_expanded(tmp_path: Path, monkeypatch):
    """`sqlite:///~/answers.db` is the file in the home folder (SQLite alone would create a
    folder named `~` in the working directory), like every path parameter's `~`."""
    from lingtest.tasks.consistency.run_settings import database_url
    from lingtest.flows.registry import Params
    from lingtest.tasks.core.paths import Workspace

    monkeypatch.setenv("HOME", str(tmp_path))
    params = Params.model_validate({"consistency": {"database_url": "sqlite:///~/answers.db"}})
    url = database_url(params.consistency, Workspace(tmp_path / "project"))
    assert url == f"sqlite:///{tmp_path}/answers.db"
    with open_store(url) as store:
        assert store is not None
    assert (tmp_path / "answers.db").is_file()


def test_tasks_opening_a_new_file_at_once_all_get_the_store(tmp_path) -> None:
    """Two tasks opening a new SQLite file at the same moment both create its tables; the
    one that loses the race ("table already exists") tries again and gets the store."""
    from concurrent.futures import ThreadPoolExecutor

    from lingtest.tasks.consistency.store import open_store

    for attempt in range(3):
        url = f"sqlite:///{tmp_path / f'new-{attempt}.sqlite'}"
        with ThreadPoolExecutor(4) as pool:
            stores = list(pool.map(lambda _: open_store(url), range(4)))
        assert all(s.counts()["runs"] == 0 for s in stores)
        for store in stores:
            store.close()
