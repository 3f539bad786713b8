"""Embedding a model's texts for the ``contrastive`` stage: the encoder a unit loads, the
dictionaries whose words θ needs, and the tasks that fill the embedding store (``embed``
for one model, ``embed-shards`` for a set of store shards, spread over worker processes).

Embeddings live in an on-disk store keyed by model revision, pooling and text hash
(``data/cache/embeddings``, ``embedding.EmbeddingStore``), so a rerun makes no model call."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from lingtest.tasks.contrastive import embedding, thresholds
from lingtest.tasks.core.caching import task
from lingtest.tasks.contrastive.params import ContrastiveParams
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.model_spec import ModelRef


class Embedded:
    """Rows of one model's embeddings by text: ``embedded(texts)`` gives their matrix."""

    def __init__(self, texts: list[str], matrix: np.ndarray):
        self.row = {text: i for i, text in enumerate(texts)}
        self.matrix = matrix

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.matrix[[self.row[t] for t in texts]]


def _encoder(model: ModelRef, offline: bool, device: str, params: ContrastiveParams,
             pass_tokens: int | None, precision: str | None = None, backend: str | None = None,
             root: str | None = None, http=None):
    """``model``'s encoder (``any_encoder.load_any_encoder``: lingtest's own, a
    sentence-transformers model's own encode, a python: object or an embedding service):
    the stage's pooling and max_length, ``runtime.encoder_*``'s path; python: files
    relative to ``root``; a service's HTTP settings ``http``."""
    from lingtest.tasks.models.any_encoder import load_any_encoder
    from lingtest.tasks.models.pooling import parse_pooling

    if params.pooling is not None:
        try:
            parse_pooling(params.pooling)
        except LingtestError as exc:
            raise LingtestError(f"contrastive.pooling: {exc}; or null for each model's "
                                "own pooling") from None
    return load_any_encoder(model, offline=offline, device=device, pooling=params.pooling,
                            max_length=params.max_length, pass_tokens=pass_tokens,
                            precision=precision, backend=backend,
                            root=Path(root) if root else None, http=http)


NO_VOCABULARY_NOTE = "contrastive.dictionary_file's words (the model has no vocabulary)"


def vocabulary_note(encoder, user_dictionary: bool = True) -> str:
    """Where the ``vocab`` dictionary of ``encoder`` came from, for provenance: its
    tokenizer or own vocabulary, else ``contrastive.dictionary_file``, else (an embedding
    service without one) the packaged English word list."""
    source = getattr(encoder, "vocabulary_source", "tokenizer")
    if source:
        return f"the model's {source}"
    return NO_VOCABULARY_NOTE if user_dictionary else getattr(encoder, "word_list_note",
                                                              NO_VOCABULARY_NOTE)


def _dictionaries(encoder, params: ContrastiveParams, seed: int,
                  dictionaries: dict[str, list[str]]) -> dict[str, list[str]]:
    """``vocab`` (the model's whole-word vocabulary) and ``dictionaries``. A model without a
    vocabulary (a python: encoder with neither ``vocabulary()`` nor a tokenizer, an embedding
    service) takes the user's dictionary (``contrastive.dictionary_file``) as its ``vocab``
    dictionary, which then is not repeated as ``user``; without one, a service takes the
    packaged English word list and a python: encoder gets the error that says so. None at
    all when no threshold kind asked for needs one (``thresholds.needs_dictionaries``)."""
    if not thresholds.needs_dictionaries(params.thresholds):
        return {}
    if getattr(encoder, "vocabulary_source", "tokenizer") is None:
        if "user" not in dictionaries:  # a service's word list; a python: model's error
            return {"vocab": thresholds.cap_words(encoder.vocabulary(),
                                                  params.dictionary_max_words, seed),
                    **dictionaries}
        rest = {name: ws for name, ws in dictionaries.items() if name != "user"}
        return {"vocab": thresholds.cap_words(dictionaries["user"], params.dictionary_max_words,
                                              seed), **rest}
    return {"vocab": thresholds.vocabulary_dictionary(encoder, params.dictionary_max_words,
                                                      seed), **dictionaries}


def _to_embed(encoder, texts: list[str], params: ContrastiveParams, seed: int,
              dictionaries: dict[str, list[str]]) -> tuple[dict[str, list[str]], list[str]]:
    """The dictionaries (the model's vocabulary plus ``dictionaries``, each deduplicated by
    the model's normal form) and every distinct text to embed, texts first."""
    words = _dictionaries(encoder, params, seed, dictionaries)
    words = {name: thresholds.distinct_forms(ws, encoder.normal_forms(ws))
             for name, ws in words.items()}
    return words, list(dict.fromkeys([*texts, *(w for ws in words.values() for w in ws)]))


