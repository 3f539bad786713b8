"""One run of a stage at a time per project: a lock file under ``.prefect/locks/``.

Two runs of one stage in one checkout write the same outputs (and two ``dvc exp run`` the same
workspace), so the second refuses at once with one line naming the holder. The lock is an
``flock`` on ``.prefect/locks/<name>.lock``: the kernel drops it when its process dies (a
SIGKILL, a power loss), so a dead holder never blocks; the file's JSON record (pid, host, start
time, command) is only what the refusal says.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace

REPRO = "repro"  # the scheduled rerun's lock: every stage of the project
# Set for the stage commands a scheduled rerun starts, so they do not refuse their own parent.
INSIDE_REPRO = "LINGTEST_INSIDE_REPRO"
# Set with it when the rerun is a DVC experiment: its name, tagged on the stage runs.
EXPERIMENT = "LINGTEST_EXPERIMENT"


class StageBusy(LingtestError):
    """Another live process runs this stage (or a scheduled rerun) in this project."""

    def __init__(self, name: str, record: dict):
        self.record = record
        here = record.get("host") == socket.gethostname()
        what = "a scheduled rerun" if name == REPRO else f"stage {name}"
        super().__init__(
            f"{what} is running in this project since {record.get('since', '?')}, pid "
            f"{record.get('pid', '?')}{'' if here else ' on ' + str(record.get('host'))}; "
            f"wait for it or stop it (its lock: {record.get('path')})")


def lock_path(workspace: Workspace, name: str) -> Path:
    return workspace.prefect_home / "locks" / f"{name}.lock"


def _read(path: Path) -> dict:
    """The holder's record; it is written just after the flock, so a brief wait may be needed."""
    for _ in range(20):
        try:
            record = json.loads(path.read_text() or "{}")
        except (OSError, ValueError):
            record = {}
        if record.get("pid"):
            return {**record, "path": str(path)}
        time.sleep(0.05)
    return {"path": str(path)}


def holder(workspace: Workspace, name: str) -> dict | None:
    """The record of the live process holding ``name``'s lock, or None when it is free."""
    path = lock_path(workspace, name)
    if not path.is_file():
        return None
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(path)
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None


@contextlib.contextmanager
def hold(workspace: Workspace, name: str) -> Iterator[dict]:
    """Hold ``name``'s lock for the block, or raise ``StageBusy`` at once."""
    path = lock_path(workspace, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # not truncated: a holder's record stays readable
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StageBusy(name, _read(path)) from None
        record = {"stage": name, "pid": os.getpid(), "host": socket.gethostname(),
                  "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  "command": " ".join(sys.argv)}
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(record))
        handle.flush()
        try:
            yield record
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
    finally:
        handle.close()  # closing releases the flock


def busy(workspace: Workspace, names: list[str]) -> tuple[str, dict] | None:
    """The first of ``names`` (and the scheduled rerun) whose lock a live process holds."""
    for name in [REPRO, *names]:
        record = holder(workspace, name)
        if record is not None:
            return name, record
    return None
