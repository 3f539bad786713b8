"""Atomic folder replacement: ``data/raw``, ``data/processed`` and report folders are swapped
by renames, so a SIGKILL at any step leaves the previous or the new copy whole, and the next
start puts the previous copy back and deletes leftover staging folders."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from projects import copy_code
from lingtest.tasks.core import io
from lingtest.tasks.core.paths import Workspace

# Runs one writer in a child process that SIGKILLs itself at a chosen step of the swap:
# "aside" (before moving the old copy aside), "move_in" (before moving the new copy to the
# target, for the old code: right after it deleted the target) or "delete_old".
CHILD = textwrap.dedent("""
    import json, os, shutil, signal, sys
    from pathlib import Path

    import pandas as pd

    target, kill_at, writer, root, mirror = sys.argv[1:6]
    target = Path(target)
    real_rename, real_rmtree = os.rename, shutil.rmtree

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def rename(src, dst, *args, **kwargs):
        if kill_at == "aside" and Path(src) == target:
            die()
        if kill_at == "move_in" and Path(dst) == target:
            die()
        return real_rename(src, dst, *args, **kwargs)

    def rmtree(path, *args, **kwargs):
        if kill_at == "delete_old" and ".old-" in Path(path).name:
            die()
        return real_rmtree(path, *args, **kwargs)

    os.rename, shutil.rmtree = rename, rmtree
    from lingtest.tasks.core.paths import Workspace
    if writer == "raw":
        from lingtest.tasks.core.assets import import_raw_assets
        from lingtest.tasks.core.config import DataParams
        import_raw_assets(DataParams(mirror=mirror, online=False, assets=["boolq"]),
                          Workspace(Path(root)))
    else:
        from lingtest.tasks.data.build_tasks import write_tables
        tables = {"t": pd.DataFrame({"x": [1, 2, 3]})}
        write_tables.fn(tables, root)
    """)


def _previous_copy(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "MANIFEST.tsv").write_text("previous\n")
    (folder / "t.parquet").write_text("previous\n")


def _run_child(target: Path, kill_at: str, writer: str, root: Path, mirror: Path) -> int:
    done = subprocess.run([sys.executable, "-c", CHILD, str(target), kill_at, writer,
                           str(root), str(mirror)], capture_output=True, text=True,
                          timeout=120)
    return done.returncode


def _is_new(target: Path, writer: str) -> bool:
    if writer == "raw":
        return (target / "MANIFEST.tsv").read_text().startswith("path\tsha256")
    return pd.read_parquet(target / "t.parquet")["x"].tolist() == [1, 2, 3]


@pytest.mark.parametrize("writer", ["raw", "processed"])
@pytest.mark.parametrize("kill_at", ["aside", "move_in", "delete_old"])
def test_sigkill_during_swap_leaves_a_whole_copy(tmp_path, mirror, writer, kill_at):
    workspace = Workspace(tmp_path)
    target = workspace.raw if writer == "raw" else workspace.processed
    _previous_copy(target)
    assert _run_child(target, kill_at, writer, tmp_path, mirror) == -9
    io.recover_dir(target)  # what the next start does first
    if kill_at == "delete_old":
        assert _is_new(target, writer)
    else:
        assert (target / "MANIFEST.tsv").read_text() == "previous\n"
        assert (target / "t.parquet").read_text() == "previous\n"
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]  # no leftovers


def test_next_start_cleans_staging_and_writes_the_new_copy(tmp_path, mirror):
    workspace = Workspace(tmp_path)
    _previous_copy(workspace.raw)
    assert _run_child(workspace.raw, "move_in", "raw", tmp_path, mirror) == -9
    from lingtest.tasks.core.assets import import_raw_assets
    from lingtest.tasks.core.config import DataParams

    import_raw_assets(DataParams(mirror=str(mirror), online=False, assets=["boolq"]), workspace)
    assert _is_new(workspace.raw, "raw")
    assert sorted(p.name for p in workspace.data.iterdir()) == ["raw"]


def test_staged_dir_swaps_on_success_and_keeps_the_old_copy_on_error(tmp_path):
    target = tmp_path / "reports" / "stage"
    target.mkdir(parents=True)
    (target / "old.md").write_text("old")
    with pytest.raises(RuntimeError):
        with io.staged_dir(target) as stage:
            (stage / "half.md").write_text("half")
            raise RuntimeError("killed half-way")
    assert [p.name for p in target.iterdir()] == ["old.md"]
    with io.staged_dir(target) as stage:
        io.write_json(stage / "new.json", {"a": 1})
    assert [p.name for p in target.iterdir()] == ["new.json"]
    assert json.loads((target / "new.json").read_text()) == {"a": 1}
    assert sorted(p.name for p in target.parent.iterdir()) == ["stage"]


@pytest.mark.slow
def test_failed_report_writing_keeps_the_previous_reports(data_project, monkeypatch):
    """A data run that dies while publishing leaves reports/data as it was; the next run
    swaps in a whole new folder and removes the dead run's staging folder."""
    import lingtest.tasks.core.publish
    from lingtest.flows.stage import run_stage
    from lingtest.flows.registry import load_params

    workspace, overrides = data_project
    reports = workspace.reports / "data"
    before = {p.name: p.read_bytes() for p in reports.iterdir()}
    real, calls = lingtest.tasks.core.publish.publish_table, []

    def dies_on_second(key, df, title, *args, **kwargs):
        calls.append(key)
        if len(calls) == 2:
            raise RuntimeError("killed while writing reports")
        real(key, df, "NEW " + title, *args, **kwargs)

    monkeypatch.setattr(lingtest.tasks.core.publish, "publish_table", dies_on_second)
    params = load_params(workspace.root, overrides)
    with pytest.raises(RuntimeError, match="killed while writing reports"):
        run_stage("data", params, workspace)
    assert {p.name: p.read_bytes() for p in reports.iterdir()} == before
    monkeypatch.setattr(lingtest.tasks.core.publish, "publish_table", real)
    run_stage("data", params, workspace)
    assert {p.name: p.read_bytes() for p in reports.iterdir()} == before
    # no staging or moved-aside folder is left (other tests' reports may share the project)
    assert not [p.name for p in workspace.reports.iterdir() if p.name.startswith(".")]


