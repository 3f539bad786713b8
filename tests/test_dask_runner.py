"""``runtime.task_runner: dask``: the fan-out, ``auto``, and what a cluster cannot serve fails
at once with one clear line. A stage on 2 workers gives the thread runner's tables byte for
byte: test_contrastive_flow, test_capabilities_flow and test_adaptive_debug."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

import pytest

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace

pytest.importorskip("prefect_dask")

HOTEL = "imdb_hotel_conversion.csv"


def _project(root: Path, mirror: Path, *overrides: str):
    from lingtest.flows.registry import load_params

    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    base = [f"adaptive.trees=[{mirror / 'adatest' / HOTEL}]", "adaptive.models=[vader]",
            "adaptive.bootstrap=200", "runtime.shards=2"]
    return load_params(root, [*base, *overrides]), Workspace(root)


def test_a_gpu_no_worker_declares_is_refused_at_once(mirror, tmp_path, prefect_harness):
    import time

    from lingtest.flows.stage import run_stage

    params, workspace = _project(tmp_path, mirror, "runtime.task_runner=dask",
                                 "runtime.max_workers=1", "runtime.device=cuda")
    start = time.monotonic()
    with pytest.raises(LingtestError, match=r"runtime.device: cuda.*no.*GPU|none of the 1 "
                                            r"Dask worker\(s\) declares one"):
        run_stage("adaptive", params, workspace)
    assert time.monotonic() - start < 60
    assert not (workspace.interim / "adaptive" / "suite.parquet").exists()  # refused first


def test_a_remote_cluster_needs_shared_storage_and_a_server(tmp_path, mirror):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from lingtest.flows.stage import task_runner
    from lingtest.tasks.core.runtime import api_for_workers

    params, _ = _project(tmp_path, mirror, "runtime.task_runner=dask",
                         "runtime.dask_address=tcp://10.0.0.1:8786")
    with pytest.raises(LingtestError, match="runtime.result_storage"):
        task_runner(params)
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        with pytest.raises(LingtestError, match="PREFECT_API_URL"):
            with api_for_workers(params.runtime):
                pass


def test_result_storage_is_a_folder_under_the_root_or_a_url_fsspec_opens(
        tmp_path, mirror, prefect_harness):
    from prefect.filesystems import RemoteFileSystem

    from lingtest.flows.stage import result_storage

    params, workspace = _project(tmp_path, mirror, "runtime.result_storage=shared/results")
    assert result_storage(params, workspace) == tmp_path / "shared" / "results"
    params, workspace = _project(tmp_path, mirror, "runtime.result_storage=memory://results")
    block = result_storage(params, workspace)
    assert isinstance(block, RemoteFileSystem) and block.basepath == "memory://results"
    assert block._block_document_id is not None  # saved: Prefect takes only saved blocks
    params, workspace = _project(tmp_path, mirror, "runtime.result_storage=nosuchfs://x/y")
    with pytest.raises(LingtestError, match="runtime.result_storage nosuchfs://x/y"):
        result_storage(params, workspace)


def test_a_local_dask_run_without_a_server_hands_the_workers_a_temporary_one(
        tmp_path, mirror, prefect_harness):
    """No API URL: workers would each start their own server; this process's is shared."""
    import httpx
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    from lingtest.tasks.core.runtime import api_for_workers

    params, _ = _project(tmp_path, mirror, "runtime.task_runner=dask")
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        assert get_current_settings().api.url is None
        with api_for_workers(params.runtime) as url:
            assert get_current_settings().api.url == url  # what the workers' context carries
            assert httpx.get(f"{url}/health", timeout=10).status_code == 200


def _pid_of_call(index: int, delay: float) -> tuple[int, int]:
    """A call that sleeps (so two calls overlap) and says which process ran it."""
    import os
    import time

    time.sleep(delay)
    return index, os.getpid()


def test_fan_out_spreads_calls_over_dask_processes_and_runs_them_in_turn_on_threads(
        prefect_harness):
    """Capability expansion's fan-out, as the flow hands it to a method: on Dask each call is
    a task in a worker process (two processes seen, results in call order though later calls
    finish first); under threads the calls run one after another in the flow's own process."""
    import os

    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    from lingtest.flows.method import call_runner
    from lingtest.flows.stage import runner_uses_processes

    call = task(_pid_of_call, cache_policy=NO_CACHE)
    calls = [(index, 0.8 - 0.2 * index) for index in range(4)]

    def spread() -> tuple[bool, list]:
        return runner_uses_processes(), call_runner()([(call, args) for args in calls])

    cluster = {"n_workers": 2, "threads_per_worker": 1}
    on_dask = flow(spread, task_runner=DaskTaskRunner(cluster_kwargs=cluster))()
    on_threads = flow(spread, task_runner=ThreadPoolTaskRunner(max_workers=2))()

    assert on_dask[0] is True and on_threads[0] is False
    assert [index for index, _ in on_dask[1]] == [0, 1, 2, 3]
    dask_pids = {pid for _, pid in on_dask[1]}
    assert len(dask_pids) == 2 and os.getpid() not in dask_pids
    assert on_threads[1] == [(index, os.getpid()) for index in range(4)]


