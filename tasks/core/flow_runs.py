"""Flow runs left RUNNING by a process that died (SIGKILL, power loss) are marked Crashed.

Prefect only learns that a run crashed when its process says so; a killed process says
nothing, and the UI shows the run as running for ever. Each stage run is tagged with
``pid:<host>:<pid>``; the next stage start on the same host marks the runs whose process is
gone as Crashed, so run comparisons in the UI never mix live and dead runs.
"""
from __future__ import annotations

import os
import socket

PID_TAG = "pid:"


def process_tag() -> str:
    """The tag naming this process: ``pid:<host>:<pid>``."""
    return f"{PID_TAG}{socket.gethostname()}:{os.getpid()}"


def _process_gone(tag: str) -> bool:
    """True when ``tag`` names a process on this host that no longer exists."""
    host, _, pid = tag[len(PID_TAG):].rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's run: we cannot tell
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def mark_orphaned_runs_crashed(stage_tag: str) -> list[str]:
    """Set Crashed on RUNNING flow runs tagged ``stage_tag`` whose process is gone; their names."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (FlowRunFilter, FlowRunFilterState,
                                                FlowRunFilterStateType, FlowRunFilterTags)
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    marked = []
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            tags=FlowRunFilterTags(all_=[stage_tag]),
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING]))))
        for run in runs:
            tags = [t for t in run.tags if t.startswith(PID_TAG)]
            if tags and _process_gone(tags[0]):
                client.set_flow_run_state(run.id, Crashed(
                    message=f"its process ({tags[0][len(PID_TAG):]}) is gone; marked by the next "
                            f"start of this stage"), force=True)
                marked.append(run.name)
    return marked
