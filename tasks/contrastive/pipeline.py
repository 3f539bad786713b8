"""Prefect tasks of the ``contrastive`` stage (COSTELLO): suite, embeddings, thresholds,
downstream classifiers, validation. The plain functions live beside this module; their
composition per model is ``method.ContrastiveMethod.run_unit``.

Caches: embeddings live in an on-disk store keyed by model revision, pooling and text hash
(``data/cache/embeddings``), so a rerun makes no model call; the other heavy tasks are
Prefect-cached on their arguments' content (arrays by their bytes) and the code they reach
(``tasks.core.caching``).

Table ``results`` (``data/interim/contrastive/results.parquet``; one row per case × model ×
distance × dictionary × rule × threshold; ``validate`` gives every column but ``method``,
``output`` and ``score``, the case/result contract's, which ``method.contract_rows`` adds):

==============  =====  ====================================================================
column          dtype  meaning
==============  =====  ====================================================================
case_id         str    the triple's id (suite table)
method          str    ``contrastive``
relation        str    CR1..CR4 or an imported relation name
model_id        str    model under test: its display name (``ModelRef.name``), never a path
revision        str    the model's resolved revision (package version + weights hash; a
                       python: model's module file hash)
pooling         str    the pooling used (e.g. ``mean+norm``, ``pooler``, ``cls``), or ``own
                       encode`` (a python: encoder, a sentence-transformers model with other
                       modules: no exact-length passes)
distance        str    l1 / l2 / cos (cos = 1 − cosine similarity; with ``cosine: similarity``
                       the similarity itself, as the paper's code)
dictionary      str    vocab (the model's whole-word vocabulary), dataset (seed words) or user
                       (``dictionary_file``); each deduplicated by the model's normal form
rule            str    ``paper`` when θ and the distance follow the paper's code
                       (``threshold_rule: paper``; for cos also ``cosine: similarity``), else
                       ``corrected``
threshold_kind  str    zero / min / mu-2sigma / mu-sigma
threshold       float  θ
d_pos, d_neg    float  SemD(e, e⁺), SemD(e, e⁻)
output          str    the raw output: JSON ``{"d_pos": …, "d_neg": …}`` (floats exactly)
margin          float  d_pos − d_neg
score           float  the margin: the contract's continuous score
verdict         str    ``fail`` when margin > θ (a reported violation), else ``pass``
p_greater       float  one-sided Wilcoxon p of F > G over the downstream classifiers
p_less          float  one-sided Wilcoxon p of F < G
gt_a, gt_b      bool   ground truth: clearly buggy (GT_A) / potentially buggy (GT_B)
==============  =====  ====================================================================
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from tasks.contrastive import (classifiers, costello_json, distances, embedding, ground_truth,
                                suite, thresholds)
from tasks.core.caching import model_id, task
from tasks.contrastive.params import ContrastiveParams
from tasks.core.config import Params
from tasks.core.errors import LingtestError
from tasks.core.paths import Workspace
from tasks.models.model_spec import ModelRef
from tasks.models.registry import resolve

SpacyModel = model_id("spacy", resolve=resolve)  # keyed on its resolved revision
SUITE_TABLES = ("sst", "word_polarity", "names", "gender_pairs", "contrast_pairs", "mrpc")
SUITE_SETTINGS = ("suite", "relations", "sst_split", "mrpc_split", "contrast_split", "max_seeds",
                  "cr1_triples", "synonym_scope", "synonym_probability")


def resolve_path(path: str, workspace: Workspace) -> Path:
    """A parameter's path: as given when absolute, else under the project root."""
    given = Path(path)
    return given if given.is_absolute() else workspace.root / given


