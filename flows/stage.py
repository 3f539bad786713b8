"""Running one stage's flow: parameters, seed, task runner, run name and tags."""
from __future__ import annotations

import importlib
from typing import Any

from tasks.core.config import Params
from tasks.core.errors import LingtestError
from tasks.core.paths import PACKAGE_ROOT, Workspace
from tasks.core.runtime import git_commit, seed_everything, set_threads

from flows import STAGES


def stage_params(stage: str) -> tuple[str, ...]:
    """The (dotted) parameters ``stage`` reads: its ``params:`` list in the code's dvc.yaml."""
    import yaml

    stages = yaml.safe_load((PACKAGE_ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    if stage not in stages:
        raise LingtestError(f"unknown stage `{stage}`; stages: {', '.join(stages)}")
    return tuple(stages[stage].get("params", ()))


def stage_params_hash(params: Params, *stages: str) -> str:
    """Short hash of only the parameters the stages read, for the run's ``params:`` tag."""
    return params.section_hash(*sorted({key for stage in stages for key in stage_params(stage)}))


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
