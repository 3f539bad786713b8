"""Answering (KomMKonLLM): each LLM's pending prompts, sent in batches, every answer saved
in its own committed transaction as it returns (a local model's batch when its forward
pass returns), so a run killed at any moment loses no answer that arrived and a rerun
sends only the prompts without one (a paid API is never paid twice for an answer; at most
the ``concurrency`` requests in flight at the kill are sent again).

A model is keyed by its spec (``store_key``: without ``?`` options, so a display name can
change without re-asking, and without URL credentials) plus an *identity* computed without
loading it (``identity``); when the database already holds that identity and nothing is
pending, the model is never loaded. Tasks take the parsed ``ModelRef`` and are named after
its display name (never a URL or path). Under a process runner the pending prompts are split into runs of whole batches
(``batch_runs``), one ``answer-pending`` task each, after one ``register-model`` task
recorded the model's key: every run's prompts share the batches one pass would give them.
"""
from __future__ import annotations

import hashlib
import json
import logging

import pandas as pd
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger
from sqlalchemy import select

from pathlib import Path

from lingtest.tasks.consistency.store import open_store
from lingtest.tasks.consistency.store_schema import Model
from lingtest.tasks.core import stopping
from lingtest.tasks.core.caching import task
from lingtest.tasks.core.secrets import redact_text
from lingtest.tasks.models.llm import HTTP_FORMS, LLMResponse, OnAnswer, answer_each
from lingtest.tasks.models.model_spec import ModelRef


# Settings that change a backend's answers; timeouts, retries and concurrency do not, so
# changing them must not re-send anything.
ANSWER_SETTINGS = {"hf": ("max_new_tokens", "system", "batch_size", "device"),
                   "seq2seq": ("max_new_tokens", "batch_size", "device"),
                   "http": ("max_new_tokens", "temperature", "seed", "system"),
                   "python": ("max_new_tokens", "temperature", "seed", "system", "batch_size")}


def store_key(ref: ModelRef) -> str:
    """The spec a result store keys the model's answers by: as written, without ``?``
    options (a display name is cosmetic) and without a URL password. A spec without options
    keys as it always did, so existing stores keep their answers."""
    return redact_text(ref.bare)


def model_ref(spec: str | ModelRef, root: Path | None = None) -> ModelRef:
    from lingtest.tasks.models.llm import parse_llm

    return parse_llm(spec, root=root)


