"""A finished ``lingtest test`` run as one static HTML file, ``runs/<name>/report.html``: for
sharing a result with someone who has no Prefect UI and no Python. Figures are embedded as
``data:`` URIs and the stylesheet is inline, so the file opens in any browser, offline,
without a server or JavaScript, and can be mailed or attached on its own."""
from __future__ import annotations

import base64
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd
from jinja2 import Environment, FileSystemLoader
from markupsafe import Markup

from lingtest.result import TestResult
from lingtest.tasks.core import io
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import root_marked
from lingtest.tasks.core.publish import slug
from lingtest.tasks.core.secrets import redact_text

FILE = "report.html"
TEMPLATE = "report_template.html"  # beside this module (package data: *.html)
WORST = 20  # failing cases shown per method
LONG = 25  # rows above which a table is folded (<details>), so the page stays scannable
PROSE = 40  # characters in a cell above which its column holds sentences
IMAGES = {".png": "image/png", ".svg": "image/svg+xml"}
# provenance keys shown first, in this order; "parameters (…)" (long JSON) last
FIRST = ("models", "profile", "seed", "inputs (sha256)", "code")


def write_report(result: TestResult, *, worst: int = WORST) -> Path:
    """Write ``result.folder / "report.html"`` whole or not at all; return its path."""
    page = render_report(result, worst=worst)
    return io.write_text(result.folder / FILE, page)


def render_report(result: TestResult, *, worst: int = WORST) -> str:
    """The report page as text: the summary, the run's provenance, and per method the
    side-by-side table, the changes, the method's own tables and figures and the ``worst``
    failing cases with their texts."""
    if worst < 0:
        raise LingtestError(f"report of run {result.name}: worst={worst}; fix: the number of "
                            f"failing cases to show per method, 0 or more (default {WORST})")
    try:
        context = {"name": result.name, "notes": result.notes, "models": result.models,
                   "baselines": result.baselines, "worst": worst,
                   "summary": _table(result.summary()),
                   "methods": [_method(result, method, worst) for method in result.methods]}
    except FileNotFoundError as missing:  # a run folder copied in part, or cleaned up
        where = _relative(Path(missing.filename or str(missing)), result.folder)
        raise LingtestError(f"run {result.name}: {where} is missing from {result.folder}, so "
                            "no report was written; fix: run lingtest test for it again, or "
                            "copy the whole run folder") from None
    environment = Environment(loader=FileSystemLoader(Path(__file__).parent), autoescape=True,
                              finalize=_no_machine_paths(result.folder), trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True)
    return environment.get_template(TEMPLATE).render(context)


def _method(result: TestResult, method: str, worst: int) -> dict:
    own = result.folder / "reports" / method
    failures = result.failures(method)
    provenance = _provenance(result.folder, method)
    stated = {entry.get("text") for entry in provenance["entries"]}
    return {"name": method, "anchor": f"method-{slug(method)}",
            "table": _table(result.table(method)), "changes": _table(result.changes(method)),
            "failures": _table(failures.head(worst)), "failing": len(failures),
            "provenance": provenance,
            "tables": [_own_table(path, result.folder, stated)
                       for path in sorted(own.glob("*.csv"))],
            "figures": [_figure(path, result.folder) for path in _images(own)]}


# ------------------------------------------------------------------ tables

def _table(frame: pd.DataFrame) -> dict:
    """A frame as the template draws it: cells as text, numeric columns marked (set right),
    columns of sentences marked (kept wide enough to read), long tables marked (folded)."""
    cells = [_cells(frame[name]) for name in frame.columns]
    columns = [{"name": str(name), "num": _numeric(frame[name]),
                "prose": max(map(len, texts), default=0) > PROSE}
               for name, texts in zip(frame.columns, cells)]
    return {"columns": columns, "rows": [list(row) for row in zip(*cells)],
            "long": len(frame) > LONG}


def _numeric(column: pd.Series) -> bool:
    return (pd.api.types.is_numeric_dtype(column)
            and not pd.api.types.is_bool_dtype(column))


def _cells(column: pd.Series) -> list[str]:
    """A column's values as text; floats with the decimals the column needs (at most 4),
    the same in every row so that they line up; missing values blank."""
    if pd.api.types.is_float_dtype(column):
        present = column.dropna()
        places = max((len(f"{v:.4f}".rstrip("0").partition(".")[2]) for v in present
                      if math.isfinite(v)), default=0)
        return ["" if pd.isna(v) else f"{v:.{places}f}" for v in column]
    return ["" if _missing(v) else str(v) for v in column]


def _missing(value: Any) -> bool:
    return pd.api.types.is_scalar(value) and bool(pd.isna(value))


