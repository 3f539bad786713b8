"""``runtime.task_runner: dask``: the fan-out, ``auto``, and what a cluster cannot serve fails
at once with one clear line. A stage on 2 workers gives the thread runner's tables byte for
byte: test_contrastive_flow, test_capabilities_flow and test_adaptive_debug."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tasks.core.errors import LingtestError
from tasks.core.paths import PACKAGE_ROOT, Workspace

pytest.importorskip("prefect_dask")

HOTEL = "imdb_hotel_conversion.csv"


def _project(root: Path, mirror: Path, *overrides: str):
    from flows.registry import load_params

    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    base = [f"adaptive.trees=[{mirror / 'adatest' / HOTEL}]", "adaptive.models=[vader]",
            "adaptive.bootstrap=200", "runtime.shards=2"]
    return load_params(root, [*base, *overrides]), Workspace(root)


def test_a_gpu_no_worker_declares_is_refused_at_once(mirror, tmp_path, prefect_harness):
    import time

    from flows.stage import run_stage

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

    from flows.stage import task_runner
    from tasks.core.runtime import api_for_workers

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

    from flows.stage import result_storage

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

    from tasks.core.runtime import api_for_workers

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

    from flows.method import call_runner
    from flows.stage import runner_uses_processes

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
    from flows.registry import PROCESS_STAGES
    from flows.stage import resolved_runner

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

    from flows.stage import resolved_runner

    params, _ = _project(tmp_path, mirror, "runtime.task_runner=auto")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "prefect_dask" else real(name, *a))
    with caplog.at_level("WARNING", logger="lingtest"):
        assert resolved_runner(params, "capabilities").runtime.task_runner == "threads"
    assert "pip install 'lingtest[dask]'" in caplog.text
