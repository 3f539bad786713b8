"""A failure score for a suggestion nobody has labelled yet, so suggestions can be ranked.

AdaTest ranks suggestions before anyone labels them: ``ClassifierScorer`` sums, over the
model's outputs, P(output) × P(fail | output), with P(fail | output) from a per-topic label
model trained on the topic's labelled tests (``TopicLabelingModel``, a ridge classifier on
embeddings). Here the label model is the topic's ``k`` most similar tests (MiniLM cosine,
similarity-weighted): ``q(y)`` is their share asking for output ``y``, and

    score = Σ_y P_model(y) × (1 − q(y))

A ``pass`` row asks for its output; a ``fail`` row of a binary tree for the other class, else
for any label but its output (spread evenly); invariance tests carry no label and are left
out. The neighbours come from the topic and its subtopics (none there: the whole tree; an
empty tree: every label equally likely). Without an encoder every suggestion gets the
topic's label shares (its prior). The labels are each model's own (neg / neutral / pos for
sentiment models). A raw-score model needs no label model: its score is the model's own
(AdaTest's ``RawScorer`` ranks by it).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from lingtest.tasks.adaptive.cases import EXPECTATION_COLUMN, INPUT_B, expectation_of
from lingtest.tasks.adaptive.scoring import answered, score_column
from lingtest.tasks.adaptive.tested_models import as_tested
from lingtest.tasks.adaptive.tree import TestTree, is_subtopic
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.label_maps import LABELS3

Embed = Callable[[list[str]], np.ndarray]
NEIGHBOURS = 5


class CachedEmbed:
    """An encoder that embeds each distinct text once (the tree's tests are embedded again
    for every suggestion batch and every keystroke otherwise)."""

    def __init__(self, embed: Embed):
        self.embed, self.vectors = embed, {}

    def __call__(self, texts: list[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if new:
            self.vectors.update(zip(new, np.asarray(self.embed(new), dtype=np.float64)))
        return np.array([self.vectors[t] for t in texts]) if texts else np.empty((0, 0))


def expected_shares(output: str, label: str, binary_labels: tuple[str, str] | None,
                    labels: tuple[str, ...] = LABELS3) -> np.ndarray | None:
    """The labels a test asks for, as shares over ``labels`` (None: none of them)."""
    expect, _ = expectation_of(output, label, binary_labels)
    if expect.label not in labels:
        return None
    shares = np.zeros(len(labels))
    if expect.kind == "output":
        shares[labels.index(expect.label)] = 1.0
    else:
        others = [i for i, y in enumerate(labels) if y != expect.label]
        shares[others] = 1.0 / max(1, len(others))
    return shares


def topic_pool(tree: TestTree, topic: str, binary_labels: tuple[str, str] | None,
               labels: tuple[str, ...] = LABELS3) -> tuple[list[str], np.ndarray]:
    """(inputs, label shares) of the labelled tests under ``topic`` (else the whole tree)."""
    tests = tree.tests
    for column in (INPUT_B, EXPECTATION_COLUMN):  # invariance and raw-score tests ask no label
        if column in tests.columns:
            tests = tests[tests[column] == ""]
    tests = tests[tests["output"] != ""]
    under = tests[[is_subtopic(topic, t) for t in tests["topic"]]]
    rows = under if len(under) else tests
    inputs, shares = [], []
    for text, output, label in zip(rows["input"], rows["output"], rows["label"]):
        q = expected_shares(output, label, binary_labels, labels)
        if q is not None:
            inputs.append(str(text))
            shares.append(q)
    return inputs, np.array(shares).reshape(-1, len(labels))


def imputed_shares(tree: TestTree, topic: str, inputs: list[str], embed: Embed | None,
                   binary_labels: tuple[str, str] | None, k: int = NEIGHBOURS,
                   labels: tuple[str, ...] = LABELS3) -> np.ndarray:
    """q per input (rows) over ``labels`` (columns), see the module docstring."""
    pool, shares = topic_pool(tree, topic, binary_labels, labels)
    if not len(pool):
        return np.full((len(inputs), len(labels)), 1.0 / len(labels))
    if embed is None or not inputs:
        return np.repeat(shares.mean(0, keepdims=True), len(inputs), axis=0)
    vectors = np.asarray(embed(pool + list(inputs)), dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms == 0, 1.0, norms)
    similarity = unit[len(pool):] @ unit[:len(pool)].T
    nearest = np.argsort(-similarity, axis=1, kind="stable")[:, :k]
    weights = np.clip(np.take_along_axis(similarity, nearest, axis=1), 1e-6, None)
    q = (weights[:, :, None] * shares[nearest]).sum(1)
    return q / q.sum(1, keepdims=True)


def rank_suggestions(suggestions: pd.DataFrame, tree: TestTree, topic: str, models: list,
                     binary_labels: tuple[str, str] | None = None,
                     embed: Embed | None = None) -> pd.DataFrame:
    """``suggestions`` with ``<model> output`` / ``<model> score`` per model (the first also
    as ``output`` / ``score``), sorted by the first model's score, highest first (ties keep
    generation order). An input the model gave no answer (``undefined``, or probabilities
    that are not numbers) scores NaN and is listed after every scored one."""
    if not models:
        raise LingtestError("rank_suggestions: no model under test; name at least one")
    inputs = [str(t) for t in suggestions["input"]]
    ranked = suggestions.reset_index(drop=True).copy()
    shares: dict[tuple[str, ...], np.ndarray] = {}  # q per label set (models may differ)
    for model in models:
        tested = as_tested(model)
        if not inputs:
            answers, scores = [], np.empty(0)
        elif tested.kind == "raw":
            answers, scores = tested.outputs_and_scores(inputs)
        else:
            if tested.labels not in shares:
                shares[tested.labels] = imputed_shares(tree, topic, inputs, embed,
                                                       binary_labels, labels=tested.labels)
            answers, probs = tested.predict_with_probabilities(inputs)
            probs = np.asarray(probs, float)
            scores = (probs * (1 - shares[tested.labels])).sum(1)
            silent = np.array([not answered(a, p) for a, p in zip(answers, probs)], bool)
            scores[silent] = np.nan
        ranked[f"{model.model_id} output"] = list(answers)
        ranked[score_column(model.model_id)] = np.asarray(scores, float)
    first = models[0].model_id
    ranked["output"] = ranked[f"{first} output"]
    ranked["score"] = ranked[score_column(first)]
    order = np.argsort(-ranked["score"].to_numpy(), kind="stable")
    return ranked.iloc[order].reset_index(drop=True)
