"""Alerts and the one-run-per-stage lock, on real files, a real webhook receiver on 127.0.0.1
and real processes (a lock holder that is killed)."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pandas as pd
import pytest

from lingtest.tasks.core import alerts
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.core.run_lock import REPRO, StageBusy, hold, holder, lock_path
from lingtest.tasks.core.sections import AlertRule

TOKEN = "T0/B0/tok3n"


class Receiver:
    """An HTTP server in a thread that records each POST's path and JSON body."""

    def __init__(self, status: int = 200):
        received: list[tuple[str, dict]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append((self.path, json.loads(body or b"{}")))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):  # quiet
                pass

        self.received = received
        self.server = HTTPServer(("127.0.0.1", 0), Handler)  # port 0: a free one
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/{TOKEN}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, count: int = 1, timeout: float = 30) -> list[tuple[str, dict]]:
        deadline = time.monotonic() + timeout
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.received

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture()
def receiver():
    server = Receiver()
    yield server
    server.close()


def test_send_posts_slack_json_and_masks_the_url_when_the_hook_fails(receiver, caplog):
    assert alerts.send(receiver.url, "lingtest: stage data run x Failed: boom")
    path, body = receiver.wait()[0]
    assert path == f"/hooks/{TOKEN}" and body == {"text": "lingtest: stage data run x Failed: boom"}
    broken = Receiver(status=500)
    try:
        with caplog.at_level(logging.INFO, logger="lingtest"):
            assert not alerts.send(broken.url, "text")
        assert "alert to" in caplog.text and "/***" in caplog.text
        assert "tok3n" not in caplog.text
    finally:
        broken.close()
    assert alerts.mask_url(receiver.url) == f"http://127.0.0.1:{receiver.server.server_port}/***"


def test_the_webhook_url_is_masked_in_every_dump_and_error(tmp_path):
    from lingtest.flows.registry import load_params
    from lingtest.tasks.core.errors import LingtestError

    (tmp_path / "params.yaml").write_text((PACKAGE_ROOT / "params.yaml").read_text())
    url = f"https://hooks.example.com/services/{TOKEN}"
    params = load_params(tmp_path, [f"runtime.notify_url={url}"])
    assert params.runtime.notify_url == url  # the code reads the real URL
    dumped = json.dumps(params.model_dump(mode="json"))  # provenance, Prefect's parameters
    assert "tok3n" not in dumped and "https://hooks.example.com/***" in dumped
    with pytest.raises(LingtestError) as bad:
        load_params(tmp_path, [f"runtime.notify_url=hooks.example.com/{TOKEN}"])
    assert "tok3n" not in str(bad.value) and "runtime.notify_url" in str(bad.value)


def test_a_failed_flow_run_notifies_with_stage_run_state_and_error_line(receiver,
                                                                        prefect_harness):
    from prefect import flow

    @flow(name="alert-probe")
    def failing() -> None:
        raise ValueError("the oracle file is empty (inputs/q.jsonl)")

    probe = alerts.with_failure_alerts(failing, "stage probe", receiver.url)
    state = probe(return_state=True)
    assert state.is_failed()
    text = receiver.wait()[0][1]["text"]
    assert text.startswith("lingtest: stage probe run ")
    assert " Failed: " in text and "the oracle file is empty (inputs/q.jsonl)" in text
    # No webhook configured: the flow is returned as it was, with no hook.
    assert alerts.with_failure_alerts(failing, "stage probe", None) is failing


def test_regression_rules_on_metrics_and_on_broken_cases(tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "m.json").write_text(json.dumps({"minilm": {"CR1": {"N_V": 12}}}))
    rules = [AlertRule(metric="reports/m.json:minilm.CR1.N_V", above=10),
             AlertRule(metric="reports/m.json:minilm.CR1.N_V", below=5),
             AlertRule(metric="reports/m.json:minilm.CR9.N_V", above=0),
             AlertRule(cases="broken", above=0)]
    interim = tmp_path / "data" / "interim" / "capabilities"
    interim.mkdir(parents=True)
    before_rows = pd.DataFrame({"case_id": ["a", "b", "c"], "model_id": "m",
                                "verdict": ["pass", "pass", "fail"]})
    before_rows.to_parquet(interim / "results.parquet")
    before = alerts.snapshot_results(rules, tmp_path, ["capabilities", "adaptive"])
    assert list(before) == ["capabilities"]
    after_rows = before_rows.assign(verdict=["fail", "pass", "pass"])  # a broken, c fixed
    after_rows.to_parquet(interim / "results.parquet")
    fired = alerts.regressions(rules, tmp_path, before)
    assert fired == ["reports/m.json:minilm.CR1.N_V = 12, above 10",
                     "reports/m.json:minilm.CR9.N_V: no number there (check runtime.alerts)",
                     "capabilities: 1 case(s) passed in the previous run and fail now "
                     "(more than 0)"]
    # Without a cases rule nothing is read ahead of the run.
    assert alerts.snapshot_results(rules[:1], tmp_path, ["capabilities"]) == {}


