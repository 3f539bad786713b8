"""The paper's debugging protocol, per CheckList topic (AdaTest §4, Table 1 / Figure 7).

For each CheckList topic to fix, its examples are split three ways (``split_topic``):
``held_out`` (the evaluated sample, never trained on by either condition), ``seeds`` (5 tests
the AdaTest loop starts from) and ``pool`` (the rest: what the CheckList-data condition samples
from and what the oracle consults). The AdaTest condition then runs test–fix–retest rounds
(``debug_topic``): the LM suggests tests under the topic from the tree's tests, the oracle
labels them, the failing ones join the tree, the model is fine-tuned (from the checkpoint, on
the tree's tests mixed with SST-2) and the next round's suggestions re-test it; the loop stops
when the share of failing suggestions is at most ``threshold`` (among at least
``MIN_JUDGED`` = 5 the oracle labelled) or after ``rounds`` fixes.

The paper's users reviewed suggestions by hand. Offline, ``NearestExampleOracle`` stands in
for them: it labels a suggestion with the label of the topic's CheckList examples nearest to
it (MiniLM cosine), calls it off topic when even those are far, and abstains when they
disagree or the text reads as no test. It is a substitute and the report names it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd

from lingtest.tasks.adaptive.checklist_topics import LEARNABLE, MFT, learnable_topics
from lingtest.tasks.adaptive.review import ABSTAIN, ORACLE_PREFIX, not_a_test, run_round
from lingtest.tasks.adaptive.prompts import Embed, PromptSettings
from lingtest.tasks.adaptive.tree import TestTree, ensure_topic_markers, new_tree
from lingtest.tasks.core.errors import LingtestError

log = logging.getLogger(__name__)
SEED_LABELER = "checklist-seed"
ORACLE_REFERENCE = 400  # seeded cap on the pool examples the oracle compares with
TEST_COLUMNS = ["text", "label", "topic", "source", "round"]
MIN_JUDGED = 5  # a re-test on fewer oracle-labelled suggestions cannot say the topic passes


def _rng(seed: int, salt: int, name: str) -> np.random.Generator:
    key = np.frombuffer(name.encode("utf-8"), dtype=np.uint8).tolist()
    return np.random.default_rng([seed, salt, *key])


def tree_topic(test: str) -> str:
    """A CheckList test name as a tree topic path (``/`` inside the name becomes ``∕``)."""
    return "/" + " ".join(test.replace("/", "∕").split())


@dataclass
class TopicSplit:
    """One CheckList topic's examples: seeds / pool as (text, label, example_id)."""

    topic: str
    seeds: pd.DataFrame
    pool: pd.DataFrame
    held_out: int  # examples of the topic in the evaluated sample

    @property
    def path(self) -> str:
        return tree_topic(self.topic)


def split_topic(checklist: pd.DataFrame, held_out: pd.DataFrame, topic: str, seed_tests: int,
                seed: int) -> TopicSplit:
    """Seeds and pool of ``topic`` from its learnable examples outside ``held_out`` (the
    evaluated sample, every topic's) and sharing no text with it; seeded per topic."""
    known = learnable_topics(checklist)
    if topic not in known:
        raise LingtestError(f"adaptive.debug.topics: `{topic}` is no CheckList MFT test with "
                            f"a negative or positive label; fix: pick from {known}")
    rows = checklist[(checklist["test"] == topic) & checklist["expectation"].eq(MFT)
                     & checklist["label"].isin(list(LEARNABLE))]
    evaluated = held_out[held_out["test"] == topic]
    taken = set(evaluated["example_id"].astype(int))
    held_texts = {str(t) for texts in held_out["texts"] for t in texts}
    text = rows["texts"].map(lambda t: str(t[0]))
    rest = rows[~rows["example_id"].astype(int).isin(taken) & ~text.isin(held_texts)]
    rest = pd.DataFrame({"text": rest["texts"].map(lambda t: str(t[0])),
                         "label": rest["label"].map(lambda x: LEARNABLE[int(x)]),
                         "example_id": rest["example_id"].astype(int)})
    rest = rest.drop_duplicates("text").reset_index(drop=True)
    if len(rest) <= seed_tests:
        raise LingtestError(f"adaptive.debug.topics: `{topic}` has {len(rest)} examples "
                            f"outside the evaluated ones; it needs more than {seed_tests} "
                            "(seed tests and a pool); fix: lower adaptive.debug."
                            "checklist_examples or pick another topic")
    pick = np.sort(_rng(seed, 11, topic).choice(len(rest), seed_tests, replace=False))
    seeds = rest.iloc[pick].reset_index(drop=True)
    pool = rest.drop(index=pick).reset_index(drop=True)
    return TopicSplit(topic, seeds, pool, len(evaluated))


def checklist_sample(split: TopicSplit, n: int, seed: int) -> pd.DataFrame:
    """The CheckList-data condition's ``n`` examples of the topic (pool only; seeded)."""
    pool = split.pool
    pick = np.sort(_rng(seed, 7, split.topic).choice(len(pool), min(n, len(pool)),
                                                     replace=False))
    chosen = pool.iloc[pick]
    return pd.DataFrame({"text": chosen["text"], "label": chosen["label"],
                         "topic": split.topic, "source": "checklist-pool",
                         "round": 0}).reset_index(drop=True)


