"""COSTELLO's parameter section (``contrastive`` in params.yaml) and the names of its
distances, thresholds and relations."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.sections import Section, UserPath


DISTANCES = ("l1", "l2", "cos")
THRESHOLDS = ("zero", "min", "mu-2sigma", "mu-sigma")
RELATIONS = ("CR1", "CR2", "CR3", "CR4")


def smallest_signed_rank_n(alpha: float) -> int:
    """Fewest classifiers at which COSTELLO's one-sided Wilcoxon signed-rank test can give
    p < ``alpha``: its smallest exact p-value, all n differences of one sign, is 0.5**n
    (5 for α = 0.05; scipy's ``wilcoxon`` agrees, tests/test_contrastive_options.py)."""
    n = 1
    while 0.5 ** n >= alpha:
        n += 1
    return n


class ContrastiveParams(Section):
    """COSTELLO: test generation, embedding, thresholds, ground truth (Jiang et al., FSE 2024)."""

    uses_encoders = True

    suite: UserPath | None = Field(
        None, description="a COSTELLO JSON suite to run instead of generating one")
    relations: list[Literal[RELATIONS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(RELATIONS), min_length=1,
        description="COSTELLO's contrastive relations to generate and test")
    sst_split: Literal["train", "dev", "test"] = Field(
        "test", description="SST split whose sentences seed CR1 and CR2")
    mrpc_split: Literal["train", "validation", "test"] = Field(
        "validation", description="MRPC split whose paraphrase pairs seed CR4")
    contrast_split: Literal["dev", "test", "all"] = Field(
        "all", description="IMDb contrast-set pairs that seed CR3")
    max_seeds: int | None = Field(None, ge=1, description="cap on seeds per relation; null: all")
    cr1_triples: Literal["word", "seed"] = Field(
        "word", description="CR1: one triple per qualifying word (paper) or one per seed")
    synonym_scope: Literal["text", "word"] = Field(
        "text", description="CR2 s⁻ / CR3 s⁺: synonyms over the whole text (paper) or one word")
    synonym_probability: float = Field(
        0.5, gt=0, le=1, description="chance each replaceable word is replaced (scope text)")
    encoders: list[str] | None = Field(None, min_length=1,
                                       description="models under test; null: models.encoders")
    batch_size: int = Field(
        32, ge=1, description="texts per encode call for an encoder that batches by count "
        "(sentence-transformers-like, through the Python API); lingtest's own encoders run "
        "passes of >= runtime.pass_tokens tokens instead")
    distances: list[Literal[DISTANCES]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(DISTANCES), min_length=1,
        description="embedding distances a violation is measured with")
    thresholds: list[Literal[THRESHOLDS]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(THRESHOLDS), min_length=1,
        description="margins θ a violation must exceed (zero, min, μ−2σ, μ−σ of the "
                    "positive pairs' distances)")
    dictionary_max_words: int | None = Field(
        None, ge=2, description="cap on the vocabulary dictionary (sampled with the seed)")
    dictionary_file: UserPath | None = Field(
        None, description="a user dictionary (JSON list or one word per line) for θ, beside "
        "the vocabulary and dataset ones")
    pooling: str | None = Field(
        None, description="pooling override (pooler, cls, mean, mean+norm, ...); null: the model's own")

    @field_validator("pooling")
    @classmethod
    def _known_pooling(cls, pooling: str | None) -> str | None:
        if pooling is not None:
            from lingtest.tasks.models.pooling import parse_pooling
            try:
                parse_pooling(pooling)
            except LingtestError as error:
                raise ValueError(str(error)) from None
        return pooling
    max_length: int | None = Field(
        None, ge=8, description="tokens kept per text; null: the model's own (paper: 512)")
    threshold_rule: Literal["corrected", "paper"] = Field(
        "corrected", description="θ rule: σ and plain L2 (corrected), or √σ and squared L2 (paper's code)")
    cosine: Literal["distance", "similarity"] = Field(
        "distance", description="cos: 1 − cos similarity, or the similarity (paper's code)")
    block_size: int = Field(1024, ge=16, description="rows per block of the nearest-neighbour search")
    n_classifiers: int = Field(14, ge=2, le=14,
                               description="downstream classifiers for the ground truth")
    classifier_epochs: int = Field(30, ge=1, description="an upper bound: each classifier "
                                   "keeps its best epoch on held-out rows")
    classifier_max_train: int | None = Field(
        None, ge=10, description="cap on training examples per downstream task (seeded sample)")
    classifier_max_test: int | None = Field(
        None, ge=10, description="cap on test examples per downstream task (seeded sample)")
    paraphrase_features: Literal["joint", "pair"] = Field(
        "joint", description='CR4 vectors (distances and classifiers): "s1 [SEP] s2" embedded '
        "whole (paper) or pair features [u, v, |u-v|, u*v]")
    alpha: float = Field(0.05, gt=0, lt=1, description="level of the one-sided Wilcoxon tests")

    @model_validator(mode="after")
    def _classifiers_can_reach_alpha(self) -> "ContrastiveParams":
        """Below the smallest bank the test can reject at, every P_A would be 0 and every
        P_B 100 whatever the model does: refused."""
        need = smallest_signed_rank_n(self.alpha)
        if self.n_classifiers < need:
            fix = (f"set contrastive.n_classifiers to {need} or more" if need <= 14 else
                   "raise contrastive.alpha (14 classifiers reach at best p = 0.5**14)")
            raise ValueError(
                f"contrastive.n_classifiers {self.n_classifiers}: a one-sided Wilcoxon test "
                f"over {self.n_classifiers} classifiers can never reach p < contrastive.alpha "
                f"{self.alpha} (its smallest p is 0.5**{self.n_classifiers} = "
                f"{0.5 ** self.n_classifiers:.4g}), so every P_A would be 0 and every P_B 100; "
                f"fix: {fix}")
        return self
