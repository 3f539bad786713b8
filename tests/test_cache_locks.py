"""Cache-key locks left by a killed run (SIGTERM, kill -9) are broken, so the next run
proceeds within seconds; a run waiting on a live lock says so, naming the lock and holder."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lingtest.tasks.core import cache_locks
from lingtest.tasks.core.cache_locks import ResultStorageLocks
from lingtest.tasks.core.paths import PACKAGE_ROOT

HOLD = textwrap.dedent("""\
    import sys, time
    from lingtest.tasks.core.cache_locks import ResultStorageLocks
    ResultStorageLocks(sys.argv[1]).acquire_lock("the-key", "first-run")
    print("held", flush=True)
    time.sleep(600)
""")


def holder(folder: Path) -> subprocess.Popen:
    """A process that takes ``the-key`` in ``folder`` and keeps it until killed."""
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], env=env,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_a_killed_holders_lock_is_broken_and_the_next_run_takes_it(sig, tmp_path, caplog):
    child = holder(tmp_path)
    child.send_signal(sig)
    child.wait(10)
    lock = tmp_path / "the-key.lock"
    assert json.loads(lock.read_text())["owner"]["pid"] == child.pid  # left behind
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert ResultStorageLocks(tmp_path).acquire_lock("the-key", "next-run", 10)
    assert time.monotonic() - start < 3
    assert json.loads(lock.read_text())["holder"] == "next-run"
    assert f"cache lock {lock}: removed, its holder no longer runs (held by pid {child.pid}" \
        in caplog.text


def test_a_live_holder_is_waited_on_and_named(tmp_path, caplog):
    child = holder(tmp_path)
    try:
        with caplog.at_level(logging.WARNING):
            assert not ResultStorageLocks(tmp_path).acquire_lock("the-key", "next-run", 2.5)
        waits = [r.getMessage() for r in caplog.records if "waiting for cache lock" in
                 r.getMessage()]
        assert len(waits) == 1, caplog.text  # one line, not one per poll
        assert f"{tmp_path / 'the-key.lock'}" in waits[0]
        assert f"pid {child.pid} on host {cache_locks._HOST}" in waits[0]
    finally:
        child.kill()
        child.wait(10)
    assert ResultStorageLocks(tmp_path).acquire_lock("the-key", "next-run", 5)


def _write_lock(folder: Path, owner: dict | None, age_s: float = 0.0) -> Path:
    lock = folder / "the-key.lock"
    record = {"holder": "old-run", "expiration": None}
    if owner is not None:
        record["owner"] = owner
    lock.write_text(json.dumps(record))
    os.utime(lock, (time.time() - age_s, time.time() - age_s))
    return lock


@pytest.mark.parametrize("owner, age_s, held", [
    (None, 0, True),  # Prefect's own format, just written: a run may be holding it
    (None, cache_locks.REMOTE_STALE_S + 60, False),  # left by an older lingtest
    ({"host": "elsewhere", "pid": 1, "started": 1.0}, 0, True),  # refreshed by its holder
    ({"host": "elsewhere", "pid": 1, "started": 1.0}, cache_locks.REMOTE_STALE_S + 60, False),
    ({"host": cache_locks._HOST, "pid": os.getpid(), "started": 12345.0}, 0, False),  # pid reused
    ({"host": cache_locks._HOST, "pid": os.getpid(), "started": None}, 0, True),
], ids=["no-owner-fresh", "no-owner-old", "other-host-fresh", "other-host-stale",
        "pid-reused", "this-process"])
def test_which_locks_still_hold(owner, age_s, held, tmp_path):
    if owner is not None and owner["started"] is None:
        owner["started"] = cache_locks._start_time(os.getpid())
    _write_lock(tmp_path, owner, age_s)
    assert ResultStorageLocks(tmp_path).is_locked("the-key") is held
    assert (tmp_path / "the-key.lock").exists() is held


def test_a_holder_keeps_its_lock_fresh(tmp_path, monkeypatch):
    """Another host judges a lock by its age: the holder refreshes the file."""
    monkeypatch.setattr(cache_locks, "HEARTBEAT_S", 0.2)
    monkeypatch.setattr(cache_locks, "_beating", None)
    locks = ResultStorageLocks(tmp_path)
    assert locks.acquire_lock("the-key", "me")
    lock = tmp_path / "the-key.lock"
    os.utime(lock, (time.time() - 3600, time.time() - 3600))
    time.sleep(1.0)
    assert time.time() - lock.stat().st_mtime < 5
    locks.release_lock("the-key", "me")
    assert not lock.exists()


# --------------------------------------------------------------------------- a real task

TASK = textwrap.dedent("""\
    import time
    from pathlib import Path

    from prefect import task

    from lingtest.tasks.core.caching import ContentInputs

    POLICY = ContentInputs(exclude=("hold_s", "marker"), code_root=Path(__file__).parents[1],
                           packages=("demo_lockpkg",))


    @task(cache_policy=POLICY, persist_result=True)
    def slow(x: int, hold_s: float, marker: str) -> int:
        Path(marker).write_text("running")
        time.sleep(hold_s)
        return x + 1
""")

RUN = textwrap.dedent("""\
    import sys
    from prefect import flow
    from demo_lockpkg.work import slow

    @flow
    def first(marker: str) -> int:
        return slow(1, 600, marker)

    first(sys.argv[1])
""")


@pytest.mark.timeout(300)
def test_a_run_killed_inside_a_cached_task_does_not_hang_the_next(tmp_path, prefect_harness,
                                                                   monkeypatch):
    """kill -9 of a flow whose task holds its cache-key lock; the next run of the same task
    (same key) takes the lock within seconds and computes the result."""
    from prefect import flow
    from prefect.settings import (PREFECT_API_URL, PREFECT_RESULTS_LOCAL_STORAGE_PATH,
                                  temporary_settings)

    package = tmp_path / "demo_lockpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "work.py").write_text(TASK)
    storage = tmp_path / "storage"
    marker = tmp_path / "first-running"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{PACKAGE_ROOT}",
           "PREFECT_API_URL": str(PREFECT_API_URL.value()),
           "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(storage)}
    child = subprocess.Popen([sys.executable, "-c", RUN, str(marker)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert child.poll() is None and time.monotonic() < deadline, "the first run ended"
            time.sleep(0.2)
        locks = list((storage / "cache-locks").glob("*.lock"))
        assert len(locks) == 1  # the task holds its key
    finally:
        child.kill()
        child.wait(10)
    assert locks[0].exists()  # left by the killed run

    monkeypatch.syspath_prepend(str(tmp_path))
    from demo_lockpkg.work import slow

    @flow
    def second(marker: str) -> int:
        return slow(1, 0, marker)

    start = time.monotonic()
    with temporary_settings({PREFECT_RESULTS_LOCAL_STORAGE_PATH: storage}):
        assert second(str(tmp_path / "second-running")) == 2
    assert time.monotonic() - start < 60
    assert (tmp_path / "second-running").exists()  # computed here, under the lock
    assert not locks[0].exists()  # and released
