"""AdaTest's prompt builder: which tests of the tree go into each LM prompt, and the prompt text.

A port of ``adaptivetesting/_prompt_builder.py`` (``PromptBuilder.__call__``, test mode) and
the prompt format of ``generators.TextCompletionGenerator._create_prompt_strings``
(microsoft/adaptive-testing v0.3.5). For a focus topic and each of ``repetitions`` prompts:

1. **Topic weight** per row: ×100 for each level of the focus path the row's topic starts
   with (a plain string prefix, as the code does), ×100 more for the focus topic itself;
   topic markers and ``__suggestions__`` rows get 0; divided by the maximum.
2. **Working set**: the ``working_set_size`` (100) rows of largest score × weight.
3. **Score randomisation**: uniform noise in [0, ``score_randomization``) added to each score
   (the code's ``np.random.rand``; its docstring and the paper say Gaussian).
4. **Slots**: ``Binomial(prompt_size, slot_randomization)`` slots are random (their scores
   redrawn as 1 + U[0, 0.1)), the rest greedy.
5. **Greedy pick**: argmax of score × topic weight × diversity × (1 − avoidance) × outside
   weight, where diversity = 1 − max cosine similarity (input and output embeddings side by
   side) to the tests already taken; with probability ``skip_randomization`` the pick is
   skipped and keeps 0.1 of its weight; a pick from outside the focus topic makes its topic
   ×0.1, a pick from a subtopic makes that subtopic ×0.001.
6. The prompt lists the picks in reverse order: the strongest test comes last, next to the
   open quote the LM completes.

All randomness comes from one ``numpy.random.Generator`` (the run's seed), in the code's order.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from typing import Callable

import numpy as np
import pandas as pd

from lingtest.tasks.adaptive.cases import INPUT_B
from lingtest.tasks.adaptive.tree import SCORE_SUFFIX, TestTree, is_subtopic
from lingtest.tasks.core.errors import LingtestError

Embed = Callable[[list[str]], np.ndarray]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"  # stands in for stsb-roberta-base-v2


@dataclass(frozen=True)
class PromptSettings:
    """The knobs of AdaTest's ``PromptBuilder`` and ``TestTreeBrowser`` (code defaults)."""

    prompt_size: int = 7
    slot_randomization: float = 0.25
    score_randomization: float = 0.05
    skip_randomization: float = 0.25
    prompt_diversity: bool = True
    subtopic_diversity: bool = True
    working_set_size: int = 100
    max_suggestions: int = 100
    suggestion_thread_budget: float = 0.5

    def __post_init__(self) -> None:
        for name in ("prompt_size", "working_set_size", "max_suggestions"):
            if int(getattr(self, name)) < 1:
                raise LingtestError(f"adaptive.{name} = {getattr(self, name)}: must be >= 1")
        for name in ("slot_randomization", "score_randomization", "suggestion_thread_budget"):
            if not 0.0 <= float(getattr(self, name)):
                raise LingtestError(f"adaptive.{name} = {getattr(self, name)}: must be >= 0")
        if not 0.0 <= self.slot_randomization <= 1.0:
            raise LingtestError(f"adaptive.slot_randomization = {self.slot_randomization}: "
                                "a probability, 0..1")
        if not 0.0 <= self.skip_randomization < 0.99:
            raise LingtestError(f"adaptive.skip_randomization = {self.skip_randomization}: must "
                                "be in [0, 0.99), else every pick is skipped")

    @classmethod
    def from_dict(cls, values: dict) -> "PromptSettings":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise LingtestError(f"adaptive prompt settings: unknown key(s) {unknown}; known: "
                                f"{sorted(known)}")
        return cls(**values)


PAIR_SEPARATOR = '" ~ "'


def pair_text(first: str, second: str) -> str:
    """An invariance test as a prompt line quotes it: ``"first" ~ "second"`` (the prompt
    adds the outer quotes; ``pairs`` reads completions back)."""
    return f"{first}{PAIR_SEPARATOR}{second}"


@dataclass(frozen=True)
class PromptItem:
    """One test in a prompt: its tree row id, topic and input."""

    row_id: str
    topic: str
    input: str


