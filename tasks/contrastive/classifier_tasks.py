"""The downstream classifiers' side of the ``contrastive`` stage: which tasks a suite needs
(``relation_kind``), their training data and features from a model's embeddings, and the
cached ``train-classifiers`` task (the classifiers themselves: ``classifiers``)."""
from __future__ import annotations


import numpy as np
import pandas as pd
from prefect.logging import get_run_logger

from lingtest.tasks.contrastive import classifiers
from lingtest.tasks.core.caching import task
from lingtest.tasks.contrastive.params import ContrastiveParams


def relation_kind(texts: pd.Series) -> str:
    """``paraphrase`` when every text is a ``s1 [SEP] s2`` pair (CR4), else ``sentiment``."""
    return "paraphrase" if texts.str.count(r" \[SEP\] ").eq(1).all() else "sentiment"


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
