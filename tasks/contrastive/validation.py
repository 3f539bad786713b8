"""Validating a suite's triples on a model's embeddings: the nearest-neighbour task behind θ,
COSTELLO's test oracle (every distance × dictionary × rule × θ) and the triples' ground truth
from the downstream classifiers.

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


import numpy as np
import pandas as pd

from lingtest.tasks.contrastive import classifiers, distances, ground_truth, thresholds
from lingtest.tasks.core.caching import task
from lingtest.tasks.contrastive.params import ContrastiveParams
from lingtest.tasks.contrastive.classifier_tasks import features, relation_kind


@task(name="nearest-neighbours", task_run_name="nn-{metric}-{label}", exclude=("label",))
def nearest_neighbour_distances(vectors: np.ndarray, metric: str, label: str,
                                block_size: int) -> np.ndarray:
    """Each dictionary word's distance to its nearest other word (blocked)."""
    return thresholds.nearest_neighbour_distances(vectors, metric, block_size)


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
