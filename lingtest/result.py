"""A finished ``lingtest test`` run as DataFrames: what a notebook cell shows and a script
reads. Everything is read from the run's folder (``runs/<name>/``), so ``lingtest.load``
gives the same object for a run made yesterday, from the command line or from Python."""
from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lingtest.tasks.core.errors import LingtestError

RUN_FILE = "run.json"  # what lingtest.test wrote down about the run, in its folder
WORST = 5  # failing cases a cell shows per method
RUN_KEYS = {"name": str, "models": list, "methods": list, "baselines": dict}  # run.json's


@dataclass
class TestResult:
    """One run of your models: per method the side-by-side table, the per-case results with
    their texts, the changes against each baseline model, and the failures."""

    name: str
    folder: Path
    models: list[str]
    methods: list[str]
    baselines: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # how the run went (threads, cache)
    # of the run just made (lingtest.test), not of one read back: each method's comparison
    # as the command line prints it, and every gate (max_fail, max_broken) the run failed
    comparisons: list[dict] = field(default_factory=list, repr=False)
    breaches: list[str] = field(default_factory=list, repr=False)
    # each method's cases, read once (summary, failures and the cell all start from them)
    _cases: dict[str, pd.DataFrame] = field(default_factory=dict, init=False, repr=False,
                                            compare=False)

    __test__ = False  # not a pytest test class, whatever its name

    @classmethod
    def read(cls, folder: Path) -> "TestResult":
        run_file = folder / RUN_FILE
        if not run_file.is_file():
            raise LingtestError(f"{folder} holds no finished lingtest test run ({RUN_FILE} is "
                                "missing); fix: name a folder under runs/ that lingtest test "
                                "or lingtest.test wrote, or run it")
        from lingtest.tasks.core import io

        fix = "run lingtest test for it again"
        run = io.read_input_json(run_file, fix)
        if not isinstance(run, dict):
            wrong = ["the whole file (not a JSON object)"]
        else:
            wrong = [key for key, kind in RUN_KEYS.items() if not isinstance(run.get(key), kind)]
            wrong += [] if isinstance(run.get("notes", []), list) else ["notes"]
        if wrong:
            raise LingtestError(f"{run_file}: not a finished run's record ({', '.join(wrong)} "
                                f"missing or of the wrong type); fix: {fix}")
        return cls(run["name"], folder, run["models"], run["methods"], run["baselines"],
                   run.get("notes", []))

    def write(self) -> None:
        from lingtest.tasks.core import io

        io.write_json(self.folder / RUN_FILE, {
            "name": self.name, "models": self.models, "methods": self.methods,
            "baselines": self.baselines, "notes": self.notes})

    # ------------------------------------------------------------------ per method

    def _method(self, method: str):
        if method not in self.methods:
            raise LingtestError(f"run {self.name} did not run {method}; it ran "
                                f"{', '.join(self.methods)}")
        from lingtest.flows.registry import stage_method

        return stage_method(method)

    def _report(self, method: str, table: str) -> pd.DataFrame:
        from lingtest.flows.own_models import report_prefix

        return pd.read_csv(self.folder / "reports" / f"{method}-vs-baseline"
                           / f"{report_prefix(self.name, method)}-{table}.csv")

    def _interim(self, method: str, outputs: Path | None) -> Path:
        """Where a method's suite and rows are: this run's ``outputs`` or the pipeline's."""
        from lingtest.tasks.core.paths import Workspace

        return Workspace(self.folder.parent.parent, outputs).interim / self._method(method).stage

    def table(self, method: str) -> pd.DataFrame:
        """Fail % per capability / topic / relation / question (and the method's settings),
        your models beside the baseline models, over the cases every model answered."""
        self._method(method)
        return self._report(method, "side-by-side")

    def changes(self, method: str) -> pd.DataFrame:
        """Per your model and baseline model: cases fixed, broken, unchanged."""
        self._method(method)
        if not self.baselines.get(method):
            from lingtest.tasks.core.side_by_side import CHANGE_COLUMNS

            return pd.DataFrame(columns=CHANGE_COLUMNS)
        return self._report(method, "changes")

    def cases(self, method: str) -> pd.DataFrame:
        """Every result row of your models and the baseline models, with the case's texts
        and expectation; ``model_id`` says whose."""
        if method not in self._cases:
            contract = self._method(method).contract
            interim = self._interim(method, self.folder)
            suite = pd.read_parquet(interim / "suite.parquet")
            rows = pd.read_parquet(interim / "results.parquet")
            rows = pd.concat([rows[rows["model_id"].isin(self.models)], self._baseline_rows(
                method, set(suite["case_id"]))], ignore_index=True)
            wanted = [c for c in (contract.group, *contract.texts, "expectation")
                      if c in suite.columns and c not in rows.columns]
            self._cases[method] = rows.merge(suite[["case_id", *wanted]], on="case_id",
                                             how="left")
        return self._cases[method].copy()

    def _baseline_rows(self, method: str, case_ids: set[str]) -> pd.DataFrame:
        """The baseline models' rows on this run's cases: run here, else the pipeline's."""
        here = self._interim(method, self.folder / "baseline") / "results.parquet"
        path = here if here.is_file() else self._interim(method, None) / "results.parquet"
        if not self.baselines.get(method) or not path.is_file():
            return pd.DataFrame()
        rows = pd.read_parquet(path)
        return rows[rows["model_id"].isin(self.baselines[method])
                    & rows["case_id"].isin(case_ids)]

    def failures(self, method: str, capability: str | None = None,
                 model: str | None = None) -> pd.DataFrame:
        """Your models' failing cases with their texts, worst first: cases the most baseline
        models pass come first (what your model breaks). ``capability`` narrows to one
        group of the method (a capability, topic, relation or question); ``model`` to one of
        your models."""
        contract = self._method(method).contract
        rows = self.cases(method)
        if capability is not None:
            known = sorted(rows[contract.group].dropna().unique())
            if capability not in known:
                raise LingtestError(f"{method} has no {contract.group} {capability!r} in run "
                                    f"{self.name}; it has: {', '.join(map(str, known))}")
            rows = rows[rows[contract.group] == capability]
        keys = ["case_id", *contract.result_keys]
        base = rows[~rows["model_id"].isin(self.models)]
        passed_by = (base[base["verdict"] == "pass"].groupby(keys).size()
                     .rename("baselines passing"))
        mine = rows[rows["model_id"].isin([model] if model else self.models)
                    & (rows["verdict"] == "fail")]
        if model is not None and model not in self.models:
            raise LingtestError(f"{model!r} is not among run {self.name}'s models: "
                                f"{', '.join(self.models)}")
        mine = mine.merge(passed_by.reset_index(), on=keys, how="left").fillna(
            {"baselines passing": 0})
        shown = ["model_id", contract.group, *contract.result_keys,
                 *[c for c in contract.texts if c in mine.columns], "expectation", "output",
                 "baselines passing"]
        return (mine.sort_values(["baselines passing", "case_id"], ascending=[False, True],
                                 kind="stable")[[c for c in shown if c in mine.columns]]
                .astype({"baselines passing": int}).reset_index(drop=True))

    # ------------------------------------------------------------------ the whole run

    def summary(self) -> pd.DataFrame:
        """Per method and model (yours, then the baselines): fail % over its decided
        verdicts on this run's cases (what ``--max-fail`` gates), and for yours the cases
        fixed and broken against each baseline model, summed over the baselines."""
        from lingtest.tasks.core.side_by_side import fail_percent

        rows = []
        for method in self.methods:
            cases, changes = self.cases(method), self.changes(method)
            for who in [*self.models, *self.baselines.get(method, [])]:
                mine = changes[changes["model"] == who] if who in self.models else None
                rows.append({"method": method, "model": who,
                             "role": "yours" if who in self.models else "baseline",
                             "fail %": round(fail_percent(
                                 cases.loc[cases["model_id"] == who, "verdict"]), 2),
                             "fixed": int(mine["fixed"].sum()) if mine is not None else None,
                             "broken": int(mine["broken"].sum()) if mine is not None else None})
        return pd.DataFrame(rows).astype({"fixed": "Int64", "broken": "Int64"})

    def report(self) -> Path:
        """Write the run's ``report.html`` (again) and return its path: one file to share,
        which opens in any browser without a server (``lingtest.report``)."""
        from lingtest.report import write_report

        return write_report(self)

    def __repr__(self) -> str:
        return (f"TestResult({self.name!r}: {', '.join(self.models)} through "
                f"{', '.join(self.methods)}; {self.folder})")

    def _repr_html_(self) -> str:
        """The summary, each method's side-by-side table and its worst failing cases, their
        texts whole (pandas cuts a cell at 50 characters by default)."""
        parts = [f"<h3>lingtest: {html.escape(self.name)}</h3>",
                 *[f"<p><i>{html.escape(note)}</i></p>" for note in self.notes]]
        with pd.option_context("display.max_colwidth", None):
            summary = self.summary().astype(object)  # a baseline's fixed/broken: blank
            parts.append(summary.where(summary.notna(), "").to_html(index=False))
            for method in self.methods:
                worst = self.failures(method).head(WORST)
                parts += [f"<h4>{method}: fail % beside the baseline</h4>",
                          self.table(method).to_html(index=False, na_rep=""),
                          f"<h4>{method}: worst failing cases (first {WORST})</h4>",
                          worst.to_html(index=False, na_rep="") if len(worst) else
                          "<p>no failing case</p>"]
        return "\n".join(parts)
