"""Prefect's temporary server for a run without `lingtest ui`: started before the flow with
retries, and a start that keeps failing is one line with the fix, not a long traceback.

Each case runs in a subprocess of its own: the session's Prefect harness would otherwise
answer for the temporary server."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tasks.core.paths import PACKAGE_ROOT

PROBE = """import time
from tasks.core.errors import LingtestError
from tasks.core.runtime import start_temporary_server
import httpx
try:
    url = start_temporary_server(2)
    print("healthy", httpx.get(url + "/health", timeout=10).status_code)
except LingtestError as error:
    print("error", error)
"""


def _probe(tmp_path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=240, env={**clean, "PYTHONPATH": str(PACKAGE_ROOT),
                                            "PREFECT_HOME": str(tmp_path / "home"), **env})


@pytest.mark.slow
def test_the_temporary_server_starts_and_a_failing_start_is_one_line(tmp_path):
    started = _probe(tmp_path)
    assert started.stdout.strip() == "healthy 200", started.stdout + started.stderr[-2000:]
    # A database the server cannot open: it never answers; two attempts, then one line.
    failed = _probe(tmp_path, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="2",
                    PREFECT_API_DATABASE_CONNECTION_URL="sqlite+aiosqlite:////nonexistent/x.db")
    out = failed.stdout.strip()
    assert out.startswith("error Prefect's temporary server did not start (2 attempts"), out
    assert "Timed out" in out and "start `lingtest ui` once" in out
    assert len(out.splitlines()) == 1 and "Traceback" not in failed.stdout