def identity(spec: str | ModelRef, settings: dict, prompts: dict,
             root: Path | None = None) -> str:
    """What fixes a model's answers, known without loading it: spec, the settings that
    change answers, prompt settings and, for a local model, its stop rule and the resolved
    revision (package version / file hash); for an HTTP model, the server (base URL) and, where the API gives
    one, the model's digest, so answers from another server are never reused; for a
    ``python:`` model its revision (module file hash + ``revision`` attribute: importing the
    module is its loading), so an edited module is asked again and an unchanged one is not."""
    from lingtest.tasks.models.llm import STOP_RULE, LLMSettings, load_llm

    ref = model_ref(spec, root)
    kind = ("http" if ref.form in HTTP_FORMS else ref.form if ref.form in ("python", "seq2seq")
            else "hf")
    revision = endpoint = None
    if kind in ("hf", "seq2seq"):
        from lingtest.tasks.models.registry import resolve

        res = resolve(ref.target, "causal_lm" if kind == "hf" else "seq2seq",
                      offline=settings["offline"])
        revision = [res.source, res.revision, res.gguf_file]
    elif kind == "python":
        from lingtest.tasks.models.user_code import load_user_object

        revision = load_user_object(ref, root).revision
    else:
        backend = load_llm(ref, LLMSettings(**settings))  # HTTP: no connection until asked
        try:
            endpoint = backend.endpoint()
        finally:
            backend.close()
    extra = ({"stop": STOP_RULE}  # a changed rule: a new model key
             if kind in ("hf", "seq2seq") else {})
    if kind == "hf":  # another engine: other last bits, so a new key (transformers: none)
        from lingtest.tasks.models.lm_engines import planned_engine

        chosen = LLMSettings(**settings)  # its defaults for settings written before engines
        engine = planned_engine(chosen.lm_engine, chosen.lm_precision, chosen.device)
        extra.update({"engine": engine} if engine else {})
    text = json.dumps({"spec": store_key(ref), "prompt": prompts, "revision": revision,
                       "settings": {k: settings[k] for k in ANSWER_SETTINGS[kind]}, **extra,
                       **({"endpoint": endpoint} if endpoint is not None else {})},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def known_model_key(store, spec: str, ident: str) -> int | None:
    """The newest model key of ``spec`` recorded under ``ident``, else None."""
    with store.engine.connect() as conn:
        rows = conn.execute(select(Model.id, Model.params).where(Model.model_id == spec)).all()
    keys = [key for key, params in rows if (params or {}).get("identity") == ident]
    return max(keys) if keys else None


def _pending(store, model_key: int, queries: pd.DataFrame) -> pd.DataFrame:
    """The run's distinct prompts that ``model_key`` has not answered (older queries of the
    same questions, from other settings, are not this run's business)."""
    pending = store.pending(model_key, queries["store_id"].unique().tolist())
    wanted = queries[["store_id", "prompt"]].drop_duplicates()
    return pending.merge(wanted, left_on=["question_id", "prompt"],
                         right_on=["store_id", "prompt"]).drop(columns="store_id")


@task(name="check-model", cache_policy=NO_CACHE, task_run_name="check-{ref.name}")
def check_model(url: str, ref: ModelRef, ident: str, queries_path: str) -> dict:
    """Known key, pending count and (for a known key) pending query ids for ``ref``,
    without loading it."""
    queries = pd.read_parquet(queries_path)
    total = queries[["store_id", "prompt"]].drop_duplicates().shape[0]
    with open_store(url) as store:
        key = known_model_key(store, store_key(ref), ident)
        ids = None if key is None else _pending(store, key, queries)["query_id"].tolist()
    return {"model_key": key, "pending": total if ids is None else len(ids),
            "pending_ids": ids, "total": total}


def _load_and_register(store, ref: ModelRef, root: str, ident: str, settings: dict,
                       prompts: dict):
    """The backend (cached per process) and its model key (the same key from any process)."""
    from lingtest.tasks.models.llm import LLMSettings, load_llm

    backend = load_llm(ref, LLMSettings(**settings), root=Path(root))
    return backend, store.upsert_model(store_key(ref), {**backend.parameters(), **prompts,
                                                        "identity": ident})


@task(name="register-model", cache_policy=NO_CACHE, task_run_name="register-{ref.name}")
def register_model(url: str, ref: ModelRef, root: str, ident: str, settings: dict,
                   prompts: dict) -> int:
    """Load the backend once and record its parameters: the key the answer tasks share."""
    with open_store(url) as store:
        backend, key = _load_and_register(store, ref, root, ident, settings, prompts)
    _close(backend)
    return key


def run_logger() -> logging.Logger:
    """The Prefect run's logger inside a flow or task; a plain one outside (``retest``, or
    ``answer_pending.fn`` called directly)."""
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("lingtest.consistency")


def _close(backend) -> None:
    close = getattr(backend, "close", None)  # HTTP backends hold a connection pool
    if callable(close):
        close()


def pending_ids(url: str, model_key: int, queries_path: str) -> list[int]:
    """The query ids ``model_key`` has not answered, in query order."""
    with open_store(url) as store:
        return _pending(store, model_key, pd.read_parquet(queries_path))["query_id"].tolist()


def batch_runs(ids: list[int], chunk: int, parts: int) -> list[list[int]]:
    """``ids`` in up to ``parts`` runs of whole batches of ``chunk``, in order: each run's
    prompts share the batches one pass would give them, so a local model's greedy answers
    are the same however the runs are spread."""
    batches = [ids[i:i + chunk] for i in range(0, len(ids), chunk)]
    per_part = -(-len(batches) // max(1, parts)) if batches else 1
    return [[q for batch in batches[i:i + per_part] for q in batch]
            for i in range(0, len(batches), per_part)]


@task(name="answer-pending", cache_policy=NO_CACHE, task_run_name="answer-{ref.name}")
def answer_pending(url: str, ref: ModelRef, root: str, ident: str, settings: dict,
                   prompts: dict, queries_path: str, run_id: int,
                   query_ids: list[int] | None = None) -> dict:
    """Load the backend, register its parameters, send what is pending in batches of
    ``answer_chunk`` and save every answer as it returns (the module docstring says why).
    ``query_ids``: only these of the pending prompts (one run of ``batch_runs``). Under a
    process runner every worker process writes its answers to the store itself."""
    logger = run_logger()
    queries = pd.read_parquet(queries_path)
    sent = errors = 0
    name = ref.name  # what the logs call it (never a URL or path)
    with open_store(url) as store:
        backend, key = _load_and_register(store, ref, root, ident, settings, prompts)
        pending = _pending(store, key, queries)
        total = queries[["store_id", "prompt"]].drop_duplicates().shape[0]
        if query_ids is None:
            logger.info("%s (model key %d): %d of %d prompts pending, %d already answered",
                        name, key, len(pending), total, total - len(pending))
        else:
            part = pending[pending["query_id"].isin(query_ids)].reset_index(drop=True)
            logger.info("%s (model key %d): %d of the %d pending prompts (queries %d–%d)",
                        name, key, len(part), len(pending), min(query_ids, default=0),
                        max(query_ids, default=0))
            pending = part
        chunk = answer_chunk(settings, ref)
        for start in range(0, len(pending), chunk):
            stopping.check(f"{name}'s next {chunk} prompts")  # a SIGTERM: send no more
            batch = pending.iloc[start:start + chunk]
            answers = answer_each(backend, batch["prompt"].tolist(),
                                  _saver(store, run_id, key, batch["query_id"].tolist()))
            sent += len(batch)
            errors += sum(a.error is not None for a in answers)
            logger.info("%s: %d / %d sent (%d failed)", name, sent, len(pending), errors)
    _close(backend)
    fingerprints = sorted(getattr(backend, "fingerprints", ()))
    if fingerprints:
        logger.info("%s: system_fingerprint(s) %s", name, ", ".join(fingerprints))
    return {"model_key": key, "sent": sent, "errors": errors, "total": total,
            "system_fingerprints": fingerprints}


def _saver(store, run_id: int, model_key: int, query_ids: list[int]) -> OnAnswer:
    """Saves the answers a backend hands back (each HTTP answer, each local batch) in one
    committed transaction, before the next is awaited."""
    def save(done: list[tuple[int, LLMResponse]]) -> None:
        store.save_responses(run_id, model_key, [
            {"query_id": int(query_ids[i]), "text": a.text, "error": a.error,
             "latency_s": a.latency_s, "attempts": a.attempts} for i, a in done])
    return save


def answer_chunk(settings: dict, ref: ModelRef) -> int:
    """Prompts per ``answer`` call (and the unit ``batch_runs`` splits by): a local or
    ``python:`` model's ``batch_size`` (its batches, hence its greedy answers, do not depend
    on ``concurrency``, which is not part of its identity); for an HTTP model
    ``max(batch_size, concurrency)`` prompts, every one saved as it returns."""
    if ref.form in HTTP_FORMS:
        return max(settings["batch_size"], settings["concurrency"])
    return settings["batch_size"]
