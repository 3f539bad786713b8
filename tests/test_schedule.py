"""Scheduled reruns and `lingtest ui` as a user runs them: real servers, bounded waits.

`lingtest ui` and `lingtest serve` run as subprocesses in a temporary DVC project; the
scheduled run is read back through the Prefect client (its reads failed with HTTP 422 under
fastapi 0.151–0.154, and SQLAlchemy 2.1 stopped the scheduler from creating runs at all).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.core.runtime import ui_state_file

from test_ui_server import free_port

LINGTEST = [sys.executable, "-m", "lingtest.flows.cli"]

DVC_YAML = """stages:
  count:
    cmd: {python} count.py
    deps: [count.py]
    params: [seed]
    metrics:
      - metrics.json:
          cache: false
"""
COUNT_PY = """import json, os, yaml
seed = yaml.safe_load(open("params.yaml"))["seed"]
json.dump({"seed_seen": seed}, open("metrics.json", "w"))
open("experiment.txt", "a").write(os.environ.get("LINGTEST_EXPERIMENT", "-") + "\\n")
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PYTHONPATH=str(PACKAGE_ROOT), DO_NOT_TRACK="1", DVC_NO_ANALYTICS="1",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", **extra)
    return env


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root,
                   check=True, capture_output=True)


@pytest.fixture(scope="module")
def dvc_project(tmp_path_factory) -> Path:
    """A git + DVC project with lingtest's params.yaml and one tiny stage."""
    root = tmp_path_factory.mktemp("schedule") / "project"
    root.mkdir()
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    (root / "dvc.yaml").write_text(DVC_YAML.format(python=sys.executable))
    (root / "count.py").write_text(COUNT_PY)
    (root / ".gitignore").write_text(".prefect/\n")
    _git(root, "init", "-q")
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True,
                   env=_env())
    subprocess.run([sys.executable, "-m", "dvc", "config", "core.analytics", "false"], cwd=root,
                   check=True, env=_env())
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "init")
    return root


def _spawn(root: Path, args: list[str], log: str, **env: str) -> subprocess.Popen:
    """A lingtest command in the background, its output in a file (a full pipe would block it)."""
    out = open(root.parent / log, "w")
    process = subprocess.Popen([*LINGTEST, *args], cwd=root, env=_env(**env), stdout=out,
                               stderr=subprocess.STDOUT, text=True)
    process.log_path = root.parent / log  # what _stop shows when the process hangs
    return process


def _log(root: Path, log: str) -> str:
    return (root.parent / log).read_text()[-3000:]


def _start_ui(root: Path, port: int) -> tuple[subprocess.Popen, str]:
    process = _spawn(root, ["ui", "--port", str(port)], "ui.log")
    api_url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, _log(root, "ui.log")
        try:
            # ready = healthy AND its state file written: `serve` finds the server through it
            # (the server answers a moment before `lingtest ui` writes the file)
            if (httpx.get(f"{api_url}/health", timeout=1).status_code == 200
                    and ui_state_file(Workspace(root)).is_file()):
                return process, api_url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    process.kill()
    pytest.fail("lingtest ui did not answer within 120 s")


def _stop(process: subprocess.Popen, timeout: float = 180) -> int:
    """SIGTERM, as a service manager stops a process; SIGKILL (and a failure) if it hangs.
    Under the whole suite's load three stops took over 40-60 s in one full run (none when
    these files ran alone; a tick may be in flight at SIGTERM), hence 180 s."""
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGUSR1)  # `lingtest serve` dumps its threads' stacks
        time.sleep(3)
        process.kill()
        process.wait()
        log = getattr(process, "log_path", None)
        tail = log.read_text()[-6000:] if log is not None and log.is_file() else ""
        raise AssertionError(f"{process.args[3:]} did not stop within {timeout} s of SIGTERM; "
                             f"its log ends:\n{tail}")


def _port_free(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=1)
    except httpx.HTTPError:
        return True
    return False


@pytest.fixture(scope="module")
def project_ui(dvc_project: Path):
    """(process, port, API URL) of `lingtest ui` on the module's project: one start serves
    the schedule test and then the UI test, which stops it (it comes last in this file)."""
    port = free_port()
    ui, api_url = _start_ui(dvc_project, port)
    yield ui, port, api_url
    if ui.poll() is None:
        _stop(ui)


def _repro_runs(api_url: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}):
        with get_client(sync_client=True) as client:
            return client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(
                any_=["repro"])))


def _first(serve: subprocess.Popen, root: Path, what: str, find) -> list:
    """What ``find()`` returns once it returns anything, polled while the service runs."""
    found, deadline = [], time.monotonic() + 120
    while not found and time.monotonic() < deadline:
        assert serve.poll() is None, _log(root, "serve.log")
        time.sleep(1)
        found = find()
    assert found, f"no {what} within 120 s of serving:\n" + _log(root, "serve.log")
    return found


