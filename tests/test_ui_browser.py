"""The Prefect UI in headless Chromium: after two `data` runs with different parameters, the
artifact page of ``data-tables`` lists both versions, each version shows its own provenance,
and the second run's ``data-comparison`` artifact shows the changed parameters as a diff.

Chromium is Debian's (``.ci/run`` installs it); it is driven over the DevTools protocol with
``websockets``, polling the rendered text (the UI renders client-side) instead of a fixed time budget.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.core.server import start_server, stop_server

from browser import RENDER_WAIT_S, read_pages, start_chromium, stop_chromium
from test_ui_server import free_port

# Two runs that differ in the seed and in a parameter of the data stage (so in the run names).
RUNS = [{"seed": 1, "data.timeout_s": 11}, {"seed": 2, "data.timeout_s": 12}]


def _run_data_stage(root: Path, mirror: Path, overrides: dict[str, object]) -> None:
    """`lingtest run data` as a user runs it beside `lingtest ui` (it reports to that server)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PYTHONPATH=str(PACKAGE_ROOT), LINGTEST_MIRROR=str(mirror), HF_HUB_OFFLINE="1")
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]
    result = subprocess.run([sys.executable, "-m", "lingtest.flows.cli", "run", "data",
                             "--set", "data.online=false", *sets], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def _commit_project(root: Path, message: str) -> None:
    """The project as a DVC user keeps it: git (reports are git-tracked) and DVC."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    if not (root / ".git").exists():
        # the running server writes under .prefect/: `git add` would see files change
        (root / ".gitignore").write_text(".prefect/\n")
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
        subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", message, "--allow-empty"], cwd=root, check=True)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_artifact_page_shows_both_versions_of_two_runs(tmp_path: Path, mirror: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    workspace = Workspace(root)
    server, api_url = start_server(workspace, "127.0.0.1", free_port())
    chromium = None
    try:
        shutil.copy(PACKAGE_ROOT / "dvc.yaml", root / "dvc.yaml")  # the stage's files
        _commit_project(root, "before the runs")
        for overrides in RUNS:
            _run_data_stage(root, mirror, overrides)
            _commit_project(root, f"run {overrides}")  # what the next run compares with
        answer = httpx.post(f"{api_url}/artifacts/filter", timeout=10,
                            json={"artifacts": {"key": {"any_": ["data-tables"]}}})
        versions = sorted(answer.raise_for_status().json(), key=lambda v: v["created"])
        assert len(versions) == 2, versions  # both runs reported to this server
        names = [httpx.get(f"{api_url}/flow_runs/{v['flow_run_id']}", timeout=10).json()["name"]
                 for v in versions]
        assert names[0] != names[1]
        ui_url = api_url.removesuffix("/api")
        # The key page lists every version (short id, flow run) under the newest description;
        # each version's own page shows that run's provenance.
        comparison = httpx.post(f"{api_url}/artifacts/filter", timeout=10, json={
            "artifacts": {"key": {"any_": ["data-comparison"]}}}).raise_for_status().json()
        newest = max(comparison, key=lambda v: v["created"])
        pages = [(f"{ui_url}/artifacts/key/data-tables",
                  [*names, *(v["id"][:8] for v in versions), "seed: 2"]),
                 (f"{ui_url}/artifacts/artifact/{versions[0]['id']}",
                  ["Provenance", "seed: 1", '"timeout_s":11.0']),
                 # the second run against the first: the changed parameters, one line each
                 (f"{ui_url}/artifacts/artifact/{newest['id']}",
                  ["Parameters", "seed: 1 → 2", "data.timeout_s: 11.0 → 12.0"])]
        user_data_dir = tmp_path / "chromium-profile"
        user_data_dir.mkdir()
        chromium, websocket_url = start_chromium(user_data_dir)
        screenshot, compared = tmp_path / "ui.png", tmp_path / "comparison.png"
        key_page, first_version, _ = asyncio.run(asyncio.wait_for(
            read_pages(websocket_url, pages, {0: screenshot, 2: compared}),
            timeout=4 * RENDER_WAIT_S))
    finally:
        if chromium is not None:
            stop_chromium(chromium)
        stop_server(server, workspace)
    print(key_page)
    assert '"timeout_s":12.0' not in first_version  # the older version, not the newest again
    for shot in (screenshot, compared):
        assert shot.stat().st_size > 10_000, f"{shot.name} is (nearly) empty"
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
