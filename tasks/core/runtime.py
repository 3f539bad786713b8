"""Process set-up before Prefect or torch do anything: environment, telemetry, seeds, threads.

``configure_environment`` must run before ``import prefect`` reads its settings, so the CLI
calls it first. It points Prefect at a repo-local home, turns telemetry off, and joins the
``lingtest ui`` server when one is running for this project.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace

if TYPE_CHECKING:
    from lingtest.tasks.core.config import RuntimeParams

TELEMETRY_OFF = {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DVC_NO_ANALYTICS": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}


def ui_state_file(workspace: Workspace) -> Path:
    return workspace.prefect_home / "ui.json"


def running_ui_url(workspace: Workspace, timeout: float = 10.0) -> str | None:
    """The API URL of this project's ``lingtest ui`` server when it answers, else None."""
    state = ui_state_file(workspace)
    if not state.is_file():
        return None
    try:
        url = json.loads(state.read_text())["api_url"]
        import httpx

        if httpx.get(f"{url}/health", timeout=timeout).status_code == 200:
            return url
    except Exception:  # a stale state file: the server is gone
        return None
    return None


def configure_environment(workspace: Workspace, use_ui: bool = True) -> str | None:
    """Set the process environment for Prefect, DVC and HF; return the UI's API URL if used."""
    for key, value in TELEMETRY_OFF.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("PREFECT_HOME", str(workspace.prefect_home))
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    api_url = running_ui_url(workspace) if use_ui and "PREFECT_API_URL" not in os.environ else None
    if api_url:
        os.environ["PREFECT_API_URL"] = api_url
    else:
        check_api_url()  # the user's PREFECT_API_URL: it answers, or one error now
    return api_url or os.environ.get("PREFECT_API_URL")


def check_api_url(timeout: float = 5.0) -> None:
    """A PREFECT_API_URL that does not answer is one error before the run, not an httpx
    traceback from inside Prefect."""
    url = os.environ.get("PREFECT_API_URL")
    if not url:
        return
    import httpx

    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=timeout).raise_for_status()
    except httpx.HTTPError as error:
        from lingtest.tasks.core.secrets import redact_text

        raise LingtestError(
            f"PREFECT_API_URL={redact_text(url)} does not answer ({type(error).__name__}: "
            f"{redact_text(str(error))}); fix: start that server (`lingtest ui`), or unset "
            "PREFECT_API_URL so the run starts a temporary server of its own") from None


def interpreter_first(path: str) -> str:
    """``path`` (a PATH value) with the running interpreter's bin folder first: a service's
    PATH may hold no venv, and dvc.yaml's commands call ``lingtest`` and ``python`` by name."""
    import sys

    bin_dir = str(Path(sys.executable).parent)
    return os.pathsep.join([bin_dir, *[p for p in path.split(os.pathsep) if p and p != bin_dir]])


def seed_everything(seed: int) -> None:
    """One seed for Python, NumPy and torch (torch only if already importable)."""
    random.seed(seed)
    import numpy as np

    np.random.seed(seed % (2**32))
    _unseed_prefect_port_choice()
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return
    torch.manual_seed(seed)


def _unseed_prefect_port_choice() -> None:
    """Prefect's temporary server draws its port from the global ``random``
    (``SubprocessASGIServer.find_available_port``), so two runs with the same seed drew the
    same ports and collided; that module gets OS entropy instead. Only ours is seeded."""
    if os.environ.get("PREFECT_API_URL"):  # a running server: no port to pick
        return
    from prefect.server.api import server

    server.random = random.SystemRandom()


def set_threads(threads: int) -> None:
    """Cap torch's intra-op threads (the default profile targets 2 cores)."""
    import torch

    torch.set_num_threads(threads)


def git_commit(root: Path) -> str:
    """Short commit of the project checkout, ``-dirty`` when its code has uncommitted changes.

    Only code counts: under ``dvc repro`` the stage's own outputs are always modified.
    """
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=root,
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                                "flows", "tasks", "pyproject.toml"],
                               cwd=root, capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "nogit"


STARTS = 3  # attempts at Prefect's temporary server


def start_temporary_server(attempts: int = STARTS) -> str:
    """Start Prefect's temporary server (the instance Prefect's own temporary mode uses), retried:
    under load its health check can time out (an httpx ReadTimeout, a 300-line traceback after
    minutes); each failed attempt is stopped and the next waits longer on another port. After
    the last one: one line with the fix. Returns its API URL."""
    import time

    from prefect.server.api.server import SubprocessASGIServer

    timeout = int(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", 120))
    errors = []
    for attempt in range(attempts):
        server = SubprocessASGIServer()
        try:
            server.start(timeout=timeout * 2 ** attempt)
            return server.api_url
        except Exception as error:  # noqa: BLE001 - any start failure is retried, then reported
            first = (str(error).strip().splitlines() or [""])[0][:160]
            errors.append(f"{type(error).__name__}{': ' + first if first else ''}")
            server.stop()
            if attempt + 1 < attempts:  # no wait after the last one
                time.sleep(2 * (attempt + 1))
    raise LingtestError(
        f"Prefect's temporary server did not start ({attempts} attempts, {timeout} s doubling: "
        f"{'; '.join(errors)}); the machine may be overloaded: start `lingtest ui` once (runs "
        f"then report to it, no server per run) or raise "
        f"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS")


@contextlib.contextmanager
def api_for_workers(runtime: "RuntimeParams"):
    """One Prefect API for the run, started before the flow. The configured server
    (``lingtest ui``, PREFECT_API_URL) when there is one; else this process's temporary server,
    started here with retries (``start_temporary_server``) rather than lazily by Prefect, and
    handed to every Dask worker (a worker with no API URL starts its own temporary server,
    ~20 s each, a database of its own). A remote cluster (``runtime.dask_address``) needs a
    server its machines reach: loopback would not do."""
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    if get_current_settings().api.url:
        yield get_current_settings().api.url
        return
    if runtime.task_runner == "dask" and runtime.dask_address:
        raise LingtestError(
            f"runtime.dask_address {runtime.dask_address}: the workers need a Prefect server "
            f"they all reach; start `lingtest ui --host <this machine's address>` (or any "
            f"Prefect server) and set PREFECT_API_URL to its API URL")
    api_url = start_temporary_server()
    with temporary_settings({PREFECT_API_URL: api_url}):
        yield api_url