def suggestion_plan(settings: PromptSettings = PromptSettings()) -> tuple[int, int]:
    """(prompts, completions per prompt) as ``TestTreeBrowser._generate_suggestions`` computes
    them; the defaults give 8 prompts × 12 completions for 100 suggestions."""
    p, budget, wanted = settings.prompt_size, 1 + settings.suggestion_thread_budget, \
        settings.max_suggestions
    threads = max(1, int(math.floor(budget * (p / (p + 1) + wanted / (p + 1))
                                    - wanted / (p + 1)) / (p / (p + 1))))
    return threads, wanted // threads


def score_max(score: object, label: str) -> float:
    """A row's score as the code reads it: the max over ``|``-joined template scores; an
    empty or unparsable score counts 1 for a failing test, else 0."""
    if score is None or score == "" or (isinstance(score, float) and math.isnan(score)):
        return 1.0 if label == "fail" else 0.0
    if isinstance(score, str):
        values = []
        for part in score.split("|"):
            try:
                values.append(float(part))
            except ValueError:
                values.append(math.nan)
        return float(np.max(values))
    return float(np.max(score))


def topic_weights(topics: list[str], labels: list[str], topic: str) -> np.ndarray:
    """Step 1: each row's topic weight for focus ``topic`` (1 for the focus topic's tests)."""
    topics_arr = np.array(topics, dtype=object)
    weights = np.ones(len(topics))
    parts = topic.split("/")
    for i in range(1, len(parts)):
        prefix = "/".join(parts[:i + 1])
        weights *= 1 + 99 * np.array([t.startswith(prefix) for t in topics_arr], dtype=float)
    weights *= 1 + 99 * (topics_arr == topic).astype(float)
    weights *= np.array([label != "topic_marker" for label in labels], dtype=float)
    weights *= np.array(["__suggestions__" not in t for t in topics_arr], dtype=float)
    top = weights.max() if len(weights) else 0.0
    return weights / top if top > 0 else weights


def cosine_similarities(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms == 0, 1.0, norms)
    return unit @ unit.T


@functools.lru_cache(maxsize=1)
def minilm_embed(offline: bool = True) -> Embed:
    """The packaged MiniLM encoder's ``encode`` (mean pooling, L2-normalised), loaded once."""
    from lingtest.tasks.models.encoders import load_encoder

    return load_encoder(MINILM, offline=offline, device="cpu").encode


def tree_scores(tree: TestTree, score_column: str | None = None) -> np.ndarray:
    """Each row's score for the builder: ``score_max`` of ``score_column`` (default: the tree's
    first ``… score`` column; without one, from the labels alone)."""
    frame = tree.frame
    if score_column is None:
        found = [c for c in frame.columns if c.endswith(SCORE_SUFFIX)]
        score_column = found[0] if found else None
    elif score_column not in frame.columns:
        raise LingtestError(f"{tree.source}: no score column {score_column!r}; the tree has "
                            f"{[c for c in frame.columns if c.endswith(SCORE_SUFFIX)]}")
    values = frame[score_column] if score_column else pd.Series("", index=frame.index)
    return np.array([score_max(v, label) for v, label in zip(values, frame["label"])])


