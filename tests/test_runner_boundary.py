"""Runner decisions live in the flow: methods declare their preparatory calls and fan out
through what the flow hands them (``lingtest.flows.method``); no module under ``tasks/`` names the
Dask runner or asks the running flow which task runner it has."""
from __future__ import annotations

import ast
import inspect

import pytest

from lingtest.flows.registry import STAGES, stage_method
from lingtest.tasks.core.paths import PACKAGE_ROOT

TASKS = PACKAGE_ROOT / "tasks"
# runner classes and modules, and the flow's own question (``lingtest.flows.stage``)
RUNNER_NAMES = ("DaskTaskRunner", "ThreadPoolTaskRunner", "prefect_dask", "prefect.task_runners",
                "runner_uses_processes")


def _runner_inspections(source: str) -> list[str]:
    """Where ``source`` names a task runner class or module, or reads ``task_runner`` off
    anything but a ``runtime`` configuration (``params.runtime.task_runner`` says what to
    build, it does not inspect what runs)."""
    found = [f"names {name}" for name in RUNNER_NAMES if name in source]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "task_runner":
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name != "runtime":
                found.append(f"line {node.lineno}: reads .task_runner of {ast.unparse(owner)}")
        if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "getattr"
                and any(isinstance(arg, ast.Constant) and arg.value == "task_runner"
                        for arg in node.args)):
            found.append(f"line {node.lineno}: getattr(…, 'task_runner')")
    return found


def test_no_module_under_tasks_inspects_the_task_runner():
    offenders = {str(path.relative_to(PACKAGE_ROOT)): found
                 for path in sorted(TASKS.rglob("*.py"))
                 if (found := _runner_inspections(path.read_text(encoding="utf-8")))}
    assert offenders == {}


def test_the_check_sees_what_the_methods_used_to_do():
    """The inspection ``lingtest.tasks.core.method`` had before the flow took it over is caught; a
    configuration's ``task_runner`` field is not."""
    before = ("from prefect.context import FlowRunContext\n"
              "runner = getattr(FlowRunContext.get(), 'task_runner', None)\n"
              "uses = type(runner).__name__ == 'DaskTaskRunner'\n"
              "other = FlowRunContext.get().task_runner\n")
    assert len(_runner_inspections(before)) == 3
    assert _runner_inspections("if params.runtime.task_runner == 'dask': pass\n"
                               "if runtime.task_runner == 'auto': pass\n") == []


def test_phases_run_in_order_with_each_phase_fed_the_last_ones_results():
    """``run_phases`` sends each phase's results back into the method's generator: a later
    phase built from an earlier one's results, the results of the last kept by the method."""
    from lingtest.flows.method import run_phases
    from lingtest.tasks.core.method import Method, run_in_turn

    seen: dict[str, list] = {}

    def preparation():
        lengths = yield [(len, ("ab",)), (len, ("abcd",))]
        seen["first"] = lengths
        seen["second"] = yield [(pow, (n, 2)) for n in lengths]

    run_phases(preparation(), run_in_turn)
    assert seen == {"first": [2, 4], "second": [4, 16]}
    assert list(Method.preparation(None, None)) == []  # the base class declares none


@pytest.mark.parametrize("stage", [s for s in STAGES if stage_method(s) is not None])
def test_every_stage_method_declares_its_preparation(stage):
    """A method's ``preparation`` is a generator, so nothing in it runs unless the flow
    drives it (under threads it does not)."""
    method = stage_method(stage)
    assert inspect.isgeneratorfunction(method.preparation)
    assert not hasattr(method, "prepare")
