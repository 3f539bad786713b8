"""The ``lingtest`` command line: run stages, show parameters and models, start the UI.

Every ``LingtestError`` is printed as one line (no traceback) and exits with status 2.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.secrets import redact_text, redact_value

from lingtest.flows.cli_common import PROFILE_HELP, SET_HELP, current_params

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Reproducible pipelines for testing NLP models.")


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
    from lingtest.api import run as run_stage

    _exit_cleanly_on_sigterm()
    done = run_stage(stage, profile=profile, sets=list(set_ or []),
                     echo=lambda text: typer.echo(text, err=True))
    for line in done["alerts"]:
        typer.secho(f"lingtest: alert: {line}", fg="yellow", err=True)


@app.command()
def validate(stage: str = typer.Argument(..., help="Stage to check (see `lingtest stages`)."),
             set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
             profile: Optional[str] = typer.Option(None, "--profile", help=PROFILE_HELP)
             ) -> None:
    """Check a stage's parameters, input files and models as `lingtest run` does first,
    without running it (loads no weights)."""
    from lingtest.api import check

    params = current_params(set_, profile)
    check(stage, params, Workspace.current())
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
            None, "--max-fail", min=0, max=100, help="Exit 1 when a model's overall fail % "
            "of a method exceeds this."),
        max_broken: Optional[int] = typer.Option(
            None, "--max-broken", min=0, help="Exit 1 when a model breaks more cases than "
            "this against a baseline model."),
        set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
        profile: Optional[str] = typer.Option(None, "--profile", help=PROFILE_HELP)) -> None:
    """Test your own models with the methods that fit them, beside the pipeline's baseline
    models; writes runs/<name>/ only (the pipeline's data/ and reports/ stay as they are)."""
    from lingtest.api import test as test_models

    result = test_models(list(models), methods, profile=profile, name=name,
                         sets=list(set_ or []), max_fail=max_fail, max_broken=max_broken,
                         echo=lambda text: typer.echo(text, err=True))
    _print_comparisons(result.comparisons, result.folder)
    for breach in result.breaches:
        typer.secho(f"lingtest test: gate failed: {breach}", fg="red", err=True)
    if result.breaches:
        raise typer.Exit(1)


@app.command()
def report(run: str = typer.Argument(..., help="A run name under runs/, or a run folder.")
           ) -> None:
    """Write a finished `lingtest test` run as runs/<name>/report.html: its tables, figures
    and worst failing cases in one file that opens in any browser, without a server."""
    from lingtest.api import load

    typer.echo(load(run).report())


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
    from lingtest.flows.own_models import EXPORTABLE, RUNS
    from lingtest.flows.own_models import export_suite as export_flow
    from lingtest.tasks.core.runtime import configure_environment
    from lingtest.flows.validation import validate_files

    if stage not in EXPORTABLE:
        raise LingtestError(f"lingtest export-suite: `{stage}` scores no classifier texts; "
                            f"stages: {', '.join(EXPORTABLE)}")
    workspace = Workspace.current()
    params = current_params(set_, profile)
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


def _print_comparisons(comparisons: list[dict], folder: Path) -> None:
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
    console.print(f"reports: {folder / 'reports'}; to share: {folder / 'report.html'}")


@app.command()
def stages() -> None:
    """List the stages: each one's plug-in, paper and what it runs (a flow, or a method
    class that the one method flow runs)."""
    from lingtest.flows.registry import STAGES, plugin_of, stage_spec

    for name in STAGES:
        spec, plugin = stage_spec(name), plugin_of(name)
        paper = f"{plugin.paper} ({plugin.citation})" if plugin.paper else plugin.title
        typer.echo(f"{name}\t{plugin.name}\t{paper}\t{spec.method or spec.flow}")


@app.command()
def params(set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
           profile: Optional[str] = typer.Option(None, "--profile", help=PROFILE_HELP)) -> None:
    """Print the effective parameters (YAML) after profile and overrides."""
    import yaml

    effective = current_params(set_, profile)
    typer.echo(yaml.safe_dump(effective.model_dump(mode="json"), sort_keys=False).rstrip())


@app.command()
def models(set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
           profile: Optional[str] = typer.Option(None, "--profile", help=PROFILE_HELP)) -> None:
    """List every configured model (every parameter that names one, in every stage) with
    its display name and where it resolves (package, hub cache, hub, local, python, file,
    http) or why it cannot load."""
    from rich.console import Console
    from rich.table import Table

    from lingtest.flows.validation import describe_configured

    rows = describe_configured(current_params(set_, profile), Workspace.current())
    table = Table("parameter", "model", "name", "kind", "source", "revision", "pooling",
                  "path / reason")
    for row in map(redact_value, rows):  # a spec's URL may carry a password
        where = row.get("reason") if row["source"] == "missing" else row.get("path")
        table.add_row(row["key"], row["id"], str(row.get("name") or ""), row["kind"], row["source"],
                      str(row.get("revision") or ""), str(row.get("pooling") or ""),
                      str(where or ""))
    Console(width=240).print(table)


@app.command("plan")
def plan(
        stages_: Optional[List[str]] = typer.Option(
            None, "--stages", help="Stages to plan, comma-separated or repeated (default: "
            "every stage, in dvc.yaml's order)."),
        gpu_tflops: Optional[float] = typer.Option(
            None, "--gpu-tflops", help="The GPU's assumed sustained TFLOP/s (default 10: "
            "about a third of an A10G's or L4's fp32 peak)."),
        as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
        recalibrate: bool = typer.Option(
            False, "--recalibrate", help="Measure this CPU again (else the stored figures "
            "under $LINGTEST_CACHE/plan are reused)."),
        set_: Optional[List[str]] = typer.Option(None, "--set", help=SET_HELP),
        profile: Optional[str] = typer.Option(None, "--profile", help=PROFILE_HELP)) -> None:
    """Before a run: per stage the models it loads (where they are, what to download, how
    large), its model calls, and their time on this CPU and on a GPU; loads no weights but
    the packaged MiniLM and SmolLM2, timed once per machine (docs/reproducing.md)."""
    import json

    from rich.console import Console

    from lingtest.flows.cpu_calibration import load_or_measure
    from lingtest.flows.run_estimate import (DEFAULT_GPU_TFLOPS, check_gpu_tflops, make_plan, render,
                                    selected_stages)

    chosen = selected_stages(stages_)  # an unknown stage: refused before anything loads
    gpu = check_gpu_tflops(DEFAULT_GPU_TFLOPS if gpu_tflops is None else gpu_tflops)
    params = current_params(set_, profile)
    workspace = Workspace.current()
    calibration = load_or_measure(params, workspace, recalibrate,
                                  say=lambda line: typer.echo(line, err=True))
    the_plan = make_plan(params, workspace, chosen, calibration, gpu)
    if as_json:
        typer.echo(json.dumps(the_plan.as_json(), indent=2, default=str))
        return
    render(the_plan, Console(width=None if sys.stdout.isatty() else 160))


@app.command()
def ui(host: str = "127.0.0.1", port: int = 4200) -> None:
    """Start the Prefect server (SQLite under .prefect/); flows started meanwhile report to it."""
    from lingtest.tasks.core.server import serve_ui

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
    the last finished tick failed (see flows/serving.py)."""
    import os

    from lingtest.tasks.core import alerts
    from lingtest.tasks.core.runtime import configure_environment

    if project is not None:
        root = Path(project).expanduser().resolve()
        if not (root / "params.yaml").is_file():
            raise LingtestError(f"lingtest serve --project {project}: no params.yaml there; "
                                "give the project folder (the one holding params.yaml)")
        os.environ["LINGTEST_ROOT"] = str(root)
    workspace = Workspace.current()
    if interval is not None and interval <= 0:
        raise LingtestError(f"--interval {interval}: give a number of seconds > 0")
    params = current_params(None, None)
    if notify is not None:
        from pydantic import ValidationError

        from lingtest.tasks.core.sections import RuntimeParams
        try:
            RuntimeParams(notify_url=notify)
        except ValidationError:
            raise LingtestError(f"lingtest serve --notify {alerts.mask_url(notify)}: expected "
                                "an http(s):// webhook URL, e.g. "
                                "https://hooks.slack.com/services/...") from None
        os.environ[alerts.NOTIFY_ENV] = notify
    alerts.check_rules(params.runtime.alerts, workspace.root)
    if not configure_environment(workspace):  # before Prefect is imported: it reads the URL
        raise LingtestError("no Prefect server: start `lingtest ui` first (schedules only fire "
                            "with a real server), or set PREFECT_API_URL")
    from lingtest.flows.repro import uses_git
    uses_git(str(workspace.root))  # a folder DVC cannot rerun in: refused before serving
    from lingtest.flows.serving import serve_schedule

    schedule = {"interval": interval} if interval is not None else {"cron": cron}
    when = f"every {interval:g} s" if interval is not None else f"on cron {cron!r}"
    url = alerts.mask_url(alerts.webhook(params.runtime.notify_url))
    typer.echo(f"serving deployment repro/{name} {when} for {workspace.root}"
               f"{f', alerts to {url}' if url else ''}; Ctrl-C or SIGTERM stops it", err=True)
    code = serve_schedule(workspace, schedule, list(stage or []), experiment, push, name,
                          echo=lambda line: typer.echo(line, err=True))
    raise typer.Exit(code)


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
    from lingtest.flows.registry import STAGES, stage_method as method_class
    from lingtest.tasks.core.compare import (compare as compare_runs, comparison_markdown,
                                    resolve_rev, snapshot)
    from lingtest.tasks.core.io import check_output_folder, write_text

    root = Workspace.current().root
    if markdown is not None:
        markdown = markdown.expanduser()
        if markdown.exists() and not markdown.is_file():
            raise LingtestError(f"lingtest compare --markdown {markdown}: not a regular file; "
                                "fix: the path of the Markdown file to write")
        check_output_folder(markdown, f"lingtest compare --markdown {markdown}", root)
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


def _add_plugin_commands() -> None:
    """Each plug-in's own commands (``Plugin.cli``) as ``lingtest`` commands."""
    from lingtest.flows.registry import PLUGINS
    from lingtest.tasks.core.plugin_spec import load

    for plugin in PLUGINS:
        if plugin.cli:
            app.registered_commands.extend(load(plugin.cli).registered_commands)


_add_plugin_commands()


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
