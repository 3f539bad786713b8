"""AdaTest's parameter sections: ``adaptive`` and its debugging experiment ``adaptive.debug``."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from lingtest.tasks.core.sections import Band, Section, UserPath


DEBUG_TOPICS = ["Hard: Negation of positive with neutral stuff in the middle (should be negative)",
                "used to, but now", "my opinion is what matters"]


class DebugParams(Section):
    """AdaTest's debugging experiment (the ``adaptive-debug`` stage): per CheckList topic,
    AdaTest's test–fix–retest rounds from 5 seed tests vs CheckList data, re-tested on
    held-out tests of every topic (the paper's Table 1 and Figure 7)."""

    uses_encoders = True

    model: str = Field("lingtest/minilm-sst2", description="the fine-tuned classifier "
                       "(a lingtest classifier folder or id) training continues from")
    topics: list[str] = Field(
        default_factory=lambda: list(DEBUG_TOPICS), description="CheckList MFT tests to fix, "
        "in Figure 7's order (cumulative models train on the first k)")
    conditions: list[Literal["adatest", "checklist-data", "adatest-tree"]] = Field(
        ["adatest", "checklist-data"], min_length=1, description="adatest: the test–fix–retest "
        "loop from seed_tests seed tests; checklist-data: checklist_n examples of the topic; "
        "adatest-tree: the hotel tree's tests (not the paper's protocol)")
    seed_tests: int = Field(5, ge=1, description="tests of the topic the AdaTest tree starts "
                            "from (the paper's 5)")
    rounds: int = Field(4, ge=1, description="at most this many fix rounds per topic (the "
                        "paper's users ran 2.8–3.8)")
    prompts: int = Field(4, ge=1, description="prompts per round (AdaTest's 8)")
    completions: int = Field(6, ge=1, description="LM completions per prompt (AdaTest's 12)")
    oracle_k: int = Field(5, ge=1, description="the oracle labels like this many nearest "
                          "CheckList examples of the topic (abstains when they disagree)")
    oracle_similarity: float = Field(0.5, ge=0, le=1, description="below this mean cosine to "
                                     "those examples a suggestion is off topic")
    cumulative: bool = Field(True, description="also train on the first k topics (k = 2..K) "
                             "for Figure 7")
    tree: UserPath | None = Field(None, description="adatest-tree: AdaTest CSV tree trained on; "
                             "null: the first of adaptive.trees")
    tree_topics: list[str] = Field(default_factory=list, description="adatest-tree: tree "
                                   "topics (and their subtopics) trained on; empty: every topic")
    corrections: UserPath | None = Field("inputs/adatest-label-corrections.csv", description=(
        "adatest-tree: curated label corrections applied when the tree is read; null: none"))
    seeds: int = Field(1, ge=1, description="training seeds per condition (seed, seed+1, …)")
    epochs: int = Field(3, ge=1, description="fine-tuning epochs per training run")
    batch_size: int = Field(16, ge=1, description="sentences per training step")
    lr: float = Field(2e-5, gt=0, description="AdamW learning rate")
    mix_ratio: float = Field(1.0, ge=0, description="SST-2 training sentences per topic test")
    checklist_n: int = Field(50, ge=1, description="checklist-data: examples per topic")
    checklist_examples: int = Field(30, ge=1, description="held-out CheckList examples per "
                                    "test evaluated (seeded sample; never trained on)")
    threshold: float = Field(0.2, gt=0, lt=1, description="a topic fails at this error rate; "
                             "the loop stops when at most this share of suggestions fails")
    bootstrap: int = Field(5000, ge=100, description="paired resamples per topic change")
    fdr: float = Field(0.05, gt=0, lt=1, description="Benjamini–Hochberg level over topics")
    neutral_band: Band = Field(
        (1 / 3, 2 / 3), description="CheckList on a binary model: neutral inside the band")
    ood_split: Literal["dev", "test", "all"] = Field(
        "dev", description="IMDb contrast-set split evaluated out of domain")
    eval_max: int | None = Field(300, ge=1, description="seeded cap on SST-2 validation "
                                 "sentences and IMDb pairs evaluated; null: all")

    @field_validator("topics")
    @classmethod
    def _distinct_topics(cls, topics: list[str]) -> list[str]:
        repeated = sorted({t for t in topics if topics.count(t) > 1})
        if repeated:
            raise ValueError(f"topics {repeated} appear twice; name each CheckList test once")
        return topics


class AdaptiveParams(Section):
    """AdaTest: the ``adaptive`` stage re-scores the tracked trees."""

    uses_encoders = True

    trees: list[UserPath] = Field(
        ["data/raw/adatest/imdb_hotel_conversion.csv"], min_length=1,
        description="AdaTest CSV trees (relative to the project root) re-scored every run")
    binary_labels: tuple[str, str] | None = Field(
        ("neg", "pos"), description="a fail row of a binary tree expects the other class; "
        "null: 'should not output' its output")
    models: list[str] = Field(["lingtest/minilm-sst2", "vader"], min_length=1,
                              description="models under test; the first ranks suggestions")

    @field_validator("binary_labels")
    @classmethod
    def _two_labels(cls, labels: tuple[str, str] | None) -> tuple[str, str] | None:
        if labels is not None and labels[0] == labels[1]:
            raise ValueError(f"binary_labels names {labels[0]!r} twice; give the negative "
                             "and the positive label, e.g. [neg, pos]")
        return labels
    neutral_band: Band = Field(
        (0.5, 0.5), description="binary models: neutral inside; (0.5, 0.5) = AdaTest's argmax")
    bootstrap: int = Field(1000, ge=100, description="resamples of the 95% failure-rate CIs")
    debug: DebugParams = Field(default_factory=DebugParams)
