"""The one flow every testing method's stage runs: suite → a task per (model, shard) →
contract results → report. Composition only; the method (``lingtest.tasks.core.method.Method``)
computes."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import pandas as pd
from prefect import Flow, flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import TerminationSignal
from prefect.futures import PrefectFuture

from lingtest.flows.stage import runner_uses_processes, unit_resources
from lingtest.tasks.core import stopping
from lingtest.tasks.core.compare import previous_run, publish_comparison
from lingtest.flows.registry import Params
from lingtest.tasks.core.errors import FailedCalls, LingtestError
from lingtest.tasks.core.method import Call, Method, Preparation, Unit, UnitResult, run_in_turn
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.publish import publish
from lingtest.tasks.core.schema import write_cases, write_results

# Where a run whose model calls failed writes its reports (under data/interim/<stage>).
FAILED_RUN_REPORTS = "failed-run-reports"


@task(name="run-unit", task_run_name="{unit.name}", cache_policy=NO_CACHE)
def run_unit(method: Method, suite: pd.DataFrame, unit: Unit) -> UnitResult:
    """One model's part on one shard; the method's own tasks inside it cache what is costly."""
    return method.run_unit(suite, unit)


def submit_all(calls: list[Call]) -> list:
    """Every call submitted at once, so the calls spread over the runner's worker processes;
    results in call order."""
    futures = [task.submit(*args) for task, args in calls]
    return [future.result() for future in futures]


def call_runner() -> Callable[[list[Call]], list]:
    """How a method's independent calls run under the running flow's task runner: submitted
    to worker processes, or in turn in the flow's thread (the libraries they share within a
    process are not thread-safe, so threads would only queue)."""
    return submit_all if runner_uses_processes() else run_in_turn


def run_phases(preparation: Preparation, run_calls: Callable[[list[Call]], list]) -> None:
    """Run a method's declared preparation: each phase's calls through ``run_calls``, their
    results sent back into the generator for the next phase."""
    results = None
    while True:
        try:
            calls = preparation.send(results)
        except StopIteration:
            return
        results = run_calls(calls)


def submit_early(method: Method) -> dict[Unit, PrefectFuture]:
    """The units that read no case, submitted before the suite exists (on a process runner
    they fill the workers while the flow tags, parses and expands)."""
    with unit_resources(method.params):
        return {unit: run_unit.submit(method, pd.DataFrame(), unit)
                for unit in method.early_units()}


def compose(method: Method) -> dict:
    method.check_inputs()
    before = previous_run(method.workspace, method.stage)  # before this run writes
    resources = unit_resources(method.params)  # refused before the suite when unmet
    processes = runner_uses_processes()
    method.run_calls = call_runner()
    early = submit_early(method) if processes else {}  # under threads: with the rest
    suite = method.build_suite()
    write_cases(method.suite_path, suite, method.contract)
    with method.running(suite):
        with resources:  # on Dask with runtime.device cuda: a GPU per unit
            units = method.units(suite)
            stray = sorted(unit.name for unit in set(early) - set(units))
            if stray:
                raise LingtestError(f"{method.stage}: early units {stray} are not among the "
                                    "stage's units")
            if processes:  # under threads each unit does its share itself
                run_phases(method.preparation(suite), submit_all)
            futures = [early[unit] if unit in early else run_unit.submit(method, suite, unit)
                       for unit in units]
        runs = [future.result() for future in futures]
        results = method.collect(suite, runs)
    write_results(method.results_path, results, method.contract)
    report, summary = method.report(suite, results, runs), method.summary(suite, results, runs)
    partial = method.workspace.interim / method.stage / FAILED_RUN_REPORTS
    if summary.get("errors"):  # failed model calls: the last good reports stay in place
        publish(report, method.workspace, into=partial)
        raise FailedCalls(method.stage, summary, method.workspace.shown(partial))
    shutil.rmtree(partial, ignore_errors=True)
    publish(report, method.workspace)
    publish_comparison(method.stage, method.workspace, method.contract.result_index, before,
                       get_run_logger())
    return summary


def method_flow(method_class: type[Method]) -> Flow:
    """The stage flow of ``method_class``, named after its stage (the UI groups runs by it)."""

    def run(params: Params, root: str, outputs: str | None = None) -> dict:
        workspace = Workspace(Path(root), Path(outputs) if outputs else None)
        try:
            return compose(method_class(params, workspace))
        except (TerminationSignal, KeyboardInterrupt) as signal:
            # before Prefect's shutdown waits for the task threads: they send no more
            stopping.request(type(signal).__name__)
            raise

    run.__doc__ = method_class.__doc__
    run.__name__ = run.__qualname__ = f"{method_class.stage.replace('-', '_')}_flow"
    stage_flow = flow(run, name=method_class.stage, log_prints=True)
    stage_flow.method_class = method_class  # `lingtest.flows.stage_method`: its contract, for diffs
    return stage_flow