def test_every_report_output_is_kept_by_dvc_until_its_stage_succeeds():
    """DVC deletes a stage's outputs before running it unless they persist: a failed run
    would leave no reports. Every `reports/` output in dvc.yaml persists (publishing swaps in
    a whole folder, so nothing stale survives a successful run)."""
    import yaml

    from lingtest.tasks.core.paths import PACKAGE_ROOT

    stages = yaml.safe_load((PACKAGE_ROOT / "dvc.yaml").read_text())["stages"]
    outs = {(stage, next(iter(out))): next(iter(out.values()))
            for stage, spec in stages.items() for out in spec.get("outs", [])
            if isinstance(out, dict)}
    reports = {key: flags for key, flags in outs.items() if key[1].startswith("reports/")}
    assert {stage for stage, _ in reports} == set(stages)
    assert [key for key, flags in reports.items() if not flags.get("persist")] == []


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_failed_dvc_repro_leaves_the_previous_reports(tmp_path, mirror):
    """`dvc repro` of the real `data` stage, then a failing one (a bad parameter): the first
    run's reports are still there, byte for byte, and `dvc status` names the stage."""
    import os
    import shutil

    from lingtest.tasks.core.paths import PACKAGE_ROOT

    root = tmp_path / "project"
    root.mkdir()
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copy(PACKAGE_ROOT / name, root / name)
    copy_code(root)  # the stages' code dependencies, as DVC hashes them
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "LINGTEST_MIRROR": str(mirror), "HF_HUB_OFFLINE": "1",
           "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "PYTHONPATH": str(PACKAGE_ROOT)}
    env = {k: v for k, v in env.items() if not k.startswith("PREFECT_API")}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), cwd=root, env=env, capture_output=True, text=True,
                              timeout=500)

    for command in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"]):
        assert run(*command).returncode == 0
    params = (root / "params.yaml").read_text()
    # one small asset: its table, the always-built one and the report (all the stage's steps)
    params, subset = re.subn(r"^  assets: \[[^\]]*\]", "  assets: [mrpc]", params, count=1,
                             flags=re.M)
    assert subset == 1
    (root / "params.yaml").write_text(params.replace("online: true", "online: false", 1))
    first = run(sys.executable, "-m", "dvc", "repro", "data")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    reports = root / "reports" / "data"
    before = {p.name: p.read_bytes() for p in reports.iterdir()}
    assert "provenance.json" in before

    (root / "params.yaml").write_text((root / "params.yaml").read_text().replace(
        "timeout_s: ", "timeout_s: -", 1))  # refused by the stage's parameter check
    failed = run(sys.executable, "-m", "dvc", "repro", "data")
    assert failed.returncode != 0 and "timeout_s" in failed.stderr + failed.stdout
    assert {p.name: p.read_bytes() for p in reports.iterdir()} == before