HOLDER = """import sys, time
from pathlib import Path
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.run_lock import hold
with hold(Workspace(Path(sys.argv[1])), sys.argv[2]):
    print("held", flush=True)
    time.sleep(120)
"""


def _hold_in_subprocess(root: Path, name: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), name],
                               stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)})
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_run_of_a_stage_refuses_at_once_and_a_dead_holder_does_not_block(tmp_path):
    (tmp_path / "params.yaml").write_text((PACKAGE_ROOT / "params.yaml").read_text())
    workspace = Workspace(tmp_path)
    first = _hold_in_subprocess(tmp_path, "data")
    try:
        started = time.monotonic()
        second = subprocess.run(
            [sys.executable, "-m", "lingtest.flows.cli", "run", "data"], cwd=tmp_path,
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT), "LINGTEST_ROOT": str(tmp_path)})
        took = time.monotonic() - started
        assert second.returncode == 2, second.stderr
        line = second.stderr.strip()
        assert len(line.splitlines()) == 1 and "Traceback" not in line
        assert "stage data is running in this project since " in line
        assert f"pid {first.pid}" in line
        assert took < 20, took  # one line at once, no Prefect server started
        with pytest.raises(StageBusy):
            with hold(workspace, "data"):
                pass
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # The kernel dropped the dead holder's lock: its record is still in the file, but free.
    assert json.loads(lock_path(workspace, "data").read_text())["pid"] == first.pid
    assert holder(workspace, "data") is None
    with hold(workspace, "data") as record:
        assert record["pid"] == os.getpid()
        assert holder(workspace, "data")["pid"] == os.getpid()
    assert holder(workspace, "data") is None


def test_a_manual_run_refuses_while_a_scheduled_rerun_holds_the_project(tmp_path):
    (tmp_path / "params.yaml").write_text((PACKAGE_ROOT / "params.yaml").read_text())
    rerun = _hold_in_subprocess(tmp_path, REPRO)
    try:
        env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT), "LINGTEST_ROOT": str(tmp_path)}
        second = subprocess.run([sys.executable, "-m", "lingtest.flows.cli", "run", "data"],
                                cwd=tmp_path, capture_output=True, text=True, timeout=60,
                                env=env)
        assert second.returncode == 2
        assert "a scheduled rerun is running in this project since" in second.stderr
        assert f"pid {rerun.pid}" in second.stderr
    finally:
        rerun.send_signal(signal.SIGKILL)
        rerun.wait()


def test_a_long_error_line_is_cut_visibly() -> None:
    from lingtest.tasks.core.alerts import error_line

    long = "lingtest: error: adaptive.models: " + "x" * 700
    cut = error_line(long)  # the alert starts "lingtest:" already: no second prefix
    assert len(cut) == 500 and cut.endswith("…") and cut.startswith("adaptive.models: x")
    assert error_line("ValueError: short") == "ValueError: short"


def test_a_skipped_tick_is_no_engine_error_in_the_service_log() -> None:
    """Prefect's engine logs a run that ends Cancelled (a skipped tick) as an ERROR with a
    traceback; lingtest.flows.repro drops that record, and only that one."""
    from prefect.exceptions import CancelledRun

    import lingtest.flows.repro  # noqa: F401 - installs the filter

    class Kept(logging.Handler):
        records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    logger, kept = logging.getLogger("prefect.flow_runs"), Kept()
    logger.addHandler(kept)
    try:
        for error in (CancelledRun("skipped: stage adaptive is running"), RuntimeError("boom")):
            try:
                raise error
            except Exception:
                logger.error("Engine execution exited with unexpected exception", exc_info=True)
    finally:
        logger.removeHandler(kept)
    assert [r.exc_info[1].args[0] for r in kept.records] == ["boom"]


def test_a_user_error_is_logged_without_its_traceback() -> None:
    """Prefect logs a failed task or flow with its stack; a LingtestError's message is the
    whole story (what, where, the fix), so its records carry no traceback; others keep it."""
    from lingtest.tasks.core.errors import LingtestError, drop_user_error_tracebacks

    drop_user_error_tracebacks()
    drop_user_error_tracebacks()  # once is enough: a second call adds no second factory
    records = []
    for error in (LingtestError("consistency.llms: all 6 LLM calls failed"), KeyError("x")):
        try:
            raise error
        except Exception:
            records.append(logging.getLogger("prefect.flow_runs").makeRecord(
                "prefect.flow_runs", logging.ERROR, __file__, 1, "Encountered exception: %r",
                (error,), sys.exc_info()))
    user, other = records
    assert user.exc_info is None and "all 6 LLM calls failed" in user.getMessage()
    assert other.exc_info is not None
