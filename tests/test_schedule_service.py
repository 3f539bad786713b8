"""`lingtest serve` as a service manager runs it: `env -i` (no venv on PATH), started in another
folder, real `lingtest ui` server, a tiny DVC stage whose command calls `lingtest` and `python`
by name, a webhook receiver on 127.0.0.1, bounded waits.

One module-scoped project and server serve both tests (each a deployment of its own).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lingtest.tasks.core.paths import PACKAGE_ROOT

from test_alerts import TOKEN, Receiver, _hold_in_subprocess
from test_schedule import _artifacts, _env, _git, _start_ui, _stop
from test_ui_server import free_port

# The stage calls `lingtest` and `python` by name, as the pipeline's dvc.yaml does.
DVC_YAML = """stages:
  count:
    cmd: lingtest params > effective.yaml && python count.py
    deps: [count.py]
    params: [seed]
    outs:
      - counted.txt
      - effective.yaml:
          cache: false
    metrics:
      - metrics.json:
          cache: false
"""
COUNT_PY = """import json, os, time, yaml
seed = yaml.safe_load(open("params.yaml"))["seed"]
time.sleep(float(os.environ.get("COUNT_SLEEP", "0")))
if seed == 13:
    raise SystemExit("count.py: error: seed 13 is unlucky")
json.dump({"seed_seen": seed}, open("metrics.json", "w"))
open("counted.txt", "w").write(f"{seed}\\n")
"""
LINGTEST_BIN = Path(sys.executable).parent / "lingtest"


def _project(root: Path, params: str, *dvc_config: list[str]) -> Path:
    """A git + DVC project with the one-stage pipeline, committed."""
    root.mkdir()
    (root / "params.yaml").write_text(params)
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "count.py").write_text(COUNT_PY)
    (root / ".gitignore").write_text(".prefect/\n/reports/schedule/\n/counted.txt\n")
    _git(root, "init", "-q")
    for args in (["init", "-q"], ["config", "core.analytics", "false"], *dvc_config):
        subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, check=True, env=_env(),
                       stdout=subprocess.DEVNULL)
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "init")
    return root


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(project root, API URL) with `lingtest ui` running for it."""
    base = tmp_path_factory.mktemp("service")
    params = (PACKAGE_ROOT / "params.yaml").read_text()
    assert "  alerts: []" in params
    root = _project(base / "project", params.replace(  # fires on the first tick (seed 42)
        "  alerts: []", "  alerts: [{metric: 'metrics.json:seed_seen', above: 40}]", 1),
        # a local-folder DVC remote: each rerun pushes to it
        ["remote", "add", "-d", "shared", str(base / "remote")])
    ui, api_url = _start_ui(root, free_port())
    yield root, api_url
    _stop(ui)


def _service(root: Path, args: list[str], log: str, **extra: str) -> subprocess.Popen:
    """`env -i HOME=… PATH=/usr/bin:/bin <venv>/bin/lingtest serve --project <root> …` from
    another folder. PYTHONPATH only points the venv's editable install at this checkout."""
    elsewhere = root.parent / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    command = [str(LINGTEST_BIN)] if LINGTEST_BIN.is_file() else [
        sys.executable, "-m", "lingtest.flows.cli"]
    env = {"HOME": os.environ.get("HOME", str(root.parent)), "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(PACKAGE_ROOT), "PREFECT_RUNNER_POLL_FREQUENCY": "1", **extra}
    out = open(root.parent / log, "w")
    process = subprocess.Popen([*command, "serve", "--project", str(root), *args],
                               cwd=elsewhere, env=env, stdout=out, stderr=subprocess.STDOUT,
                               text=True)
    process.log_path = root.parent / log  # what _stop shows when the process hangs
    return process


def _runs(api_url: str, deployment: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}):
        with get_client(sync_client=True) as client:
            return client.read_flow_runs(deployment_filter=DeploymentFilter(
                name=DeploymentFilterName(any_=[deployment])), limit=200)


