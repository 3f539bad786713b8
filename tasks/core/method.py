"""The shape every testing method takes: suite → one unit of work per (model, shard) →
contract result rows → report.

A method is a plain class (``tasks/<method>/method.py``); ``lingtest.flows.method.method_flow`` turns
it into its stage's flow, which only composes: build the suite, submit one task per
``Unit`` (so a task runner — threads or Dask — can spread the work), collect, publish.
``retest`` runs one model over a suite with the same code, for the repair and debugging
loops that re-test a new revision and diff it by ``case_id`` (``schema.compare_results``).
"""
from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, ContextManager, Generator

import pandas as pd

from lingtest.tasks.core.config import Params
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.publish import Report
from lingtest.tasks.core.schema import Contract, check_results, undefined_count


@dataclass(frozen=True)
class Unit:
    """One task's work: a part (``cases``, or a method's extra per-model part such as
    ``checklist``) of one model, and which shard of the suite's cases."""

    model_id: str
    part: str = "cases"
    shard: int = 0
    shards: int = 1

    @property
    def name(self) -> str:
        shard = f"-{self.shard + 1}of{self.shards}" if self.shards > 1 else ""
        return f"{self.part}-{self.model_id}{shard}"

    def take(self, frame: pd.DataFrame) -> pd.DataFrame:
        """This shard's rows (every ``shards``-th row from ``shard``, order kept)."""
        return frame.iloc[self.shard::self.shards] if self.shards > 1 else frame


Call = tuple[Any, tuple]  # a task (or plain function) and its positional arguments
# Phases of calls, each phase's results (in call order) sent back into the generator.
Preparation = Generator[list[Call], list, None]


def run_in_turn(calls: list[Call]) -> list:
    """Each ``task(*args)`` in this thread, one after another, results in call order: how a
    method's calls run unless its flow hands it another way (``Method.run_calls``)."""
    return [task(*args) for task, args in calls]


@dataclass
class UnitResult:
    unit: Unit
    results: pd.DataFrame | None = None  # contract rows (``Method.contract``)
    extra: dict = field(default_factory=dict)  # the method's per-model by-products


