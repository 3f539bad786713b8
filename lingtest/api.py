"""lingtest's Python API: the functions the ``lingtest`` command line calls, so a notebook
and a shell take one code path."""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace, find_project_root

if TYPE_CHECKING:
    from lingtest.result import TestResult

Echo = Callable[[str], None]


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _workspace(project: str | os.PathLike | None) -> Workspace:
    if project is None:
        return Workspace(find_project_root())
    root = Path(project).expanduser().resolve()
    if not (root / "params.yaml").is_file():
        raise LingtestError(f"project={project}: {root} holds no params.yaml; fix: the folder "
                            "of a lingtest checkout (or leave project out for the current one)")
    return Workspace(root)


def settings(sets: Iterable[str] | Mapping[str, Any] | None = None, **keywords: Any
             ) -> list[str]:
    """``--set`` strings from a list of them, a {key: value} mapping and keywords, where a
    keyword's ``__`` stands for the key's dot (``capabilities__bootstrap=200``); a value
    that is not text is written as JSON, which the parameters' YAML reads back."""
    pairs = list(sets.items()) if isinstance(sets, Mapping) else []
    listed = [] if isinstance(sets, Mapping) else list(sets or [])
    pairs += [(key.replace("__", "."), value) for key, value in keywords.items()]
    return [*listed, *(f"{key}={value if isinstance(value, str) else json.dumps(value)}"
                       for key, value in pairs)]


def test(models: Any, methods: list[str] | str | None = None, *, profile: str | None = None,
         name: str | None = None, sets: Iterable[str] | Mapping[str, Any] | None = None,
         project: str | os.PathLike | None = None, max_fail: float | None = None,
         max_broken: int | None = None, echo: Echo | None = _stderr) -> TestResult:
    """Test ``models`` with the methods that fit them (or ``methods``) beside the pipeline's
    baseline models, as ``lingtest test`` does; the run lands in ``runs/<name>/``.

    ``models``: one model, a list, or a {name: model} mapping; a model is a spec (hub id,
    folder, ``python:…``, ``predictions:…``, ``openai:…``) or a live object — a classifier
    with ``predict_proba`` (a scikit-learn pipeline), an encoder with ``encode``, an LLM
    with ``generate``, or a ``transformers`` pipeline. ``max_fail`` / ``max_broken``: the
    result's ``breaches`` name every gate the run failed."""
    from lingtest.flows.own_models import Gates, run_own_models
    from lingtest.flows.own_plan import describe_kinds, plan
    from lingtest.flows.registry import load_params
    from lingtest.result import TestResult
    from lingtest.tasks.core.runtime import configure_environment

    echo = echo or (lambda text: None)
    workspace = _workspace(project)
    overrides = settings(sets)
    specs, notes, in_process = _specs(models, workspace.root)
    if in_process:  # a Dask worker could not reach the object
        overrides.append("runtime.task_runner=threads")
    params = load_params(workspace.root, overrides, profile)
    chosen = ([m.strip() for m in methods.split(",") if m.strip()] if isinstance(methods, str)
              else list(methods) if methods else None)
    the_plan = plan(specs, chosen, name, params, workspace.root)  # before Prefect loads
    for line in [*notes, *describe_kinds(the_plan)]:
        echo(line if line.startswith("lingtest") else f"lingtest test: {line}")
    api = configure_environment(workspace)
    echo(f"lingtest test: {', '.join(the_plan.names)} through {', '.join(the_plan.methods)}, "
         f"Prefect API {api or 'temporary local server'}")
    comparisons = run_own_models(the_plan, overrides, profile, workspace.root,
                                 Gates(max_fail, max_broken), echo=echo)
    result = TestResult(the_plan.name, the_plan.out, the_plan.names, the_plan.methods,
                        {c["method"]: c["baseline"] for c in comparisons}, notes, comparisons,
                        [b for c in comparisons for b in c["breaches"]])
    result.write()
    try:  # runs/<name>/report.html, for someone without Python: a finished run stays one
        result.report()
    except Exception as error:  # noqa: BLE001 - any failure of the page, reported as one line
        echo(f"lingtest test: report.html not written ({type(error).__name__}: {error}); the "
             f"run's results are complete; fix the cause and run: lingtest report {result.name}")
    return result