def _own_table(path: Path, folder: Path, stated: set) -> dict:
    """One of the method's own report tables: its CSV, with the title and notes of the
    Markdown file the same report wrote beside it, less the notes the provenance already
    ``stated`` (the substitutes, which every table of a report repeats)."""
    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        frame = pd.DataFrame()
    except (pd.errors.ParserError, UnicodeDecodeError) as error:
        raise LingtestError(f"{_relative(path, folder)} in run folder {folder}: not a readable "
                            f"CSV table ({str(error).strip()[:120]}); fix: run lingtest test "
                            "for it again") from None
    title, notes = _title_and_notes(path.with_suffix(".md"))
    return {"name": path.stem, "anchor": f"table-{slug(path.parent.name)}-{slug(path.stem)}",
            "file": _relative(path, folder), "title": title,
            "notes": [note for note in notes if note not in stated],
            **_table(frame)}


def _title_and_notes(markdown: Path) -> tuple[str, list[str]]:
    """The ``# title`` line of a published table's Markdown and the paragraphs between it
    and the table (how the table was made, the substitutes for what the paper used)."""
    if not markdown.is_file():
        return "", []
    lines = markdown.read_text(encoding="utf-8", errors="replace").split("\n\n")
    title = lines[0][2:].strip() if lines and lines[0].startswith("# ") else ""
    notes = []
    for block in lines[1 if title else 0:]:
        if block.lstrip().startswith(("|", "#")):  # the table, then the provenance
            break
        if block.strip():
            notes.append(block.strip())
    return title, notes


# ------------------------------------------------------------------ figures

def _images(folder: Path) -> list[Path]:
    """Every figure under ``folder`` (its sub-folders too), not hidden staging leftovers."""
    if not folder.is_dir():
        return []
    return sorted(path for path in folder.rglob("*")
                  if path.suffix.lower() in IMAGES and path.is_file()
                  and not any(part.startswith(".")
                              for part in path.relative_to(folder).parts))


def _figure(path: Path, folder: Path) -> dict:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return {"file": _relative(path, folder),
            "uri": f"data:{IMAGES[path.suffix.lower()]};base64,{data}"}


# ------------------------------------------------------------------ provenance

def _provenance(folder: Path, method: str) -> dict:
    """What the run's ``provenance.json`` files say of ``method``: the comparison's (every
    model with its revision), then what the method's own and the baseline's reports add.
    A key the later files state otherwise is shown again, named after its file."""
    sources = [folder / "reports" / f"{method}-vs-baseline", folder / "reports" / method,
               folder / "baseline" / "reports" / method]
    merged: dict[str, str] = {}
    files = []
    for where in sources:
        path, label = where / "provenance.json", _relative(where, folder)
        if not path.is_file():
            continue
        try:
            stated = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(stated, dict):
                raise ValueError("not a JSON object")
        except ValueError as error:
            raise LingtestError(f"{_relative(path, folder)} in run folder {folder}: not a "
                                f"provenance record ({error}); fix: run lingtest test for it "
                                "again") from None
        files.append(_relative(path, folder))
        for key, value in stated.items():
            value = value if isinstance(value, str) else json.dumps(value)
            if merged.get(key, value) != value:
                key = f"{key} ({label})"
            merged.setdefault(key, value)
    order = sorted(merged, key=lambda key: (
        key.startswith("parameters"),
        next((i for i, first in enumerate(FIRST) if key.startswith(first)), len(FIRST))))
    return {"files": files, "entries": [_entry(key, merged[key]) for key in order]}


def _entry(key: str, value: str) -> dict:
    """One provenance line; the models one model a line, JSON (the parameters) indented."""
    if key.startswith("models"):
        return {"key": key, "lines": value.split("; ")}
    if value.startswith(("{", "[")):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {"key": key, "text": value}
        return {"key": key, "json": json.dumps(parsed, indent=2), "size": len(parsed)}
    return {"key": key, "text": value}


# ------------------------------------------------------------------ no machine paths

def _relative(path: Path, folder: Path) -> str:
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(folder)).as_posix()
    except ValueError:
        return path.name


def _no_machine_paths(folder: Path):
    """Jinja's ``finalize``: every value the page prints with the run folder as ``.``, the
    project around it as ``<root>``, the home folder as ``~`` and a URL's password masked,
    so the shared file names no one's machine and no secret. ``data:`` URIs (the figures)
    pass as they are."""
    folder = Path(os.path.abspath(folder))
    names = {str(folder), str(folder.resolve())}
    run = re.compile("(?:" + "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
                     + r")(?![\w.-])")
    root = folder.parent.parent if folder.parent.name == "runs" else None
    home = str(Path.home())
    home_path = re.compile(re.escape(home) + r"(?![\w.-])") if home not in ("/", "") else None

    def clean(value: Any) -> Any:
        if not isinstance(value, str) or isinstance(value, Markup) or value.startswith("data:"):
            return value  # a number, a figure, or a macro's output (its values were cleaned)
        value = run.sub(".", redact_text(value))
        if root is not None:
            value = root_marked(value, root)
        return home_path.sub("~", value) if home_path else value

    return clean
