"""Two runs side by side: a real git + DVC project with one recorded run (HEAD) and a new run
on disk, compared by `lingtest.tasks.core.compare` and by `lingtest compare` — the changed parameter,
the metric delta and the cases fixed / broken / added / removed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from lingtest.tasks.core.compare import compare, comparison_markdown, resolve_rev, snapshot
from lingtest.tasks.core.errors import LingtestError

DVC_YAML = """stages:
  adaptive:
    cmd: "true"
    outs:
      - data/interim/adaptive
      - reports/adaptive:
          cache: false
metrics:
  - reports/adaptive/metrics.json
"""


def write_run(root: Path, verdicts: dict[str, str], rounds: int, fail_share: float) -> None:
    interim, reports = root / "data/interim/adaptive", root / "reports/adaptive"
    interim.mkdir(parents=True, exist_ok=True)
    reports.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"case_id": list(verdicts), "model_id": "vader",
                  "verdict": list(verdicts.values()),
                  "score": [0.9 if v == "fail" else 0.1 for v in verdicts.values()]}
                 ).to_parquet(interim / "results.parquet")
    (reports / "provenance.json").write_text(json.dumps({
        "seed": 0, "parameters (adaptive)": json.dumps({"rounds": rounds, "trees": ["a.csv"]})}))
    (reports / "metrics.json").write_text(json.dumps(
        {"vader": {"fail share": fail_share}, "setting": "text"}))


def run(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "DVC_NO_ANALYTICS": "1"}
    return subprocess.run(args, cwd=root, env=env, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture()
def project(tmp_path):
    dvc = str(Path(sys.executable).with_name("dvc"))
    run(tmp_path, "git", "init", "-q")
    run(tmp_path, dvc, "init", "-q")
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    (tmp_path / "params.yaml").write_text("seed: 0\n")  # marks the project root
    write_run(tmp_path, {"c1": "pass", "c2": "pass", "c3": "fail", "c4": "fail"}, 2, 0.5)
    run(tmp_path, dvc, "commit", "-f", "-q", "adaptive")
    run(tmp_path, "git", "add", "-A")
    run(tmp_path, "git", "commit", "-q", "-m", "first run")
    # the next run: c2 broken, c3 fixed, c4 removed, c5 added, one more round
    write_run(tmp_path, {"c1": "pass", "c2": "fail", "c3": "pass", "c5": "fail"}, 3, 0.5 + 0.25)
    return tmp_path


def test_the_new_run_against_the_recorded_one(project):
    before, after = snapshot(project, "adaptive", "HEAD"), snapshot(project, "adaptive", None)
    result = compare("adaptive", before, after, ["case_id", "model_id"])
    assert result.params == ["adaptive.rounds: 2 → 3"]
    assert result.metrics.to_dict("records") == [{
        "metric": "vader.fail share", "before": 0.5, "after": 0.75,
        "delta": 0.25}]
    assert result.counts == {"fixed": 1, "broken": 1, "unchanged": 1, "added": 1,
                             "removed": 1}
    assert list(result.top["case_id"]) == ["c2", "c3"]  # broken first
    assert list(result.top["score_before"]) == [0.1, 0.9]
    text = comparison_markdown(result)
    assert "`adaptive.rounds: 2 → 3`" in text and "broken 1" in text


def test_lingtest_compare_on_revisions(project):
    lingtest = str(Path(sys.executable).with_name("lingtest"))
    out = run(project, lingtest, "compare", "HEAD", "workspace", "--stage", "adaptive",
              "--markdown", "cmp.md")
    assert "# adaptive: HEAD → workspace" in out and "fixed 1, broken 1" in out
    assert (project / "cmp.md").read_text() == out
    same = run(project, lingtest, "compare", "HEAD", "HEAD", "--stage", "adaptive")
    assert "- unchanged" in same and "fixed 0, broken 0, unchanged 4" in same
    with pytest.raises(LingtestError, match="no git revision, DVC experiment"):
        resolve_rev(project, "no-such-thing")


def test_the_previous_run_is_the_last_one_recorded_in_the_workspace(project):
    """What a stage compares itself with as it starts: the run DVC recorded last in this
    workspace (an experiment, uncommitted), read from the cache once DVC has removed the
    stage's outputs before running it; its reports from disk (DVC keeps them: persist)."""
    import shutil

    from lingtest.tasks.core.compare import previous_run
    from lingtest.tasks.core.paths import Workspace

    dvc = str(Path(sys.executable).with_name("dvc"))
    run(project, dvc, "commit", "-f", "-q", "adaptive")  # the second run, recorded, not in git
    shutil.rmtree(project / "data/interim/adaptive")  # what `dvc exp run` does first
    previous = previous_run(Workspace(project), "adaptive")
    head = snapshot(project, "adaptive", "HEAD")
    assert previous.label == "previous run" and previous.params["adaptive.rounds"] == 3
    assert sorted(previous.results["case_id"]) == ["c1", "c2", "c3", "c5"]  # not HEAD's c4
    assert sorted(head.results["case_id"]) == ["c1", "c2", "c3", "c4"]
    assert previous.metrics == {"vader.fail share": 0.75}
    (project / "dvc.lock").unlink()  # nothing recorded: no rows, and no error
    assert previous_run(Workspace(project), "adaptive").results is None
