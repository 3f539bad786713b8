"""Publishing results: keyed Prefect table artifacts plus Markdown/CSV report files.

Keys are stable across runs (``contrastive-table2``, ``data-tables``…) so the Prefect UI
shows each table's history side by side.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from lingtest.tasks.core import io

_KEY = re.compile(r"^[a-z0-9-]+$")


def provenance_block(provenance: dict[str, object]) -> str:
    """Markdown list of the parameters, data hashes, model revisions and seed of a report."""
    lines = ["## Provenance", ""]
    for key, value in provenance.items():
        lines.append(f"- **{key}**: `{value}`")
    return "\n".join(lines) + "\n"


def markdown_table(df: pd.DataFrame) -> str:
    return df.to_markdown(index=False, floatfmt=".4g")


def publish_table(key: str, df: pd.DataFrame, title: str, report_dir: Path | None = None,
                  provenance: dict[str, object] | None = None, notes: str = "",
                  artifact: bool = True) -> None:
    """Publish ``df`` as the table artifact ``key`` (unless ``artifact`` is False) and as
    ``report_dir/key.{md,csv}`` (unless ``report_dir`` is None)."""
    if not _KEY.match(key):
        raise ValueError(f"artifact key {key!r}: use lower-case letters, digits and dashes")
    if report_dir is not None:
        body = f"# {title}\n\n" + (f"{notes}\n\n" if notes else "") + f"{markdown_table(df)}\n\n"
        if provenance:
            body += provenance_block(provenance)
        io.write_text(report_dir / f"{key}.md", body)
        io.write_csv(report_dir / f"{key}.csv", df)
    if not artifact:
        return
    from prefect.artifacts import create_table_artifact
    from prefect.context import get_run_context

    try:
        get_run_context()
    except Exception:  # outside a flow run: the files are the report
        return
    records = df.astype(object).where(df.notna(), None).to_dict(orient="records")
    create_table_artifact(key=key, table=records,
                          description=artifact_description(title, notes, provenance))


def artifact_description(title: str, notes: str, provenance: dict[str, object] | None) -> str:
    """Title, notes and provenance (with the code's commit), so the UI's versions can be told apart."""
    from lingtest.tasks.core.runtime import git_commit

    provenance = dict(provenance or {})
    if not {"commit", "code"} & set(provenance):
        provenance["commit"] = git_commit(Path(__file__).resolve().parents[2])
    from lingtest.tasks.core.secrets import redact_text

    text = f"**{title}**\n\n" + (f"{notes}\n\n" if notes else "") + provenance_block(provenance)
    return redact_text(text)
