"""The ``consistency`` stage's suite tasks (KomMKonLLM): the questions of a run, their IPMs,
covering arrays and derived prompts, or a guide folder's imported artefacts.

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

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from lingtest.tasks.consistency import covering
from lingtest.tasks.consistency.ipm import IPM, build_guide_ipms, build_ipms, derive_prompt
from lingtest.tasks.core import io
from lingtest.tasks.core.caching import model_id, task
from lingtest.tasks.consistency.params import ConsistencyParams
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.models.registry import resolve


SpacyModel = model_id("spacy", resolve=resolve)  # keyed on its resolved revision


QUERY_COLUMNS = ["question_id", "store_id", "array_row", "row_values", "derived_text", "prompt"]


def store_id(question_id: str, question: str, answer: bool) -> str:
    digest = hashlib.sha256(f"{question}\x1f{bool(answer)}".encode()).hexdigest()[:10]
    return f"{question_id}:{digest}"


@task(name="select-questions", cache_policy=NO_CACHE)
def select_questions(path: str, user_file: bool, n_questions: int, seed: int) -> pd.DataFrame:
    """The user's questions, or KomMKonLLM's 27 plus a seeded sample of BoolQ validation."""
    from lingtest.tasks.data.questions import read_questions_jsonl

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
    from lingtest.tasks.models.nlp import load_spacy
    from lingtest.tasks.text.wordnet import wordnet

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
    from lingtest.tasks.consistency import guide_import

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
