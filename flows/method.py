"""The one flow every testing method's stage runs: suite → a task per (model, shard) →
contract results → report. Composition only; the method (``tasks.core.method.Method``)
computes."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from prefect import Flow, flow, task
from prefect.cache_policies import NO_CACHE

from flows.stage import unit_resources
from tasks.core.config import Params
from tasks.core.method import Method, Unit, UnitResult
from tasks.core.paths import Workspace
from tasks.core.publish import publish
from tasks.core.schema import write_cases, write_results


@task(name="run-unit", task_run_name="{unit.name}", cache_policy=NO_CACHE)
def run_unit(method: Method, suite: pd.DataFrame, unit: Unit) -> UnitResult:
    """One model's part on one shard; the method's own tasks inside it cache what is costly."""
    return method.run_unit(suite, unit)


def compose(method: Method) -> dict:
    method.check_inputs()
    resources = unit_resources(method.params)  # refused before the suite when unmet
    suite = method.build_suite()
    write_cases(method.suite_path, suite, method.contract)
    with method.running(suite):
        with resources:  # on Dask with runtime.device cuda: a GPU per unit
            method.prepare(suite)
            futures = [run_unit.submit(method, suite, unit) for unit in method.units(suite)]
        runs = [future.result() for future in futures]
        results = method.collect(suite, runs)
    write_results(method.results_path, results, method.contract)
    publish(method.report(suite, results, runs), method.workspace)
    return method.summary(suite, results, runs)


def method_flow(method_class: type[Method]) -> Flow:
    """The stage flow of ``method_class``, named after its stage (the UI groups runs by it)."""

    def run(params: Params, root: str) -> dict:
        return compose(method_class(params, Workspace(Path(root))))

    run.__doc__ = method_class.__doc__
    run.__name__ = run.__qualname__ = f"{method_class.stage.replace('-', '_')}_flow"
    return flow(run, name=method_class.stage, log_prints=True)