class Method(ABC):
    """Subclasses set ``stage`` (the DVC stage and report folder) and ``contract``, and
    implement ``build_suite``, ``run_unit`` and ``report``."""

    stage: ClassVar[str]
    contract: ClassVar[Contract]
    # How ``fan_out``'s calls run: the stage's flow sets its runner's way (submitted to the
    # worker processes under Dask); elsewhere (``retest``, a suite export) in turn. Never
    # over threads: the libraries such tasks share within a process are not thread-safe
    # (spaCy's pipelines, a language model behind its lock).
    run_calls: Callable[[list[Call]], list] = staticmethod(run_in_turn)

    def __init__(self, params: Params, workspace: Workspace):
        self.params = params
        self.workspace = workspace

    @property
    def interim(self) -> Path:
        return self.workspace.interim / self.stage

    @property
    def suite_path(self) -> Path:
        return self.interim / "suite.parquet"

    @property
    def results_path(self) -> Path:
        return self.interim / "results.parquet"

    def check_inputs(self) -> None:
        """Fail fast (missing tables, unknown models) before anything long runs."""

    @abstractmethod
    def build_suite(self) -> pd.DataFrame:
        """The cases (contract columns plus the method's own), computed through tasks."""

    @abstractmethod
    def model_ids(self) -> list[str]:
        """The models under test, in report order."""

    def units(self, suite: pd.DataFrame) -> list[Unit]:
        """One unit per model and shard of the cases (``runtime.shards``)."""
        shards = self.params.runtime.shards
        return [Unit(model_id, "cases", shard, shards)
                for model_id in self.model_ids() for shard in range(shards)]

    @abstractmethod
    def run_unit(self, suite: pd.DataFrame, unit: Unit) -> UnitResult:
        """Run one unit: contract rows for ``unit.take(suite)`` and/or per-model extras."""

    def early_units(self) -> list[Unit]:
        """Units that read no case (a subset of ``units``). On a process runner the flow
        submits them before building the suite, so they run while it is built (S²LCT's
        CheckList units beside its tagging and expansion); under threads they run with the
        rest. They get an empty suite and run outside ``running``."""
        return []

    def preparation(self, suite: pd.DataFrame) -> Preparation:
        """Work the units would each do themselves, declared so that a runner with worker
        processes can spread it before them: a generator of phases, each a list of
        ``(task, args)`` calls, that receives each phase's results (in call order) back from
        its ``yield``, so a later phase can depend on an earlier one. The flow submits the
        phases under a process runner and skips them under threads (there the units share
        one process, and would only queue behind its libraries' locks). None by default."""
        yield from ()

    def fan_out(self, task, calls: list[tuple]) -> list:
        """``task(*args)`` for each argument tuple, results in call order, run the way the
        flow chose (``run_calls``): independent calls a method needs the results of now."""
        return self.run_calls([(task, args) for args in calls])

    def running(self, suite: pd.DataFrame) -> ContextManager:
        """Brackets the units (a method that records runs marks failures here)."""
        return contextlib.nullcontext()

    def collect(self, suite: pd.DataFrame, runs: list[UnitResult]) -> pd.DataFrame:
        """All units' contract rows, model by model in unit order, each model's rows in case
        order: a sharded model's rows are put back in the order one unsharded unit gives
        them, so no statistic that resamples or reads rows in order (a bootstrap) changes
        with ``runtime.shards``."""
        frames = []
        for its_runs in by_model(runs).values():
            parts = [run.results for run in its_runs if run.results is not None]
            if not parts:
                continue
            rows = pd.concat(parts, ignore_index=True)
            frames.append(in_case_order(rows, suite)
                          if any(run.unit.shards > 1 for run in its_runs) else rows)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @abstractmethod
    def report(self, suite: pd.DataFrame, results: pd.DataFrame,
               runs: list[UnitResult]) -> Report:
        """Tables, figures, metrics and provenance of the run (published by the flow)."""

    def texts_to_score(self, suite: pd.DataFrame) -> list[str]:
        """Every distinct text a model under test is asked about on this suite (what
        ``lingtest export-suite`` hands out for scoring elsewhere): the contract's text
        columns by default; a method that asks about more texts adds them."""
        columns = [c for c in self.contract.texts if c in suite.columns]
        return list(dict.fromkeys(t for c in columns for t in suite[c] if isinstance(t, str) and t))

    def summary(self, suite: pd.DataFrame, results: pd.DataFrame,
                runs: list[UnitResult]) -> dict:
        """What the flow returns (printed by ``lingtest run``); an ``errors`` count above 0
        (failed model calls) fails the stage and keeps the last good reports. ``undefined``
        (answers that named no label: neither pass nor fail) appears when there are any."""
        verdicts = results["verdict"] if len(results) else pd.Series(dtype=str)
        undefined = undefined_count(verdicts)
        return {"cases": len(suite), "results": len(results),
                "fail": int(verdicts.eq("fail").sum()),
                **({"undefined": undefined} if undefined else {})}


def in_case_order(rows: pd.DataFrame, suite: pd.DataFrame) -> pd.DataFrame:
    """``rows`` sorted by their case's place in ``suite`` (stable: the rows of one case, and
    rows of no suite case, at the end, keep their order): the order of an unsharded unit,
    whose cases are the suite's in order."""
    position = pd.Series(range(len(suite)), index=suite["case_id"].to_numpy())
    key = rows["case_id"].map(position).fillna(len(suite)).to_numpy()
    return rows.iloc[key.argsort(kind="stable")]


def by_model(runs: list[UnitResult]) -> dict[str, list[UnitResult]]:
    """The units' results grouped by model, in unit order."""
    out: dict[str, list[UnitResult]] = {}
    for run in runs:
        out.setdefault(run.unit.model_id, []).append(run)
    return out


def retest(method: Method, suite: pd.DataFrame, model_id: str) -> pd.DataFrame:
    """``model_id``'s contract rows on ``suite`` (every shard, in this process): the re-test
    of a model — a new revision, a repaired copy — to diff with ``schema.compare_results``.
    The model need not be one of the stage's configured models."""
    shards = method.params.runtime.shards
    runs = [method.run_unit(suite, Unit(model_id, "cases", shard, shards))
            for shard in range(shards)]
    return check_results(method.collect(suite, runs), method.contract)
