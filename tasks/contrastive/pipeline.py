"""Prefect tasks of the ``contrastive`` stage (COSTELLO): suite, embeddings, thresholds,
downstream classifiers, validation. The plain functions live beside this module.

Caches: embeddings live in an on-disk store keyed by model revision, pooling and text hash
(``data/cache/embeddings``), so a rerun makes no model call; the other heavy tasks are
Prefect-cached on a ``token`` argument that hashes what determines their result (model
revision, input texts, parameters) and on the source of the modules that compute it.

Table ``results`` (``data/interim/contrastive/results.parquet``; one row per case × model ×
distance × threshold × dictionary):

==============  =====  ====================================================================
column          dtype  meaning
==============  =====  ====================================================================
case_id         str    the triple's id (suite table)
relation        str    CR1..CR4 or an imported relation name
model_id        str    model under test
revision        str    the model's resolved revision (package version + weights hash)
pooling         str    the pooling used (e.g. ``mean+norm``, ``pooler``, ``cls``)
distance        str    l1 / l2 / cos (cos = 1 − cosine similarity)
dictionary      str    vocab (the model's whole-word vocabulary) or dataset (seed words)
threshold_kind  str    zero / min / mu-2sigma / mu-sigma
threshold       float  θ
d_pos, d_neg    float  SemD(e, e⁺), SemD(e, e⁻): the raw output
margin          float  d_pos − d_neg: the continuous score
verdict         str    ``fail`` when margin > θ (a reported violation), else ``pass``
p_greater       float  one-sided Wilcoxon p of F > G over the downstream classifiers
p_less          float  one-sided Wilcoxon p of F < G
gt_a, gt_b      bool   ground truth: clearly buggy (GT_A) / potentially buggy (GT_B)
==============  =====  ====================================================================
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from tasks.contrastive import classifiers, distances, embedding, ground_truth, suite, thresholds
from tasks.core.caching import ContentKey
from tasks.core.config import ContrastiveParams, Params
from tasks.core.errors import LingtestError
from tasks.core.paths import Workspace

SUITE_TABLES = ("sst", "word_polarity", "names", "gender_pairs", "contrast_pairs", "mrpc")
SUITE_MODULES = ("tasks.contrastive.suite", "tasks.text.mutations", "tasks.text.lexicon_lookup")
SUITE_SETTINGS = ("suite", "relations", "sst_split", "mrpc_split", "contrast_split", "max_seeds")


def _stable(value: object) -> object:
    """JSON stand-in for a value: arrays by the sha256 of their bytes, the rest as text."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{value.shape}:" + hashlib.sha256(value.tobytes()).hexdigest()
    return str(value)


