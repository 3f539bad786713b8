"""The ``train-sentiment`` stage: the MiniLM SST-2 classifier that S²LCT tests offline."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from prefect import flow, task

from tasks.capabilities.train_sentiment import METRICS_FILE, train_minilm_sst2
from tasks.core import io
from tasks.core.artifacts import publish_table
from tasks.core.config import Params
from tasks.core.paths import Workspace
from tasks.core.runtime import git_commit
from tasks.models.sentiment import MINILM_SST2_DIR

SUBSTITUTE = ("Substitute: the paper's SST-2 fine-tuned BERT / RoBERTa / DistilBERT → "
              "all-MiniLM-L6-v2 fine-tuned here on SST-2 (mean pooling + linear head).")


@task(name="fine-tune-minilm")
def fine_tune(sst_path: str, out_dir: str, params: Params) -> dict:
    """Always trains: DVC reruns this stage only when its inputs changed."""
    t = params.capabilities.train_sentiment
    return train_minilm_sst2(pd.read_parquet(sst_path), Path(out_dir), params.seed,
                             epochs=t.epochs, batch_size=t.batch_size, lr=t.lr,
                             max_train=t.max_train, max_test=t.max_test,
                             threads=params.runtime.threads, offline=params.models.offline)


PROCESS_FIGURES = ("seconds", "epoch_seconds", "threads")


@flow(name="train-sentiment", log_prints=True)
def train_sentiment_flow(params: Params, root: str) -> dict:
    workspace = Workspace(Path(root))
    sst = workspace.processed / "sst.parquet"
    out_dir = workspace.root / MINILM_SST2_DIR
    metrics = fine_tune(str(sst), str(out_dir), params)
    reports = io.staging_dir(workspace.reports / "train-sentiment")  # swapped in whole below
    # DVC metrics: the result, not this process's wall-clock seconds or thread count
    io.write_json(reports / "minilm-sst2-metrics.json",
                  {k: v for k, v in metrics.items() if k not in PROCESS_FIGURES})
    row = {k: metrics[k] for k in ("model_id", "accuracy", "test_size", "train_size", "epochs",
                                   "batch_size", "lr", "seconds", "threads", "base_revision")}
    publish_table("s2lct-minilm-sst2", pd.DataFrame([row]),
                  "MiniLM SST-2 classifier: test accuracy (SST-2 test split)", reports,
                  provenance={"seed": params.seed, "profile": params.profile,
                              "parameters (train_sentiment)":
                                  params.capabilities.train_sentiment.model_dump_json(),
                              "sst.parquet sha256": io.sha256_file(sst)[:12],
                              "code": git_commit(workspace.root)},
                  notes=SUBSTITUTE)
    io.replace_dir(reports, workspace.reports / "train-sentiment")
    print(f"MiniLM SST-2 test accuracy {metrics['accuracy']:.4f} "
          f"({metrics['test_size']} sentences), trained in {metrics['seconds']} s")
    return json.loads(json.dumps(metrics))
