"""Test helper: commands run as a user types them, with the virtualenv's ``lingtest`` on PATH,
each in a process group of its own so that stopping it stops what it started."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


def user_env(mirror: Path, **extra: str) -> dict[str, str]:
    """The environment of a user's shell: the virtualenv first on PATH, offline, the mirror."""
    env = dict(os.environ)
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               HF_HUB_OFFLINE="1", LINGTEST_MIRROR=str(mirror), COLUMNS="200", **extra)
    env.pop("LINGTEST_ROOT", None)  # the project is the current folder, as for a user
    return env


@contextmanager
def started(command: str, cwd: Path, env: dict[str, str], line: str,
            timeout_s: float) -> Iterator[Path]:
    """``command`` in bash until ``line`` is in its output (stdout and stderr, in the log
    file yielded); then SIGTERM to its group, as a service manager stops it."""
    log = cwd.parent / f"{cwd.name}-{time.monotonic_ns()}.log"
    with log.open("w") as out:
        process = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while line not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"`{command}` exited ({process.returncode}) or ran {timeout_s} s "
                            f"without printing {line!r}:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield log
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
