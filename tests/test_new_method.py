"""docs/new-method.md's worked example, run: a copy of the project gets the page's files (the
code blocks headed by their path), and the new method is a stage, a parameter section, a
checked model list and a run that writes its contract tables and report — with no other file
of the project touched."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from projects import copy_code
from lingtest.tasks.core.paths import PACKAGE_ROOT

PAGE = PACKAGE_ROOT / "docs" / "new-method.md"
BLOCK = re.compile(r"```(python|yaml)\n# (\S+)\n(.*?)```", re.S)


def page_files() -> dict[str, str]:
    """Path → text of every code block headed by ``# <path>``."""
    return {path: text for _, path, text in BLOCK.findall(PAGE.read_text(encoding="utf-8"))}


def test_the_page_lists_exactly_the_files_it_writes() -> None:
    files = page_files()
    assert set(files) == {"tasks/typos/__init__.py", "tasks/typos/params.py",
                          "tasks/typos/method.py", "tasks/typos/plugin.py", "params.yaml",
                          "dvc.yaml"}
    table = PAGE.read_text(encoding="utf-8").split("## 1.")[0]
    assert all(f"`{path}`" in table for path in files)


@pytest.fixture(scope="module")
def typos_project(tmp_path_factory, data_project) -> Path:
    """The project's code and configuration with the page's method added."""
    root = tmp_path_factory.mktemp("typos-project")
    copy_code(root)  # the stages' code dependencies, as DVC hashes them
    processed = root / "data" / "processed"
    processed.mkdir(parents=True)
    shutil.copy(data_project[0].processed / "sst.parquet", processed / "sst.parquet")
    params = (PACKAGE_ROOT / "params.yaml").read_text(encoding="utf-8")
    stages = yaml.safe_load((PACKAGE_ROOT / "dvc.yaml").read_text(encoding="utf-8"))
    for path, text in page_files().items():
        if path == "params.yaml":
            params += "\n" + text
        elif path == "dvc.yaml":
            stages["stages"].update(yaml.safe_load(text))
        else:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text, encoding="utf-8")
    (root / "params.yaml").write_text(params, encoding="utf-8")
    (root / "dvc.yaml").write_text(yaml.safe_dump(stages, sort_keys=False), encoding="utf-8")
    return root


def _lingtest(root: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(PYTHONPATH=str(root), LINGTEST_ROOT=str(root), HF_HUB_OFFLINE="1",
               PREFECT_API_URL=PREFECT_API_URL.value())
    return subprocess.run([sys.executable, "-m", "lingtest.flows.cli", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_new_method_is_a_stage_with_a_checked_section(typos_project: Path) -> None:
    stages = _lingtest(typos_project, "stages")
    assert stages.returncode == 0, stages.stderr
    assert "typos\ttypos\tCheckList (Ribeiro et al., ACL 2020)\tlingtest.tasks.typos.method:TyposMethod" \
        in stages.stdout.splitlines()
    refused = _lingtest(typos_project, "params", "--set", "typos.sentences=0")
    assert refused.returncode == 2
    assert "typos.sentences" in refused.stderr and "greater than or equal to 1" in refused.stderr
    unknown = _lingtest(typos_project, "validate", "typos", "--set", "typos.models=[nosuch]")
    assert unknown.returncode == 2 and "typos.models" in unknown.stderr, unknown.stderr
    models = _lingtest(typos_project, "models")
    assert any(line.startswith("│ typos.models") and "vader" in line
               for line in models.stdout.splitlines()), models.stdout


def test_the_new_method_runs_and_reports(typos_project: Path) -> None:
    run = _lingtest(typos_project, "run", "typos", "--set", "typos.sentences=30",
                    "--set", "runtime.task_runner=threads")
    assert run.returncode == 0, run.stderr[-3000:]
    interim = typos_project / "data" / "interim" / "typos"
    suite = pd.read_parquet(interim / "suite.parquet")
    results = pd.read_parquet(interim / "results.parquet")
    assert 25 <= len(suite) <= 30 and (suite["text"] != suite["perturbed"]).all()
    # one swapped pair: the same letters, the same words, one word differs
    for text, perturbed in zip(suite["text"], suite["perturbed"]):
        changed = [(a, b) for a, b in zip(text.split(" "), perturbed.split(" ")) if a != b]
        assert len(changed) == 1 and sorted(changed[0][0]) == sorted(changed[0][1])
    assert len(results) == len(suite) and set(results["model_id"]) == {"vader"}
    metrics = json.loads((typos_project / "reports" / "typos" / "metrics.json").read_text())
    fail = 100 * results["verdict"].eq("fail").mean()
    assert metrics["vader"]["fail %"] == round(fail, 1)
    assert 0 < fail < 50  # VADER's lexicon misses a misspelt word now and then
    provenance = json.loads((typos_project / "reports" / "typos" /
                             "provenance.json").read_text())
    assert provenance["seed"] == 42 and "sst.parquet=" in provenance["inputs (sha256)"]