def suite_inputs(params: ContrastiveParams, workspace: Workspace) -> list[str]:
    """The files a suite is made from: the processed tables, or the imported suite file."""
    if params.suite:
        path = Path(params.suite)
        path = path if path.is_absolute() else workspace.root / path
        if not path.is_file():
            raise LingtestError(f"contrastive.suite: {path} does not exist; give the path of "
                                "a COSTELLO JSON suite, or null to generate one")
        return [str(path)]
    files = [workspace.processed / f"{name}.parquet" for name in SUITE_TABLES]
    absent = [str(f) for f in files if not f.is_file()]
    if absent:
        raise LingtestError(f"missing processed tables {', '.join(absent)}: run "
                            "`lingtest run data` (or `dvc repro data`) first")
    return [str(f) for f in files]


@task(name="build-suite")
def build_suite(inputs: list[Path], settings: dict, seed: int, nltk_data: Path,
                spacy_model: SpacyModel, offline: bool) -> pd.DataFrame:
    """Generate the triples (or import a COSTELLO JSON suite)."""
    params = ContrastiveParams(**settings)
    if params.suite:
        imported = costello_json.select_imported(
            costello_json.read_costello_suite(inputs[0]), params.relations, params.max_seeds,
            seed, inputs[0])
        get_run_logger().info("suite %s: %s", Path(inputs[0]).name,
                              imported.groupby("relation", sort=False).size().to_dict())
        return imported
    from tasks.models.nlp import load_spacy
    from tasks.text.wordnet import wordnet

    tables = {Path(f).stem: pd.read_parquet(f) for f in inputs}
    generated = suite.generate_suite(tables, load_spacy(spacy_model, offline=offline),
                                     wordnet(nltk_data), params, seed)
    get_run_logger().info("suite: %s", generated.groupby("relation").size().to_dict())
    return generated


def relation_kind(texts: pd.Series) -> str:
    """``paraphrase`` when every text is a ``s1 [SEP] s2`` pair (CR4), else ``sentiment``."""
    return "paraphrase" if texts.str.count(r" \[SEP\] ").eq(1).all() else "sentiment"


class Embedded:
    """Rows of one model's embeddings by text: ``embedded(texts)`` gives their matrix."""

    def __init__(self, texts: list[str], matrix: np.ndarray):
        self.row = {text: i for i, text in enumerate(texts)}
        self.matrix = matrix

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.matrix[[self.row[t] for t in texts]]


def _encoder(model: ModelRef, offline: bool, device: str, params: ContrastiveParams,
             pass_tokens: int | None, precision: str | None = None, backend: str | None = None,
             root: str | None = None):
    """``model``'s encoder (``any_encoder.load_any_encoder``: lingtest's own, a
    sentence-transformers model's own encode, or a python: object): the stage's pooling and
    max_length, ``runtime.encoder_*``'s path; python: files relative to ``root``."""
    from tasks.models.any_encoder import load_any_encoder
    from tasks.models.encoders import parse_pooling

    if params.pooling is not None:
        try:
            parse_pooling(params.pooling)
        except LingtestError as exc:
            raise LingtestError(f"contrastive.pooling: {exc}; or null for each model's "
                                "own pooling") from None
    return load_any_encoder(model, offline=offline, device=device, pooling=params.pooling,
                            max_length=params.max_length, pass_tokens=pass_tokens,
                            precision=precision, backend=backend,
                            root=Path(root) if root else None)


NO_VOCABULARY_NOTE = "contrastive.dictionary_file's words (the model has no vocabulary)"


def vocabulary_note(encoder) -> str:
    """Where the ``vocab`` dictionary of ``encoder`` came from, for provenance."""
    source = getattr(encoder, "vocabulary_source", "tokenizer")
    return f"the model's {source}" if source else NO_VOCABULARY_NOTE


