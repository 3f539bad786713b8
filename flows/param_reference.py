"""The parameter reference (the docs' parameters page): every setting of ``Params`` with its
default, its value in each profile that changes it, its allowed values and its description —
all read from the pydantic models, so a setting is described once, in its ``Field``."""
from __future__ import annotations

import json
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from lingtest.flows.registry import Params, load_params


def _section(annotation: object) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) \
        else None


def _allowed(annotation: object) -> str:
    """Literal choices (also inside ``list[...]`` and ``| None``) as ``a | b``; else ''."""
    for arg in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(arg) is typing.Literal:
            return " | ".join(str(v) for v in typing.get_args(arg))
        inner = _allowed(arg) if typing.get_args(arg) and arg is not annotation else ""
        if inner:
            return inner
    return ""


def _value(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    text = text if len(text) <= 48 else text[:45] + "…"
    return f"`{text}`".replace("|", "\\|")


def _rows(model: type[BaseModel], values: list[dict], prefix: str = "") -> list[tuple]:
    """(key, field, value per profile) for each leaf setting, sections depth first."""
    rows: list[tuple] = []
    for name, field in model.model_fields.items():
        inner = _section(field.annotation)
        key = f"{prefix}{name}"
        if inner is not None:
            rows += _rows(inner, [v.get(name, {}) for v in values], f"{key}.")
        else:
            rows.append((key, field, [v.get(name) for v in values]))
    return rows


def profiles(root: Path) -> list[str]:
    """The profiles a project defines: ``params/<name>.yaml``."""
    return sorted(p.stem for p in (root / "params").glob("*.yaml"))


def reference_markdown(root: Path) -> str:
    """One table per top-level section: setting, default (``params.yaml``), the value in each
    profile where it differs, allowed values and the field's description."""
    names = profiles(root)
    loaded = [load_params(root).model_dump(mode="json")]
    loaded += [load_params(root, profile=name).model_dump(mode="json") for name in names]
    header = ["setting", "default", *(f"`{n}` profile" for n in names), "values",
              "description"]
    out: list[str] = []
    section_rows: dict[str, list[tuple]] = {}
    for key, field, values in _rows(Params, loaded):
        section = key.split(".")[0] if "." in key else "top level"
        section_rows.setdefault(section, []).append((key, field, values))
    for section, rows in section_rows.items():
        out += [f"## {section}", "", "| " + " | ".join(header) + " |",
                "|" + "---|" * len(header)]
        for key, field, values in rows:
            default, *others = values
            cells = [f"`{key}`", _value(default)]
            cells += [_value(v) if v != default else "" for v in others]
            cells += [_allowed(field.annotation).replace("|", "\\|"), _description(field)]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def _description(field: FieldInfo) -> str:
    return (field.description or "").replace("|", "\\|").replace("\n", " ")
