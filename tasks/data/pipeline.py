"""Prefect tasks of the ``data`` stage: import raw assets, build and write the tables.

The plain functions live in ``tasks.core.assets`` and the reader modules; these wrappers
add caching keyed on the raw files' contents and the readers' source code, and logging.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from tasks.core import assets, io
from tasks.core.caching import ContentKey
from tasks.core.config import DataParams
from tasks.core.paths import Workspace
from tasks.data import TABLES
from tasks.data.lexicons import GENDER_PAIRS_TSV

READER_MODULES = tuple(sorted({fn.__module__ for fn in TABLES.values()}))


@task(name="import-raw-assets", cache_policy=NO_CACHE)
def import_raw_assets(params: DataParams, root: str) -> pd.DataFrame:
    manifest = assets.import_raw_assets(params, Workspace(Path(root)))
    get_run_logger().info("imported %d raw files (%.1f MB)", len(manifest),
                          manifest["bytes"].sum() / 1e6)
    return manifest


@task(name="build-table", persist_result=True,
      cache_policy=ContentKey(files=("manifest_file",), values=("name",),
                              modules=READER_MODULES,
                              data_files=(str(GENDER_PAIRS_TSV),), version="1"),
      task_run_name="build-{name}")
def build_table(name: str, raw: str, manifest_file: str) -> pd.DataFrame:
    """Build one processed table from ``data/raw``; cached on the raw files and reader code."""
    table = TABLES[name](Path(raw))
    get_run_logger().info("%s: %d rows", name, len(table))
    return table


@task(name="write-tables", cache_policy=NO_CACHE)
def write_tables(tables: dict[str, pd.DataFrame], manifest: pd.DataFrame, root: str,
                 report_dir: str) -> pd.DataFrame:
    """Write every table into a staging folder that replaces ``data/processed`` whole, and
    the row counts (DVC metrics) into ``report_dir``."""
    workspace = Workspace(Path(root))
    with io.staged_dir(workspace.processed) as stage:
        rows = []
        for name in sorted(tables):
            path = stage / f"{name}.parquet"
            io.write_parquet(path, tables[name])
            rows.append({"table": name, "rows": len(tables[name]),
                         "columns": ", ".join(map(str, tables[name].columns)),
                         "sha256": io.sha256_file(path)[:16]})
        summary = pd.DataFrame(rows)
    io.write_json(Path(report_dir) / "tables.json",
                  {"rows": {r["table"]: r["rows"] for r in rows}})
    return summary


def table_names() -> list[str]:
    return sorted(TABLES)
