"""The ``data`` stage end to end into a temporary project, on the mirror's real files."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from lingtest.flows.stage import run_stage
from lingtest.flows.registry import load_params
from lingtest.tasks.core.io import sha256_file
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace

EXPECTED_ROWS = {"sst": 8544 + 1101 + 2210, "mrpc": 3668 + 408 + 1725,
                 "questions": 3270 + 27, "contrast_pairs": 100 + 488, "ptb_trees": 3914}


@pytest.fixture(scope="module")
def project(data_project) -> Workspace:
    return data_project[0]


def test_processed_tables_have_the_expected_rows(project: Workspace) -> None:
    metrics = json.loads((project.reports / "data" / "metrics.json").read_text())
    assert metrics["setting"] == "processed tables" and set(metrics) == {"setting", "all"}
    for name, expected in EXPECTED_ROWS.items():
        assert metrics["all"][f"rows.{name}"] == expected, name
        assert len(pd.read_parquet(project.processed / f"{name}.parquet")) == expected
    sst = pd.read_parquet(project.processed / "sst.parquet")
    assert sst.groupby("split").size().to_dict() == {"train": 8544, "dev": 1101, "test": 2210}
    questions = pd.read_parquet(project.processed / "questions.parquet")
    assert questions.groupby("source").size().to_dict() == {"boolq": 3270, "kommkonllm": 27}


def test_manifest_lists_every_raw_file_with_its_hash(project: Workspace) -> None:
    manifest = pd.read_csv(project.manifest, sep="\t")
    assert len(manifest) == 22  # 20 + the two AdaTest trees (adatest/)
    for row in manifest.sample(5, random_state=0).itertuples():
        assert sha256_file(project.raw / row.path) == row.sha256


def test_reports_state_their_provenance(project: Workspace) -> None:
    report = (project.reports / "data" / "data-tables.md").read_text()
    assert "## Provenance" in report and "seed" in report and "| sst " in report


def test_rerun_hits_the_cache_and_writes_identical_tables(project: Workspace, mirror: Path,
                                                          monkeypatch) -> None:
    """Run as a scheduled experiment's stage command: tagged with the experiment, and its
    comparison artifact (against the previous run) names it and finds nothing changed."""
    from lingtest.tasks.core.run_lock import EXPERIMENT

    before = {p.name: sha256_file(p) for p in project.processed.glob("*.parquet")}
    params = load_params(project.root, [f"data.mirror={mirror}", "data.online=false"])
    monkeypatch.setenv(EXPERIMENT, "repro-data-20261127-120000")
    stages = project.root / "dvc.yaml"  # where a comparison finds the stage's files
    stages.write_bytes((PACKAGE_ROOT / "dvc.yaml").read_bytes())
    try:
        run_stage("data", params, project)
    finally:
        stages.unlink()
    after = {p.name: sha256_file(p) for p in project.processed.glob("*.parquet")}
    assert before == after
    assert not [p for p in project.data.iterdir() if p.name.startswith(".")]
    cached, tags, comparison = _newest_run()
    assert cached >= len(before)
    assert "exp:repro-data-20261127-120000" in tags
    assert "# data: previous run → this run (experiment repro-data-20261127-120000)" in comparison
    assert "## Parameters\n\n- unchanged" in comparison


def _newest_run() -> tuple[int, list[str], str]:
    """The newest `data` flow run: its task runs served from the cache, its tags and its
    comparison artifact's text."""
    import asyncio

    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, FlowRunFilter
    from prefect.client.schemas.sorting import FlowRunSort, TaskRunSort

    async def read() -> tuple[int, list[str], str]:
        async with get_client() as client:
            runs = await client.read_flow_runs(sort=FlowRunSort.START_TIME_DESC, limit=1)
            tasks = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id={"any_": [runs[0].id]}),
                sort=TaskRunSort.EXPECTED_START_TIME_DESC, limit=200)
            artifacts = await client.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id={"any_": [runs[0].id]}, key={"any_": ["data-comparison"]}))
            cached = sum(1 for t in tasks if t.state and t.state.name == "Cached")
            return cached, runs[0].tags, artifacts[0].data if artifacts else ""

    return asyncio.run(read())


def test_a_subset_of_assets_builds_its_tables_and_keeps_the_rest(tmp_path, mirror) -> None:
    """``data.assets`` naming a subset: on a fresh project only the tables of those assets
    are built; a later subset run keeps the other assets and tables."""
    import shutil

    from lingtest.tasks.data.build_tasks import TABLE_ASSETS
    from lingtest.tasks.core.paths import PACKAGE_ROOT
    from lingtest.tasks.data import TABLES

    assert set(TABLE_ASSETS) == set(TABLES)
    shutil.copy(PACKAGE_ROOT / "params.yaml", tmp_path / "params.yaml")
    workspace = Workspace(tmp_path)
    base = [f"data.mirror={mirror}", "data.online=false"]
    run_stage("data", load_params(tmp_path, [*base, "data.assets=[boolq,kommkonllm,mrpc]"]),
              workspace)
    built = sorted(p.stem for p in workspace.processed.glob("*.parquet"))
    assert built == ["gender_pairs", "mrpc", "questions"]
    run_stage("data", load_params(tmp_path, [*base, "data.assets=[mrpc]"]), workspace)
    assert sorted(p.stem for p in workspace.processed.glob("*.parquet")) == built
    assert set(pd.read_csv(workspace.manifest, sep="\t")["asset"]) == {"boolq", "kommkonllm",
                                                                        "mrpc"}
