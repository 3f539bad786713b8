"""`lingtest ui`: a real Prefect server; flows started in the checkout report to it."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.core.runtime import running_ui_url, ui_state_file
from lingtest.tasks.core.server import start_server, stop_server

FLOW = """
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.runtime import configure_environment
print(configure_environment(Workspace.current()))
from prefect import flow

@flow(name="ping")
def ping():
    return 1

ping.with_options(flow_run_name="ping-from-checkout")()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_flow_runs_show_up_on_the_ui_server(tmp_path: Path) -> None:
    shutil.copy(PACKAGE_ROOT / "params.yaml", tmp_path / "params.yaml")
    workspace = Workspace(tmp_path)
    process, api_url = start_server(workspace, "127.0.0.1", free_port())
    try:
        assert running_ui_url(workspace) == api_url
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        env["PYTHONPATH"] = str(PACKAGE_ROOT)
        result = subprocess.run([sys.executable, "-c", FLOW], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=180)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.strip().splitlines()[0] == api_url
        runs = httpx.post(f"{api_url}/flow_runs/filter", json={}, timeout=10).json()
        assert "ping-from-checkout" in [run["name"] for run in runs]
        assert (tmp_path / ".prefect" / "prefect.db").exists() or any(
            (tmp_path / ".prefect").glob("*.db"))
    finally:
        stop_server(process, workspace)
    assert not ui_state_file(workspace).exists()
    assert running_ui_url(workspace) is None


# `lingtest ui` started the way a script's `&` job (or a test runner's worker) starts it:
# SIGINT ignored, which an exec'd process inherits
UI_WITH_SIGINT_IGNORED = """import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
os.execv(sys.executable, [sys.executable, "-m", "lingtest.flows.cli", "ui", "--port", sys.argv[1]])
"""


def test_ctrl_c_stops_lingtest_ui_and_its_server_even_when_sigint_came_ignored(tmp_path):
    """Ctrl-C (SIGINT) still stops `lingtest ui` and the server it started; with the
    inherited SIG_IGN left in place both ignored it and only SIGKILL ended them."""
    import signal
    import time

    (tmp_path / "params.yaml").write_text((PACKAGE_ROOT / "params.yaml").read_text())
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    log = tmp_path / "ui.log"
    process = subprocess.Popen([sys.executable, "-c", UI_WITH_SIGINT_IGNORED, str(port)],
                               cwd=tmp_path, env={**clean, "PYTHONPATH": str(PACKAGE_ROOT)},
                               stdout=log.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True)
    state = ui_state_file(Workspace(tmp_path))
    try:
        deadline = time.monotonic() + 120
        while not state.is_file():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        os.kill(process.pid, signal.SIGINT)
        assert process.wait(timeout=30) == 0, log.read_text()
        with socket.socket() as probe:  # the server is gone too
            assert probe.connect_ex(("127.0.0.1", port)) != 0
        assert not state.exists()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