def build_prompts(tree: TestTree, topic: str, rng: np.random.Generator,
                  settings: PromptSettings = PromptSettings(), repetitions: int | None = None,
                  scores: np.ndarray | None = None, embed: Embed | None = None,
                  score_column: str | None = None, pairs: bool = False
                  ) -> list[list[PromptItem]]:
    """``repetitions`` prompts (default: ``suggestion_plan``'s count) for focus ``topic``,
    each a list of up to ``prompt_size`` tests, strongest last (see the module docstring).
    ``scores`` overrides the tree's score column; ``embed`` the MiniLM encoder; ``pairs``:
    an invariance test is written as its pair (``pair_text``)."""
    if repetitions is None:
        repetitions = suggestion_plan(settings)[0]
    frame = tree.frame
    if len(frame) == 0:
        return [[] for _ in range(repetitions)]
    ids = np.array(frame.index, dtype=object)
    all_topics, all_labels = list(frame["topic"]), list(frame["label"])
    weights = topic_weights(all_topics, all_labels, topic)
    if weights.sum() == 0:
        return [[] for _ in range(repetitions)]
    scores = tree_scores(tree, score_column) if scores is None else np.asarray(scores, float)
    if scores.shape != (len(frame),):
        raise LingtestError(f"build_prompts: {len(scores)} scores for {len(frame)} tree rows")

    top = np.argsort(-(scores * weights), kind="stable")[:settings.working_set_size]
    ids, weights, scores = ids[top], weights[top], scores[top] * 1.0
    topics = np.array([all_topics[i] for i in top], dtype=object)
    n = len(ids)
    similarities = None
    if settings.prompt_diversity:
        embed = embed or minilm_embed()
        inputs = [str(frame["input"].iloc[i]) for i in top]
        outputs = [str(frame["output"].iloc[i]) for i in top]
        vectors = np.asarray(embed(inputs + outputs), dtype=np.float64)
        similarities = cosine_similarities(np.hstack([vectors[:n], vectors[n:]]))

    def text(row_id) -> str:
        second = str(frame.at[row_id, INPUT_B]) if pairs and INPUT_B in frame.columns else ""
        first = str(frame.at[row_id, "input"])
        return pair_text(first, second) if second else first

    prompts = []
    for _ in range(repetitions):
        picks = _pick(ids, topics, weights, scores, similarities, topic, rng, settings)
        prompts.append([PromptItem(str(ids[k]), str(topics[k]), text(ids[k]))
                        for k in reversed(picks)])
    return prompts


def _pick(ids: np.ndarray, topics: np.ndarray, weights: np.ndarray, scores: np.ndarray,
          similarities: np.ndarray | None, topic: str, rng: np.random.Generator,
          settings: PromptSettings) -> list[int]:
    """Steps 3-5 for one prompt: working-set positions in the order they were taken."""
    n = len(ids)
    scores_now = scores + settings.score_randomization * rng.random(n)
    weights_now = weights.copy()
    sim_avoidance, hard_avoidance = np.zeros(n), np.zeros(n)
    diversity = np.ones(n)
    size = settings.prompt_size
    num_random = max(0, min(int(rng.binomial(size, settings.slot_randomization)), n - size))
    num_greedy = max(0, min(size - num_random, n - num_random))
    picks: list[int] = []
    outside_used = np.ones(n)
    while len(picks) < num_greedy + num_random:
        if len(picks) == num_greedy:  # the random slots: scrambled scores
            scores_now = 1 + rng.random(n) * 0.1
        if similarities is not None:
            diversity = 1 - (similarities * sim_avoidance).max(1)
        rank = scores_now * weights_now * diversity * (1 - hard_avoidance) * outside_used
        if np.nanmax(rank) <= 0 and picks:  # the focus subtree is used up
            break
        new = int(np.nanargmax(rank))
        skip_draw = rng.random()
        new_topic = topics[new]
        if not is_subtopic(topic, new_topic):
            outside_used *= 1 - 0.9 * (topics == new_topic)
        if skip_draw >= settings.skip_randomization:
            picks.append(new)
            avoidance = 1.0
        else:
            avoidance = 1 - 0.1
        hard_avoidance[new] = avoidance
        sim_avoidance[new] = avoidance
        if settings.subtopic_diversity and topic != new_topic and is_subtopic(topic, new_topic):
            subtopic = topic + "/" + new_topic[len(topic) + 1:].split("/")[0]
            weights_now *= np.array([0.001 if is_subtopic(subtopic, t) else 1.0 for t in topics])
    return picks


def prompt_texts(prompts: list[list[PromptItem]], topic: str, quote: str = '"',
                 sep: str = "\n") -> list[str]:
    """The LM's prompt strings, as ``_create_prompt_strings`` writes them for tests: one
    quoted input per line, ending with an open quote. When any prompt of the batch holds a
    test from another topic, every item gets a ``<topic>:`` line and the prompt ends with the
    focus topic's line, so an empty topic still gets (zero-shot) suggestions."""
    show_topics = any(item.topic != topic for prompt in prompts for item in prompt)
    texts = []
    for prompt in prompts:
        text = ""
        for item in prompt:
            if show_topics:
                text += sep + item.topic + ":" + sep + quote
            else:
                text += quote
            text += item.input + quote + sep
        texts.append(text + (sep + topic + ":" + sep + quote if show_topics else quote))
    return texts
