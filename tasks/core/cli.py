"""The ``lingtest`` command line: run stages, show parameters and models, start the UI.

Every ``LingtestError`` is printed as one line (no traceback) and exits with status 2.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from tasks.core.errors import LingtestError
from tasks.core.paths import Workspace
from tasks.core.secrets import redact_text, redact_value

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Reproducible pipelines for testing NLP models.")

SET_HELP = "Override a parameter, e.g. --set seed=7 --set data.online=false (repeatable)."
PROFILE_HELP = "Merge params/<profile>.yaml over params.yaml (e.g. paper)."


def _params(overrides: list[str] | None, profile: str | None):
    from tasks.core.config import load_params

    return load_params(Workspace.current().root, overrides or [], profile)


def _validate(stage: str, params, workspace: Workspace) -> None:
    """``validate_inputs``; its notice (models that need an unreachable hub) as one line."""
    from tasks.core.validate import validate_inputs

    notice = validate_inputs(stage, params, workspace)
    if notice:
        typer.secho(f"lingtest: {notice}", fg="yellow", err=True)


def _exit_cleanly_on_sigterm() -> None:
    """SIGTERM ends the process through SystemExit (status 143), not the default abrupt end,
    so exit handlers run: the temporary Prefect server a run started is stopped instead of
    left running (measured: every SIGTERM'd run left one). During a flow Prefect handles the
    signal first (the flow crashes, its task threads send no more) and then hands it here."""
    import signal

    def leave(signum: int, frame) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, leave)


@app.command()
def run(stage: str = typer.Argument(..., help="Stage to run (see `lingtest stages`)."),
        set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
        profile: Optional[str] = typer.Option(None, "--profile", help=PROFILE_HELP)) -> None:
    """Run one stage's Prefect flow (DVC's stages call this). One run of a stage at a time
    per project: a second refuses at once, naming the first (tasks/core/run_lock.py)."""
    import os

    from tasks.core import alerts
    from tasks.core.run_lock import INSIDE_REPRO, REPRO, StageBusy, hold, holder
    from tasks.core.runtime import configure_environment

    workspace = Workspace.current()
    params = _params(set_, profile)
    alerts.check_rules(params.runtime.alerts, workspace.root)
    rerun = None if os.environ.get(INSIDE_REPRO) else holder(workspace, REPRO)
    if rerun is not None:
        raise StageBusy(REPRO, rerun)
    _exit_cleanly_on_sigterm()
    with hold(workspace, stage):  # a second run of the stage: one line, at once
        _validate(stage, params, workspace)  # before Prefect starts or anything is written
        api = configure_environment(workspace)
        typer.echo(f"lingtest: stage {stage}, profile {params.profile}, seed {params.seed}, "
                   f"Prefect API {api or 'temporary local server'}", err=True)
        from flows.stage import run_stage

        before = alerts.snapshot_results(params.runtime.alerts, workspace.root, [stage])
        run_stage(stage, params, workspace)
        fired = [] if os.environ.get(INSIDE_REPRO) else alerts.regressions(
            params.runtime.alerts, workspace.root, before)
    for line in fired:
        typer.secho(f"lingtest: alert: {line}", fg="yellow", err=True)
    if fired:
        alerts.send(alerts.webhook(params.runtime.notify_url),
                    f"lingtest: stage {stage} regression: " + "; ".join(fired))


@app.command()
def validate(stage: str = typer.Argument(..., help="Stage to check (see `lingtest stages`)."),
             set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
             profile: Optional[str] = typer.Option(None, "--profile", help=PROFILE_HELP)
             ) -> None:
    """Check a stage's parameters, input files and models as `lingtest run` does first,
    without running it (loads no weights)."""
    params = _params(set_, profile)
    _validate(stage, params, Workspace.current())
    typer.echo(f"lingtest: stage {stage}, profile {params.profile}: inputs and models valid")


@app.command()
def test(
        models: List[str] = typer.Argument(..., help="Model specs: a hub id, a folder, "
                                           "python:MODULE:ATTR, python:file.py:ATTR, "
                                           "predictions:PATH, openai:MODEL@URL (#name=...)."),
        methods: Optional[str] = typer.Option(
            None, "--methods", help="Comma-separated: capabilities, adaptive (classifiers), "
            "contrastive (encoders), consistency (LLMs); default: every method that fits."),
        name: Optional[str] = typer.Option(
            None, "--name", help="Run folder runs/<name>/ (default: the first model's name)."),
        max_fail: Optional[float] = typer.Option(
            None, "--max-fail", help="Exit 1 when a model's overall fail % of a method "
            "exceeds this."),
        max_broken: Optional[int] = typer.Option(
            None, "--max-broken", help="Exit 1 when a model breaks more cases than this "
            "against a baseline model."),
        set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
        profile: Optional[str] = typer.Option(None, "--profile", help=PROFILE_HELP)) -> None:
    """Test your own models with the methods that fit them, beside the pipeline's baseline
    models; writes runs/<name>/ only (the pipeline's data/ and reports/ stay as they are)."""
    from flows.own_models import Gates, plan, run_own_models
    from tasks.core.runtime import configure_environment

    workspace = Workspace.current()
    params = _params(set_, profile)
    chosen = [m.strip() for m in methods.split(",") if m.strip()] if methods else None
    the_plan = plan(list(models), chosen, name, params, workspace.root)
    api = configure_environment(workspace)
    typer.echo(f"lingtest test: {', '.join(the_plan.names)} through "
               f"{', '.join(the_plan.methods)}, Prefect API {api or 'temporary local server'}",
               err=True)
    comparisons = run_own_models(the_plan, list(set_ or []), profile, workspace.root,
                                 Gates(max_fail, max_broken),
                                 echo=lambda text: typer.echo(text, err=True))
    _print_comparisons(comparisons, the_plan)
    breaches = [b for c in comparisons for b in c["breaches"]]
    for breach in breaches:
        typer.secho(f"lingtest test: gate failed: {breach}", fg="red", err=True)
    if breaches:
        raise typer.Exit(1)


@app.command("export-suite")
def export_suite(
        stage: str = typer.Argument(..., help="capabilities or adaptive."),
        output: Optional[str] = typer.Option(
            None, "--output", help="CSV, JSONL or Parquet file (default: "
            "runs/export-<stage>/texts.csv)."),
        set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
        profile: Optional[str] = typer.Option(None, "--profile", help=PROFILE_HELP)) -> None:
    """Write the texts a stage asks classifiers about (text_id, text), to score them with
    your own code and bring the scores back as predictions:PATH (one probability column per
    label beside text_id or text)."""
    from flows.own_models import EXPORTABLE, RUNS
    from flows.own_models import export_suite as export_flow
    from tasks.core.runtime import configure_environment
    from tasks.core.validate import validate_files

    if stage not in EXPORTABLE:
        raise LingtestError(f"lingtest export-suite: `{stage}` scores no classifier texts; "
                            f"stages: {', '.join(EXPORTABLE)}")
    workspace = Workspace.current()
    params = _params(set_, profile)
    target = Path(output).expanduser() if output else (
        workspace.root / RUNS / f"export-{stage}" / "texts.csv")
    target = target if target.is_absolute() else Path.cwd() / target
    if target.suffix.lower() not in (".csv", ".jsonl", ".parquet") or target.is_dir():
        raise LingtestError(f"lingtest export-suite --output {target}: give a .csv, .jsonl or "
                            f".parquet file")
    validate_files(stage, params, workspace)
    configure_environment(workspace)
    done = export_flow(stage, params, str(workspace.root), str(target))
    typer.echo(f"wrote {done['texts']} texts to {done['output']}")


def _print_comparisons(comparisons: list[dict], the_plan) -> None:
    """Per method: each model's overall fail % and its changes against each baseline."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    for comparison in comparisons:
        table = Table(title=f"{comparison['method']}: {comparison['shared']} shared cases",
                      *["model", "fail %", *[f"vs {b}: fixed / broken"
                                             for b in comparison["baseline"]]])
        changes = {(c["model"], c["against"]): c for c in comparison["changes"]}
        for model, rate in comparison["overall"].items():
            cells = [f"{changes[(model, b)]['fixed']} / {changes[(model, b)]['broken']}"
                     for b in comparison["baseline"]]
            table.add_row(model, f"{rate:.2f}", *cells)
        console.print(table)
    console.print(f"reports: {the_plan.out / 'reports'}")


@app.command()
def stages() -> None:
    """List the stages and the flow behind each."""
    from flows import STAGES

    for name, target in STAGES.items():
        typer.echo(f"{name}\t{target}")


@app.command()
def params(set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
           profile: Optional[str] = typer.Option(None, "--profile", help=PROFILE_HELP)) -> None:
    """Print the effective parameters (YAML) after profile and overrides."""
    import yaml

    effective = _params(set_, profile)
    typer.echo(yaml.safe_dump(effective.model_dump(mode="json"), sort_keys=False).rstrip())


@app.command()
def models(set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
           profile: Optional[str] = typer.Option(None, "--profile", help=PROFILE_HELP)) -> None:
    """List every configured model (every parameter that names one, in every stage) with
    its display name and where it resolves (package, hub cache, hub, local, python, file,
    http) or why it cannot load."""
    from rich.console import Console
    from rich.table import Table

    from tasks.core.validate import describe_configured

    rows = describe_configured(_params(set_, profile), Workspace.current())
    table = Table("parameter", "model", "name", "kind", "source", "revision", "pooling",
                  "path / reason")
    for row in map(redact_value, rows):  # a spec's URL may carry a password
        where = row.get("reason") if row["source"] == "missing" else row.get("path")
        table.add_row(row["key"], row["id"], str(row.get("name") or ""), row["kind"], row["source"],
                      str(row.get("revision") or ""), str(row.get("pooling") or ""),
                      str(where or ""))
    Console(width=240).print(table)


@app.command()
def ui(host: str = "127.0.0.1", port: int = 4200) -> None:
    """Start the Prefect server (SQLite under .prefect/); flows started meanwhile report to it."""
    from tasks.core.server import serve_ui

    serve_ui(Workspace.current(), host, port)


@app.command()
def serve(cron: str = typer.Option("0 3 * * *", help="When to rerun (cron, server time zone)."),
          interval: Optional[float] = typer.Option(
              None, "--interval", help="Rerun every N seconds instead of on the cron schedule."),
          stage: Optional[List[str]] = typer.Option(None, "--stage", help="Stages (default all)."),
          experiment: bool = typer.Option(
              True, "--experiment/--no-experiment",
              help="Each rerun is a DVC experiment (dvc exp run), or a plain dvc repro."),
          name: str = typer.Option("scheduled-repro", help="Deployment name."),
          push: bool = typer.Option(
              True, "--push/--no-push", help="After a rerun, dvc push to the project's default "
              "DVC remote (when one is configured)."),
          notify: Optional[str] = typer.Option(
              None, "--notify", help="Webhook URL told of failed runs and regression alerts "
              "(Slack-compatible JSON); default: runtime.notify_url."),
          project: Optional[str] = typer.Option(
              None, "--project", help="The project folder (default: the one holding the "
              "working directory), for a service started elsewhere.")) -> None:
    """Serve a deployment that reruns the pipeline on a schedule (needs `lingtest ui` running).

    One rerun at a time: a tick landing while one runs is skipped, not queued. Exits 1 when
    the last finished tick failed (see tasks/core/serving.py)."""
    import os

    from tasks.core import alerts
    from tasks.core.runtime import configure_environment

    if project is not None:
        root = Path(project).expanduser().resolve()
        if not (root / "params.yaml").is_file():
            raise LingtestError(f"lingtest serve --project {project}: no params.yaml there; "
                                "give the project folder (the one holding params.yaml)")
        os.environ["LINGTEST_ROOT"] = str(root)
    workspace = Workspace.current()
    if interval is not None and interval <= 0:
        raise LingtestError(f"--interval {interval}: give a number of seconds > 0")
    params = _params(None, None)
    if notify is not None:
        from pydantic import ValidationError

        from tasks.core.sections import RuntimeParams
        try:
            RuntimeParams(notify_url=notify)
        except ValidationError:
            raise LingtestError(f"lingtest serve --notify {alerts.mask_url(notify)}: expected "
                                "an http(s):// webhook URL, e.g. "
                                "https://hooks.slack.com/services/...") from None
        os.environ[alerts.NOTIFY_ENV] = notify
    alerts.check_rules(params.runtime.alerts, workspace.root)
    if not configure_environment(workspace):
        raise LingtestError("no Prefect server: start `lingtest ui` first (schedules only fire "
                            "with a real server), or set PREFECT_API_URL")
    from tasks.core.serving import serve_schedule

    schedule = {"interval": interval} if interval is not None else {"cron": cron}
    when = f"every {interval:g} s" if interval is not None else f"on cron {cron!r}"
    url = alerts.mask_url(alerts.webhook(params.runtime.notify_url))
    typer.echo(f"serving deployment repro/{name} {when} for {workspace.root}"
               f"{f', alerts to {url}' if url else ''}; Ctrl-C or SIGTERM stops it", err=True)
    code = serve_schedule(workspace, schedule, list(stage or []), experiment, push, name,
                          echo=lambda line: typer.echo(line, err=True))
    raise typer.Exit(code)


@app.command()
def adapt(topic: str = typer.Option(..., help="Tree topic to grow, e.g. /Rooms."),
          tree: str = typer.Option(..., help="AdaTest CSV tree under inputs/adaptive/ (written)."),
          rounds: int = typer.Option(1, help="Rounds of suggest → review."),
          generator: str = typer.Option(
              "HuggingFaceTB/SmolLM2-135M-Instruct",
              help="A model spec: a causal LM id or folder (offline: the packaged SmolLM2, or "
                   "google/gemma-3-270m, the packaged Gemma 3 270M), "
                   "openai:MODEL@URL (completions API), openai-chat:MODEL@URL, or "
                   "python:file.py:ATTR (generate(prompts, n=, seed=))."),
          base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint."),
          model: str = typer.Option("vader", help="Model under test."),
          reviewer: str = typer.Option("reviewer", help="Your name: the accepted rows' labeler."),
          oracle: Optional[str] = typer.Option(
              None, help="Review unattended with this reference model (labeler oracle:<id>)."),
          oracle_min_confidence: float = typer.Option(
              0.8, help="The --oracle model labels a suggestion only when its probability "
                        "for that label reaches this; it abstains on the rest."),
          oracle_topic_filter: bool = typer.Option(
              True, help="With --oracle: a suggestion whose nearest tree topic (MiniLM) is "
                         "another one, or far from every test, is off topic."),
          seed: Optional[int] = typer.Option(None, help="Default: the run's `seed`."),
          start_from: Optional[str] = typer.Option(
              None, help="Copy this tree to --tree first when --tree does not exist yet "
                         "(e.g. data/raw/adatest/imdb_hotel_conversion.csv)."),
          diversity: bool = typer.Option(
              True, help="Fill each prompt with tests unlike those already in it (AdaTest's "
                         "prompt diversity, MiniLM cosine similarity); off: by score alone."),
          top: int = typer.Option(
              20, help="Suggestions shown per round: the highest failure scores of all "
                       "prompts × completions."),
          review_timeout_s: int = typer.Option(
              3600, help="Seconds a round waits for review before the run fails.")
          ) -> None:
    """AdaTest with a person in the loop: each round pauses in the Prefect UI for review
    (start `lingtest ui` first); not a DVC stage. Trees under inputs/adaptive/ are tracked
    inputs: the `adaptive` stage re-scores every one of them."""
    import shutil

    from tasks.adaptive.method import GROWN_TREES
    from tasks.core.runtime import configure_environment

    if top < 1:
        raise LingtestError(f"lingtest adapt --top {top}: show at least 1 suggestion a round")
    if review_timeout_s < 1:
        raise LingtestError(f"lingtest adapt --review-timeout-s {review_timeout_s}: give the "
                            "seconds a round waits for review, >= 1 (default 3600)")
    workspace = Workspace.current()
    params = _params(None, None)
    from tasks.core.validate import check_model
    for key, spec in (("--model", model), ("--oracle", oracle)):
        if spec is not None:  # all checked before Prefect starts or the tree is touched
            check_model(key, spec, "classifier", params, workspace)
    from tasks.models.llm import check_llm, parse_llm
    check_llm(parse_llm(generator, "--generator", params.models.names, workspace.root),
              params.models.offline, workspace.root, key="--generator", base_url=base_url)
    from tasks.adaptive.tree import read_tree, topic_problem
    if topic_problem(topic):
        raise LingtestError(f"lingtest adapt --topic: {topic_problem(topic)}; fix: a tree topic "
                            "such as /Rooms")
    target = Path(tree).expanduser()
    target = target if target.is_absolute() else workspace.root / target
    source = None
    if not target.exists():
        if start_from is None:
            raise LingtestError(f"lingtest adapt: no tree at {target}; fix: pass --start-from "
                                "<AdaTest CSV> to begin from an existing tree")
        source = Path(start_from).expanduser()
        source = source if source.is_absolute() else workspace.root / source
        if not source.exists():
            raise LingtestError(f"lingtest adapt --start-from: no tree at {source}")
    try:  # a malformed tree, a folder or a pipe: one error before Prefect starts
        read_tree(source or target)
    except LingtestError as error:
        raise LingtestError(f"lingtest adapt {'--start-from' if source else '--tree'}: "
                            f"{error}") from None
    api = configure_environment(workspace)
    if api is None and oracle is None:
        raise LingtestError("lingtest adapt: no `lingtest ui` server runs for this project, so "
                            "no one could review; start `lingtest ui` or pass --oracle <model>")
    if source is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    if (workspace.root / GROWN_TREES) not in target.parents:
        typer.echo(f"note: {target} is outside {GROWN_TREES}/, so DVC does not track it and "
                   "the adaptive stage does not re-score it", err=True)
    tree = str(target)
    from flows.adapt import adapt_flow

    from tasks.core.secrets import MaskedURL

    seed = params.seed if seed is None else seed
    adapt_flow(tree, topic, rounds, generator, MaskedURL(url=base_url) if base_url else None,
               model, reviewer, oracle, seed,
               binary_labels=list(params.adaptive.binary_labels or []) or None,
               offline=bool(params.models.offline), root=str(workspace.root),
               pass_tokens=params.runtime.pass_tokens,
               encoder_precision=params.runtime.encoder_precision,
               encoder_backend=params.runtime.encoder_backend,
               diversity=diversity, oracle_min_confidence=oracle_min_confidence,
               top=top, review_timeout_s=review_timeout_s,
               oracle_topic_filter=oracle_topic_filter,
               label_maps=params.models.label_map, names=params.models.names)


@app.command("classify-answers")
def classify_answers(
        file: str = typer.Argument(..., help="CSV with one LLM response per row."),
        column: str = typer.Option(..., "--column", help="Column holding the responses."),
        output: str | None = typer.Option(None, "--output",
                                        help="Write here (default: replace FILE); a folder "
                                             "(or a path ending in /) gets a file of FILE's "
                                             "name."),
        overwrite: bool = typer.Option(False, "--overwrite",
                                       help="Replace a `parsed` column FILE already has "
                                            "(refused without it)."),
        oracle: str = typer.Option("guide", "--oracle",
                                   help="guide (the guide's first-word rule) | lenient | "
                                   "strict, as consistency.oracle")) -> None:
    """Add a `parsed` column (true/false/undefined, the consistency oracle) to a CSV."""
    from tasks.consistency.oracle import classified_path, classify_csv, oracle_version

    version = oracle_version(oracle)  # an unknown mode: one error naming the choices
    counts = classify_csv(file, column, output, oracle, overwrite)
    typer.echo(f"oracle {oracle} v{version}: wrote {classified_path(file, output)}")
    for value, count in counts.items():
        typer.echo(f"{value}\t{count}")


@app.command("covering-array")
def covering_array_command(
        values: str = typer.Option(..., "--values", help="Levels per parameter, e.g. 3,3,2,2."),
        strength: int = typer.Option(2, "--strength", help="Interaction strength t."),
        seed: int = typer.Option(0, "--seed"),
        generator: str = typer.Option("builtin", "--generator",
                                      help="builtin, pict, acts or cagen."),
        binary: str | None = typer.Option(None, "--binary",
                                          help="Path of the external generator."),
        check_file: str | None = typer.Option(None, "--check",
                                              help="Verify this ca-N.csv instead."),
        max_tuples: Optional[int] = typer.Option(
            None, "--max-tuples", help="Refuse a model with more t-tuples than this before "
            "generating or checking (about 30 µs each; default 500,000, about 15 s).")) -> None:
    """Print a covering array as CSV (row 0 = original input), or --check an existing one."""
    from tasks.consistency import covering

    try:
        levels = [int(v) for v in values.split(",")]
    except ValueError:
        raise LingtestError(f"--values {values[:80]!r}: expected comma-separated integers "
                            f">= 1, e.g. --values 3,3,2,2") from None
    max_tuples = covering.DEFAULT_MAX_TUPLES if max_tuples is None else max_tuples
    if max_tuples < 1:
        raise LingtestError(f"--max-tuples {max_tuples}: give a bound >= 1 (default "
                            f"{covering.DEFAULT_MAX_TUPLES:,})")
    count = covering.check_size(levels, strength, max_tuples, "--max-tuples")
    if check_file:
        array = covering.read_ca_csv(Path(check_file).expanduser())
        covering.check(array, levels, strength)
        t = min(strength, len(levels))
        typer.echo(f"{check_file}: {len(array)} rows, all {count} {t}-tuples covered")
        return
    array = covering.covering_array(levels, strength, seed, generator,
                                    str(Path(binary).expanduser()) if binary else None)
    typer.echo(covering.ca_csv_text(array), nl=False)


@app.command()
def review(tree: str = typer.Argument(..., help="AdaTest CSV tree to review; every change is "
                                      "written to it at once (e.g. inputs/adaptive/hotel.csv; "
                                      "relative to the current folder, else the project)."),
           port: Optional[int] = typer.Option(
               None, help="Port on 127.0.0.1 (default: a free port, printed at start)."),
           model: Optional[List[str]] = typer.Option(
               None, "--model", help="Model under test, side by side when repeated; the "
                                     "driving one (the first; the page switches it) ranks "
                                     "suggestions (default lingtest/minilm-sst2): any "
                                     "classifier (python: over its own labels too), a python: "
                                     "raw-score model, or an LLM spec with #scorer=<classifier "
                                     "or python:>&fail_label=<label>."),
           generator: Optional[List[str]] = typer.Option(
               None, "--generator",
               help="Suggestion generator, as for `lingtest adapt`; repeat to choose among "
                    "several on the page, each loaded on first use (default: the packaged "
                    "google/gemma-3-270m, then HuggingFaceTB/SmolLM2-135M-Instruct)."),
           base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint."),
           reviewer: str = typer.Option("reviewer", help="Your name: the labeler of the rows "
                                                          "you label."),
           seed: Optional[int] = typer.Option(None, help="Default: the run's `seed`."),
           prompts: Optional[int] = typer.Option(
               None, help="Prompts per round of suggestions (default AdaTest's plan: 8)."),
           completions: Optional[int] = typer.Option(
               None, help="Completions per prompt (default 12: ~100 suggestions a round)."),
           diversity: bool = typer.Option(
               True, help="AdaTest's prompt diversity (MiniLM); off: prompts by score alone."),
           record: bool = typer.Option(
               True, help="Record the session as a Prefect flow run (`review-session`: "
                          "`lingtest ui`'s server, PREFECT_API_URL, else a temporary one).")
           ) -> None:
    """AdaTest's review loop in the browser: the tree by topic with every model's failure
    scores, ranked suggestions filed in one click, edits saved to TREE with undo."""
    from tasks.adaptive.tree import read_tree

    workspace = Workspace.current()
    target = _review_tree(tree, workspace)
    read_tree(target)  # a malformed tree: one error before anything loads
    from tasks.core.runtime import configure_environment

    api = configure_environment(workspace) if record else None  # before Prefect is imported
    if port is not None and not 0 < port < 65536:
        raise LingtestError(f"lingtest review --port {port}: give a port 1..65535, or leave "
                            "--port out for a free one")
    params = _params(None, None)
    from tasks.adaptive.review_app.session import ReviewSettings
    from tasks.adaptive.prompts import PromptSettings

    settings = ReviewSettings(
        reviewer=reviewer, seed=params.seed if seed is None else seed, prompts=prompts,
        completions=completions,
        binary_labels=tuple(params.adaptive.binary_labels or []) or None,
        prompt_settings=PromptSettings(prompt_diversity=diversity))
    specs = list(dict.fromkeys(model or ["lingtest/minilm-sst2"]))
    from tasks.adaptive.tested_models import load_tested_model
    from tasks.core.validate import check_model
    for spec in specs:  # any classifier, a raw-score model, or an LLM with #scorer=
        check_model("--model", spec, "tested model", params, workspace)
    from tasks.models.llm import check_llm, parse_llm
    generators = list(dict.fromkeys(generator or REVIEW_GENERATORS))
    for spec in list(generators):
        try:
            check_llm(parse_llm(spec, "--generator", params.models.names, workspace.root),
                      params.models.offline, workspace.root, key="--generator",
                      base_url=base_url)
        except LingtestError as error:
            if generator or spec == REVIEW_GENERATORS[-1]:
                raise
            generators.remove(spec)  # a default that is not installed: the fallback serves
            typer.secho(f"lingtest review: {spec} left out ({error})", fg="yellow", err=True)
    from tasks.adaptive.review_app.app import bind, serve

    sock = bind(port)  # a port in use: one error before the models load
    from tasks.adaptive.generators import make_generator
    from tasks.adaptive.prompts import minilm_embed
    from tasks.adaptive.review_app.session import ReviewSession
    from tasks.models.sentiment import load_sentiment_model

    offline = bool(params.models.offline)

    def sentiment(spec: str):
        return load_sentiment_model(spec, (0.5, 0.5), offline, workspace.root,
                                    params.runtime.pass_tokens,
                                    precision=params.runtime.encoder_precision,
                                    backend=params.runtime.encoder_backend,
                                    label_maps=params.models.label_map,
                                    names=params.models.names)

    models = [load_tested_model(spec, sentiment, workspace.root, offline, params.models.names,
                                params.models.label_map) for spec in specs]

    def loader(spec: str):
        return lambda: make_generator(spec, offline=offline, base_url=base_url,
                                      root=workspace.root, names=params.models.names)

    session = ReviewSession(target, models, {spec: loader(spec) for spec in generators},
                            settings, embed=minilm_embed(offline))
    recorder = None
    if record:
        from flows.review_session import SessionRecorder

        recorder = SessionRecorder(session, warn=lambda line: typer.secho(
            line, fg="yellow", err=True)).start()
        typer.echo(f"lingtest review: recorded as a `review-session` flow run on "
                   f"{api or 'a temporary local Prefect server'}", err=True)
    try:
        serve(session, sock, announce=lambda line: typer.echo(line, err=True))
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        if recorder is not None and not recorder.stop():
            typer.secho("lingtest review: the Prefect flow run did not end in time; it "
                        "stays Running in the UI", fg="yellow", err=True)


# `lingtest review`'s generators when none is named: Gemma 3 270M first (16 of 80 suggestions
# a person would keep in a blind reading, SmolLM2-135M 1 of 80), SmolLM2 the fallback.
REVIEW_GENERATORS = ("google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct")


def _review_tree(tree: str, workspace: Workspace) -> Path:
    """TREE relative to the current folder, else to the project root (as `lingtest adapt
    --tree`); neither: one error naming both."""
    given = Path(tree).expanduser()
    candidates = [given] if given.is_absolute() else [Path.cwd() / given,
                                                      workspace.root / given]
    for candidate in candidates:
        if candidate.exists():  # a folder or a pipe: read_tree names what it is
            return candidate.resolve()
    tried = " nor ".join(str(c) for c in dict.fromkeys(candidates))
    raise LingtestError(f"lingtest review {tree}: no tree at {tried}; give the path of an "
                        "AdaTest CSV (e.g. inputs/adaptive/hotel.csv)")


@app.command()
def compare(before: str = typer.Argument(..., help="A git revision, DVC experiment name, "
                                          "Prefect flow-run id, or `workspace`."),
            after: str = typer.Argument("workspace", help="The same kinds (default: the "
                                                           "files on disk)."),
            stage: Optional[List[str]] = typer.Option(
                None, "--stage", help="Stage(s) to compare (default: every testing stage)."),
            markdown: Optional[Path] = typer.Option(
                None, help="Also write the comparison as Markdown to this file.")) -> None:
    """Two runs side by side: changed parameters, headline metric deltas and per-case
    fixed / broken / added / removed counts with the top changes, per stage."""
    from flows import STAGES, stage_method as method_class
    from tasks.core.compare import (compare as compare_runs, comparison_markdown,
                                    resolve_rev, snapshot)
    from tasks.core.io import write_text

    root = Workspace.current().root
    if markdown is not None:
        markdown = markdown.expanduser()
        if markdown.exists() and not markdown.is_file():
            raise LingtestError(f"lingtest compare --markdown {markdown}: not a regular file; "
                                "fix: the path of the Markdown file to write")
    names = list(stage or [s for s in STAGES if method_class(s) is not None])
    unknown = [s for s in names if s not in STAGES]
    if unknown:
        raise LingtestError(f"lingtest compare --stage {unknown[0]}: no such stage; stages: "
                            f"{', '.join(STAGES)}")
    revs = (resolve_rev(root, before), resolve_rev(root, after))
    parts = []
    for name in names:
        cls = method_class(name)
        keys = cls.contract.result_index if cls is not None else ["case_id", "model_id"]
        parts.append(comparison_markdown(compare_runs(
            name, snapshot(root, name, revs[0], before), snapshot(root, name, revs[1], after),
            keys)))
    text = "\n".join(parts)
    typer.echo(text, nl=False)
    if markdown is not None:
        write_text(markdown, text)


def main() -> None:
    """Every error a user can cause is one ``lingtest: error:`` line and exit status 2:
    a LingtestError, and a command-line usage error (unknown command or option, a value of
    the wrong type) too, which click would draw as a box of several lines."""
    # click's exceptions, wherever this typer keeps them (its own copy of click since 0.23)
    click = sys.modules[typer.BadParameter.__module__]
    try:
        code = app(standalone_mode=False)
    except LingtestError as error:
        # a message may quote a parameter value: never print its password
        typer.secho(f"lingtest: error: {redact_text(str(error))}", fg="red", err=True)
        sys.exit(2)
    except click.NoArgsIsHelpError as error:  # `lingtest` alone: the help
        typer.echo(error.ctx.get_help(), err=True)
        sys.exit(2)
    except click.UsageError as error:
        ctx = error.ctx
        command = "lingtest" + (f" {ctx.info_name}" if ctx is not None and ctx.parent else "")
        typer.secho(f"lingtest: error: {command}: {redact_text(error.format_message()).rstrip('.')}; fix: "
                    f"see `{command} --help`", fg="red", err=True)
        sys.exit(2)
    except click.ClickException as error:
        typer.secho(f"lingtest: error: {redact_text(error.format_message())}", fg="red",
                    err=True)
        sys.exit(error.exit_code)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    # typer.Exit(code) of a command; else 0, as click's standalone mode ends (SystemExit)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
