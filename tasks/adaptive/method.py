"""AdaTest's re-scoring stage as a ``Method``: the tracked test trees (``adaptive.trees``)
re-scored on every model under test, for scheduled reruns.

- **Suite**: every labelled test of every tree as a case (``cases.tree_to_cases``), with
  the tree file it came from (``tree``); a test two trees share is one case (the first).
- **Units**: one per model and shard (``runtime.shards``); a unit scores its shard's cases
  (``scoring.score_cases``).
- **Report**: per tree, topic and model the failure rate with a 95 % percentile bootstrap
  interval (``stats.rate_interval``; undefined verdicts counted apart, not in the rate),
  the cross-model table (topics × models failure rates, the paper's §2.3 comparison), and
  the diff against the previous run's results by case and model
  (``schema.compare_results``; the previous ``results.parquet`` is read before the flow
  overwrites it). The re-scored trees, with a ``<model> score`` column per model, are
  written to ``data/interim/adaptive/trees/``.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from lingtest.tasks.adaptive.cases import CONTRACT, tree_to_cases
from lingtest.tasks.adaptive.scoring import score_cases, scores_to_tree
from lingtest.tasks.adaptive.tree import TestTree, read_tree, write_tree
from lingtest.tasks.core.config import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.method import Method, Unit, UnitResult
from lingtest.tasks.core.metrics import stage_metrics, verdict_metrics
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.publish import Report, provenance
from lingtest.tasks.core.schema import DECIDED, change_counts, compare_results, undefined_count
from lingtest.tasks.core.stats import rate_interval
from lingtest.tasks.models.model_spec import ModelRef, refs_by_name
from lingtest.tasks.adaptive.tested_models import load_tested_model
from lingtest.tasks.models.llm_classifier import answer_counts, llm_provenance
from lingtest.tasks.models.sentiment import builtin_substitutes, load_configured

log = logging.getLogger(__name__)

GROWN_TREES = Path("inputs") / "adaptive"  # where `lingtest adapt` keeps the trees it grows


def substitutes(models: list[str]) -> str:
    """The paper's hub classifiers' stand-ins among the tested models ("" for none)."""
    builtin = builtin_substitutes(models)
    return f"Substitutes: the paper's hub sentiment classifiers → {builtin}." if builtin else ""


RATE_COLUMNS = ["tree", "topic", "model_id", "n", "fail", "undefined", "fail %", "low %",
                "high %"]


def topic_rates(suite: pd.DataFrame, results: pd.DataFrame, n_boot: int,
                seed: int) -> pd.DataFrame:
    """Failure rate per tree, topic and model over the pass/fail verdicts, with a 95 %
    bootstrap interval; one generator seeded once, groups in sorted order."""
    rng = np.random.default_rng(seed)
    merged = results.merge(suite[["case_id", "tree"]], on="case_id", how="left")
    rows = []
    for (tree, topic, model), group in merged.groupby(["tree", "topic", "model_id"],
                                                      sort=True):
        decided = group[group["verdict"].isin(DECIDED)]
        rate, low, high = rate_interval(decided["verdict"].eq("fail").to_numpy(), n_boot, rng)
        rows.append({"tree": tree, "topic": topic, "model_id": model, "n": len(decided),
                     "fail": int(decided["verdict"].eq("fail").sum()),
                     "undefined": undefined_count(group["verdict"]),
                     "fail %": rate, "low %": low, "high %": high})
    return pd.DataFrame(rows, columns=RATE_COLUMNS)


def cross_model(rates: pd.DataFrame, models: list[str]) -> pd.DataFrame:
    """Topics × models failure rates (%), models in report order."""
    table = rates.pivot_table(index=["tree", "topic"], columns="model_id", values="fail %",
                              aggfunc="first", sort=True)
    return table.reindex(columns=models).reset_index().rename_axis(columns=None)


def run_diff(previous: pd.DataFrame | None, results: pd.DataFrame) -> pd.DataFrame:
    """Per model the change counts against the previous run (all ``added`` without one)."""
    keys = ["case_id", "model_id"]
    before = previous if previous is not None else pd.DataFrame(columns=[*keys, "verdict"])
    diff = compare_results(before, results, keys)
    rows = [{"model_id": model, **change_counts(group)}
            for model, group in diff.groupby("model_id", sort=False)]
    return pd.DataFrame(rows, columns=["model_id", "fixed", "broken", "unchanged", "added",
                                       "removed"])


class AdaptiveMethod(Method):
    """The ``adaptive`` stage (AdaTest): the tracked trees re-scored on every model."""

    stage = "adaptive"
    contract = CONTRACT

    def __init__(self, params: Params, workspace: Workspace):
        super().__init__(params, workspace)
        self.previous: pd.DataFrame | None = None  # the last run's results, for the diff
        self._trees: dict[str, TestTree] = {}  # file name → tree, read by build_suite

    def tree_paths(self) -> list[Path]:
        """``adaptive.trees``, then every tree ``lingtest adapt`` grew under
        ``inputs/adaptive/`` (a tracked input: a reviewed round reruns this stage)."""
        root = self.workspace.root
        listed = [p if p.is_absolute() else root / p
                  for p in (Path(t).expanduser() for t in self.params.adaptive.trees)]
        grown = sorted((root / GROWN_TREES).glob("*.csv"))
        return list(dict.fromkeys([*listed, *grown]))

    def check_inputs(self) -> None:
        missing = [str(p) for p in self.tree_paths() if not p.is_file()]
        if missing:
            raise LingtestError(f"adaptive.trees: no test tree at {', '.join(missing)}; fix: "
                                "run the data stage (it imports the mirror's adatest/ trees) "
                                "or set adaptive.trees to AdaTest CSV files")

    def model_refs(self) -> dict[str, ModelRef]:
        """The models under test by display name (``adaptive.models`` parsed)."""
        return refs_by_name(self.params.adaptive.models, "adaptive.models",
                            self.params.models.names, self.workspace.root)

    def model_ids(self) -> list[str]:
        return list(self.model_refs())

    def build_suite(self) -> pd.DataFrame:
        """The trees' tests as cases; also keeps the previous run's results for the diff."""
        a = self.params.adaptive
        frames = []
        for path in self.tree_paths():
            tree = read_tree(path)
            self._trees[path.name] = tree
            frames.append(tree_to_cases(tree, a.binary_labels).assign(tree=path.name))
        if len({p.name for p in self.tree_paths()}) < len(self.tree_paths()):
            raise LingtestError("adaptive.trees: two trees share a file name; rename one "
                                "(reports name trees by file name)")
        suite = pd.concat(frames, ignore_index=True)
        repeated = suite["case_id"].duplicated()
        if repeated.any():
            log.warning("adaptive: %d tests repeat a test of an earlier tree; scored once",
                        int(repeated.sum()))
            suite = suite[~repeated].reset_index(drop=True)
        self.previous = pd.read_parquet(self.results_path) if self.results_path.is_file() \
            else None
        return suite

    def run_unit(self, suite: pd.DataFrame, unit: Unit) -> UnitResult:
        p, root = self.params, self.workspace.root
        ref = self.model_refs().get(unit.model_id)
        model = load_tested_model(
            ref.spec if ref is not None else unit.model_id,
            lambda spec: load_configured(spec, p, root, p.adaptive.neutral_band), root,
            bool(p.models.offline), p.models.names, p.models.label_map)
        return UnitResult(unit, score_cases(unit.take(suite), model),
                          {"revision": str(model.revision), **answer_counts(model)})

    def collect(self, suite: pd.DataFrame, runs: list[UnitResult]) -> pd.DataFrame:
        """All units' rows; the re-scored trees written beside the suite."""
        results = super().collect(suite, runs)
        for name, tree in self._trees.items():
            cases = suite[suite["tree"] == name]
            scored = scores_to_tree(tree, cases, results[results["case_id"].isin(
                cases["case_id"])])
            write_tree(scored, self.interim / "trees" / name)
        return results

    def report(self, suite: pd.DataFrame, results: pd.DataFrame,
               runs: list[UnitResult]) -> Report:
        a, models = self.params.adaptive, self.model_ids()
        rates = topic_rates(suite, results, a.bootstrap, self.params.seed)
        diff = run_diff(self.previous, results)
        revisions = {run.unit.model_id: run.extra["revision"] for run in runs}
        out = Report(self.stage, substitutes=substitutes(a.models), provenance=provenance(
            self.params, self.workspace, "adaptive", inputs=self.tree_paths(),
            models=[f"{name} ({revisions.get(name)})" + (f" ({ref.bare})" if ref.bare != name
                                                           else "")
                    for name, ref in self.model_refs().items()],
            **llm_provenance([run.extra for run in runs])))
        out.add("adaptive-topics", rates,
                "AdaTest: failure rate per tree, topic and model (95% bootstrap CI)",
                notes="Rates over pass/fail verdicts; undefined verdicts counted apart.")
        out.add("adaptive-models", cross_model(rates, models),
                "AdaTest: failure rate (%) per topic × model (paper §2.3)")
        # an artifact, no file: it depends on which run came before (a fresh clone has none),
        # so a committed copy could not be reproduced
        out.add("adaptive-diff", diff,
                "AdaTest: verdict changes against the previous run, per model", files=False,
                notes="First run: every case is added." if self.previous is None else "")
        # no change counts here: a metric's delta between two runs would read as changes
        # (the comparison artifact counts them; `runtime.alerts` fires on them)
        out.metrics = stage_metrics("pass/fail verdicts", {
            m: verdict_metrics(results.loc[results["model_id"] == m, "verdict"])
            for m in models}, {"cases": len(suite)})
        return out