def test_auto_runs_the_process_stages_on_dask_and_the_rest_on_threads(tmp_path, mirror):
    from lingtest.flows.registry import PROCESS_STAGES
    from lingtest.flows.stage import resolved_runner

    params, _ = _project(tmp_path, mirror, "runtime.task_runner=auto")
    assert PROCESS_STAGES == ("contrastive", "capabilities", "consistency")
    for stage in PROCESS_STAGES:
        assert resolved_runner(params, stage).runtime.task_runner == "dask"
    for stage in ("data", "train-sentiment", "adaptive", "adaptive-debug", "repair"):
        assert resolved_runner(params, stage).runtime.task_runner == "threads"
    assert params.runtime.task_runner == "auto"  # the caller's parameters are not changed
    explicit, _ = _project(tmp_path / "x", mirror, "runtime.task_runner=threads")
    assert resolved_runner(explicit, "capabilities").runtime.task_runner == "threads"
    default, _ = _project(tmp_path / "default", mirror)  # the checkout's params.yaml
    assert default.runtime.task_runner == "auto" and default.runtime.max_workers == 2


def test_auto_without_prefect_dask_stays_on_threads_and_says_so(tmp_path, mirror, monkeypatch,
                                                                caplog):
    import importlib.util

    from lingtest.flows.stage import resolved_runner

    params, _ = _project(tmp_path, mirror, "runtime.task_runner=auto")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "prefect_dask" else real(name, *a))
    with caplog.at_level("WARNING", logger="lingtest"):
        assert resolved_runner(params, "capabilities").runtime.task_runner == "threads"
    assert "pip install 'lingtest[dask]'" in caplog.text


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _worker_config(_: int) -> dict:
    """What a worker process was started with (the flow's config travels through its nanny)."""
    import dask

    return {**{key: dask.config.get(key) for key in ("distributed.comm.timeouts.connect",
                                                     "distributed.comm.timeouts.tcp")},
            "MALLOC_TRIM_THRESHOLD_": os.environ.get("MALLOC_TRIM_THRESHOLD_")}


def _scheduler_ttl(dask_scheduler) -> float:
    return dask_scheduler.worker_ttl


@contextlib.contextmanager
def _console():
    """The log records the console prints: the root logger's handlers', and Dask's own
    handler's when Dask configured its logging first (then its loggers do not propagate)."""
    kept: list[logging.LogRecord] = []
    keep = logging.Handler(logging.INFO)
    keep.emit = kept.append
    named = logging.root.manager.loggerDict.values()
    loggers = [logging.root, *(logger for logger in named if isinstance(logger, logging.Logger)
                               and logger.name.startswith("distributed") and not logger.propagate)]
    for logger in loggers:
        logger.addHandler(keep)
    try:
        yield kept
    finally:
        for logger in loggers:
            logger.removeHandler(keep)


def _tracebacks(records: list) -> list[str]:
    return [f"{record.name}: {record.getMessage()}" for record in records
            if record.exc_info or record.exc_text]


def test_a_busy_machine_does_not_fail_a_run_as_its_cluster_closes(tmp_path, mirror,
                                                                   prefect_harness,
                                                                   monkeypatch):
    """The user's case: `lingtest test` ran capabilities on a local cluster, then adaptive on
    threads, on a machine loaded past its cores. Busy loops run through both flows; the
    cluster runs with the busy-machine timeouts and its close ends neither run. Its worker
    runs without Dask's MALLOC_TRIM_THRESHOLD_ (x2 slower generation), which the flow's own
    environment does not keep either (an earlier plain Dask cluster of this process set it)."""
    import subprocess
    import sys

    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE
    from prefect.context import FlowRunContext

    from lingtest.flows.dask_runner import BUSY_MACHINE
    from lingtest.flows.stage import resolved_runner, task_runner

    params, _ = _project(tmp_path, mirror, "runtime.task_runner=auto", "runtime.max_workers=1")
    unit = task(_worker_config, cache_policy=NO_CACHE)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)

    def capabilities() -> tuple[dict, float]:
        client = FlowRunContext.get().task_runner.client
        return unit.submit(0).result(), client.run_on_scheduler(_scheduler_ttl)

    burn = "import time\nend = time.time() + 300\nwhile time.time() < end: pass"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(2 * os.cpu_count())]
    try:
        with _console() as printed:
            first = flow(capabilities, task_runner=task_runner(
                resolved_runner(params, "capabilities")))(return_state=True)
            after = flow(lambda: "adaptive ran", name="adaptive", task_runner=task_runner(
                resolved_runner(params, "adaptive")))()
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert first.is_completed() and after == "adaptive ran"
    worker, ttl = first.result()
    assert worker.pop("MALLOC_TRIM_THRESHOLD_") is None
    assert "MALLOC_TRIM_THRESHOLD_" not in os.environ
    assert worker == {key: BUSY_MACHINE[key] for key in worker}
    assert ttl == 15 * 60
    assert _tracebacks(printed) == []
    assert not [r for r in printed if "did not close cleanly" in r.getMessage()]


