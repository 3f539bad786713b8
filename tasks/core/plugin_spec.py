"""What a testing method declares to be one of lingtest's plug-ins.

Each ``tasks/<package>/plugin.py`` defines ``PLUGIN = Plugin(...)``: the paper, its
parameter section (a ``Section`` class in the package), and its stages — the DVC stage name,
the ``Method`` class (or a custom flow), the models it loads, the checks of its input files
before a run. ``lingtest.flows.registry`` finds the plug-ins and derives from them the stage list,
``Params``, the pre-run validation, ``lingtest models`` and the command line; nothing in
``tasks/core`` names a stage.

Code is named by ``"module:attribute"`` strings, imported when used, so listing the plug-ins
(every ``lingtest`` command does) imports no model library.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from lingtest.tasks.core.errors import LingtestError


@dataclass(frozen=True)
class ModelEntry:
    """One model a stage loads: the parameter naming it, the spec, and its kind (how it is
    checked: ``lingtest.tasks.models.checks.check_configured`` or the plug-in's ``model_checks``)."""

    key: str
    spec: str
    kind: str


@dataclass(frozen=True)
class StageSpec:
    """One DVC stage of a plug-in.

    ``method``: the ``lingtest.tasks.core.method.Method`` subclass (``lingtest.flows.method.method_flow`` makes
    its flow); ``flow``: a custom flow instead (the data and training stages). ``section``:
    the dotted parameter section it reads (its reports' provenance). ``models``: a function
    ``params -> list[ModelEntry]`` of what it loads; ``check``: ``(params, workspace) -> None``
    raising ``LingtestError`` on a bad input file. ``tables``: the processed tables its suite
    is built from (checked before a suite is exported). ``processes``: ``runtime.task_runner:
    auto`` runs it on Dask worker processes (its costly steps pay there)."""

    name: str
    section: str | None = None
    method: str | None = None
    flow: str | None = None
    models: str | None = None
    check: str | None = None
    tables: tuple[str, ...] = ()
    processes: bool = False

    def __post_init__(self) -> None:
        if (self.method is None) == (self.flow is None):
            raise LingtestError(f"stage {self.name}: give exactly one of method= and flow=")


@dataclass(frozen=True)
class Plugin:
    """A testing method (or the data room) as lingtest loads it.

    ``name``: its package under ``tasks/``, which is also its parameter section, its main
    stage, its contract's ``method`` and its report files' prefix (one name per method; the
    paper's is ``paper``). ``section`` and ``params``: that top-level ``params.yaml`` key and
    its ``Section`` class (None for a plug-in that reads only the shared sections). ``cli``:
    a ``typer.Typer`` whose commands join ``lingtest``'s. ``model_checks``: kind → ``(key, spec, params, workspace, row) -> row``
    for the model kinds only this plug-in knows."""

    name: str
    title: str
    stages: tuple[StageSpec, ...]
    paper: str = ""
    citation: str = ""
    code: str = ""
    section: str | None = None
    params: str | None = None
    cli: str | None = None
    model_checks: dict[str, str] = field(default_factory=dict)


def load(reference: str) -> Any:
    """The object a ``"package.module:attribute"`` reference names."""
    module, _, name = reference.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise LingtestError(f"plug-in reference {reference!r} does not load ({exc}); fix the "
                            "module:attribute in the plug-in's PLUGIN") from None


def call(reference: str | None, *args: Any) -> Any:
    """``load(reference)(*args)``, or None when the plug-in gives no such function."""
    return None if reference is None else load(reference)(*args)

