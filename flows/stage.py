"""Running one stage's flow: parameters, seed, task runner, run name and tags."""
from __future__ import annotations

import importlib
from typing import Any

from tasks.core.config import Params
from tasks.core.errors import LingtestError
from tasks.core.paths import Workspace
from tasks.core.runtime import git_commit, seed_everything, set_threads

from flows import STAGE_PARAMS, STAGES


def stage_params_hash(params: Params, *stages: str) -> str:
    """Short hash of only the (dotted) parameters the stages read, as dvc.yaml lists them."""
    import hashlib
    import json

    dumped = params.model_dump(mode="json")
    picked = {}
    for name in sorted({key for stage in stages for key in STAGE_PARAMS[stage]}):
        value = dumped
        for part in name.split("."):
            value = value[part]
        picked[name] = value
    return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:12]


def load_flow(stage: str):
    if stage not in STAGES:
        raise LingtestError(f"unknown stage `{stage}`; stages: {', '.join(STAGES)}")
    module, name = STAGES[stage].split(":")
    return getattr(importlib.import_module(module), name)


def task_runner(params: Params):
    """Threads by default; a Dask cluster (local, or ``runtime.dask_address``) on request."""
    if params.runtime.task_runner == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError:
            raise LingtestError("runtime.task_runner: dask needs prefect-dask: "
                                "pip install 'lingtest[dask]'") from None
        if params.runtime.dask_address:
            return DaskTaskRunner(address=params.runtime.dask_address)
        return DaskTaskRunner(cluster_kwargs={"n_workers": params.runtime.max_workers,
                                              "threads_per_worker": 1})
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=params.runtime.max_workers)


def run_stage(stage: str, params: Params, workspace: Workspace) -> Any:
    """Run ``stage``'s flow, named and tagged by stage, parameter hash and git commit."""
    from prefect import tags
    from prefect.logging import get_logger

    from tasks.core.flow_runs import mark_orphaned_runs_crashed, process_tag

    flow = load_flow(stage)
    seed_everything(params.seed)
    set_threads(params.runtime.threads)
    commit = git_commit(workspace.root)
    params_hash = stage_params_hash(params, stage)
    configured = flow.with_options(
        flow_run_name=f"{stage}-{params_hash[:8]}-{commit}",
        task_runner=task_runner(params),
    )
    crashed = mark_orphaned_runs_crashed(f"stage:{stage}")
    if crashed:
        get_logger("lingtest").warning("marked %d flow run(s) of a killed process as Crashed: %s",
                                       len(crashed), ", ".join(crashed))
    with tags(f"stage:{stage}", f"params:{params_hash}", f"commit:{commit}",
              f"profile:{params.profile}", f"seed:{params.seed}", process_tag()):
        return configured(params=params, root=str(workspace.root))
