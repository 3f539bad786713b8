"""Running one stage's flow: parameters, seed, task runner, run name and tags."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lingtest.flows.registry import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.core.run_lock import EXPERIMENT
from lingtest.tasks.core.runtime import api_for_workers, git_commit, seed_everything, set_threads

from lingtest.flows.registry import PROCESS_STAGES, stage_flow


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
    """The stage's flow (an unknown stage: one error listing the stages)."""
    return stage_flow(stage)


def resolved_runner(params: Params, stage: str) -> Params:
    """``params`` with ``runtime.task_runner: auto`` made concrete for ``stage``: dask for
    ``PROCESS_STAGES``, threads for the rest (the run's provenance shows which)."""
    if params.runtime.task_runner != "auto":
        return params
    runner = "dask" if stage in PROCESS_STAGES and dask_installed() else "threads"
    return params.model_copy(update={"runtime": params.runtime.model_copy(
        update={"task_runner": runner})})


def dask_installed() -> bool:
    """Whether prefect-dask is importable; without it ``auto`` stays on threads (and says so)
    rather than failing: ``dask`` asked by name still fails with the install line."""
    import importlib.util
    import logging

    if importlib.util.find_spec("prefect_dask") is not None:
        return True
    logging.getLogger("lingtest").warning(
        "runtime.task_runner auto: prefect-dask is not installed, so this stage runs on "
        "threads; pip install 'lingtest[dask]' to spread it over processes")
    return False


def check_runtime(params: Params) -> None:
    """What ``task_runner`` and ``result_storage`` would refuse, found without building
    either (``lingtest run`` checks it before Prefect starts)."""
    runtime, spec = params.runtime, params.runtime.result_storage
    if runtime.task_runner == "dask" and runtime.dask_address and spec is None:
        raise LingtestError(
            f"runtime.dask_address {runtime.dask_address}: set runtime.result_storage "
            f"to a folder or fsspec URL every worker reaches (task results travel "
            f"through it; on one machine any folder does)")
    if runtime.task_runner == "dask" and runtime.dask_address:
        _check_scheduler(runtime.dask_address)
    if spec is not None and ("://" not in spec or spec.startswith("file://")):
        _check_folder(Path(spec.removeprefix("file://")).expanduser(),
                      f"runtime.result_storage {spec}", "give a folder (or fsspec URL)")
    if os.environ.get("LINGTEST_CACHE"):
        _check_folder(Path(os.environ["LINGTEST_CACHE"]).expanduser(),
                      f"LINGTEST_CACHE={os.environ['LINGTEST_CACHE']}",
                      "point it at a writable folder, or unset it (~/.cache/lingtest)")
    if spec is not None and "://" in spec and not spec.startswith("file://"):
        import fsspec

        protocol = spec.split("://", 1)[0]
        try:
            fsspec.get_filesystem_class(protocol)
        except (ImportError, ValueError) as error:
            raise LingtestError(f"runtime.result_storage {spec}: fsspec cannot open "
                                f"{protocol}:// here ({error}); install its package (e.g. "
                                f"s3fs) or give a folder") from None