def _dictionaries(encoder, params: ContrastiveParams, seed: int,
                  dictionaries: dict[str, list[str]]) -> dict[str, list[str]]:
    """``vocab`` (the model's whole-word vocabulary) and ``dictionaries``. A model without a
    vocabulary (a python: encoder with neither ``vocabulary()`` nor a tokenizer) takes the
    user's dictionary (``contrastive.dictionary_file``) as its ``vocab`` dictionary, which
    then is not repeated as ``user``; without one it is the error that says so. None at
    all when no threshold kind asked for needs one (``thresholds.needs_dictionaries``)."""
    if not thresholds.needs_dictionaries(params.thresholds):
        return {}
    if getattr(encoder, "vocabulary_source", "tokenizer") is None:
        if "user" not in dictionaries:
            encoder.vocabulary()  # raises the error naming the model and the fix
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
          precision: str | None = None, backend: str | None = None, root: str | None = None
          ) -> tuple[dict, Embedded]:
    """Embed ``texts`` and the dictionaries (the model's vocabulary, plus ``dictionaries``:
    name → words), each distinct text once, each dictionary deduplicated by the model's
    normal form (``thresholds.distinct_forms``). ``pass_tokens``: ``runtime.pass_tokens``;
    ``precision`` / ``backend``: ``runtime.encoder_precision`` / ``encoder_backend``;
    ``root``: the project root (python: files).

    The on-disk store is the cache: a rerun embeds nothing (it is keyed by the model's
    display name, revision — a python: module's file hash — and ``cache_key``). Returns the
    model's facts (display name, spec, revision, pooling, each dictionary's words, what ran)
    and the embeddings.
    """
    from tasks.models.any_encoder import describe_encoder

    encoder = _encoder(model, offline, device, params, pass_tokens, precision, backend, root)
    words, everything = _to_embed(encoder, texts, params, seed, dictionaries)
    store = embedding.EmbeddingStore.for_encoder(Path(store_root), encoder)
    missing = len(store.missing(everything))
    matrix = embedding.embed_texts(encoder, everything, store, params.batch_size)
    get_run_logger().info("%s: %d distinct texts, %d embedded now, %d from the cache",
                          encoder.model_id, len(everything), missing, len(everything) - missing)
    parameters = encoder.parameters()
    info = {"model_id": encoder.model_id, "spec": model.bare, "form": model.form,
            "source": parameters.get("source"), "revision": encoder.revision,
            "pooling": encoder.pooling, "exact_length": bool(encoder.exact_length),
            "describe": describe_encoder(encoder),
            "vocabulary": vocabulary_note(encoder) if words else None,  # None: no θ search
            "dim": int(matrix.shape[1]), "dictionaries": words, "embedded_now": missing,
            "parameters": parameters}
    return info, Embedded(everything, matrix)


def shard_calls(model: ModelRef, texts: list[str], store_root: str, offline: bool,
                device: str, params: ContrastiveParams, seed: int,
                dictionaries: dict[str, list[str]], pass_tokens: int | None = None,
                precision: str | None = None, backend: str | None = None, groups: int = 2,
                root: str | None = None) -> list[tuple]:
    """The arguments of ``embed_store_shards`` calls that embed what ``embed`` would for
    ``model``: the store's shards holding a missing text, dealt into ``groups`` sets
    (one per worker: every call pays its own fill-up copies and model load)."""
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


@task(name="nearest-neighbours", task_run_name="nn-{metric}-{label}", exclude=("label",))
def nearest_neighbour_distances(vectors: np.ndarray, metric: str, label: str,
                                block_size: int) -> np.ndarray:
    """Each dictionary word's distance to its nearest other word (blocked)."""
    return thresholds.nearest_neighbour_distances(vectors, metric, block_size)


@task(name="train-classifiers", task_run_name="classifiers-{kind}")
def train_classifiers(kind: str, X_train: np.ndarray, y_train: np.ndarray,
                      X_test: np.ndarray, y_test: np.ndarray, n: int, epochs: int,
                      seed: int) -> classifiers.ClassifierBank:
    """The downstream classifiers of one task (sentiment on SST-2, paraphrase on MRPC)."""
    bank = classifiers.train_classifiers(X_train, y_train, X_test, y_test, n=n, epochs=epochs,
                                         seed=seed)
    get_run_logger().info("%s classifiers: mean test accuracy %.4f", kind,
                          float(np.mean(bank.accuracies)))
    return bank


