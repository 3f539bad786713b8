"""``lingtest test``: a user's models through the methods that fit them, beside the
pipeline's baseline models, without touching the pipeline's tracked outputs.

Each method runs its own stage flow on a workspace whose interim files, run state and
reports live under ``runs/<name>/`` (git-ignored); the suite is built by the same cached
tasks as the pipeline's, so an unchanged suite is a cache hit, and the baseline models'
rows are read from the pipeline's stored results (``data/interim/<stage>/results.parquet``)
when they were made with the run's seed and method settings and answer every case; else
the baseline models run on the run's suite under ``runs/<name>/baseline/``. A
``compare-with-baseline`` flow then publishes, per method, the side-by-side failure rates
and the per-case fixed / broken counts (``lingtest.tasks.core.side_by_side``) as report files and
Prefect artifacts; gates (``max_fail``, ``max_broken``) turn them into an exit status for CI.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from prefect import flow

from lingtest.flows.own_plan import KIND_METHODS, METHOD_MODELS, RUNS, Plan, plan  # noqa: F401
from lingtest.flows.registry import Params
from lingtest.flows.registry import load_params, stage_method
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.metrics import stage_metrics, verdict_metrics
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.publish import Report, provenance, publish, slug
from lingtest.tasks.core.side_by_side import case_changes, changed_cases, fail_percent, side_by_side

@dataclass
class Gates:
    """CI thresholds: a user model's overall fail % per method, and cases it may break
    against any baseline model (None: no gate)."""

    max_fail: float | None = None
    max_broken: int | None = None

    def breaches(self, method: str, overall: dict[str, float],
                 changes: pd.DataFrame) -> list[str]:
        out = []
        if self.max_fail is not None:
            out += [f"{method}: {model} fails {rate:.2f} % > {self.max_fail:g} %"
                    for model, rate in overall.items()
                    if not math.isnan(rate) and rate > self.max_fail]
        if self.max_broken is not None:
            out += [f"{method}: {row.model} breaks {row.broken} cases that {row.against} "
                    f"passes (> {self.max_broken})"
                    for row in changes.itertuples() if row.broken > self.max_broken]
        return out


def method_params(the_plan: Plan, method: str, overrides: list[str], profile: str | None,
                  root: Path, specs: list[str] | None = None, out: Path | None = None
                  ) -> Params:
    """The run's parameters with the method's model list set to the user's models (or
    ``specs``), and the consistency answers kept in the run's own database (under ``out``,
    default the run's folder), not the pipeline's."""
    sets = [*overrides, f"{METHOD_MODELS[method]}={json.dumps(specs or the_plan.specs)}"]
    params = load_params(root, sets, profile)
    if method == "consistency" and params.consistency.database_url is None:
        database = (out or the_plan.out) / "consistency.sqlite"
        params = load_params(root, [*sets, f"consistency.database_url=sqlite:///{database}"],
                             profile)
    return params


def method_class(method: str):
    return stage_method(method)


# Settings that do not change a method's verdicts: how answers are fetched and stored.
NOT_VERDICTS = ("database_url", "concurrency", "timeout_s", "retries", "backoff_s")


def baseline_to_run_here(method: str, params: Params, root: Path, outputs: Path,
                         mine: list[str]) -> tuple[list[str], str]:
    """The specs of the pipeline's stored models of ``method`` when their stored rows cannot
    stand beside this run's, and why in words: the run's seed or method settings differ from
    the ones the stored rows were made with (their report's provenance) — another profile's
    θ dictionary gives other verdicts on the same cases — or they leave some of its cases
    unanswered (the quick profile's capabilities share 12 of its 63 cases with the
    default's). ([], "") when they can stand, or there are none (no ``make run`` yet). A
    stored model is found by its name in params.yaml's list, or is its own spec (a built-in
    or org/name hub id); one that is neither is left out, and the words say so."""
    ran = method_class(method)(params, Workspace(root, outputs))
    cases = set(pd.read_parquet(ran.results_path, columns=["case_id"])["case_id"])
    stored = baseline_rows(method_class(method)(params, Workspace(root)).results_path, mine)
    if stored is None or stored.empty:
        return [], ""
    key = METHOD_MODELS[method]
    field = key.split(".")[1]
    differ = settings_differ(method, params, root, exclude=(field, *NOT_VERDICTS))
    covered = stored.groupby("model_id", sort=False)["case_id"].agg(
        lambda ids: len(cases & set(ids)))
    if not differ and covered.min() == len(cases):
        return [], ""
    from lingtest.flows.validation import configured_models, display_name

    pipeline = load_params(root, [], None)
    tested = ("classifier", "tested model", "encoder", "llm")  # not fill, spacy: no baseline
    by_name = {display_name(entry.spec, pipeline, Workspace(root)): entry.spec
               for entry in configured_models(pipeline, [method]) if entry.kind in tested}
    specs = {name: by_name.get(name) or (name if _names_itself(name, key, root) else None)
             for name in covered.index}
    left = [name for name, spec in specs.items() if spec is None]
    shown = ", ".join(differ[:4]) + (f" and {len(differ) - 4} more" if len(differ) > 4 else "")
    verb = "differs" if len(differ) == 1 else "differ"
    why = (f"this run's {shown} {verb} from the stored results' (another suite, or other "
           f"verdicts on the same cases)" if differ else
           f"the pipeline's stored results answer {covered.min()} of this run's {len(cases)} "
           f"cases (made with other settings)") + (
        f"; {', '.join(left)} left out (not among params.yaml's {method} models, so it "
        f"cannot be rerun)"
        if left else "")
    return [spec for spec in specs.values() if spec], why


def settings_differ(method: str, params: Params, root: Path,
                    exclude: tuple[str, ...]) -> list[str]:
    """The seed and ``method``'s settings (bar ``exclude``) that differ between ``params``
    and the pipeline's stored report of that method (its provenance), as ``section.key``;
    [] when they agree or no report states them."""
    from lingtest.tasks.core.paths import root_marked

    stored = Workspace(root).reports / method / "provenance.json"
    section = METHOD_MODELS[method].split(".")[0]
    try:
        provenance = json.loads(stored.read_text(encoding="utf-8"))
        theirs = json.loads(provenance[f"parameters ({section})"])
    except (OSError, ValueError, KeyError):
        return []
    mine = json.loads(root_marked(params.section(section).model_dump_json(), root))
    differ = [f"{section}.{name}" for name in mine
              if name not in exclude and mine[name] != theirs.get(name)]
    return (["seed"] if provenance.get("seed") != params.seed else []) + differ


def _names_itself(name: str, key: str, root: Path) -> bool:
    """A stored model name that is also its spec: a built-in or an org/name hub id."""
    from lingtest.tasks.models.model_spec import parse_model

    try:
        ref = parse_model(name, key, None, root)
    except LingtestError:
        return False
    return ref.form == "builtin" or (ref.form == "hub" and "/" in name)


def baseline_rows(path: Path, mine: list[str]) -> pd.DataFrame | None:
    """The pipeline's stored results (``path``) of its own models (not the user's names)."""
    if not path.is_file():
        return None
    rows = pd.read_parquet(path)
    return rows[~rows["model_id"].isin(mine)]


def report_prefix(run_name: str, method: str) -> str:
    """How a run's comparison files under ``reports/<method>-vs-baseline`` begin."""
    return slug(f"{run_name}-{method}")[:80]