@task(name="embed", task_run_name="embed-{model.name}", cache_policy=NO_CACHE)
def embed(model: ModelRef, texts: list[str], store_root: str, offline: bool, device: str,
          params: ContrastiveParams, seed: int,
          dictionaries: dict[str, list[str]], pass_tokens: int | None = None,
          precision: str | None = None, backend: str | None = None, root: str | None = None,
          http=None) -> tuple[dict, Embedded]:
    """Embed ``texts`` and the dictionaries (the model's vocabulary, plus ``dictionaries``:
    name → words), each distinct text once, each dictionary deduplicated by the model's
    normal form (``thresholds.distinct_forms``). ``pass_tokens``: ``runtime.pass_tokens``;
    ``precision`` / ``backend``: ``runtime.encoder_precision`` / ``encoder_backend``;
    ``root``: the project root (python: files); ``http``: an embedding service's
    ``LLMSettings`` (``embedding_endpoints.endpoint_settings``).

    An embedding service embeds here, never in shard tasks, ``http.concurrency`` requests
    at a time, each request's vectors stored as it returns; its facts add ``endpoint``:
    requests made, input tokens, vectors embedded now and served from the store.

    The on-disk store is the cache: a rerun embeds nothing (it is keyed by the model's
    display name, revision — a python: module's file hash — and ``cache_key``). Returns the
    model's facts (display name, spec, revision, pooling, each dictionary's words, what ran)
    and the embeddings.
    """
    from lingtest.tasks.core.secrets import redact_text
    from lingtest.tasks.models.any_encoder import describe_encoder

    encoder = _encoder(model, offline, device, params, pass_tokens, precision, backend, root,
                       http)
    words, everything = _to_embed(encoder, texts, params, seed, dictionaries)
    store = embedding.EmbeddingStore.for_encoder(Path(store_root), encoder)
    missing = len(store.missing(everything))
    matrix = embedding.embed_texts(encoder, everything, store, params.batch_size)
    logger = get_run_logger()
    logger.info("%s: %d distinct texts, %d embedded now, %d from the cache",
                encoder.model_id, len(everything), missing, len(everything) - missing)
    parameters = encoder.parameters()
    info = {"model_id": encoder.model_id, "spec": redact_text(model.bare), "form": model.form,
            "source": parameters.get("source"), "revision": encoder.revision,
            "pooling": encoder.pooling, "exact_length": bool(encoder.exact_length),
            "cls_for_pooler": bool(getattr(encoder, "cls_for_pooler", False)),
            "describe": describe_encoder(encoder),
            "vocabulary": vocabulary_note(encoder, "user" in dictionaries) if words
            else None,  # None: no θ search
            "dim": int(matrix.shape[1]), "dictionaries": words, "embedded_now": missing,
            "parameters": parameters}
    if hasattr(encoder, "usage"):  # an embedding service: what this run asked of it
        info["endpoint"] = {**encoder.usage(), "from_store": len(everything) - missing}
        logger.info("%s at %s: %d requests, %d input tokens (%s), %d vectors from the store",
                    encoder.model_id, info["endpoint"]["endpoint"],
                    info["endpoint"]["requests"], info["endpoint"]["input_tokens"],
                    info["endpoint"]["tokens"], info["endpoint"]["from_store"])
        encoder.close()
    return info, Embedded(everything, matrix)


def shard_calls(model: ModelRef, texts: list[str], store_root: str, offline: bool,
                device: str, params: ContrastiveParams, seed: int,
                dictionaries: dict[str, list[str]], pass_tokens: int | None = None,
                precision: str | None = None, backend: str | None = None, groups: int = 2,
                root: str | None = None) -> list[tuple]:
    """The arguments of ``embed_store_shards`` calls that embed what ``embed`` would for
    ``model``: the store's shards holding a missing text, dealt into ``groups`` sets
    (one per worker: every call pays its own fill-up copies and model load). None for an
    embedding service: it embeds in ``embed``, with its own concurrency."""
    from lingtest.tasks.models.embedding_endpoints import is_endpoint

    if is_endpoint(model):
        return []
    encoder = _encoder(model, offline, device, params, pass_tokens, precision, backend, root)
    _, everything = _to_embed(encoder, texts, params, seed, dictionaries)
    store = embedding.EmbeddingStore.for_encoder(Path(store_root), encoder)
    by_shard = embedding.split_by_shard(store.missing(everything), store.n_shards)
    shards = [shard for shard, part in sorted(by_shard.items()) if part]
    runs = [shards[i::max(1, groups)] for i in range(max(1, groups))]
    return [(model, [t for shard in run for t in by_shard[shard]], store_root, offline,
             device, params, run, pass_tokens, precision, backend, root) for run in runs if run]


_SHARD_ENCODERS: dict[tuple, object] = {}


def shard_encoder(model: ModelRef, offline: bool, device: str, params: ContrastiveParams,
                  pass_tokens: int | None, precision: str | None = None,
                  backend: str | None = None, root: str | None = None):
    """The process's encoder for shard tasks, loaded once. A plain function on purpose: a
    task's own function reaches a Dask worker pickled by value, with a private copy of the
    globals it names, so a cache it held would be empty in every call."""
    key = (model, offline, device, params.pooling, params.max_length, pass_tokens,
           precision, backend, root)
    if key not in _SHARD_ENCODERS:
        _SHARD_ENCODERS.clear()
        _SHARD_ENCODERS[key] = _encoder(model, offline, device, params, pass_tokens,
                                        precision, backend, root)
    return _SHARD_ENCODERS[key]


@task(name="embed-shards", task_run_name="embed-{model.name}-shards-{shards[0]}",
      cache_policy=NO_CACHE)
def embed_store_shards(model: ModelRef, texts: list[str], store_root: str, offline: bool,
                       device: str, params: ContrastiveParams, shards: list[int],
                       pass_tokens: int | None = None, precision: str | None = None,
                       backend: str | None = None, root: str | None = None) -> int:
    """Embed the missing ``texts`` of some store shards (no other call writes those shard
    files); the count embedded. The vectors are the bytes ``embed`` would store."""
    encoder = shard_encoder(model, offline, device, params, pass_tokens, precision, backend,
                            root)
    store = embedding.EmbeddingStore.for_encoder(Path(store_root), encoder)
    mine = {text for text in texts if embedding.shard_of(embedding.text_hash(text),
                                                          store.n_shards) in shards}
    if len(mine) != len(set(texts)):
        raise LingtestError(f"embed_store_shards: {len(set(texts)) - len(mine)} texts outside "
                            f"shards {shards}")
    return embedding.embed_missing(encoder, texts, store, params.batch_size)