def token(*parts: object) -> str:
    """A cache token: sha256 of what determines a task's result (arrays by their bytes, so
    a cached result never outlives a change in the embeddings it was computed from)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=_stable).encode()).hexdigest()


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


@task(name="build-suite", persist_result=True,
      cache_policy=ContentKey(files=("inputs",), values=("settings", "seed"),
                              modules=SUITE_MODULES, version="1"))
def build_suite(inputs: list[str], settings: dict, seed: int, root: str,
                spacy_model: str, offline: bool) -> pd.DataFrame:
    """Generate the triples (or import a COSTELLO JSON suite)."""
    params = ContrastiveParams(**settings)
    if params.suite:
        return suite.read_costello_suite(inputs[0])
    from tasks.models.nlp import load_spacy
    from tasks.text.wordnet import wordnet

    workspace = Workspace(Path(root))
    tables = {Path(f).stem: pd.read_parquet(f) for f in inputs}
    generated = suite.generate_suite(tables, load_spacy(spacy_model, offline=offline),
                                     wordnet(workspace.nltk_data), params, seed)
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


@task(name="embed", task_run_name="embed-{model_id}", cache_policy=NO_CACHE)
def embed(model_id: str, texts: list[str], store_root: str, offline: bool, device: str,
          batch_size: int, max_words: int | None, seed: int) -> tuple[dict, Embedded]:
    """Embed ``texts`` and the model's vocabulary dictionary, each distinct text once.

    The on-disk store is the cache: a rerun embeds nothing. Returns the model's facts
    (id, revision, pooling, the dictionary's words) and the embeddings.
    """
    from tasks.models.encoders import load_encoder

    encoder = load_encoder(model_id, offline=offline, device=device)
    words = thresholds.vocabulary_dictionary(encoder, max_words, seed)
    everything = list(dict.fromkeys([*texts, *words]))
    store = embedding.EmbeddingStore.for_encoder(Path(store_root), encoder)
    missing = len(store.missing(everything))
    matrix = embedding.embed_texts(encoder, everything, store, batch_size)
    get_run_logger().info("%s: %d distinct texts, %d embedded now, %d from the cache",
                          model_id, len(everything), missing, len(everything) - missing)
    info = {"model_id": model_id, "revision": encoder.revision, "pooling": encoder.pooling,
            "dim": int(matrix.shape[1]), "vocabulary": words, "embedded_now": missing,
            "parameters": encoder.parameters()}
    return info, Embedded(everything, matrix)


@task(name="nearest-neighbours", persist_result=True, task_run_name="nn-{metric}-{label}",
      cache_policy=ContentKey(values=("key",), modules=("tasks.contrastive.thresholds",)))
def nearest_neighbour_distances(key: str, vectors: np.ndarray, metric: str, label: str,
                                block_size: int) -> np.ndarray:
    """Each dictionary word's distance to its nearest other word (blocked)."""
    return thresholds.nearest_neighbour_distances(vectors, metric, block_size)


@task(name="train-classifiers", persist_result=True, task_run_name="classifiers-{kind}",
      cache_policy=ContentKey(values=("key",), modules=("tasks.contrastive.classifiers",)))
def train_classifiers(key: str, kind: str, X_train: np.ndarray, y_train: np.ndarray,
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


def classifier_data(tables: dict[str, pd.DataFrame], params: ContrastiveParams,
                    seed: int) -> dict[str, dict]:
    """Training/test texts and labels of both downstream tasks (optionally capped)."""
    data: dict[str, dict] = {"sentiment": {}, "paraphrase": {}}
    for split, cap in (("train", params.classifier_max_train), ("test", params.classifier_max_test)):
        texts, labels = classifiers.sst2_rows(tables["sst"], split)
        keep = _sample(len(labels), cap, seed)
        data["sentiment"][split] = [texts[i] for i in keep]
        data["sentiment"][f"{split}_y"] = labels[keep]
        first, second, labels = classifiers.mrpc_rows(tables["mrpc"], split)
        keep = _sample(len(labels), cap, seed)
        data["paraphrase"][split] = ([first[i] for i in keep], [second[i] for i in keep])
        data["paraphrase"][f"{split}_y"] = labels[keep]
    return data


def features(kind: str, texts, lookup) -> np.ndarray:
    """Classifier features of ``texts``: embeddings, or pair features of (s1, s2) texts."""
    if kind == "sentiment":
        return lookup(list(texts))
    first, second = texts if isinstance(texts, tuple) else classifiers.split_pairs(list(texts))
    return classifiers.pair_features(lookup(list(first)), lookup(list(second)))


def validate(suite_frame: pd.DataFrame, lookup, model: dict, params: ContrastiveParams,
             thetas: dict[tuple[str, str], dict[str, float]],
             truth: pd.DataFrame) -> pd.DataFrame:
    """Every (distance, dictionary, threshold) verdict of every triple, with its ground truth."""
    seed, pos, neg = (lookup(suite_frame[c].tolist()) for c in ("seed", "positive", "negative"))
    frames = []
    for metric in params.distances:
        d_pos = distances.pair_distances(seed, pos, metric)
        d_neg = distances.pair_distances(seed, neg, metric)
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
                    "threshold_kind": kind, "threshold": theta, "d_pos": d_pos, "d_neg": d_neg,
                    "margin": margin, "verdict": np.where(margin > theta, "fail", "pass"),
                    "p_greater": truth["p_greater"].to_numpy(),
                    "p_less": truth["p_less"].to_numpy(),
                    "gt_a": truth["gt_a"].to_numpy(), "gt_b": truth["gt_b"].to_numpy()}))
    return pd.concat(frames, ignore_index=True)


def triple_truth(suite_frame: pd.DataFrame, lookup, banks: dict, alpha: float) -> pd.DataFrame:
    """GT_A / GT_B of every triple, with the bank of its relation's downstream task."""
    parts = []
    for relation, group in suite_frame.groupby("relation", sort=False):
        kind = relation_kind(pd.concat([group["seed"], group["positive"], group["negative"]]))
        X = [features(kind, group[c], lookup) for c in ("seed", "positive", "negative")]
        truth = ground_truth.bank_ground_truth(banks[kind], *X, alpha=alpha)
        truth.index = group.index
        parts.append(truth)
    return pd.concat(parts).loc[suite_frame.index]


def needed_texts(suite_frame: pd.DataFrame, data: dict, dataset_words: list[str]) -> list[str]:
    """Every distinct text to embed: triples, pair halves, classifier data, dataset words."""
    texts: list[str] = []
    for column in ("seed", "positive", "negative"):
        values = suite_frame[column].tolist()
        texts += values
        pairs = [v for v in values if v.count(classifiers.SEP) == 1]
        for first, second in (v.split(classifiers.SEP) for v in pairs):
            texts += [first, second]
    texts += list(data["sentiment"]["train"]) + list(data["sentiment"]["test"])
    for split in ("train", "test"):
        first, second = data["paraphrase"][split]
        texts += list(first) + list(second)
    texts += dataset_words
    return list(dict.fromkeys(texts))


def settings_of(params: Params) -> dict:
    return params.contrastive.model_dump(mode="json", include=set(SUITE_SETTINGS))
