"""Test helper: a second project beside a test's, for runs on another task runner."""
from __future__ import annotations

import shutil
from pathlib import Path

from lingtest.tasks.core.paths import Workspace


# The smallest capabilities run that still builds, expands and scores a suite (one capability)
SMALLEST_CAPABILITIES = [
    "capabilities.capabilities=[LC2]", "capabilities.seeds_per_lc=2",
    "capabilities.max_masks_per_seed=2", "capabilities.fill_candidates=3",
    "capabilities.pcfg_heldout=10", "capabilities.checklist_max_examples=3",
    "capabilities.coverage_sizes=[4]", "capabilities.coverage_repeats=1",
    "capabilities.bootstrap=100"]

# The project's code and profiles, as DVC hashes them for a stage's dependencies (dvc.yaml)
CODE_FOLDERS = ("tasks", "flows", "lingtest", "params")


def copy_code(root: Path) -> None:
    """The project's code folders and profiles into ``root``: a copy ``dvc repro`` can run."""
    from lingtest.tasks.core.paths import PACKAGE_ROOT

    for folder in CODE_FOLDERS:
        shutil.copytree(PACKAGE_ROOT / folder, root / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))


def sibling_project(source: Workspace, root: Path) -> Workspace:
    """A project at ``root`` with ``source``'s parameters and raw and processed tables (no
    interim outputs, caches or reports), so a stage runs there cold on the same inputs."""
    root.mkdir(parents=True)
    shutil.copy(source.root / "params.yaml", root / "params.yaml")
    for folder in ("raw", "processed"):
        shutil.copytree(source.data / folder, root / "data" / folder)
    return Workspace(root)


# Real CheckList tests of each kind (MFT, INV, DIR), LC2's own test among them (coverage_pairs)
CHECKLIST_TESTS = ("Sentiment-laden words in context", "simple negations: not negative",
                   "punctuation", "intensifiers")


def fewer_rows(workspace: Workspace, sst_per_split: int | None = 600,
               checklist_tests: tuple[str, ...] | None = CHECKLIST_TESTS) -> None:
    """``workspace``'s SST (the first ``sst_per_split`` sentences of each split; None: all)
    and CheckList suite (``checklist_tests``; None: all) cut down in place: the same real
    rows, fewer of them for spaCy to tag (all 11,855) and a slow model to score (all 38
    tests)."""
    import pandas as pd

    from lingtest.tasks.core.io import write_parquet

    if sst_per_split is not None:
        sst = pd.read_parquet(workspace.processed / "sst.parquet")
        write_parquet(workspace.processed / "sst.parquet",
                      sst.groupby("split", sort=False).head(sst_per_split))
    if checklist_tests is None:
        return
    checklist = pd.read_parquet(workspace.processed / "checklist_suite.parquet")
    kept = checklist[checklist["test"].isin(checklist_tests)]
    assert set(kept["test"]) == set(checklist_tests), "a CheckList test was renamed"
    write_parquet(workspace.processed / "checklist_suite.parquet", kept)


def dask_overrides(storage: Path, address: str) -> list[str]:
    """The session's cluster of two worker processes (conftest's ``dask_cluster``), results
    and cache records in ``storage``."""
    return ["runtime.task_runner=dask", f"runtime.dask_address={address}",
            "runtime.max_workers=2", f"runtime.result_storage={storage}"]


def report_tables(workspace: Workspace, stage: str) -> dict[str, bytes]:
    """Every table (Markdown and CSV), metrics and provenance file of a stage's reports, by
    path in its folder (figures' images aside): what two runs that must agree compare."""
    folder = workspace.reports / stage
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.suffix in (".csv", ".md", ".json")}


def changed_tables(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    """The files of two ``report_tables`` whose bytes differ, or that one run lacks."""
    return sorted(name for name in before.keys() | after.keys()
                  if before.get(name) != after.get(name))