def _unit(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


class NearestExampleOracle:
    """Labels a suggestion like the topic's ``k`` nearest CheckList examples (seeds and a
    seeded sample of the pool): off topic (None) when their mean cosine is below
    ``min_similarity``; ``ABSTAIN`` when they disagree or the text reads as no test."""

    def __init__(self, split: TopicSplit, embed: Embed, seed: int, k: int = 5,
                 min_similarity: float = 0.5, reference: int = ORACLE_REFERENCE):
        pool = split.pool
        if len(pool) > reference:
            pick = np.sort(_rng(seed, 13, split.topic).choice(len(pool), reference,
                                                              replace=False))
            pool = pool.iloc[pick]
        reference = pd.concat([split.seeds, pool], ignore_index=True)
        self.labels = reference["label"].to_numpy()
        self.vectors = _unit(np.asarray(embed(reference["text"].tolist())))
        self.embed, self.k, self.min_similarity = embed, min(k, len(reference)), min_similarity
        self.oracle_id = f"{ORACLE_PREFIX}checklist-nearest-{self.k}"

    def expect(self, topic: str, inputs: list[str]) -> list[str | None]:
        if not inputs:
            return []
        sims = _unit(np.asarray(self.embed(inputs))) @ self.vectors.T
        nearest = np.argsort(-sims, axis=1, kind="stable")[:, :self.k]
        out = []
        for text, row, idx in zip(inputs, sims, nearest):
            if row[idx].mean() < self.min_similarity:
                out.append(None)
                continue
            labels = set(self.labels[idx])
            out.append(labels.pop() if len(labels) == 1 and not_a_test(text) is None
                       else ABSTAIN)
        return out


@dataclass
class LoopSettings:
    rounds: int
    threshold: float
    prompts: int
    completions: int
    prompt_settings: PromptSettings = field(default_factory=PromptSettings)


@dataclass
class TopicRun:
    """What the AdaTest loop of one topic and training seed produced."""

    tests: pd.DataFrame  # TEST_COLUMNS: the seeds and the accepted suggestions
    rounds: pd.DataFrame  # one row per round: counts, failure share, stopped
    suggestions: pd.DataFrame  # every reviewed suggestion with its review


def seed_tree(split: TopicSplit) -> TestTree:
    """A tree holding the topic's seed tests (labelled ``checklist-seed``)."""
    rows = [{"topic": split.path, "input": r.text, "output": r.label, "label": "pass",
             "labeler": SEED_LABELER} for r in split.seeds.itertuples(index=False)]
    tree = new_tree(rows, [f"seed{i}" for i in range(len(rows))])
    return TestTree(ensure_topic_markers(tree.frame, [split.path]), tree.source)


def tree_tests(tree: TestTree, split: TopicSplit) -> pd.DataFrame:
    """The tree's labelled tests as training rows (seed or the round that accepted it)."""
    tests = tree.tests
    tests = tests[tests["topic"] == split.path]
    rounds = tests.get("provenance", pd.Series("", index=tests.index)).map(_round_of)
    return pd.DataFrame({"text": tests["input"].astype(str),
                         "label": tests["output"].astype(str), "topic": split.topic,
                         "source": np.where(tests["labeler"] == SEED_LABELER, "seed",
                                            "suggestion"),
                         "round": rounds.astype(int)}).reset_index(drop=True)


def _round_of(provenance: str) -> int:
    import json

    try:
        return int(json.loads(provenance).get("round", 0)) if provenance else 0
    except (ValueError, AttributeError):
        return 0


def debug_topic(split: TopicSplit, base_model, fine_tune: Callable[[pd.DataFrame], object],
                generator, oracle, embed: Embed, settings: LoopSettings,
                seed: int) -> TopicRun:
    """AdaTest's test–fix–retest rounds on one topic (see the module docstring).
    ``fine_tune(tests)`` returns the checkpoint fine-tuned on ``tests`` (mixed as the stage
    mixes); ``base_model`` is the checkpoint, tested in the first round."""
    tree, model = seed_tree(split), base_model
    counts, reviews = [], []
    for round_no in range(1, settings.rounds + 1):
        result = run_round(tree, split.path, generator, oracle, [model], round_no=round_no,
                           seed=seed * 1000 + round_no, settings=settings.prompt_settings,
                           prompts=settings.prompts, completions=settings.completions,
                           accept="failures", embed=embed, binary_labels=("neg", "pos"))
        review = result.suggestions
        verdict = review.get(f"{model.model_id} verdict", pd.Series(dtype=str))
        judged = review["review"].isin(["accepted", "rejected", "kept-human"]) \
            & verdict.isin(["pass", "fail"])
        failing = int((judged & verdict.eq("fail")).sum())
        share = failing / int(judged.sum()) if judged.any() else np.nan
        passes = (round_no > 1 and int(judged.sum()) >= MIN_JUDGED
                  and share <= settings.threshold)
        counts.append({**result.counts, "tested_model": model.model_id,
                       "judged": int(judged.sum()), "failing": failing,
                       "failing_share": share, "topic": split.topic,
                       "stopped": "passes" if passes else ""})
        reviews.append(review.assign(round=round_no, topic=split.topic,
                                     tested_model=model.model_id))
        if passes:  # the re-test found (almost) no failure: the topic is fixed
            break
        tree = result.tree
        model = fine_tune(tree_tests(tree, split))
    else:
        counts[-1]["stopped"] = f"after {settings.rounds} rounds"
    rounds = pd.DataFrame(counts)
    rounds["fixes"] = rounds.index + 1 - rounds["stopped"].eq("passes").astype(int)
    return TopicRun(tree_tests(tree, split), rounds,
                    pd.concat(reviews, ignore_index=True))