@flow(name="compare-with-baseline", log_prints=True)
def compare_with_baseline(method: str, run_name: str, mine: list[str], params: Params,
                          root: str, outputs: str, max_fail: float | None = None,
                          max_broken: int | None = None, baseline_outputs: str | None = None,
                          why_here: str = "") -> dict:
    """Side-by-side failure rates and per-case changes of ``mine`` against the pipeline's
    baseline models on ``method``'s suite, published under ``runs/<name>/reports``: their
    stored rows, or the rows of their run on this suite under ``baseline_outputs``."""
    workspace = Workspace(Path(root), Path(outputs))
    ran = method_class(method)(params, workspace)  # where the stage wrote its suite and rows
    contract = ran.contract
    suite, results = pd.read_parquet(ran.suite_path), pd.read_parquet(ran.results_path)
    results = results[results["model_id"].isin(mine)]
    stored = method_class(method)(params, Workspace(Path(root))).results_path  # the pipeline's
    if baseline_outputs:  # the pipeline's models, run on this run's suite
        stored = method_class(method)(params, Workspace(Path(root), Path(baseline_outputs))
                                      ).results_path
    baseline = baseline_rows(stored, mine)
    if baseline is not None:  # the stored rows of this run's cases, not the whole pipeline's
        baseline = baseline[baseline["case_id"].isin(suite["case_id"])]
    base_models = list(dict.fromkeys(baseline["model_id"])) if baseline is not None else []
    rows = pd.concat([results, baseline], ignore_index=True) if base_models else results
    models = [*mine, *base_models]
    table = side_by_side(rows, suite, contract, models)
    changes = case_changes(rows, contract, mine, base_models)
    overall = {m: fail_percent(results.loc[results["model_id"] == m, "verdict"]) for m in mine}
    shared = int(table["cases"].max()) if len(table) else 0
    prefix = report_prefix(run_name, method)
    revision = rows.drop_duplicates("model_id").set_index("model_id")["revision"]
    report = Report(f"{method}-vs-baseline", provenance=provenance(
        params, workspace, METHOD_MODELS[method].split(".")[0],
        models=[f"{m} @ {revision.get(m)} (yours)" for m in mine]
        + [f"{m} @ {revision.get(m)} (baseline: "
           + ("run here on this run's suite" if baseline_outputs else
              f"the pipeline's {stored.relative_to(root)}") + ")" for m in base_models]))
    note = ("No baseline: the pipeline has no stored results for this method yet (make run)."
            if not base_models else
            f"Baseline models run here on this run's suite: {why_here}; {shared} cases every "
            "model answered are compared." if baseline_outputs else
            f"Baseline rows read from the pipeline's stored results, not recomputed"
            + (f", though {why_here}: no baseline model could be rerun, so compare with care"
               if why_here else "") + f"; {shared} cases every model answered are compared.")
    report.add(f"{prefix}-side-by-side", table,
               f"{method}: fail % per {contract.group} — your models beside the baseline",
               notes=note, substitutes=False)
    if base_models:
        report.add(f"{prefix}-changes", changes,
                   f"{method}: per case, what your models fix or break against each baseline "
                   "model", substitutes=False)
        report.add_per_model(f"{prefix}-pairs", {
            f"{model} vs {base}": changed_cases(rows, suite, contract, model, base)
            for model in mine for base in base_models},
            f"{method}: cases {{model}}: fixed or broken (first 20 per pair)",
            column="pair", substitutes=False)
    breaches = Gates(max_fail, max_broken).breaches(method, overall, changes)
    report.metrics = stage_metrics(f"{method}: all cases of each model", {
        model: verdict_metrics(rows.loc[rows["model_id"] == model, "verdict"])
        for model in models})
    publish(report, workspace)
    return {"method": method, "overall": overall, "baseline": base_models, "shared": shared,
            "changes": changes.to_dict(orient="records"), "breaches": breaches,
            "table": table.to_dict(orient="records")}


