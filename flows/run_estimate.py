"""What a pipeline run will load, download, compute and take, before it starts (``lingtest
plan``): per stage (dvc.yaml's order) every model it loads with where its files are now and
its size, the model calls it makes, counted from the effective parameters and the data
stage's tables as the stage's own code makes them, and the time those calls take on this
machine's CPU and on a GPU.

The rule (``RULE``): a forward pass costs 2 FLOPs per weight a token passes through
(embeddings left out; a language model's output layer added), a training step 6, a
nearest-neighbour search 2 per word pair and dimension, a classifier bank's training 6 per
weight, row and epoch. CPU seconds = FLOPs ÷ this CPU's rate for that kind of work, measured
on the packaged MiniLM and SmolLM2 (``flows/cpu_calibration.py``): a model's cost is the
measured one scaled by its parameter count and its tokens. GPU seconds = FLOPs ÷ an assumed
sustained throughput (``--gpu-tflops``), since no GPU is here to measure. Only the model
work is counted: start-up, parsing, tagging and reports are not.

Counts are ``exact`` (from the tables, or from a suite the stage built earlier with the
same settings), ``at most`` (a bound from the parameters where the run decides, e.g. how
many fills a model proposes) or ``estimate`` (a yield measured on the default run, scaled).
"""
from __future__ import annotations

import math

from lingtest.flows.cpu_calibration import Calibration
from lingtest.flows.plan_counting import (DEFAULT_GPU_TFLOPS, GPU_ASSUMPTION, RULE, SIZE_RULE,
                                 TOKENS, Counting, MissingInputs, Plan, Work,
                                 stage_model_rows)
from lingtest.flows.stage_estimates import ESTIMATORS
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace

# --------------------------------------------------------------------------- the plan

def selected_stages(names: list[str] | None) -> list[str]:
    """The stages to plan, in dvc.yaml's order (all when ``names`` is empty); an unknown name
    is refused, naming the stages."""
    from lingtest.flows.registry import STAGES, stage_spec

    wanted = [n.strip() for name in names or [] for n in name.split(",") if n.strip()]
    for name in wanted:
        stage_spec(name)  # the registry's one error for an unknown stage
    return [s for s in STAGES if not wanted or s in wanted]


def check_gpu_tflops(gpu_tflops: float) -> float:
    if not gpu_tflops > 0 or math.isinf(gpu_tflops):
        raise LingtestError(f"lingtest plan --gpu-tflops {gpu_tflops}: give the GPU's "
                            "sustained TFLOP/s, a finite number above 0 (default "
                            f"{DEFAULT_GPU_TFLOPS:g})")
    return gpu_tflops


def make_plan(params, workspace: Workspace, stages: list[str], calibration: Calibration,
              gpu_tflops: float = DEFAULT_GPU_TFLOPS) -> Plan:
    """The plan of ``stages`` under ``params``: models, counted work, times."""
    check_gpu_tflops(gpu_tflops)
    rows = [row for stage in stages for row in stage_model_rows(stage, params, workspace)]
    plan = Plan(params.profile, stages, rows, [], calibration, gpu_tflops)
    missing: set[str] = set()
    shared: dict = {}
    for stage in stages:
        count = Counting(params, workspace, [r for r in rows if r.stage == stage], shared)
        estimator = ESTIMATORS.get(stage)
        if estimator is None:
            plan.notes.append(f"{stage}: no count of its model calls (a stage the plan does "
                              "not know); its time is not in the totals")
            plan.work.append(Work(stage, "", "not counted", 0, "", 0, None, "encode",
                                  "unknown", "no estimator for this stage"))
            continue
        try:
            plan.work += estimator(count)
        except MissingInputs as absent:
            missing |= set(absent.paths)
            plan.work.append(Work(stage, "", "not counted: needs the data stage's outputs", 0,
                                  "", 0, None, "encode", "unknown", ", ".join(absent.paths)))
    c = params.capabilities
    extra = (["benepar's benepar_en3 parser (benepar.download('benepar_en3'))"]
             if c.parser == "benepar" else []) + (
        ["NLTK's SentiWordNet (python -m nltk.downloader sentiwordnet)"]
        if c.word_sentiment == "sentiwordnet" else [])
    if "capabilities" in stages and extra:
        plan.notes.append(f"capabilities also downloads {' and '.join(extra)}, not counted in "
                          "the download sizes")
    if missing:
        plan.notes.insert(0, "the counts of model calls need the data stage's outputs "
                          f"(missing: {', '.join(sorted(missing))}); fix: lingtest run data, "
                          "then plan again")
    return plan.timed()