@pytest.mark.parametrize("how", ["scheduler killed", "worker frozen"])
def test_a_cluster_that_fails_to_close_is_one_line_and_the_next_run_goes_on(
        how, tmp_path, mirror, prefect_harness):
    """A remote scheduler killed before the close (Dask logged its client's reconnect with a
    traceback), and a local worker frozen past the close's bound (the close waits for it):
    the run is Completed, nothing raises, no traceback; an overrun close is one warning line
    and its worker processes are killed."""
    import signal
    import subprocess
    import sys
    import time

    import psutil
    from prefect import flow
    from prefect.context import FlowRunContext

    from lingtest.flows.stage import _check_scheduler, task_runner

    scheduler = None
    if how == "scheduler killed":
        port = _free_port()
        scheduler = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
             "--port", str(port), "--no-dashboard"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(120):
            try:
                _check_scheduler(f"tcp://127.0.0.1:{port}", 1)
                break
            except LingtestError:
                time.sleep(0.5)
        overrides = (f"runtime.dask_address=tcp://127.0.0.1:{port}",
                     f"runtime.result_storage={tmp_path / 'results'}")
    else:
        overrides = ("runtime.max_workers=1",)
    params, _ = _project(tmp_path, mirror, "runtime.task_runner=dask", *overrides)
    runner = task_runner(params)
    runner.close_timeout_s = 2  # a frozen worker is waited for 4 s, then killed
    workers = []

    def finished() -> str:
        client = FlowRunContext.get().task_runner.client  # connected, as a unit's submit does
        if scheduler is not None:
            os.kill(scheduler.pid, signal.SIGKILL)
        else:
            workers.extend(psutil.Process(pid) for pid in client.run(os.getpid).values())
            for worker in workers:
                worker.suspend()  # a worker the machine starves: it never answers the close
        return "done"

    try:
        with _console() as printed:
            start = time.monotonic()
            state = flow(finished, task_runner=runner)(return_state=True)
            took = time.monotonic() - start
            after = flow(lambda: "next ran", name="next-stage")()
    finally:
        if scheduler is not None:
            scheduler.kill()
            scheduler.wait()
    assert state.is_completed() and state.result() == "done" and after == "next ran"
    assert _tracebacks(printed) == []
    warnings = [r.getMessage() for r in printed if "did not close cleanly" in r.getMessage()]
    if scheduler is None:
        assert len(warnings) == 1 and "not closed after 2 s" in warnings[0]
        assert "1 worker process(es) were killed" in warnings[0]
        assert took < 60 and all(_ended(worker) for worker in workers)


def _ended(process, within_s: float = 10.0) -> bool:
    """Whether a killed process is gone (or dead, waiting for its parent to reap it)."""
    import time

    import psutil

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.2)
    return False


def test_a_killed_worker_slow_to_be_reaped_does_not_fail_its_nannys_close(tmp_path, mirror):
    """Dask's nanny kills a worker that did not stop, then raises TimeoutError when the kernel
    has not reaped it in time (on a busy machine, seconds): a timeout too short for any
    machine shows the same. The local cluster lingtest starts closes the worker anyway."""
    import psutil
    from distributed import LocalCluster

    from lingtest.flows.stage import task_runner

    params, _ = _project(tmp_path, mirror, "runtime.task_runner=dask", "runtime.max_workers=1")
    with LocalCluster(**task_runner(params).cluster_kwargs, dashboard_address=":0") as cluster:
        nanny = next(iter(cluster.workers.values()))
        worker = psutil.Process(nanny.pid)
        assert cluster.sync(nanny.close, timeout=0.001) == "OK"
        assert _ended(worker)