def _sample(n: int, cap: int | None, seed: int) -> np.ndarray:
    """Row indices: all ``n`` rows, or ``cap`` of them sampled with ``seed`` (kept in order)."""
    if cap is None or cap >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, cap, replace=False))


def needed_kinds(suite_frame: pd.DataFrame) -> list[str]:
    """The downstream tasks the suite's relations need (``sentiment``, ``paraphrase``): only
    their classifier banks are trained."""
    kinds = {relation_kind(pd.concat([g["seed"], g["positive"], g["negative"]]))
             for _, g in suite_frame.groupby("relation", sort=False)}
    return [k for k in ("sentiment", "paraphrase") if k in kinds]


def classifier_data(tables: dict[str, pd.DataFrame], params: ContrastiveParams, seed: int,
                    kinds: tuple[str, ...] = ("sentiment", "paraphrase")) -> dict[str, dict]:
    """Training/test texts and labels of the downstream tasks in ``kinds`` (optionally capped).

    Paraphrase texts are (sentence1s, sentence2s); ``features`` makes them classifier input.
    """
    data: dict[str, dict] = {kind: {} for kind in kinds}
    for split, cap in (("train", params.classifier_max_train), ("test", params.classifier_max_test)):
        if "sentiment" in data:
            texts, labels = classifiers.sst2_rows(tables["sst"], split)
            keep = _sample(len(labels), cap, seed)
            data["sentiment"][split] = [texts[i] for i in keep]
            data["sentiment"][f"{split}_y"] = labels[keep]
        if "paraphrase" in data:
            first, second, labels = classifiers.mrpc_rows(tables["mrpc"], split)
            keep = _sample(len(labels), cap, seed)
            data["paraphrase"][split] = ([first[i] for i in keep], [second[i] for i in keep])
            data["paraphrase"][f"{split}_y"] = labels[keep]
    return data


def _halves(texts) -> tuple[list[str], list[str]]:
    return (list(texts[0]), list(texts[1])) if isinstance(texts, tuple) \
        else classifiers.split_pairs(list(texts))


def features(kind: str, texts, lookup, paraphrase: str = "joint") -> np.ndarray:
    """Classifier (and, per triple, distance) input of ``texts``: their embeddings; for
    paraphrase pairs the embedding of the joint text "s1 [SEP] s2" (``joint``, COSTELLO's
    setting, the same vector the distances use) or the pair features [u, v, |u−v|, u⊙v]
    of the halves (``pair``)."""
    if kind == "sentiment":
        return lookup(list(texts))
    first, second = _halves(texts)
    if paraphrase == "joint":
        return lookup([a + classifiers.SEP + b for a, b in zip(first, second)])
    return classifiers.pair_features(lookup(first), lookup(second))


def _triple_features(group: pd.DataFrame, lookup, paraphrase: str) -> list[np.ndarray]:
    kind = relation_kind(pd.concat([group["seed"], group["positive"], group["negative"]]))
    return [features(kind, group[c], lookup, paraphrase) for c in ("seed", "positive", "negative")]


