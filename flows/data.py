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

# The raw assets (``tasks.core.assets.ASSETS``) each table is read from: a table is built only
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


def buildable_tables(manifest) -> list[str]:
    """The tables whose raw assets ``manifest`` lists."""
    present = set(manifest["asset"])
    return [name for name in table_names() if set(TABLE_ASSETS[name]) <= present]


@flow(name="data", log_prints=True)
def data_flow(params: Params, root: str) -> dict[str, int]:
    workspace = Workspace(Path(root))
    final_reports = workspace.reports / "data"
    reports = staging_dir(final_reports)  # swapped in whole at the end (replace_dir)
    manifest = import_raw_assets(params.data, root)
    futures = {name: build_table.submit(name, str(workspace.raw), str(workspace.manifest))
               for name in buildable_tables(manifest)}
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
