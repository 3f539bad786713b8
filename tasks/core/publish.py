"""One publisher for every stage's report: tables (Markdown + CSV + keyed Prefect artifact),
figures with the data they plot, the DVC metrics JSON, ``provenance.json`` and the
substitutes, all from one ``Report``; the report folder is staged and swapped in whole, so a
failed stage leaves the previous report, never half of a new one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from lingtest.tasks.core import io
from lingtest.tasks.core.artifacts import publish_table
from lingtest.tasks.core.config import Params
from lingtest.tasks.core.environment import environment_note
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.metrics import FILE as METRICS_FILE
from lingtest.tasks.core.metrics import check_metrics_shape
from lingtest.tasks.core.paths import Workspace, root_marked
from lingtest.tasks.core.runtime import git_commit
from lingtest.tasks.core.secrets import redact_value


@dataclass
class Table:
    """One published table. ``files=False`` publishes the artifact only (a family's rows of
    every model), ``artifact=False`` the files only (one member of a family);
    ``substitutes`` puts the run's substitutes in the table's notes."""

    key: str
    frame: pd.DataFrame
    title: str
    notes: str = ""
    substitutes: bool = True
    files: bool = True
    artifact: bool = True
    provenance: dict = field(default_factory=dict)  # added to the report's, for this table


@dataclass
class Figure:
    """A PNG and the data it plots, written beside it as ``<stem>.csv`` (or ``data_name``)
    in wide form (an x column, one column per line), which ``dvc plots`` draws."""

    plot: Callable[[Path], object]
    data: pd.DataFrame
    data_name: str = ""

    def data_file(self, name: str) -> str:
        return self.data_name or str(Path(name).with_suffix(".csv"))


@dataclass
class Report:
    stage: str
    tables: list[Table] = field(default_factory=list)
    figures: dict[str, Figure] = field(default_factory=dict)  # file (PNG) → figure
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)  # extra CSV files
    metrics: dict | None = None  # `reports/<stage>/metrics.json`: see lingtest.tasks.core.metrics
    provenance: dict = field(default_factory=dict)
    substitutes: str = ""

    def add(self, key: str, frame: pd.DataFrame, title: str, **kwargs) -> Table:
        table = Table(key, frame, title, **kwargs)
        self.tables.append(table)
        return table

    def add_per_model(self, key: str, frames: dict[str, pd.DataFrame], title: str,
                      column: str = "model_id", **kwargs) -> Table:
        """A per-model table family: files ``<key>-<model slug>.{md,csv}`` per model and one
        artifact ``key`` holding every model's rows (``column`` first), so a run publishes
        one key, not one per model. ``title`` may name ``{model}``."""
        for model, frame in frames.items():
            self.add(f"{key}-{slug(model)}"[:120], frame, title.format(model=model),
                     artifact=False, **kwargs)
        rows = [frame.drop(columns=column, errors="ignore").assign(**{column: model})
                for model, frame in frames.items()]
        combined = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame({column: []})
        combined = combined[[column, *combined.columns.drop(column)]]
        return self.add(key, combined, title.format(model="each model"), files=False, **kwargs)


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
    value = params.section(section)
    out: dict = {"seed": params.seed, "profile": params.profile,
                 f"parameters ({section.split('.')[-1]})": value.model_dump_json()}
    inputs = list(inputs)
    if inputs:
        out["inputs (sha256)"] = file_hashes(inputs)
    models = list(models)
    if models:
        out["models"] = "; ".join(models)
    if type(value).uses_encoders:
        out.update(encoder_path_note(params))
    out.update(extra)
    out["code"] = git_commit(workspace.root)
    out.update(environment_note(workspace.root))
    return out


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


def publish(report: Report, workspace: Workspace, into: Path | None = None) -> Path:
    """Write ``report`` into ``reports/<stage>`` (swapped in whole), its metrics included as
    ``reports/<stage>/metrics.json`` (``dvc.yaml`` declares it under the top-level
    ``metrics:``, which may name a file inside a stage's out), and its tables as Prefect
    artifacts. ``into``: a failed run's report, files only, there instead."""
    final = into or workspace.reports / report.stage
    metrics = None
    if report.metrics is not None:  # checked before anything is written
        metrics = check_metrics_shape(_plain(report.metrics),
                                      f"{report.stage}: {METRICS_FILE}")
    _check_names(report)
    staged = io.staging_dir(final)
    prov = report_provenance(report.provenance, workspace)
    if report.substitutes:
        prov["substitutes"] = report.substitutes
    for table in report.tables:
        notes = "\n\n".join(part for part in (
            table.notes, report.substitutes if table.substitutes else "") if part)
        publish_table(table.key, table.frame, table.title,
                      staged if table.files else None,
                      provenance={**prov, **report_provenance(table.provenance, workspace)},
                      notes=notes,
                      artifact=table.artifact and into is None)
    for name, figure in report.figures.items():
        (staged / name).parent.mkdir(parents=True, exist_ok=True)
        figure.plot(staged / name)
        io.write_csv(staged / figure.data_file(name), figure.data)
    for name, frame in report.frames.items():
        io.write_csv(staged / name, frame)
    io.write_text(staged / "provenance.json",
                  json.dumps(prov, indent=2, sort_keys=True, default=str) + "\n")
    if metrics is not None:
        io.write_json(staged / METRICS_FILE, metrics)
    io.replace_dir(staged, final)
    return final


def report_provenance(provenance: dict, workspace: Workspace) -> dict:
    """Provenance as a report writes it: passwords masked (a model spec or URL may carry
    one) and paths inside the project as ``<root>/…`` (a parameter, a database URL, a model
    file), so identical runs in two checkouts write the same report."""
    return root_marked(redact_value(dict(provenance)), workspace.root)


def _check_names(report: Report) -> None:
    """No two parts of a report write the same file (a figure's data over a table, say)."""
    names = [f"{t.key}{suffix}" for t in report.tables if t.files for suffix in (".md", ".csv")]
    for name, figure in report.figures.items():
        names += [name, figure.data_file(name)]
    names += [*report.frames, "provenance.json"]
    names += [METRICS_FILE] if report.metrics is not None else []
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise LingtestError(f"{report.stage}: report files written twice: {twice}")


def _plain(obj: dict) -> dict:
    """numpy scalars and the like as plain JSON values."""
    return json.loads(json.dumps(obj, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
