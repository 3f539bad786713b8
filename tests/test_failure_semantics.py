"""Failure semantics of the ``consistency`` stage: failed LLM calls make the stage fail
(non-zero exit, so DVC does not record it as up to date) after everything is written; the
rerun resends only the failed prompts and succeeds."""
from __future__ import annotations

import shutil
import socket

import pandas as pd
import pytest
from llm_servers import FakeLLMServer
from test_consistency_import import guide_folder  # noqa: F401 - the guide's files, a fixture

from lingtest.tasks.core.errors import FailedCalls
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace

OVERRIDES = ["consistency.llms=[ollama:llama3.2]", "consistency.prompt_join=none",
             "consistency.bootstrap=0", "consistency.retries=0",
             "runtime.task_runner=threads"]  # the tests' reference runner (conftest)


def _project(tmp_path, folder) -> tuple[Workspace, list[str]]:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    return Workspace(root), [f"consistency.import_dir={folder}", *OVERRIDES]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_every_call_refused_fails_the_stage(guide_folder, tmp_path, monkeypatch,  # noqa: F811
                                            prefect_harness):
    from lingtest.flows.stage import run_stage
    from lingtest.flows.registry import load_params

    workspace, overrides = _project(tmp_path, guide_folder)
    monkeypatch.setenv("OLLAMA_HOST", f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(FailedCalls, match="all 7 LLM calls failed") as failed:
        run_stage("consistency", load_params(workspace.root, overrides), workspace)
    assert failed.value.summary["errors"] == failed.value.summary["sent"] == 7
    # no report over the last good ones: this run's (nothing answered) beside its results
    assert not (workspace.reports / "consistency").exists()
    partial = workspace.root / failed.value.partial
    assert failed.value.partial == "data/interim/consistency/failed-run-reports"
    assert failed.value.partial in str(failed.value)
    summary = pd.read_csv(partial / "consistency-summary.csv")
    assert summary.loc[0, "n_errors"] == 7


@pytest.mark.slow
def test_some_calls_failed_fails_the_stage_and_rerun_resends_them(
        guide_folder, tmp_path, monkeypatch, prefect_harness):  # noqa: F811
    from lingtest.flows.stage import run_stage
    from lingtest.flows.registry import load_params

    workspace, overrides = _project(tmp_path, guide_folder)
    params = load_params(workspace.root, overrides)
    with FakeLLMServer("ollama", fail_first=2) as server:
        monkeypatch.setenv("OLLAMA_HOST", server.url)
        with pytest.raises(FailedCalls, match="2 of 7 LLM calls failed"):
            run_stage("consistency", params, workspace)
        again = run_stage("consistency", params, workspace)
    assert again["sent"] == 2 and again["errors"] == 0
    results = pd.read_csv(workspace.reports / "consistency" / "results.csv", dtype=str)
    assert len(results) == 7