def _wait(what: str, check, serve: subprocess.Popen, log: Path, timeout: float = 150):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert serve.poll() is None, log.read_text()[-3000:]
        found = check()
        if found:
            return found
        time.sleep(1)
    pytest.fail(f"{what}: not within {timeout} s\n{log.read_text()[-3000:]}")


def _named(runs: list, state: str) -> list:
    return [r for r in runs if r.state_name == state]


def _waiting(runs: list) -> list:
    return [r for r in runs if r.state_type.value in ("SCHEDULED", "PENDING", "RUNNING")]


def _experiments(root: Path) -> list[str]:
    shown = subprocess.run([sys.executable, "-m", "dvc", "exp", "list", "--name-only"],
                           cwd=root, capture_output=True, text=True, env=_env(), check=True)
    return shown.stdout.split()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_env_i_service_runs_ticks_skips_overlaps_keeps_the_tree_and_alerts(served) -> None:
    root, api_url = served
    receiver = Receiver()
    log = root.parent / "service.log"
    serve = _service(root, ["--interval", "4", "--name", "svc", "--notify", receiver.url],
                     "service.log", COUNT_SLEEP="4")
    started = time.monotonic()
    try:
        # 1. A tick completes: the stage's `lingtest` and `python` resolved under env -i.
        done = _wait("a completed tick", lambda: _named(_runs(api_url, "svc"), "Completed"),
                     serve, log)
        first = done[0]
        print(f"first completed tick after {time.monotonic() - started:.1f} s: {first.name}")
        assert first.name.startswith("repro-all-")
        tick = first.expected_start_time.astimezone(dt.timezone.utc)
        assert first.name == f"repro-all-{tick:%Y%m%d-%H%M%S}"
        assert f"exp:{first.name}" in first.tags and "stage:repro" in first.tags
        assert "alert:regression" in first.tags
        regression = receiver.wait(1)[0][1]["text"]
        assert regression == (f"lingtest: scheduled rerun {first.name} regression: "
                              f"metrics.json:seed_seen = 42, above 40")
        assert first.name in _experiments(root)
        assert json.loads((root / "metrics.json").read_text()) == {"seed_seen": 42}
        assert (root / "counted.txt").read_text() == "42\n"
        assert any("pushed to" in (a.description or "") and first.name in (a.description or "")
                   for a in _artifacts(api_url, "dvc-metrics"))
        assert yaml.safe_load((root / "effective.yaml").read_text())["seed"] == 42
        assert any(first.name in (a.description or "") for a in _artifacts(api_url, "dvc-metrics"))
        # 2. Ticks landing during the run (its stage alone sleeps one interval) were
        # cancelled, not queued.
        runs = _runs(api_url, "svc")
        overlapped = [r for r in runs if r.state_type.value == "CANCELLED"
                      and "concurrency limit" in (r.state.message or "")]
        assert overlapped, [(r.name, r.state_name) for r in runs]
        assert not [r for r in runs if r.state_name == "AwaitingConcurrencySlot"]
        # 3. Nothing changed: the next ticks record no experiment.
        _wait("an unchanged tick", lambda: _named(_runs(api_url, "svc"), "Unchanged"), serve, log)
        assert _experiments(root) == [first.name]
        # 4. A stage of the project running elsewhere: the tick is skipped, naming it.
        holder = _hold_in_subprocess(root, "count")
        try:
            skipped = _wait("a tick skipped for the held stage", lambda: [
                r for r in _named(_runs(api_url, "svc"), "Skipped")
                if "stage count is running in this project since" in (r.state.message or "")],
                serve, log)
            assert f"pid {holder.pid}" in skipped[0].state.message
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait()
        # 5. An injected failure: the tree stays as it was and the webhook hears of it.
        _git(root, "add", "dvc.lock", "effective.yaml", "metrics.json")
        _git(root, "commit", "-qm", "first outputs")
        params = (root / "params.yaml").read_text()
        (root / "params.yaml").write_text(params.replace("seed: 42", "seed: 13", 1))
        status_before = subprocess.run(["git", "status", "--porcelain"], cwd=root,
                                       capture_output=True, text=True).stdout
        assert status_before.strip() == "M params.yaml"
        # 4b. A new host: a fresh clone pulls the pushed outputs, with nothing to recompute.
        clone = root.parent / "clone"
        subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
        pulled_in = time.monotonic()
        pull = subprocess.run([sys.executable, "-m", "dvc", "pull"], cwd=clone, env=_env(),
                              capture_output=True, text=True)
        pulled_in = time.monotonic() - pulled_in
        assert pull.returncode == 0, pull.stderr
        assert (clone / "counted.txt").read_text() == "42\n"
        status = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=clone,
                                env=_env(), capture_output=True, text=True, check=True)
        assert json.loads(status.stdout) == {}, status.stdout
        print(f"fresh clone: dvc pull {pulled_in:.1f} s, dvc status clean")
        failed = _wait("a failed tick", lambda: [r for r in _runs(api_url, "svc")
                                                 if r.state_type.value == "FAILED"], serve, log)
        posts = receiver.wait(2)
        assert len(posts) == 2, "no failure alert reached the receiver"
        path, body = posts[1]
        assert path == f"/hooks/{TOKEN}"
        text = body["text"]
        print("alert:", text)
        assert text.startswith(f"lingtest: scheduled run {failed[0].name} Failed: ")
        assert "seed 13 is unlucky" in text
        assert f"/runs/flow-run/{failed[0].id}" in text
        status_after = subprocess.run(["git", "status", "--porcelain"], cwd=root,
                                      capture_output=True, text=True).stdout
        assert status_after == status_before
        assert json.loads((root / "metrics.json").read_text()) == {"seed_seen": 42}
        assert (root / "counted.txt").read_text() == "42\n"  # a cached output, checked out
        # 6. A crash: the tick's process is killed mid-run (its `dvc exp run` child is left
        # to finish); the service runs the flow's on_crashed hook, and the webhook hears it.
        (root / "params.yaml").write_text(params.replace("seed: 42", "seed: 8", 1))
        running = _wait("a running tick", lambda: [
            r for r in _runs(api_url, "svc") if r.state_type.value == "RUNNING"
            and any(t.startswith("pid:") for t in r.tags)], serve, log)
        tag = next(t for t in running[0].tags if t.startswith("pid:"))
        os.kill(int(tag.rsplit(":", 1)[1]), signal.SIGKILL)
        crashed = _wait("the killed tick marked Crashed", lambda: [
            r for r in _runs(api_url, "svc") if r.state_type.value == "CRASHED"], serve, log)
        texts = [body["text"] for _, body in receiver.wait(3)]
        print("\n".join(texts))
        assert any(t.startswith(f"lingtest: scheduled run {crashed[0].name} Crashed: ")
                   for t in texts), texts
    finally:
        (root / "params.yaml").write_text(re.sub(r"^seed: \d+", "seed: 42",
                                                 (root / "params.yaml").read_text(), count=1,
                                                 flags=re.M))
        code = _stop(serve)
        receiver.close()
    text = log.read_text()
    assert "tok3n" not in text, "the webhook's token reached the service's log"
    assert "not found" not in text and "exited with 127" not in text
    summary = [line for line in text.splitlines() if line.startswith("stopped serving")]
    print(summary[-1], f"(served {time.monotonic() - started:.0f} s)")
    assert code == 1, text[-2000:]  # the last finished tick failed (or crashed)
    assert "the last run" in summary[-1]
    runs = _runs(api_url, "svc")
    assert not _waiting(runs), "the stopped service left runs waiting"
    from collections import Counter
    print(Counter(f"{r.state_name}: {(r.state.message or '')[:40]}" for r in runs))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_restarted_service_runs_no_stale_tick_and_a_stop_leaves_none_waiting(served) -> None:
    root, api_url = served
    log = root.parent / "restart-1.log"
    first = _service(root, ["--interval", "3", "--name", "restart"], "restart-1.log")
    try:
        _wait("ticks scheduled", lambda: len([r for r in _runs(api_url, "restart")
                                              if r.state_type.value == "SCHEDULED"]) >= 2,
              first, log)
    finally:
        first.send_signal(signal.SIGKILL)  # a crash: no clean-up at all
        first.wait()
    killed = dt.datetime.now(dt.timezone.utc)

    def fallen_due() -> list:
        return [r for r in _runs(api_url, "restart") if r.state_type.value in
                ("SCHEDULED", "PENDING") and r.expected_start_time <= dt.datetime.now(
                    dt.timezone.utc)]

    deadline = time.monotonic() + 30  # ticks fall due while no service runs (every 3 s)
    while not (due := fallen_due()) and time.monotonic() < deadline:
        time.sleep(0.5)
    runs = _runs(api_url, "restart")
    assert due, ("no tick fell due while the service was down",
                 [(r.name, r.state_name, r.expected_start_time) for r in runs])
    print(f"{len(due)} tick(s) fell due while the service was down:",
          sorted(r.state_name for r in due))
    log = root.parent / "restart-2.log"
    restarted_at = dt.datetime.now(dt.timezone.utc)
    second = _service(root, ["--interval", "3", "--name", "restart"], "restart-2.log")
    try:
        ran = _wait("a tick of the restarted service", lambda: [
            r for r in _runs(api_url, "restart") if r.state_type.value == "COMPLETED"
            and r.expected_start_time >= restarted_at], second, log)
        print(f"restarted service ran {ran[0].name} ({ran[0].state_name})")
    finally:
        code = _stop(second)
    runs = {r.id: r for r in _runs(api_url, "restart")}
    for old in due:
        now = runs[old.id]
        assert now.state_type.value == "CANCELLED", (now.name, now.state_name)
        assert "stale tick" in now.state.message
    stale_ran = [r for r in runs.values() if killed <= r.expected_start_time < restarted_at
                 and r.state_type.value in ("COMPLETED", "FAILED", "RUNNING")]
    assert not stale_ran, [r.name for r in stale_ran]
    assert code == 0, log.read_text()[-2000:]
    assert not _waiting(list(runs.values())), [(r.name, r.state_name) for r in runs.values()]


