"""The plug-in registry: every ``tasks/<package>/plugin.py`` that defines ``PLUGIN``, and what
is derived from them — the stages (``STAGES``, in dvc.yaml's order), the stages that run on
worker processes under ``runtime.task_runner: auto``, ``Params`` (the shared sections plus
each plug-in's own) and ``load_params`` for it, each stage's flow.

A method is added by its own folder (``plugin.py``, ``params.py``, its ``Method``) plus its
sections in ``params.yaml`` and ``dvc.yaml``: docs/new-method.md walks through one.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
from pathlib import Path
from typing import Any

from pydantic import Field, create_model

import lingtest.tasks
from lingtest.tasks.core import config
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT
from lingtest.tasks.core.plugin_spec import Plugin, StageSpec, load


def _discover() -> tuple[Plugin, ...]:
    """The ``PLUGIN`` of every ``tasks/<package>/plugin.py``, by package name."""
    found = []
    for info in sorted(pkgutil.iter_modules(lingtest.tasks.__path__), key=lambda i: i.name):
        if not info.ispkg or importlib.util.find_spec(f"lingtest.tasks.{info.name}.plugin") is None:
            continue
        plugin = getattr(importlib.import_module(f"lingtest.tasks.{info.name}.plugin"), "PLUGIN", None)
        if not isinstance(plugin, Plugin):
            raise LingtestError(f"tasks/{info.name}/plugin.py: defines no PLUGIN = Plugin(...); "
                                "fix: see docs/new-method.md")
        if plugin.name != info.name:
            raise LingtestError(f"tasks/{info.name}/plugin.py: PLUGIN.name is {plugin.name!r}; "
                                f"fix: name it after its package, {info.name!r}")
        if plugin.section not in (None, plugin.name):
            raise LingtestError(f"tasks/{info.name}/plugin.py: section {plugin.section!r}; fix: "
                                f"name the parameter section after the plug-in, {info.name!r}")
        found.append(plugin)
    return tuple(found)


def _dvc_order() -> list[str]:
    """The stage names in dvc.yaml's order (the order `lingtest stages` lists them)."""
    import yaml

    path = PACKAGE_ROOT / "dvc.yaml"
    if not path.is_file():
        return []
    return list((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("stages", {}))


def _by_stage(plugins: tuple[Plugin, ...]) -> dict[str, tuple[Plugin, StageSpec]]:
    """Each stage's plug-in and spec, in dvc.yaml's order (stages it lacks last, by name);
    a stage two plug-ins declare is refused."""
    specs: dict[str, tuple[Plugin, StageSpec]] = {}
    for plugin in plugins:
        for stage in plugin.stages:
            if stage.name in specs:
                raise LingtestError(f"stage {stage.name} is declared by the plug-ins "
                                    f"{specs[stage.name][0].name} and {plugin.name}")
            specs[stage.name] = (plugin, stage)
    order = _dvc_order()
    ranked = sorted(specs, key=lambda s: (s not in order, order.index(s) if s in order else 0, s))
    return {name: specs[name] for name in ranked}


PLUGINS: tuple[Plugin, ...] = _discover()
_SPECS = _by_stage(PLUGINS)
STAGES: tuple[str, ...] = tuple(_SPECS)
PROCESS_STAGES: tuple[str, ...] = tuple(s for s in STAGES if _SPECS[s][1].processes)


def stage_spec(stage: str) -> StageSpec:
    return _spec(stage)[1]


def plugin_of(stage: str) -> Plugin:
    return _spec(stage)[0]


def _spec(stage: str) -> tuple[Plugin, StageSpec]:
    if stage not in _SPECS:
        raise LingtestError(f"unknown stage `{stage}`; stages: {', '.join(STAGES)}")
    return _SPECS[stage]


def _build_params() -> type[config.Params]:
    """``Params``: the shared sections (``lingtest.tasks.core.config.Params``) and each plug-in's."""
    fields: dict[str, Any] = {}
    for plugin in PLUGINS:
        if plugin.section is None:
            continue
        section = load(plugin.params)
        fields[plugin.section] = (section, Field(default_factory=section,
                                                 description=plugin.title))
    model = create_model("Params", __base__=config.Params, __module__=__name__, **fields)
    model.__doc__ = "Every parameter: the shared sections and each plug-in's own."
    return model


Params = _build_params()


def load_params(root: Path | None = None, overrides: list[str] | tuple[str, ...] = (),
                profile: str | None = None) -> config.Params:
    """The effective parameters for a project root (cwd's project when None)."""
    return config.read_params(Params, root, overrides, profile)


def stage_method(stage: str):
    """The ``Method`` class behind a stage (None for the data and training stages)."""
    spec = stage_spec(stage)
    return load(spec.method) if spec.method else None


@functools.cache
def stage_flow(stage: str):
    """The Prefect flow of a stage: its plug-in's own, or ``method_flow`` of its Method."""
    spec = stage_spec(stage)
    if spec.flow:
        return load(spec.flow)
    # by reference, as the plug-ins' own code: a stage with its own flow does not depend
    # on the method flow's module (tests/test_dvc_deps)
    return load("lingtest.flows.method:method_flow")(load(spec.method))


def stage_modules(stage: str) -> list[str]:
    """The modules a stage's run starts from (its dependency walk: tests/test_dvc_deps)."""
    spec, plugin = stage_spec(stage), plugin_of(stage)
    roots = [f"lingtest.tasks.{plugin.name}.plugin"]
    roots += [plugin.params.partition(":")[0]] if plugin.params else []  # its defaults
    roots += [spec.flow.partition(":")[0]] if spec.flow else [
        "lingtest.flows.method", spec.method.partition(":")[0]]
    return roots
