"""``lingtest ui``: a real Prefect server on SQLite under the project's PREFECT_HOME.

The server's API URL is written to ``.prefect/ui.json``; ``lingtest run`` reads it and
reports there while the server answers, else falls back to a temporary local server.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tasks.core.errors import LingtestError
from tasks.core.paths import Workspace
from tasks.core.runtime import TELEMETRY_OFF, ui_state_file


def server_env(workspace: Workspace) -> dict[str, str]:
    env = dict(os.environ, **TELEMETRY_OFF, PREFECT_HOME=str(workspace.prefect_home))
    env.pop("PREFECT_API_URL", None)
    return env


def start_server(workspace: Workspace, host: str, port: int,
                 wait_s: float = 120.0) -> tuple[subprocess.Popen, str]:
    """Start ``prefect server start`` and wait until its health endpoint answers."""
    import httpx

    workspace.prefect_home.mkdir(parents=True, exist_ok=True)
    api_url = f"http://{host}:{port}/api"
    log = open(workspace.prefect_home / "server.log", "ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)],
        env=server_env(workspace), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LingtestError(f"prefect server exited ({process.returncode}); see "
                                f"{workspace.prefect_home / 'server.log'} (is port {port} free?)")
        try:
            if httpx.get(f"{api_url}/health", timeout=1.0).status_code == 200:
                ui_state_file(workspace).write_text(json.dumps(
                    {"api_url": api_url, "ui_url": f"http://{host}:{port}", "pid": process.pid}))
                return process, api_url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.terminate()
    raise LingtestError(f"prefect server did not answer on {api_url} within {wait_s:.0f} s")


def stop_server(process: subprocess.Popen, workspace: Workspace) -> None:
    state: Path = ui_state_file(workspace)
    if state.exists():
        state.unlink()
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def serve_ui(workspace: Workspace, host: str, port: int) -> None:
    """Run the server in the foreground until Ctrl-C."""
    process, api_url = start_server(workspace, host, port)
    print(f"Prefect UI: http://{host}:{port}  (API {api_url}); flows started from "
          f"{workspace.root} report here. Ctrl-C stops it.", flush=True)
    try:
        process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(process, workspace)