# --------------------------------------------------------------------------- output

def _gb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


def _params_text(n: int | None) -> str:
    return "—" if n is None else f"{n / 1e6:.1f} M"


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _count_text(n: int) -> str:
    return f"{n:,}"


def render(plan: Plan, console) -> None:
    """The plan as readable tables: per stage its models and its work, then the totals."""
    from rich.table import Table

    console.print(f"[bold]lingtest plan[/bold]: profile {plan.profile}, stages "
                  f"{', '.join(plan.stages)}")
    for note in plan.notes:
        console.print(f"[yellow]note[/yellow]: {note}")
    downloader = {model: row.stage for model, row in plan.downloads().items()}
    for stage in plan.stages:
        rows = [r for r in plan.models if r.stage == stage]
        work = [w for w in plan.work if w.stage == stage]
        totals = plan.stage_totals(stage)
        console.print(f"\n[bold]{stage}[/bold]: {len(rows)} model(s), "
                      f"{totals['downloads']} to download ({totals['download_gb']:.2f} GB), "
                      f"CPU {_time(totals['cpu_hours'] * 3600)}, GPU "
                      f"{_time(totals['gpu_hours'] * 3600)}")
        if rows:
            table = Table("model", "kind", "where", "parameters", "download", "size from")
            for r in rows:
                first = downloader.get(r.model, stage)
                table.add_row(r.model, r.kind, r.where, _params_text(r.parameters),
                              "—" if r.where != "to download" else _gb(r.download_bytes)
                              if first == stage else f"in {first}",
                              r.size_source.split(":")[0] if r.size_source else "—")
            console.print(table)
        if not work:
            console.print("no model calls")
            continue
        table = Table("work", "models", "calls", "tokens", "count", "CPU", "GPU")
        for what, items in _grouped(work).items():
            calls = sum(w.calls for w in items)
            cpu = None if any(w.cpu_seconds is None for w in items) else \
                sum(w.cpu_seconds for w in items)
            gpu = None if any(w.gpu_seconds is None for w in items) else \
                sum(w.gpu_seconds for w in items)
            bounds = sorted({w.bound for w in items})
            table.add_row(what, str(len({w.model for w in items})),
                          f"{_count_text(calls)} {items[0].unit}".strip(),
                          _count_text(sum(w.tokens for w in items)), "/".join(bounds),
                          _time(cpu), _time(gpu))
        console.print(table)
    totals = plan.totals()
    table = Table("stage", "to download", "CPU hours", "GPU hours", "count")
    for stage in plan.stages:
        s = plan.stage_totals(stage)
        table.add_row(stage, f"{s['downloads']} ({s['download_gb']:.2f} GB)",
                      f"{s['cpu_hours']:.2f}", f"{s['gpu_hours']:.3f}",
                      "/".join(s["bounds"]) or "—")
    table.add_row("[bold]total[/bold]", f"{totals['downloads']} ({totals['download_gb']:.2f} GB)",
                  f"{totals['cpu_hours']:.2f}", f"{totals['gpu_hours']:.3f}",
                  "" if totals["complete"] else "incomplete")
    console.print("\n[bold]totals[/bold]")
    console.print(table)
    cal = plan.calibration
    console.print(f"\nrule: {RULE}")
    console.print(f"sizes: {SIZE_RULE}; {TOKENS}.")
    console.print(f"CPU: {cal.machine}, {cal.threads} torch thread(s), measured {cal.measured}: "
                  + ", ".join(f"{kind} {cal.rate(kind) / 1e9:.1f}" for kind in
                              ("encode", "train", "generate", "search_l1", "search_dot",
                               "banks")) + f" GFLOP/s (LM engine {cal.engine})")
    console.print(f"GPU: {plan.gpu_tflops:g} TFLOP/s assumed ({GPU_ASSUMPTION}).")


def _grouped(work: list[Work]) -> dict[str, list[Work]]:
    out: dict[str, list[Work]] = {}
    for item in work:
        out.setdefault(item.what, []).append(item)
    return out