def test_a_failed_rerun_puts_back_untracked_outputs_and_leaves_the_index_alone(tmp_path):
    """Outputs never committed (DVC deletes them before the stage runs; git has no copy) and a
    staged edit: after the failed `dvc exp run`, `git status` and every file are as before."""
    from lingtest.flows.repro import _run, dvc_command, restore_tree, tree_snapshot

    root = _project(tmp_path / "project", (PACKAGE_ROOT / "params.yaml").read_text())
    first = _run(dvc_command("exp", "run", "--name", "first"), str(root))
    assert first.returncode == 0, first.stderr
    (root / "params.yaml").write_text((root / "params.yaml").read_text().replace(
        "seed: 42", "seed: 13", 1))
    _git(root, "add", "params.yaml")  # a staged edit
    status = ["git", "status", "--porcelain"]
    before = subprocess.run(status, cwd=root, capture_output=True, text=True).stdout
    assert "?? metrics.json" in before and "M  params.yaml" in before, before
    files = {name: (root / name).read_text()
             for name in ("metrics.json", "effective.yaml", "dvc.lock", "counted.txt")}
    keep = tmp_path / "keep"
    keep.mkdir()
    snapshot = tree_snapshot(str(root), keep)
    failed = _run(dvc_command("exp", "run", "--name", "second"), str(root))
    assert failed.returncode != 0 and "seed 13 is unlucky" in failed.stderr
    assert not (root / "metrics.json").exists()  # what DVC did to the untracked output
    restored = restore_tree(str(root), snapshot, keep)
    assert "metrics.json" in restored
    assert subprocess.run(status, cwd=root, capture_output=True, text=True).stdout == before
    assert {name: (root / name).read_text() for name in files} == files
