"""The ``data`` stage: raw assets into ``data/raw`` (with MANIFEST), tables into ``data/processed``."""
from __future__ import annotations

from pathlib import Path

from prefect import flow

from tasks.core.artifacts import publish_table
from tasks.core.config import Params
from tasks.core.io import replace_dir, sha256_text, staging_dir
from tasks.core.paths import Workspace
from tasks.core.runtime import git_commit
from tasks.data.pipeline import build_table, import_raw_assets, table_names, write_tables


@flow(name="data", log_prints=True)
def data_flow(params: Params, root: str) -> dict[str, int]:
    workspace = Workspace(Path(root))
    final_reports = workspace.reports / "data"
    reports = staging_dir(final_reports)  # swapped in whole at the end (replace_dir)
    manifest = import_raw_assets(params.data, root)
    futures = {name: build_table.submit(name, str(workspace.raw), str(workspace.manifest))
               for name in table_names(manifest)}
    tables = {name: future.result() for name, future in futures.items()}
    summary = write_tables(tables, manifest, root, str(reports))
    provenance = {"seed": params.seed, "profile": params.profile,
                  "parameters (data)": params.data.model_dump_json(),
                  "raw files": len(manifest),
                  "raw MANIFEST sha256": sha256_text(manifest.to_csv(index=False))[:16],
                  "code": git_commit(workspace.root)}
    publish_table("data-tables", summary, "Processed tables", reports, provenance=provenance)
    publish_table("data-manifest", manifest, "Raw assets (MANIFEST)", reports)
    replace_dir(reports, final_reports)
    return dict(zip(summary["table"], summary["rows"]))