def run_own_models(the_plan: Plan, overrides: list[str], profile: str | None, root: Path,
                   gates: Gates, echo=print) -> list[dict]:
    """Every planned method on the user's models, then its comparison; returns the
    comparisons (``breaches`` non-empty: a gate failed)."""
    from lingtest.flows.stage import run_stage
    from lingtest.flows.validation import check_display_names, validate_inputs

    workspace = Workspace(root, the_plan.out)
    staged = [(m, method_params(the_plan, m, overrides, profile, root))
              for m in the_plan.methods]
    for method, params in staged:  # every method's inputs checked before the first runs
        check_display_names(params, workspace)
        validate_inputs(method, params, workspace)
    out = []
    for number, (method, params) in enumerate(staged, 1):
        echo(f"lingtest test [{number}/{len(staged)}]: {method} on "
             f"{', '.join(the_plan.names)} → {the_plan.out / 'reports' / method}")
        run_stage(method, params, workspace, run_tags=(f"test:{the_plan.name}",))
        here, why = baseline_to_run_here(method, params, root, the_plan.out, the_plan.names)
        base_out = the_plan.out / "baseline"
        if here:
            echo(f"lingtest test [{number}/{len(staged)}]: {method}: {why}, so the baseline "
                 f"{', '.join(here)} runs on this run's suite → {base_out / 'reports' / method}")
            run_stage(method, method_params(the_plan, method, overrides, profile, root, here,
                                             base_out),
                      Workspace(root, base_out), run_tags=(f"test:{the_plan.name}:baseline",))
        out.append(compare_with_baseline(method, the_plan.name, the_plan.names, params,
                                         str(root), str(the_plan.out), gates.max_fail,
                                         gates.max_broken, str(base_out) if here else None,
                                         why))
    return out


EXPORTABLE = ("capabilities", "adaptive")  # the methods that score classifiers' texts


@flow(name="export-suite", log_prints=True)
def export_suite(stage: str, params: Params, root: str, output: str) -> dict:
    """Write every text ``stage`` asks a classifier about (``Method.texts_to_score``), with
    its ``text_id``, for scoring elsewhere and coming back as ``predictions:PATH``. The suite
    is built by the stage's own cached tasks (a hit when the pipeline built it with the same
    parameters) in a workspace under ``runs/``, so the pipeline's files stay as they are."""
    from lingtest.tasks.core import io
    from lingtest.tasks.models.own_classifiers import text_id

    workspace = Workspace(Path(root), Path(root) / RUNS / f"export-{stage}")
    method = method_class(stage)(params, workspace)
    texts = method.texts_to_score(method.build_suite())
    frame = pd.DataFrame({"text_id": [text_id(t) for t in texts], "text": texts})
    target = Path(output)
    writers = {".csv": io.write_csv, ".parquet": io.write_parquet,
               ".jsonl": lambda path, df: io.write_text(
                   path, df.to_json(orient="records", lines=True, force_ascii=False))}
    writers[target.suffix.lower()](target, frame)
    return {"stage": stage, "texts": len(frame), "output": str(target)}