def _artifacts(api_url: str, key: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}):
        with get_client(sync_client=True) as client:
            return client.read_artifacts(artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[key])))


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_served_interval_schedule_fires_and_each_run_is_a_dvc_experiment(
        dvc_project: Path, project_ui) -> None:
    _, _, api_url = project_ui
    serve = _spawn(dvc_project, ["serve", "--interval", "5"], "serve.log",
                   PREFECT_RUNNER_POLL_FREQUENCY="1")
    try:
        # an experiment's run (later ticks find nothing changed: state Unchanged)
        runs = _first(serve, dvc_project, "scheduled run of `repro` completed", lambda: [
            r for r in _repro_runs(api_url) if r.state_name == "Completed"])
        run = runs[0]
        assert run.deployment_id is not None  # fired by the schedule, not started by hand
        commit = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], cwd=dvc_project,
                                capture_output=True, text=True).stdout.strip()
        assert run.name.startswith("repro-all-")  # stage(s) and tick time
        assert f"exp:{run.name}" in run.tags  # its DVC experiment
        # the stage command ran under that name (a lingtest stage tags its run with it)
        assert (dvc_project / "experiment.txt").read_text().splitlines()[0] == run.name
        assert {"stage:repro", f"commit:{commit}", "seed:42"} <= set(run.tags)
        assert any(tag.startswith("params:") for tag in run.tags)
        metrics = _artifacts(api_url, "dvc-metrics")
        assert metrics and "seed 42" in (metrics[0].description or "")
    finally:
        _stop(serve)
    # The rerun was a DVC experiment: `dvc exp show` lists it with the stage's metric.
    shown = subprocess.run([sys.executable, "-m", "dvc", "exp", "show", "--json"],
                           cwd=dvc_project, capture_output=True, text=True, env=_env())
    assert shown.returncode == 0, shown.stderr
    experiments = [exp for row in json.loads(shown.stdout) for exp in (row.get("experiments") or [])]
    assert experiments, shown.stdout[:2000]
    assert "seed_seen" in shown.stdout


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_serve_without_git_reruns_with_dvc_repro_and_says_so_once(tmp_path: Path) -> None:
    """A `dvc init --no-scm` project cannot hold `dvc exp` experiments: the service says so
    in one line at start and its ticks run plain `dvc repro` (before: every tick failed on
    `dvc exp run` with a traceback). A DVC project that expects git where there is none is
    refused at start with one line naming the fix."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    (root / "dvc.yaml").write_text(DVC_YAML.format(python=sys.executable))
    (root / "count.py").write_text(COUNT_PY)
    for args in (["init", "--no-scm", "-q"], ["config", "core.analytics", "false"]):
        subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, check=True, env=_env())
    ui, api_url = _start_ui(root, free_port())
    try:
        serve = _spawn(root, ["serve", "--interval", "5"], "serve.log",
                       PREFECT_RUNNER_POLL_FREQUENCY="1")
        try:
            finished = _first(serve, root, "tick finished", lambda: [
                r for r in _repro_runs(api_url) if r.state_name != "Unchanged"
                and r.state_type.value in ("COMPLETED", "FAILED", "CRASHED")])
        finally:
            code = _stop(serve)
        log = (tmp_path / "serve.log").read_text()
        assert [r.state_name for r in finished] == ["Completed"], log[-3000:]
        assert not any(tag.startswith("exp:") for tag in finished[0].tags)
        assert code == 0 and "Traceback" not in log, log[-3000:]
        said = [line for line in log.splitlines() if "no git repository" in line]
        assert said == [f"{root} is no git repository (dvc init --no-scm): no DVC experiments "
                        "without git, so each tick runs plain `dvc repro`"]
        assert json.loads((root / "metrics.json").read_text()) == {"seed_seen": 42}
        assert (root / "experiment.txt").read_text().splitlines()[0] == "-"  # no experiment

        subprocess.run([sys.executable, "-m", "dvc", "config", "core.no_scm", "false"],
                       cwd=root, check=True, env=_env())
        refused = subprocess.run([*LINGTEST, "serve", "--interval", "5"], cwd=root, env=_env(),
                                 capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert "Traceback" not in refused.stderr
        assert refused.stderr.strip().splitlines()[-1].endswith(
            "is a DVC project that expects git but is no git repository; fix: `git init` and "
            "commit it, or `dvc config core.no_scm true` to rerun without git (no experiments)")
    finally:
        _stop(ui)


def test_ui_port_sets_the_ui_api_url_refuses_a_taken_port_and_stops_on_sigterm(
        dvc_project: Path, project_ui) -> None:
    ui, port, api_url = project_ui  # the server the schedule test above (if run) served with
    assert ui.poll() is None, "the module's `lingtest ui` stopped before this test"
    try:
        # The UI in the browser asks /ui-settings where the API is: this port, not 4200.
        settings = httpx.get(f"http://127.0.0.1:{port}/ui-settings", timeout=10).json()
        assert settings["api_url"] == api_url
        second = subprocess.run([*LINGTEST, "ui", "--port", str(port)], cwd=dvc_project,
                                env=_env(), capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert f"port {port} on 127.0.0.1 is taken" in second.stderr
        assert "Traceback" not in second.stderr and "Prefect UI" not in second.stdout
    finally:
        code = _stop(ui)
    assert code == 0
    assert _port_free(port), "the Prefect server outlived `lingtest ui` (orphan)"
    assert not (dvc_project / ".prefect" / "ui.json").exists()
