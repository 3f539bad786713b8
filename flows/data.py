"""The ``data`` stage: raw assets into ``data/raw`` (with MANIFEST), tables into ``data/processed``."""
from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from lingtest.tasks.core.compare import previous_run, publish_comparison
from lingtest.flows.registry import Params
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.publish import publish
from lingtest.tasks.data.build_tasks import build_table, buildable_tables, data_report, import_raw_assets, write_tables


@flow(name="data", log_prints=True)
def data_flow(params: Params, root: str) -> dict[str, int]:
    workspace = Workspace(Path(root))
    before = previous_run(workspace, "data")  # before this run writes
    manifest = import_raw_assets(params.data, root)
    futures = {name: build_table.submit(name, str(workspace.raw), workspace.manifest)
               for name in buildable_tables(manifest)}
    summary = write_tables({name: future.result() for name, future in futures.items()}, root)
    publish(data_report(params, workspace, manifest, summary), workspace)
    publish_comparison("data", workspace, [], before, get_run_logger())  # no per-case results
    return dict(zip(summary["table"], summary["rows"]))
