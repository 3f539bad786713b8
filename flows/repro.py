"""Scheduled reruns: a flow that asks DVC to reproduce stages, so DVC still decides *whether*.

``lingtest serve`` registers it as a deployment (cron or interval) on the ``lingtest ui``
server. Each scheduled run is a DVC experiment (``dvc exp run``: ``dvc exp show`` lists it; a
no-op when nothing changed), is named and tagged like ``lingtest run`` (stage, parameter hash,
commit), and publishes the metrics as the keyed artifact ``dvc-metrics``, so the UI keeps its
history across runs.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
from prefect import flow, task
from prefect.logging import get_run_logger

from tasks.core.artifacts import publish_table


def dvc_command(*args: str) -> list[str]:
    """DVC from the interpreter that runs lingtest: a served flow's PATH may not hold the venv."""
    return [sys.executable, "-m", "dvc", *args]


def run_identity(root: str, stages: list[str] | None = None) -> dict[str, str]:
    """Parameter hash (of the parameters the reproduced stages read; all stages when none),
    commit, profile and seed of the checkout, as ``lingtest run`` tags them."""
    from flows import STAGES
    from flows.stage import stage_params_hash
    from tasks.core.config import load_params
    from tasks.core.runtime import git_commit

    params = load_params(Path(root))
    read = [s for s in (stages or STAGES) if s in STAGES] or list(STAGES)
    return {"params": stage_params_hash(params, *read), "commit": git_commit(Path(root)),
            "profile": params.profile, "seed": str(params.seed)}


def _run_name() -> str:
    from prefect.runtime import flow_run

    identity = run_identity(flow_run.parameters["root"], flow_run.parameters.get("stages"))
    return f"repro-{identity['params'][:8]}-{identity['commit']}"


def _tag_this_run(identity: dict[str, str]) -> None:
    """Add the ``lingtest run`` tags to this flow run (a deployment's tags are fixed at serve time)."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    from tasks.core.flow_runs import process_tag

    tags = ["stage:repro", *(f"{key}:{value}" for key, value in identity.items()), process_tag()]
    with get_client(sync_client=True) as client:
        current = client.read_flow_run(flow_run.id)
        client.update_flow_run(flow_run.id, tags=sorted(set(current.tags) | set(tags)))


@task(name="dvc-repro", retries=1, retry_delay_seconds=30)
def dvc_repro(root: str, stages: list[str], experiment: bool) -> str:
    """``dvc exp run`` (an experiment ``dvc exp show`` lists) or plain ``dvc repro``."""
    command = dvc_command("exp", "run", *stages) if experiment else dvc_command("repro", *stages)
    result = subprocess.run(command, cwd=root, capture_output=True, text=True)
    get_run_logger().info("%s\n%s", " ".join(command[2:]), result.stdout[-4000:])
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:])} failed ({result.returncode}): "
                           f"{result.stderr[-2000:]}")
    return result.stdout


@task(name="dvc-metrics")
def dvc_metrics(root: str) -> pd.DataFrame:
    shown = subprocess.run(dvc_command("metrics", "show", "--json"), cwd=root,
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


@flow(name="repro", flow_run_name=_run_name, log_prints=True)
def repro_flow(root: str, stages: list[str] | None = None, experiment: bool = True) -> str:
    identity = run_identity(root, stages)
    _tag_this_run(identity)
    output = dvc_repro(root, stages or [], experiment)
    publish_table("dvc-metrics", dvc_metrics(root), "DVC metrics after the scheduled rerun",
                  Path(root) / "reports" / "schedule", provenance=identity,
                  notes=", ".join(f"{key} {value}" for key, value in identity.items()))
    return output
