"""Parameters: ``params.yaml`` (+ a profile file + ``--set`` overrides) into pydantic models.

Precedence, lowest first: ``params.yaml``; ``params/<profile>.yaml`` when ``profile`` is not
``default`` (so ``dvc exp run -S profile=paper`` switches profile); ``--set key=value``.
Unknown keys and bad values fail with one message naming the dotted key and what is allowed.
``Params`` here holds the sections every stage shares (``lingtest.tasks.core.sections``); the plug-in
registry (``lingtest.flows.registry``) derives the full class with each method's section and reads
parameters into it (``lingtest.flows.registry.load_params``).
"""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.secrets import redact_override, redact_value
from lingtest.tasks.core.sections import DataParams, ModelsParams, RuntimeParams, Section


class Params(Section):
    """The shared sections; ``lingtest.flows.registry.Params`` adds each plug-in's."""

    seed: int = Field(42, ge=0, le=2**32 - 1,  # NumPy's legacy seeding takes 32 bits
                      description="drives Python, NumPy and torch")
    profile: str = Field("default", pattern=r"^[A-Za-z0-9_-]+$",
                         description="params/<profile>.yaml merged over params.yaml")
    data: DataParams = Field(default_factory=DataParams)
    models: ModelsParams = Field(default_factory=ModelsParams)
    runtime: RuntimeParams = Field(default_factory=RuntimeParams)

    def section(self, dotted: str) -> Section:
        """The section a dotted name reaches (``adaptive.debug``)."""
        value = self
        for part in dotted.split("."):
            value = getattr(value, part)
        return value

    def section_hash(self, *keys: str) -> str:
        """Short hash of the named sections or dotted keys (``models.offline``; all sections
        when none): keys caches and run tags."""
        dumped = self.model_dump(mode="json")
        picked = {}
        for key in keys or sorted(dumped):
            value = dumped
            for part in key.split("."):
                value = value[part]
            picked[key] = value
        return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:12]


# --------------------------------------------------------------------------- loading

def _read_yaml(path: Path) -> dict[str, Any]:
    from lingtest.tasks.core.io import parse_yaml, read_input_text

    if not path.exists():
        raise LingtestError(f"{path}: parameter file not found (run from the project root)")
    loaded = parse_yaml(read_input_text(path), path, "check indentation, colons and quoting")
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise LingtestError(f"{path}: expected a mapping of sections at the top level")
    return loaded


def papers_models(dotted: str) -> list[str]:
    """The models the papers used for one parameter, as the paper profile lists them with
    their sources (``contrastive.encoders`` in params/paper.yaml): what a report does not
    call a substitute. Empty when the profile does not set it."""
    from lingtest.tasks.core.paths import PACKAGE_ROOT

    value: Any = _read_yaml(PACKAGE_ROOT / "params" / "paper.yaml")
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return list(value or [])


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=value`` → (["a", "b"], value parsed as YAML: 7, true, [x, y], text)."""
    if "=" not in item:
        raise LingtestError(f"--set {redact_override(item)!r}: expected key=value, e.g. "
                            "--set seed=7")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".")]
    if not all(parts):
        raise LingtestError(f"--set {redact_override(item)!r}: the key {key!r} has an empty part")
    if not raw.strip():  # `--set key=` (a shell variable left empty) is no value at all
        raise LingtestError(f"--set {redact_override(item)!r}: no value after `=`; fix: "
                            f"{key.strip()}=null for none (the default where it has one), or "
                            "a value")
    from lingtest.tasks.core.io import load_yaml_value

    try:
        value = load_yaml_value(raw)
    except yaml.constructor.ConstructorError as exc:  # 010 or 1:30: base 8 or 60 in YAML 1.1
        raise LingtestError(f"--set {redact_override(item)!r}: {exc.problem}") from None
    except (yaml.YAMLError, RecursionError):  # kept as text: the section's check names it
        value = raw
    return parts, value


def _apply_override(tree: dict[str, Any], parts: list[str], value: Any) -> None:
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            dotted = ".".join(parts[: i + 1])
            raise LingtestError(f"--set {'.'.join(parts)}: `{dotted}` is a value, not a section")
        node = child
    node[parts[-1]] = value


def _allowed_keys(schema: type[Params], loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = schema
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = getattr(field, "annotation", None)
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return sorted(model.model_fields)


def _short(text: str, limit: int = 120) -> str:
    """A value as echoed in an error: a 100,000-character --set stays one readable line."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def explain(error: ValidationError, origin: str, schema: type[Params]) -> LingtestError:
    """One message naming each bad key and what it accepts."""
    lines = []
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"]) or "(top level)"
        if item["type"] == "extra_forbidden":
            allowed = ", ".join(_allowed_keys(schema, item["loc"]))
            lines.append(f"unknown key `{key}`; allowed keys here: {allowed}")
        elif isinstance(item.get("input"), dict):  # a section's own check: its message says it
            lines.append(f"bad value in `{key}`: {item['msg'].removeprefix('Value error, ')}")
        elif key.endswith("notify_url"):  # a webhook's path is its token: never echoed
            lines.append(f"bad value for `{key}`: {item['msg'].removeprefix('Value error, ')}")
        else:
            got = redact_value(item.get("input"), str(item["loc"][-1]) if item["loc"] else "")
            lines.append(f"bad value for `{key}`: {item['msg']} (got {_short(repr(got))})")
    return LingtestError(f"{origin}: " + "; ".join(lines))


def read_params(
    schema: type[Params],
    root: Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    profile: str | None = None,
) -> Params:
    """The effective parameters for a project root (cwd's project when None), validated
    against ``schema`` (``lingtest.flows.registry.Params``)."""
    from lingtest.tasks.core.paths import find_project_root

    root = root or find_project_root()
    tree = _read_yaml(root / "params.yaml")
    parsed = [parse_override(item) for item in overrides]
    for parts, value in parsed:  # a --set profile=... chooses the profile file too
        if parts == ["profile"]:
            profile = str(value)
    chosen = profile or str(tree.get("profile", "default"))
    origin = f"{root / 'params.yaml'}"
    if chosen != "default":
        profile_file = root / "params" / f"{chosen}.yaml"
        if profile_file.exists() and not profile_file.is_file():
            raise LingtestError(f"profile `{chosen}`: {profile_file} is not a regular file "
                                "(a folder, pipe or device); fix: a YAML file of settings")
        if not profile_file.is_file():
            known = sorted(p.stem for p in (root / "params").glob("*.yaml"))
            raise LingtestError(
                f"profile `{chosen}`: {profile_file} does not exist; known profiles: "
                f"default, {', '.join(known)}")
        tree = _deep_merge(tree, _read_yaml(profile_file))
        tree["profile"] = chosen
        origin += f" + {profile_file}"
    for parts, value in parsed:
        _apply_override(tree, parts, value)
    if parsed:
        origin += " + --set " + " ".join(
            item.split("=", 1)[0] + "=***" if item.split("=", 1)[0].endswith("notify_url")
            else _short(redact_override(item)) for item in overrides)
    try:
        return schema.model_validate(tree)
    except ValidationError as exc:
        raise explain(exc, origin, schema) from None
