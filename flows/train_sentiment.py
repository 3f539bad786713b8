"""The ``train-sentiment`` stage: the MiniLM SST-2 classifier that S²LCT tests offline."""
from __future__ import annotations

from pathlib import Path

from prefect import flow

from lingtest.tasks.training.sentiment import fine_tune, training_note, training_report
from lingtest.flows.registry import Params
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.publish import publish
from lingtest.tasks.models.sentiment import MINILM_SST2_DIR


@flow(name="train-sentiment", log_prints=True)
def train_sentiment_flow(params: Params, root: str) -> dict:
    workspace = Workspace(Path(root))
    sst = workspace.processed / "sst.parquet"
    metrics = fine_tune(sst, workspace.root / MINILM_SST2_DIR, params)
    publish(training_report(params, workspace, sst, metrics), workspace)
    print(f"MiniLM SST-2 test accuracy {metrics['accuracy']:.4f} "
          f"({metrics['test_size']} sentences); {training_note(metrics)}")
    return metrics
