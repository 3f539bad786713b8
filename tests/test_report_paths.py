"""One rule for paths in reports: a path inside the project is written ``<root>/…``, in every
section's provenance, so identical runs in two checkouts write the same report."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, get_args, get_origin

import pandas as pd
from pydantic import BaseModel

from lingtest.flows.registry import Params
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.publish import Report, provenance, publish
from lingtest.tasks.core.sections import UserPath


def _is_user_path(annotation: object) -> bool:
    if annotation == UserPath:
        return True
    if get_origin(annotation) is Annotated:
        return False
    return any(_is_user_path(arg) for arg in get_args(annotation))


def _paths_inside(model: type[BaseModel], folder: Path) -> dict:
    """Every path-valued setting of ``model`` (``UserPath``, nested sections too) set to a
    path inside ``folder``; a list of paths to one such path."""
    values: dict = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        section = [a for a in (annotation, *get_args(annotation))
                   if isinstance(a, type) and issubclass(a, BaseModel)]
        if section:
            inner = _paths_inside(section[0], folder / name)
            if inner:  # a dict of sections (per model, e.g. models.llm_classifier): one entry
                values[name] = {"a-model": inner} if get_origin(annotation) is dict else inner
        elif _is_user_path(annotation):
            path = str(folder / f"{name}.txt")
            values[name] = [path] if get_origin(annotation) is list else path
    return values


def test_every_path_parameter_inside_the_project_is_written_as_root(tmp_path: Path) -> None:
    """Each section's provenance (its parameters' paths, a database URL and a model file
    inside the project, the root named through a symlink and resolved) is published; no
    report file holds the project's absolute path, and every path reads ``<root>/…``."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    workspace = Workspace(tmp_path / "link")
    values = _paths_inside(Params, workspace.root)
    values.setdefault("consistency", {})["database_url"] = f"sqlite:///{real}/answers.sqlite"
    params = Params.model_validate(values)
    sections = [name for name, field in Params.model_fields.items()
                if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)]
    assert {"data", "runtime", "consistency", "adaptive", "capabilities"} <= set(sections)
    for section in sections:
        report = Report(f"paths-{section}", provenance=provenance(
            params, workspace, section, models=[f"mine @ v1 (python, {real}/mine.py)"],
            database=f"sqlite:///{workspace.root}/answers.sqlite"))
        table = report.add("paths-table", pd.DataFrame({"a": [1]}), "A table")
        table.provenance = {"file": str(real / "data" / "t.csv")}
        publish(report, workspace)
    written = [p for p in real.joinpath("reports").rglob("*") if p.is_file()]
    assert len(written) >= 3 * len(sections)
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert str(real) not in text and str(workspace.root) not in text, path
    consistency = json.loads((real / "reports/paths-consistency/provenance.json").read_text())
    assert consistency["database"] == "sqlite:///<root>/answers.sqlite"
    assert "(python, <root>/mine.py)" in consistency["models"]
    parameters = json.loads(consistency["parameters (consistency)"])
    assert parameters["database_url"] == "sqlite:///<root>/answers.sqlite"
    assert parameters["questions"] == "<root>/consistency/questions.txt"
    data = json.loads((real / "reports/paths-data/provenance.json").read_text())
    assert json.loads(data["parameters (data)"])["mirror"] == "<root>/data/mirror.txt"
    assert "- **file**: `<root>/data/t.csv`" in (
        real / "reports/paths-data/paths-table.md").read_text()


def test_a_sibling_folder_of_the_root_keeps_its_path(tmp_path: Path) -> None:
    """Only the root itself is marked: ``/x/project-2`` beside ``/x/project`` stays whole."""
    workspace = Workspace(tmp_path / "project")
    workspace.root.mkdir()
    other = f"{tmp_path}/project-2/q.jsonl"
    report = Report("paths", provenance={"questions": other, "here": f"{workspace.root}"})
    publish(report, workspace)
    written = json.loads((workspace.reports / "paths" / "provenance.json").read_text())
    assert written == {"questions": other, "here": "<root>"}
