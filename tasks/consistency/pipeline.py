"""Prefect tasks of the ``consistency`` stage (KomMKonLLM): questions, IPMs, covering arrays,
derived prompts, the result store and the oracle (the LLM calls: ``answering``). The plain
functions live beside this module (``ipm``, ``covering``, ``store``, ``oracle``, ``metrics``);
these tasks wrap them with caching, logging and file outputs.

Files (``data/interim/consistency``):

- ``questions.parquet``: the questions of the run (``questions`` table columns, plus
  ``store_id`` = ``<question_id>:<sha256(question, answer)[:10]>``, the id in the database:
  two user files that both number their questions ``user-00`` must not share answers);
- ``ipm/<question_id>.json``: each question's IPM (``IPM.to_json``);
- ``ca/ca-<question_id>.csv``: each covering array in KomMKonLLM's format (row 0 = original);
- ``queries.parquet``: the suite, one case per covering-array row: question_id, store_id,
  array_row, row_values, derived_text, prompt, then the contract's expectation, case_id,
  method, provenance (``contract.suite_cases``);
- ``results.parquet``: one row per model × covering-array row: ``collect_results``'s
  columns with the contract's case_id, method, revision, output, verdict, score
  (``contract.contract_results``); ``reports/consistency/results.csv`` is its
  ``report.RESULT_EXPORT`` columns.

Resume: queries, responses and verdicts live in the database (``store.py``); which prompts
a model still owes, and when it need not be loaded at all: ``answering.py``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from sqlalchemy import select

from tasks.consistency import covering, oracle
from tasks.consistency.ipm import IPM, build_guide_ipms, build_ipms, derive_prompt
from tasks.consistency.store import open_store, redact
from tasks.consistency.store_schema import Model
from tasks.core import io
from tasks.core.caching import model_id, task
from tasks.consistency.params import ConsistencyParams
from tasks.core.config import Params
from tasks.core.errors import LingtestError
from tasks.core.paths import Workspace
from tasks.models.registry import resolve

SpacyModel = model_id("spacy", resolve=resolve)  # keyed on its resolved revision
DEFAULT_DATABASE = "data/consistency/results.sqlite"
QUERY_COLUMNS = ["question_id", "store_id", "array_row", "row_values", "derived_text", "prompt"]


# ------------------------------------------------------------------ inputs and settings

def database_url(c: ConsistencyParams, workspace: Workspace) -> str:
    """``consistency.database_url``, else the SQLite file under ``data/consistency``."""
    if c.database_url:
        return _home_expanded(c.database_url)
    return f"sqlite:///{(workspace.root / DEFAULT_DATABASE).resolve()}"


def _home_expanded(url: str) -> str:
    """``sqlite:///~/answers.db``: the file in the home folder, as every path parameter's
    ``~`` is (SQLite itself would make a folder named ``~``)."""
    if not url.startswith("sqlite:///~"):
        return url
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return parsed.set(database=str(Path(parsed.database).expanduser())).render_as_string(
        hide_password=False)


def questions_input(c: ConsistencyParams, workspace: Workspace) -> str:
    """The file the questions come from: the user's JSONL, or the processed table."""
    if c.questions:
        path = Path(c.questions).expanduser()
        path = path if path.is_absolute() else workspace.root / path
        if not path.is_file():
            raise LingtestError(f"consistency.questions: {path} does not exist; give a JSONL "
                                "file of {\"question\", \"answer\", \"passage\"} records, or "
                                "null for the default set")
        return str(path)
    path = workspace.processed / "questions.parquet"
    if not path.is_file():
        raise LingtestError(f"{path} is missing: run `lingtest run data` (or `dvc repro data`)")
    return str(path)


def llm_settings(params: Params) -> dict:
    """The ``LLMSettings`` fields of the run (the LLM seed is the run's seed)."""
    c = params.consistency
    return {"max_new_tokens": c.max_new_tokens, "temperature": c.temperature,
            "seed": params.seed, "system": None, "timeout_s": c.timeout_s,
            "retries": c.retries, "backoff_s": c.backoff_s, "concurrency": c.concurrency,
            "offline": params.models.offline, "device": params.runtime.device,
            "batch_size": c.batch_size}


def prompt_settings(c: ConsistencyParams) -> dict:
    settings = {"prompt_prefix": c.prompt_prefix, "prompt_suffix": c.prompt_suffix}
    if c.prompt_join != "space":  # the default stays out, so existing identities still hold
        settings["prompt_join"] = c.prompt_join
    return settings


def store_id(question_id: str, question: str, answer: bool) -> str:
    digest = hashlib.sha256(f"{question}\x1f{bool(answer)}".encode()).hexdigest()[:10]
    return f"{question_id}:{digest}"


# ------------------------------------------------------------------ questions → queries

