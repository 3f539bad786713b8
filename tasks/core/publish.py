"""One publisher for every stage's report: tables (Markdown + CSV + keyed Prefect artifact),
figures, the DVC metrics JSON, ``provenance.json`` and the substitutes, all from one
``Report``; the report folder is staged and swapped in whole, so a failed stage leaves the
previous report, never half of a new one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from tasks.core import io
from tasks.core.artifacts import publish_table
from tasks.core.config import Params
from tasks.core.environment import environment_note
from tasks.core.paths import Workspace
from tasks.core.runtime import git_commit
from tasks.core.secrets import redact_value


@dataclass
class Table:
    """One published table. ``files=False`` publishes the artifact only (per-question
    slices, say); ``substitutes`` puts the run's substitutes in the table's notes."""

    key: str
    frame: pd.DataFrame
    title: str
    notes: str = ""
    substitutes: bool = True
    files: bool = True
    provenance: dict = field(default_factory=dict)  # added to the report's, for this table


@dataclass
class Report:
    stage: str
    tables: list[Table] = field(default_factory=list)
    figures: dict[str, Callable[[Path], object]] = field(default_factory=dict)  # file → plot
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)  # extra CSV files
    metrics: dict | None = None  # for `dvc metrics show` / `dvc exp show`
    metrics_file: str = ""  # under reports/; default `<stage>-metrics.json`, beside the out
    provenance: dict = field(default_factory=dict)
    substitutes: str = ""

    def add(self, key: str, frame: pd.DataFrame, title: str, **kwargs) -> Table:
        table = Table(key, frame, title, **kwargs)
        self.tables.append(table)
        return table


def slug(text: str) -> str:
    """A model id or question id as a lower-case artifact key / file name part."""
    return text.replace("/", "-").replace("_", "-").replace(":", "-").replace(" ", "-").lower()


def file_hashes(paths: Iterable[str | Path], digits: int = 12) -> str:
    """``name=sha256`` of each input file, for a report's provenance."""
    return ", ".join(f"{Path(p).name}={io.sha256_file(p)[:digits]}" for p in paths)


def provenance(params: Params, workspace: Workspace, section: str,
               inputs: Iterable[str | Path] = (), models: Iterable[str] = (),
               **extra: object) -> dict:
    """What every report states: seed, profile, the stage's parameters, input hashes, model
    revisions, the code's commit and whether the packages match ``requirements.lock``;
    ``extra`` adds method-specific lines."""
    value = params
    for part in section.split("."):
        value = getattr(value, part)
    out: dict = {"seed": params.seed, "profile": params.profile,
                 f"parameters ({section.split('.')[-1]})": value.model_dump_json()}
    inputs = list(inputs)
    if inputs:
        out["inputs (sha256)"] = file_hashes(inputs)
    models = list(models)
    if models:
        out["models"] = "; ".join(models)
    if section in ENCODER_SECTIONS:
        out.update(encoder_path_note(params))
    out.update(extra)
    out["code"] = git_commit(workspace.root)
    out.update(environment_note(workspace.root))
    return out


# Stages whose models run on runtime.encoder_precision / encoder_backend.
ENCODER_SECTIONS = ("contrastive", "capabilities", "adaptive", "adaptive.debug", "repair")


def encoder_path_note(params: Params) -> dict:
    """A non-default encoder path, for provenance (nothing for fp32 torch, so the default
    reports stay as they were): its results differ from fp32's in the last bits."""
    r = getattr(params, "runtime", None)
    path = (getattr(r, "encoder_precision", "fp32"), getattr(r, "encoder_backend", "torch"))
    if path == ("fp32", "torch"):
        return {}
    return {"encoder path": f"runtime.encoder_precision={path[0]}, "
                            f"runtime.encoder_backend={path[1]} (lingtest's encoders and "
                            f"classifiers; fp32 torch gives other last bits)"}


def metrics_path(workspace: Workspace, report: Report) -> Path:
    """Beside, not inside, the ``reports/<stage>`` DVC out by default (DVC reads it as
    metrics, uncached); a stage whose dvc.yaml names a file inside its folder says so."""
    return workspace.reports / (report.metrics_file or f"{report.stage}-metrics.json")


def publish(report: Report, workspace: Workspace) -> Path:
    """Write ``report`` into ``reports/<stage>`` (swapped in whole) and its metrics JSON."""
    final = workspace.reports / report.stage
    staged = io.staging_dir(final)
    prov = redact_value(dict(report.provenance))  # a model spec or URL may carry a password
    if report.substitutes:
        prov["substitutes"] = report.substitutes
    for table in report.tables:
        notes = "\n\n".join(part for part in (
            table.notes, report.substitutes if table.substitutes else "") if part)
        publish_table(table.key, table.frame, table.title,
                      staged if table.files else None,
                      provenance={**prov, **table.provenance}, notes=notes)
    for name, plot in report.figures.items():
        plot(staged / name)
    for name, frame in report.frames.items():
        io.write_csv(staged / name, frame)
    io.write_text(staged / "provenance.json",
                  json.dumps(prov, indent=2, sort_keys=True, default=str) + "\n")
    target = metrics_path(workspace, report)
    inside = target.resolve().is_relative_to(final.resolve())
    if report.metrics is not None and inside:
        io.write_json(staged / target.relative_to(final), _plain(report.metrics))
    io.replace_dir(staged, final)
    if report.metrics is not None and not inside:
        io.write_json(target, _plain(report.metrics))
    return final


def _plain(obj: dict) -> dict:
    """numpy scalars and the like as plain JSON values."""
    return json.loads(json.dumps(obj, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
