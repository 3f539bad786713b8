"""Prefect's temporary server for a run without `lingtest ui`: started before the flow with
retries, and a start that keeps failing is one line with the fix, not a long traceback.

Each case runs in a subprocess of its own: the session's Prefect harness would otherwise
answer for the temporary server."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lingtest.tasks.core.paths import PACKAGE_ROOT

PROBE = """import time
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.runtime import start_temporary_server
import httpx
try:
    url = start_temporary_server(2)
    print("healthy", httpx.get(url + "/health", timeout=10).status_code)
except LingtestError as error:
    print("error", error)
"""


def _probe(home, **env: str) -> subprocess.Popen:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return subprocess.Popen([sys.executable, "-c", PROBE], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**clean, "PYTHONPATH": str(PACKAGE_ROOT),
                                 "PREFECT_HOME": str(home), **env})


def _finish(probe: subprocess.Popen) -> subprocess.CompletedProcess:
    try:
        out, err = probe.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        probe.kill()
        raise
    return subprocess.CompletedProcess(probe.args, probe.returncode, out, err)


@pytest.mark.slow
def test_the_temporary_server_starts_and_a_failing_start_is_one_line(tmp_path):
    # Both cases at once (each in its own Prefect home): the failing one mostly waits.
    # A database the server cannot open: it never answers; two attempts, then one line.
    failing = _probe(tmp_path / "failing", PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="2",
                     PREFECT_API_DATABASE_CONNECTION_URL="sqlite+aiosqlite:////nonexistent/x.db")
    try:
        started = _finish(_probe(tmp_path / "home"))
    finally:
        failed = _finish(failing)
    assert started.stdout.strip() == "healthy 200", started.stdout + started.stderr[-2000:]
    out = failed.stdout.strip()
    assert out.startswith("error Prefect's temporary server did not start (2 attempts"), out
    assert "Timed out" in out and "start `lingtest ui` once" in out
    assert len(out.splitlines()) == 1 and "Traceback" not in failed.stdout
