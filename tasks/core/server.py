"""``lingtest ui``: a real Prefect server on SQLite under the project's PREFECT_HOME.

The server's API URL is written to ``.prefect/ui.json``; ``lingtest run`` reads it and
reports there while the server answers, else falls back to a temporary local server.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.runtime import TELEMETRY_OFF, ui_state_file


def server_env(workspace: Workspace, api_url: str) -> dict[str, str]:
    """The server's environment: the project's home, telemetry off, and the UI pointed at this
    server's API (the UI's default is port 4200, whatever port the server listens on)."""
    env = dict(os.environ, **TELEMETRY_OFF, PREFECT_HOME=str(workspace.prefect_home),
               PREFECT_UI_API_URL=api_url)
    env.pop("PREFECT_API_URL", None)
    return env


def check_port_free(host: str, port: int) -> None:
    """Fail with one clear line when something already listens on ``host:port``: the health
    check would otherwise reach that other server and report success."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            raise LingtestError(
                f"port {port} on {host} is taken ({error.strerror}): another `lingtest ui` or "
                f"Prefect server may run there; stop it or pick another port "
                f"(`lingtest ui --port {port + 1}`)") from None


def start_server(workspace: Workspace, host: str, port: int,
                 wait_s: float = 120.0) -> tuple[subprocess.Popen, str]:
    """Start ``prefect server start`` and wait until its health endpoint answers."""
    import httpx

    check_port_free(host, port)
    workspace.prefect_home.mkdir(parents=True, exist_ok=True)
    api_url = f"http://{host}:{port}/api"
    log = open(workspace.prefect_home / "server.log", "ab")
    # A process group of its own, so stopping it also stops whatever it started.
    process = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", host, "--port", str(port)],
        env=server_env(workspace, api_url), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)
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
    _stop_group(process)
    raise LingtestError(f"prefect server did not answer on {api_url} within {wait_s:.0f} s")


def _stop_group(process: subprocess.Popen) -> None:
    """SIGINT to the server's process group (a clean shutdown), SIGKILL after 20 s."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass


def stop_server(process: subprocess.Popen, workspace: Workspace) -> None:
    state: Path = ui_state_file(workspace)
    if state.exists():
        state.unlink()
    _stop_group(process)


def raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def serve_ui(workspace: Workspace, host: str, port: int) -> None:
    """Run the server in the foreground until Ctrl-C or SIGTERM (either stops the server)."""
    signal.signal(signal.SIGTERM, raise_interrupt)
    # Ctrl-C even when SIGINT came ignored from the parent (a shell script's `&` job, a test
    # runner's worker): an ignored SIGINT is inherited, and the server started below would
    # ignore its stop signal too (measured: 40 s, then SIGKILL, where 2 s is a clean stop)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    process, api_url = start_server(workspace, host, port)
    try:
        print(f"Prefect UI: http://{host}:{port}  (API {api_url}); flows started from "
              f"{workspace.root} report here. Ctrl-C stops it.", flush=True)
        process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop_server(process, workspace)