def _check_scheduler(address: str, timeout_s: float = 5.0) -> None:
    """The Dask scheduler answers a TCP connection (an unknown host or a closed port is one
    error now, not a cluster timeout after the flow started)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        socket.create_connection((parts.hostname, parts.port or 8786), timeout_s).close()
    except (OSError, ValueError) as exc:
        raise LingtestError(f"runtime.dask_address {address}: no scheduler answers there "
                            f"({exc}); fix: start it (`dask scheduler`, then `dask worker "
                            f"{address}`), or set runtime.dask_address: null for a local "
                            "cluster") from None


def _check_folder(path: Path, what: str, fix: str) -> None:
    """A folder a run will write into: one that exists, or can be made under a writable one."""
    from lingtest.tasks.core.io import unwritable

    problem = unwritable(path)
    if problem:
        raise LingtestError(f"{what}: {problem}; fix: {fix}")


def task_runner(params: Params):
    """Threads by default; a Dask cluster (local, or ``runtime.dask_address``) on request."""
    runtime = params.runtime
    if runtime.task_runner == "dask":
        try:
            from lingtest.flows.dask_runner import BoundedDaskTaskRunner, PatientNanny
        except ImportError:
            raise LingtestError("runtime.task_runner: dask needs prefect-dask: "
                                "pip install 'lingtest[dask]'") from None
        if runtime.dask_address:
            check_runtime(params)
            return BoundedDaskTaskRunner(address=runtime.dask_address)
        threads = str(runtime.threads)  # the workers' torch threads (runtime.threads)
        cluster = {"n_workers": runtime.max_workers, "threads_per_worker": 1,
                   "worker_class": PatientNanny,  # a worker slow to die does not fail the close
                   "env": {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}}
        if runtime.device == "cuda" and _cuda_devices():
            cluster["resources"] = {"GPU": 1}
        return BoundedDaskTaskRunner(cluster_kwargs=cluster)
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=runtime.max_workers)


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count()


def result_storage(params: Params, workspace: Workspace):
    """``runtime.result_storage`` for ``Flow.with_options``: a folder as a ``Path``, a URL as
    a ``RemoteFileSystem`` block saved on the Prefect API (Prefect's rule for flow storage);
    None: Prefect's default (``.prefect/storage``)."""
    spec = params.runtime.result_storage
    if spec is None:
        return None
    if "://" not in spec or spec.startswith("file://"):
        folder = Path(spec.removeprefix("file://")).expanduser()
        return folder if folder.is_absolute() else workspace.root / folder
    import hashlib

    from prefect.filesystems import RemoteFileSystem

    check_runtime(params)
    block = RemoteFileSystem(basepath=spec)
    block.save(f"lingtest-results-{hashlib.sha256(spec.encode()).hexdigest()[:12]}",
               overwrite=True)
    return block


def _running_task_runner():
    from prefect.context import FlowRunContext

    return getattr(FlowRunContext.get(), "task_runner", None)


def runner_uses_processes() -> bool:
    """Whether the running flow's task runner runs tasks in worker processes (the Dask runner
    ``task_runner`` builds): the one place that asks. Methods never do; the flow decides
    from it how their calls and preparation run (``lingtest.flows.method``)."""
    return any(cls.__name__ == "DaskTaskRunner" for cls in type(_running_task_runner()).__mro__)


def unit_resources(params: Params):
    """What each unit's task asks the Dask scheduler for: a GPU when ``runtime.device`` is
    cuda. A request no worker declares would wait forever, so it is refused here."""
    import contextlib

    if params.runtime.device != "cuda" or not runner_uses_processes():
        return contextlib.nullcontext()
    runner = _running_task_runner()
    workers = runner.client.scheduler_info(n_workers=-1)["workers"].values()
    if not any(worker.get("resources", {}).get("GPU", 0) >= 1 for worker in workers):
        declared = sorted({f"{k}={v}" for w in workers for k, v in w.get("resources", {}).items()})
        raise LingtestError(
            f"runtime.device: cuda asks a GPU for every unit, but none of the "
            f"{len(workers)} Dask worker(s) declares one (resources: "
            f"{', '.join(declared) or 'none'}); start workers with `dask worker <scheduler> "
            f"--resources GPU=1` on GPU machines, or set runtime.device: cpu")
    import dask

    return dask.annotate(resources={"GPU": 1})


def run_stage(stage: str, params: Params, workspace: Workspace,
              run_tags: tuple[str, ...] = ()) -> Any:
    """Run ``stage``'s flow, named and tagged by stage, parameter hash and git commit (and
    ``run_tags``); a workspace with ``outputs`` passes them to a method stage's flow."""
    from prefect import tags
    from prefect.logging import get_logger

    from lingtest.tasks.core.alerts import with_failure_alerts
    from lingtest.tasks.core.flow_runs import mark_orphaned_runs_crashed, process_tag

    flow = load_flow(stage)
    seed_everything(params.seed)
    set_threads(params.runtime.threads)
    commit = git_commit(workspace.root)
    params_hash = stage_params_hash(params, stage)
    params = resolved_runner(params, stage)
    runner = task_runner(params)
    with api_for_workers(params.runtime):
        storage = result_storage(params, workspace)
        configured = flow.with_options(
            flow_run_name=f"{stage}-{params_hash[:8]}-{commit}", task_runner=runner,
            **({"result_storage": storage} if storage is not None else {}))
        configured = with_failure_alerts(configured, f"stage {stage}", params.runtime.notify_url)
        crashed = mark_orphaned_runs_crashed(f"stage:{stage}")
        if crashed:
            get_logger("lingtest").warning(
                "marked %d flow run(s) of a killed process as Crashed: %s",
                len(crashed), ", ".join(crashed))
        extra = {"outputs": str(workspace.outputs)} if workspace.outputs else {}
        experiment = os.environ.get(EXPERIMENT)  # a scheduled rerun's, named by its tick
        run_tags = [*run_tags, *([f"exp:{experiment}"] if experiment else [])]
        with tags(f"stage:{stage}", f"params:{params_hash}", f"commit:{commit}",
                  f"profile:{params.profile}", f"seed:{params.seed}", process_tag(), *run_tags):
            return configured(params=params, root=str(workspace.root), **extra)
