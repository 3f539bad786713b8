"""The ``data`` stage's tasks: import the raw assets, build each processed table, write them
and report. The plain functions live in ``lingtest.tasks.core.assets`` and the reader modules; these
wrappers add caching keyed on the raw files' contents and the readers' source code, and
logging."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from lingtest.tasks.core import assets, io
from lingtest.tasks.core.caching import task
from lingtest.tasks.core.config import DataParams, Params
from lingtest.tasks.core.metrics import stage_metrics
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.publish import Report, provenance
from lingtest.tasks.data import TABLES
from lingtest.tasks.data.lexicons import GENDER_PAIRS_TSV


@task(name="import-raw-assets", cache_policy=NO_CACHE)
def import_raw_assets(params: DataParams, root: str) -> pd.DataFrame:
    manifest = assets.import_raw_assets(params, Workspace(Path(root)))
    get_run_logger().info("imported %d raw files (%.1f MB)", len(manifest),
                          manifest["bytes"].sum() / 1e6)
    return manifest


@task(name="build-table", exclude=("raw",), data_files=(GENDER_PAIRS_TSV,),
      task_run_name="build-{name}")
def build_table(name: str, raw: str, manifest_file: Path) -> pd.DataFrame:
    """Build one processed table from ``data/raw``; cached on the raw files (their sha256s
    in the MANIFEST, not the folder's location) and the reader code."""
    table = TABLES[name](Path(raw))
    get_run_logger().info("%s: %d rows", name, len(table))
    return table


@task(name="write-tables", cache_policy=NO_CACHE)
def write_tables(tables: dict[str, pd.DataFrame], root: str) -> pd.DataFrame:
    """Write every table into a staging folder that replaces ``data/processed`` whole; one
    summary row per table (rows, columns, file hash)."""
    workspace = Workspace(Path(root))
    with io.staged_dir(workspace.processed) as stage:
        rows = []
        for name in sorted(tables):
            path = stage / f"{name}.parquet"
            io.write_parquet(path, tables[name])
            rows.append({"table": name, "rows": len(tables[name]),
                         "columns": ", ".join(map(str, tables[name].columns)),
                         "sha256": io.sha256_file(path)[:16]})
    return pd.DataFrame(rows)


def table_names() -> list[str]:
    return sorted(TABLES)


# The raw assets (``lingtest.tasks.core.assets.ASSETS``) each table is read from: a table is built only
# when ``data/raw`` holds all of them, so ``data.assets`` may name a subset on a fresh checkout.
TABLE_ASSETS: dict[str, tuple[str, ...]] = {
    "sst": ("sst",),
    "word_polarity": ("sst", "opinion_lexicon"),
    "mrpc": ("mrpc",),
    "questions": ("boolq", "kommkonllm"),
    "contrast_pairs": ("contrast_sets",),
    "ptb_trees": ("treebank",),
    "checklist_suite": ("checklist",),
    "names": ("checklist", "names"),
    "gender_pairs": (),
}


def buildable_tables(manifest: pd.DataFrame) -> list[str]:
    """The tables whose raw assets ``manifest`` lists."""
    present = set(manifest["asset"])
    return [name for name in table_names() if set(TABLE_ASSETS[name]) <= present]


def data_report(params: Params, workspace: Workspace, manifest: pd.DataFrame,
                summary: pd.DataFrame) -> Report:
    """The processed tables and the raw MANIFEST; the row counts are the DVC metrics."""
    report = Report("data", metrics=stage_metrics("processed tables", {}, {
                        "rows": dict(zip(summary["table"], summary["rows"]))}),
                    provenance=provenance(params, workspace, "data", **{
                        "raw files": len(manifest),
                        "raw MANIFEST sha256": io.sha256_text(manifest.to_csv(index=False))[:16]}))
    report.add("data-tables", summary, "Processed tables")
    report.add("data-manifest", manifest, "Raw assets (MANIFEST)")
    return report
