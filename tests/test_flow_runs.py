"""Flow runs left RUNNING by a killed process are marked Crashed at the next stage start."""
from __future__ import annotations

import os
import socket
import subprocess

from prefect import flow

from lingtest.tasks.core.flow_runs import mark_orphaned_runs_crashed, process_tag


@flow(name="orphan-probe")
def _probe() -> None:
    pass


def _running_run(client, name: str, tags: list[str]):
    from prefect.states import Running

    run = client.create_flow_run(_probe, name=name, tags=tags)
    client.set_flow_run_state(run.id, Running(), force=True)
    return run


def test_only_runs_of_dead_processes_on_this_host_are_marked_crashed(prefect_harness) -> None:
    from prefect.client.orchestration import get_client

    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()
    with get_client(sync_client=True) as client:
        killed = _running_run(client, "killed", ["stage:probe", f"pid:{host}:{dead.pid}"])
        alive = _running_run(client, "alive", ["stage:probe", process_tag()])
        remote = _running_run(client, "remote", ["stage:probe", "pid:other-host:1"])
        other_stage = _running_run(client, "other", ["stage:else", f"pid:{host}:{dead.pid}"])
        marked = mark_orphaned_runs_crashed("stage:probe")
        states = {run.name: client.read_flow_run(run.id).state for run in
                  (killed, alive, remote, other_stage)}
    assert marked == ["killed"]
    assert states["killed"].is_crashed() and "is gone" in states["killed"].message
    assert all(states[name].is_running() for name in ("alive", "remote", "other"))
    assert process_tag() == f"pid:{host}:{os.getpid()}"
