"""The ``train-sentiment`` stage's parameter section."""
from __future__ import annotations

from pydantic import Field

from lingtest.tasks.core.sections import Section


class TrainSentimentParams(Section):
    """Fine-tuning the packaged MiniLM on SST-2 (the ``train-sentiment`` stage)."""

    epochs: int = Field(1, ge=1, description="1 epoch reaches ~87% SST-2 test accuracy")
    batch_size: int = Field(32, ge=1, description="sentences per training step")
    lr: float = Field(5e-5, gt=0, description="AdamW learning rate")
    max_train: int | None = Field(None, ge=1, description="seeded cap on training sentences")
    max_test: int | None = Field(None, ge=1, description="seeded cap on test sentences")
