"""Test helper: a second project beside a test's, for runs on another task runner."""
from __future__ import annotations

import shutil
from pathlib import Path

from tasks.core.paths import Workspace


def sibling_project(source: Workspace, root: Path) -> Workspace:
    """A project at ``root`` with ``source``'s parameters and raw and processed tables (no
    interim outputs, caches or reports), so a stage runs there cold on the same inputs."""
    root.mkdir(parents=True)
    shutil.copy(source.root / "params.yaml", root / "params.yaml")
    for folder in ("raw", "processed"):
        shutil.copytree(source.data / folder, root / "data" / folder)
    return Workspace(root)


def dask_overrides(storage: Path, address: str) -> list[str]:
    """The session's cluster of two worker processes (conftest's ``dask_cluster``), results
    and cache records in ``storage``."""
    return ["runtime.task_runner=dask", f"runtime.dask_address={address}",
            "runtime.max_workers=2", f"runtime.result_storage={storage}"]