@task(name="select-questions", cache_policy=NO_CACHE)
def select_questions(path: str, user_file: bool, n_questions: int, seed: int) -> pd.DataFrame:
    """The user's questions, or KomMKonLLM's 27 plus a seeded sample of BoolQ validation."""
    from tasks.data.questions import read_questions_jsonl

    if user_file:
        frame = read_questions_jsonl(path, source="user")
    else:
        table = pd.read_parquet(path)
        komm = table[table["source"] == "kommkonllm"]
        boolq = table[table["source"] == "boolq"]
        sample = boolq.sample(min(n_questions, len(boolq)), random_state=seed)
        frame = pd.concat([komm, sample.sort_values("question_id")], ignore_index=True)
    frame = frame.reset_index(drop=True)
    frame["store_id"] = [store_id(q, t, a) for q, t, a in
                         zip(frame["question_id"], frame["question"], frame["answer"])]
    get_run_logger().info("questions: %s", frame.groupby("source").size().to_dict())
    return frame


@task(name="build-ipms")
def ipms_task(questions: list[tuple[str, str]], max_values: int, spacy_model: SpacyModel,
              offline: bool, nltk_data: Path, kind: str = "guide") -> list[dict]:
    """IPMs (as ``IPM.to_json`` dicts) of (question_id, question) pairs: spaCy + WordNet,
    the guide's (``kind`` guide) or lingtest's narrower model (``kind`` lingtest)."""
    from tasks.models.nlp import load_spacy
    from tasks.text.wordnet import wordnet

    frame = pd.DataFrame(questions, columns=["question_id", "question"])
    build = build_guide_ipms if kind == "guide" else build_ipms
    ipms = build(frame, load_spacy(spacy_model, offline=offline), wordnet(nltk_data),
                 max_values)
    return [ipm.to_json() for ipm in ipms]


@task(name="covering-array", task_run_name="covering-array-{question_id}",
      exclude=("question_id",))
def covering_task(question_id: str, levels: list[int], strength: int, seed: int,
                  generator: str, binary: str | None) -> np.ndarray:
    """A checked covering array over the IPM's levels (row 0: the original question)."""
    return covering.covering_array(levels, strength, seed, generator, binary)


def write_models(ipms: list[IPM], arrays: list[np.ndarray], out: Path) -> None:
    """``ipm/<id>.json`` and ``ca/ca-<id>.csv`` per question; stale files of earlier runs go."""
    keep = {ipm.question_id for ipm in ipms}
    for folder, pattern, stem in ((out / "ipm", "*.json", lambda p: p.stem),
                                  (out / "ca", "ca-*.csv", lambda p: p.stem[3:])):
        if folder.is_dir():
            for path in folder.glob(pattern):
                if stem(path) not in keep:
                    path.unlink()
    for ipm, array in zip(ipms, arrays):
        io.write_json(out / "ipm" / f"{ipm.question_id}.json", ipm.to_json())
        io.write_text(out / "ca" / f"ca-{ipm.question_id}.csv", covering.ca_csv_text(array))


def derive_queries(questions: pd.DataFrame, ipms: list[IPM], arrays: list[np.ndarray],
                   prefix: str, suffix: str, join: str = "space") -> pd.DataFrame:
    """One row per covering-array row: the derived question and the prompt sent for it."""
    ids = dict(zip(questions["question_id"], questions["store_id"]))
    rows = []
    for ipm, array in zip(ipms, arrays):
        for index, values in enumerate(np.asarray(array).tolist()):
            text = ipm.derive(values)
            rows.append((ipm.question_id, ids[ipm.question_id], index, values, text,
                         derive_prompt(text, prefix, suffix, join)))
    return pd.DataFrame(rows, columns=QUERY_COLUMNS)


@task(name="import-guide-artefacts", cache_policy=NO_CACHE)
def import_guide(c: ConsistencyParams, workspace: Workspace, out: Path
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Questions and queries from a folder of the guide's ca-N.csv + synonyms-N.txt
    (``consistency.import_dir``; ``guide_import.labels_file`` names where the labels came
    from, for the provenance)."""
    from tasks.consistency import guide_import

    folder = guide_import.guide_folder(c.import_dir, workspace.root)
    questions, synonyms, arrays = guide_import.read_guide_folder(folder)
    questions["store_id"] = [store_id(q, t, a) for q, t, a in
                             zip(questions["question_id"], questions["question"],
                                 questions["answer"])]
    logger = get_run_logger()
    for question_id, gaps in guide_import.coverage_gaps(arrays, synonyms, c.strength).items():
        if gaps:
            logger.warning("%s: the imported array misses %d %d-tuples (used as it is)",
                           question_id, gaps, c.strength)
    folder_out = out / "ca"
    for stale in [*folder_out.glob("ca-*.csv"), *(out / "ipm").glob("*.json")]:
        stale.unlink()  # no IPMs here: the synonym lists are the guide's
    for question_id, array in arrays.items():
        io.write_text(folder_out / f"ca-{question_id}.csv", covering.ca_csv_text(array))
    queries = guide_import.guide_queries(questions, synonyms, arrays, c.prompt_prefix,
                                         c.prompt_suffix, c.prompt_join)
    logger.info("imported %d questions, %d derived questions from %s", len(questions),
                len(queries), folder)
    return questions, queries


# ------------------------------------------------------------------ store

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


def settings_record(settings: dict) -> dict:
    """The settings as the store would see them (for reports)."""
    from tasks.models.llm import LLMSettings

    return dataclasses.asdict(LLMSettings(**settings))
