"""The ``consistency`` stage's tasks on the answer store: recording a run's queries, judging
the answers with the oracle, and collecting every model's results (the LLM calls:
``answering``)."""
from __future__ import annotations

import json

import pandas as pd
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from sqlalchemy import select

from lingtest.tasks.consistency import oracle
from lingtest.tasks.consistency.store import open_store, redact
from lingtest.tasks.consistency.store_schema import Model
from lingtest.tasks.core.caching import task


@task(name="record-queries", cache_policy=NO_CACHE)
def record_queries(url: str, questions_path: str, queries_path: str, run_params: dict,
                   seed: int, commit: str) -> int:
    """Upsert questions and queries; open a run record. Returns the run id."""
    questions = pd.read_parquet(questions_path)
    queries = pd.read_parquet(queries_path)
    with open_store(url) as store:
        store.upsert_questions(questions.assign(question_id=questions["store_id"]))
        store.add_queries(queries.assign(question_id=queries["store_id"]))
        run_id = store.start_run(run_params, seed, commit)
    get_run_logger().info("database %s: run %d, %d questions, %d array rows, %d distinct "
                          "prompts", redact(url), run_id, len(questions), len(queries),
                          queries[["store_id", "prompt"]].drop_duplicates().shape[0])
    return run_id


@task(name="finish-run", cache_policy=NO_CACHE)
def finish_run(url: str, run_id: int, status: str) -> None:
    with open_store(url) as store:
        store.finish_run(run_id, status)


@task(name="judge", cache_policy=NO_CACHE)
def judge(url: str, mode: str = "guide") -> int:
    """The oracle (``mode`` guide, lenient or strict) reads every response it has not read yet under
    its version; returns how many."""
    version = oracle.oracle_version(mode)
    with open_store(url) as store:
        todo = store.unjudged(version)
        rows = []
        for r in todo.itertuples(index=False):
            parsed = oracle.read_answer(r.raw_text, mode)
            rows.append({"response_id": r.response_id, "parsed": parsed,
                         "correct": parsed == ("true" if r.expected else "false")})
        store.save_verdicts(rows, version)
    get_run_logger().info("oracle %s: judged %d new responses", version, len(rows))
    return len(rows)


def model_record(url: str, model_key: int) -> dict:
    """The parameters stored for a model key."""
    with open_store(url) as store, store.engine.connect() as conn:
        row = conn.execute(select(Model.model_id, Model.params)
                           .where(Model.id == model_key)).one()
    return {"model_id": row[0], "model_key": model_key, **(row[1] or {})}


@task(name="collect-results", cache_policy=NO_CACHE)
def collect_results(url: str, model_keys: list[int], queries_path: str,
                    mode: str = "guide") -> pd.DataFrame:
    """One row per model × covering-array row of this run, with the oracle's reading."""
    queries = pd.read_parquet(queries_path)
    with open_store(url) as store:
        results = store.results(model_keys, queries["store_id"].unique().tolist(),
                                oracle.oracle_version(mode))
        counts = store.counts()
    wanted = queries[["question_id", "store_id", "array_row", "prompt"]]
    results = (results.rename(columns={"question_id": "store_id"})
               .merge(wanted, on=["store_id", "array_row", "prompt"])
               .drop_duplicates(["model_key", "store_id", "array_row"])
               .sort_values(["model_key", "question_id", "array_row"], ignore_index=True))
    results["row_values"] = [json.dumps([int(v) for v in values])
                             for values in results["row_values"]]
    get_run_logger().info("database rows: %s", counts)
    return results
