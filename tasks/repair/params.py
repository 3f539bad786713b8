"""COSTELLO §5.4 repair's parameter section (``repair`` in params.yaml)."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from lingtest.tasks.core.sections import Section
from lingtest.tasks.contrastive.params import DISTANCES, THRESHOLDS


REPAIR_ALL = "all"  # repair.models: [all] repairs every encoder the contrastive stage tested


class RepairParams(Section):
    """COSTELLO §5.4 repair: fine-tune each chosen encoder on its violated triples (triplet
    loss) mixed with benign ones (MSE to the original embeddings), then re-test it
    (Jiang et al., FSE 2024)."""

    uses_encoders = True

    models: list[str] | None = Field(
        None, min_length=1, description="encoders to repair, one after the other (Table 3 "
        "averages them); [all]: every encoder the contrastive stage tested; null: the first "
        "one it tested")
    distance: Literal[DISTANCES] = Field(  # type: ignore[valid-type]
        "l2", description="the setting whose violations are trained on (the paper's: L2)")
    threshold: Literal[THRESHOLDS] = Field(  # type: ignore[valid-type]
        "mu-2sigma", description="θ kind of that setting (the paper's: μ−2σ)")
    dictionary: Literal["vocab", "dataset", "user"] = Field(
        "vocab", description="the contrastive stage's dictionary whose violations are trained on")
    heldout: float = Field(0.2, ge=0, lt=1, description="share of seed sentences held out "
                           "(never trained on or used to pick the epoch); 0: the paper's")
    validation: float = Field(0.2, ge=0, lt=1, description="share of seed sentences that pick "
                              "the epoch (selection: validation)")
    selection: Literal["validation", "train"] = Field(
        "validation", description="epoch kept: fewest violated validation triples, or fewest "
        "violated training triples (the paper's)")
    count_rule: Literal["test", "code"] = Field(
        "test", description="a triple counts as violated when d⁺ − d⁻ > θ (the test's rule) "
        "or d⁺ − d⁻ > −θ (Fixing.py: triplet loss with margin θ above 0)")
    alpha: float = Field(0.5, ge=0, le=1, description="weight of the triplet loss; 1 − alpha: MSE")
    lr: float = Field(1e-2, gt=0, description="SGD learning rate (the paper's 1e-4 moves "
                      "MiniLM by one violation in 80 micro-batches)")
    weight_decay: float = Field(1e-6, ge=0, description="SGD weight decay")
    lr_step: int = Field(2, ge=1, description="StepLR: epochs per decay")
    lr_gamma: float = Field(0.2, gt=0, le=1, description="StepLR: factor per decay")
    epochs: int = Field(2, ge=1, description="the paper's 8; 2 keeps the default run short "
                        "(timings: benchmarks/README.md)")
    batch_triples: int = Field(4, ge=1, description="buggy (and benign) triples per micro-batch")
    accumulation: int = Field(1, ge=1, description="micro-batches per optimiser step "
                              "(the paper's 8)")
    max_steps_per_epoch: int | None = Field(
        12, ge=1, description="cap on micro-batches per epoch (seeded sample of the cycled "
        "pairs); null: all (the larger set once, the smaller cycled)")
    selection_max_triples: int | None = Field(
        150, ge=1, description="seeded cap on the triples counted after each epoch to pick "
        "it; null: all")
    classifier_max_train: int | None = Field(
        1000, ge=1, description="re-test: seeded cap on each downstream task's training "
        "examples, the same rows for the original and the repaired model; null: "
        "contrastive.classifier_max_train")
    classifier_max_test: int | None = Field(
        500, ge=1, description="re-test: the same cap on test examples; null: "
        "contrastive.classifier_max_test")
    bootstrap: int = Field(1000, ge=100, description="resamples of the 95% intervals")

    @field_validator("models", mode="before")
    @classmethod
    def _one_id_is_a_list(cls, value: object) -> object:
        """``--set repair.models=all`` (or one id) arrives as a string."""
        return [value] if isinstance(value, str) else value

    @field_validator("models")
    @classmethod
    def _distinct_models(cls, models: list[str] | None) -> list[str] | None:
        if models is None:
            return models
        twice = sorted({m for m in models if models.count(m) > 1})
        if twice:
            raise ValueError(f"{', '.join(twice)} listed twice; name each encoder once")
        if REPAIR_ALL in models and len(models) > 1:
            raise ValueError(f"`{REPAIR_ALL}` already means every tested encoder; give "
                             f"[{REPAIR_ALL}] alone or list the ids")
        return models

    @model_validator(mode="after")
    def _splits_leave_training(self) -> "RepairParams":
        if self.heldout + self.validation >= 1:
            raise ValueError("heldout + validation must leave seeds to train on (sum < 1)")
        if self.selection == "validation" and self.validation == 0:
            raise ValueError("selection: validation needs validation > 0 (or selection: train)")
        return self
