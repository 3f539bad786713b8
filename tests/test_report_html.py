"""``lingtest report RUN`` on what is not a finished run: one clear error line, exit status 2,
and no report.html written (a previous one left as it was). The report of a real run is
checked by tests/report_checks.py where a test makes one (tests/test_python_api.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lingtest.tasks.core.errors import LingtestError

RUN = {"name": "half", "models": ["mine"], "methods": ["capabilities"],
       "baselines": {"capabilities": ["vader"]}, "notes": []}


def report(run: str, root: Path) -> subprocess.CompletedProcess:
    """``lingtest report RUN`` as a user types it, in the project ``root``."""
    env = {**os.environ, "LINGTEST_ROOT": str(root)}
    return subprocess.run([sys.executable, "-m", "lingtest.flows.cli", "report", run],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)


def one_error(done: subprocess.CompletedProcess, *words: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lingtest: error: "), done.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert done.stdout == ""
    return lines[0]


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_run_that_does_not_exist_is_named_with_the_fix(tmp_path: Path) -> None:
    one_error(report("no-such-run", tmp_path), "no-such-run", "run.json is missing", "fix:")
    assert not any(tmp_path.iterdir())


def test_a_folder_without_run_json_gets_no_report(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "started"
    (folder / "interim").mkdir(parents=True)
    one_error(report(str(folder), tmp_path), "run.json is missing")
    assert not (folder / "report.html").exists()


@pytest.mark.parametrize("text, problem", [
    ('{"name": "half", "models": [', "not valid JSON"),  # cut off while being written
    ('["half"]', "not a JSON object"),
    ('{"name": "half"}', "models, methods, baselines missing"),
])
def test_a_malformed_run_json_is_one_error_naming_it(tmp_path: Path, text: str,
                                                      problem: str) -> None:
    folder = tmp_path / "runs" / "half"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(text, encoding="utf-8")
    one_error(report("half", tmp_path), "run.json", problem, "run lingtest test for it again")
    assert files(folder) == {"run.json": text.encode()}


def test_an_incomplete_run_leaves_the_previous_report(tmp_path: Path) -> None:
    """A run folder copied in part: the missing file is named, relative to the run, and
    the report written before stays whole (no temporary file left beside it)."""
    folder = tmp_path / "runs" / "half"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(RUN), encoding="utf-8")
    (folder / "report.html").write_text("<p>the report of yesterday</p>", encoding="utf-8")
    before = files(folder)
    line = one_error(report("half", tmp_path), "run half",
                     "interim/capabilities/suite.parquet is missing", "fix:")
    assert str(tmp_path / "runs" / "half" / "interim") not in line
    assert files(folder) == before


def test_result_report_refuses_an_incomplete_run(tmp_path: Path) -> None:
    """From Python too: a LingtestError, and nothing written."""
    import lingtest

    folder = tmp_path / "runs" / "half"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(RUN), encoding="utf-8")
    with pytest.raises(LingtestError, match="suite.parquet is missing"):
        lingtest.load(folder).report()
    assert files(folder) == {"run.json": json.dumps(RUN).encode()}
