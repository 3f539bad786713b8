"""Scheduled reruns: a flow that asks DVC to reproduce stages, so DVC still decides *whether*.

``lingtest serve`` registers it as a cron deployment on the ``lingtest ui`` server; each
scheduled run calls ``dvc repro`` (a no-op when nothing changed) and publishes the metrics.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
from prefect import flow, task
from prefect.logging import get_run_logger

from tasks.core.artifacts import publish_table


@task(name="dvc-repro", retries=1, retry_delay_seconds=30)
def dvc_repro(root: str, stages: list[str]) -> str:
    result = subprocess.run(["dvc", "repro", *stages], cwd=root, capture_output=True, text=True)
    get_run_logger().info(result.stdout[-4000:])
    if result.returncode != 0:
        raise RuntimeError(f"dvc repro failed ({result.returncode}): {result.stderr[-2000:]}")
    return result.stdout


@task(name="dvc-metrics")
def dvc_metrics(root: str) -> pd.DataFrame:
    shown = subprocess.run(["dvc", "metrics", "show", "--json"], cwd=root,
                           capture_output=True, text=True, check=True).stdout
    rows = []
    for _, files in (json.loads(shown or "{}") or {}).items():
        for path, content in (files.get("data") or {}).items():
            for key, value in _flatten(content.get("data") or {}).items():
                rows.append({"file": path, "metric": key, "value": value})
    return pd.DataFrame(rows, columns=["file", "metric", "value"])


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        flat.update(_flatten(value, name + ".") if isinstance(value, dict) else {name: value})
    return flat


@flow(name="repro", log_prints=True)
def repro_flow(root: str, stages: list[str] | None = None) -> str:
    output = dvc_repro(root, stages or [])
    publish_table("dvc-metrics", dvc_metrics(root), "DVC metrics after the scheduled rerun",
                  Path(root) / "reports" / "schedule")
    return output