def _specs(models: Any, root: Path) -> tuple[list[str], list[str], bool]:
    """The spec of each model (a live object written as a python: model), what the run
    should say of the live ones, and whether one stays in this process (it runs on
    threads)."""
    from lingtest.live import as_spec, display_name

    if isinstance(models, Mapping):
        named = [(str(key), value) for key, value in models.items()]
    elif isinstance(models, (list, tuple)):
        named = [(None, model) for model in models]
    else:
        named = [(None, models)]
    specs, notes, in_process = [], [], False
    for given, model in named:
        if isinstance(model, (str, os.PathLike)):
            spec = os.fspath(model)
            specs.append(spec if given is None or "#name=" in spec else f"{spec}#name={given}")
            continue
        live = as_spec(model, given or display_name(model), root)
        specs.append(live.spec)
        how = (f"its state, {live.revision}" if live.pickled else
               f"its source, {live.revision}; it cannot be pickled ({live.why_not}), so the "
               "run goes on threads in this process, not on Dask workers")
        notes.append(f"{live.name}: a live {type(model).__name__}, identified by {how}")
        in_process = in_process or not live.pickled
    return specs, notes, in_process


def check(stage: str, params, workspace: Workspace) -> None:
    """What ``lingtest run`` and ``lingtest validate`` check before a stage runs: the alert
    rules, the display names, the stage's inputs and models (loads no weights)."""
    from lingtest.flows.validation import check_display_names, validate_inputs
    from lingtest.tasks.core import alerts

    alerts.check_rules(params.runtime.alerts, workspace.root)
    check_display_names(params, workspace)
    validate_inputs(stage, params, workspace)


def run(stage: str, *, profile: str | None = None,
        sets: Iterable[str] | Mapping[str, Any] | None = None,
        project: str | os.PathLike | None = None, echo: Echo | None = _stderr,
        **keywords: Any) -> dict:
    """Run one pipeline stage as ``lingtest run`` does (its checks first; one run of a
    stage at a time per project); keywords are settings (``seed=7``,
    ``capabilities__bootstrap=200``). Returns the stage's summary, with ``alerts``: the
    regressions the project's alert rules found against the previous results."""
    from lingtest.flows.registry import load_params, stage_spec
    from lingtest.flows.stage import run_stage
    from lingtest.tasks.core import alerts
    from lingtest.tasks.core.run_lock import INSIDE_REPRO, REPRO, StageBusy, hold, holder
    from lingtest.tasks.core.runtime import configure_environment

    echo = echo or (lambda text: None)
    stage_spec(stage)  # an unknown stage: refused before its lock file is made
    workspace = _workspace(project)
    params = load_params(workspace.root, settings(sets, **keywords), profile)
    rerun = None if os.environ.get(INSIDE_REPRO) else holder(workspace, REPRO)
    if rerun is not None:
        raise StageBusy(REPRO, rerun)
    with hold(workspace, stage):  # a second run of the stage: one line, at once
        check(stage, params, workspace)  # before Prefect starts or anything is written
        api = configure_environment(workspace)
        echo(f"lingtest: stage {stage}, profile {params.profile}, seed {params.seed}, "
             f"Prefect API {api or 'temporary local server'}")
        before = alerts.snapshot_results(params.runtime.alerts, workspace.root, [stage])
        summary = run_stage(stage, params, workspace)
        fired = [] if os.environ.get(INSIDE_REPRO) else alerts.regressions(
            params.runtime.alerts, workspace.root, before)
    if fired:
        alerts.send(alerts.webhook(params.runtime.notify_url),
                    f"lingtest: stage {stage} regression: " + "; ".join(fired))
    return {**(summary if isinstance(summary, dict) else {"summary": summary}),
            "alerts": fired}


def load(run: str | os.PathLike, project: str | os.PathLike | None = None) -> TestResult:
    """A finished ``lingtest test`` run: its name under ``runs/``, or its folder."""
    from lingtest.result import TestResult

    from lingtest.flows.own_plan import RUNS

    given = Path(run).expanduser()
    folder = given if given.is_dir() else _workspace(project).root / RUNS / str(run)
    return TestResult.read(folder.resolve())