def validate(suite_frame: pd.DataFrame, lookup, model: dict, params: ContrastiveParams,
             thetas: dict[tuple[str, str], dict[str, float]],
             truth: pd.DataFrame) -> pd.DataFrame:
    """Every (distance, dictionary, threshold) verdict of every triple, with its ground truth.

    Distances are taken between the vectors the ground truth classifies (``features``)."""
    frames = []
    for metric in params.distances:
        d_pos = np.empty(len(suite_frame))
        d_neg = np.empty(len(suite_frame))
        for _, group in suite_frame.groupby("relation", sort=False):
            rows = suite_frame.index.get_indexer(group.index)
            seed, pos, neg = _triple_features(group, lookup, params.paraphrase_features)
            d_pos[rows] = distances.pair_distances(seed, pos, metric)
            d_neg[rows] = distances.pair_distances(seed, neg, metric)
        if metric == "cos" and params.cosine == "similarity":  # Testing.py's "cos"
            d_pos, d_neg = 1.0 - d_pos, 1.0 - d_neg
        paper_rule = params.threshold_rule == "paper" and (
            metric != "cos" or params.cosine == "similarity")
        for (dist, dictionary), by_kind in thetas.items():
            if dist != metric:
                continue
            for kind, theta in by_kind.items():
                margin = d_pos - d_neg
                frames.append(pd.DataFrame({
                    "case_id": suite_frame["case_id"].to_numpy(),
                    "relation": suite_frame["relation"].to_numpy(),
                    "model_id": model["model_id"], "revision": model["revision"],
                    "pooling": model["pooling"], "distance": metric, "dictionary": dictionary,
                    "rule": "paper" if paper_rule else "corrected",
                    "threshold_kind": kind, "threshold": theta, "d_pos": d_pos, "d_neg": d_neg,
                    "margin": margin, "verdict": np.where(margin > theta, "fail", "pass"),
                    "p_greater": truth["p_greater"].to_numpy(),
                    "p_less": truth["p_less"].to_numpy(),
                    "gt_a": truth["gt_a"].to_numpy(), "gt_b": truth["gt_b"].to_numpy()}))
    return pd.concat(frames, ignore_index=True)


def triple_truth(suite_frame: pd.DataFrame, lookup, banks: dict, alpha: float,
                 paraphrase: str = "joint") -> pd.DataFrame:
    """GT_A / GT_B of every triple, with the bank of its relation's downstream task, on the
    same vectors ``validate`` measures distances between."""
    parts = []
    for _, group in suite_frame.groupby("relation", sort=False):
        kind = relation_kind(pd.concat([group["seed"], group["positive"], group["negative"]]))
        truth = ground_truth.bank_ground_truth(banks[kind],
                                               *_triple_features(group, lookup, paraphrase),
                                               alpha=alpha)
        truth.index = group.index
        parts.append(truth)
    return pd.concat(parts).loc[suite_frame.index]


def needed_texts(suite_frame: pd.DataFrame, data: dict, dataset_words: list[str],
                 paraphrase: str = "joint") -> list[str]:
    """Every distinct text to embed: triples (and their pair halves for ``pair`` features),
    classifier data (paraphrase pairs joined or as halves), dataset words."""
    texts: list[str] = []
    for column in ("seed", "positive", "negative"):
        values = suite_frame[column].tolist()
        texts += values
        if paraphrase == "pair":
            pairs = [v for v in values if v.count(classifiers.SEP) == 1]
            for first, second in (v.split(classifiers.SEP) for v in pairs):
                texts += [first, second]
    if "sentiment" in data:
        texts += list(data["sentiment"]["train"]) + list(data["sentiment"]["test"])
    for split in ("train", "test") if "paraphrase" in data else ():
        first, second = data["paraphrase"][split]
        if paraphrase == "pair":
            texts += list(first) + list(second)
        else:
            texts += [a + classifiers.SEP + b for a, b in zip(first, second)]
    texts += dataset_words
    return list(dict.fromkeys(texts))


def training_overlap(suite_frame: pd.DataFrame, data: dict) -> dict[str, int]:
    """Per relation: triples whose seed (or a seed half) is a training sentence of the
    downstream classifiers; such triples' ground truth is judged on seen data."""
    seen = set(data.get("sentiment", {}).get("train", []))
    if "paraphrase" in data:
        first, second = data["paraphrase"]["train"]
        seen |= set(first) | set(second) | {a + classifiers.SEP + b for a, b in zip(first, second)}
    overlap = {}
    for relation, group in suite_frame.groupby("relation", sort=False):
        hits = group["seed"].map(lambda t: t in seen or any(h in seen for h in
                                                             t.split(classifiers.SEP)))
        if hits.any():
            overlap[str(relation)] = int(hits.sum())
    return overlap


def settings_of(params: Params) -> dict:
    return params.contrastive.model_dump(mode="json", include=set(SUITE_SETTINGS))
