"""AdaTest's commands: ``lingtest adapt`` grows a tree with a person (or an oracle model) in
the loop through the Prefect UI; ``lingtest review`` is the review app. Neither is a DVC
stage: trees under inputs/adaptive/ are inputs the ``adaptive`` stage re-scores."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace

from lingtest.flows.cli_common import current_params

app = typer.Typer()


@app.command()
def adapt(topic: str = typer.Option(..., help="Tree topic to grow, e.g. /Rooms."),
          tree: str = typer.Option(..., help="AdaTest CSV tree under inputs/adaptive/ (written)."),
          rounds: int = typer.Option(1, min=1, help="Rounds of suggest → review."),
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

    from lingtest.tasks.adaptive.method import GROWN_TREES
    from lingtest.tasks.core.runtime import configure_environment

    if top < 1:
        raise LingtestError(f"lingtest adapt --top {top}: show at least 1 suggestion a round")
    if review_timeout_s < 1:
        raise LingtestError(f"lingtest adapt --review-timeout-s {review_timeout_s}: give the "
                            "seconds a round waits for review, >= 1 (default 3600)")
    workspace = Workspace.current()
    params = current_params(None, None)
    from lingtest.flows.validation import check_model
    for key, spec in (("--model", model), ("--oracle", oracle)):
        if spec is not None:  # all checked before Prefect starts or the tree is touched
            check_model(key, spec, "classifier", params, workspace)
    from lingtest.tasks.models.llm import check_llm, parse_llm
    check_llm(parse_llm(generator, "--generator", params.models.names, workspace.root),
              params.models.offline, workspace.root, key="--generator", base_url=base_url)
    _check_base_url("adapt", base_url, [generator], params, workspace)
    from lingtest.tasks.adaptive.tree import read_tree, topic_problem
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
    from lingtest.flows.adapt import adapt_flow, http_parameters

    from lingtest.tasks.core.secrets import MaskedURL

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
               label_maps=params.models.label_map, names=params.models.names,
               llm_classifier={name: settings.model_dump() for name, settings
                               in params.models.llm_classifier.items()},
               http=http_parameters(params), **params.models.lm_path())


@app.command()
def review(tree: str = typer.Argument(..., help="AdaTest CSV tree to review; every change is "
                                      "written to it at once (e.g. inputs/adaptive/hotel.csv; "
                                      "relative to the current folder, else the project)."),
           port: Optional[int] = typer.Option(
               None, help="Port on 127.0.0.1 (default: a free port, printed at start)."),
           model: Optional[List[str]] = typer.Option(
               None, "--model", help="Model under test, side by side when repeated; the "
                                     "driving one (the first; the page switches it) ranks "
                                     "suggestions (default adaptive.models, those "
                                     "available; as named here: each must be): any "
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
    from lingtest.tasks.adaptive.tree import read_tree

    workspace = Workspace.current()
    target = _review_tree(tree, workspace)
    read_tree(target)  # a malformed tree: one error before anything loads
    from lingtest.tasks.core.runtime import configure_environment

    api = configure_environment(workspace) if record else None  # before Prefect is imported
    if port is not None and not 0 < port < 65536:
        raise LingtestError(f"lingtest review --port {port}: give a port 1..65535, or leave "
                            "--port out for a free one")
    params = current_params(None, None)
    from lingtest.tasks.adaptive.review_app.session import ReviewSettings
    from lingtest.tasks.adaptive.prompts import PromptSettings

    settings = ReviewSettings(
        reviewer=reviewer, seed=params.seed if seed is None else seed, prompts=prompts,
        completions=completions,
        binary_labels=tuple(params.adaptive.binary_labels or []) or None,
        prompt_settings=PromptSettings(prompt_diversity=diversity))
    specs = _tested_models(model, params, workspace)
    from lingtest.tasks.models.llm import check_llm, parse_llm
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
    _check_base_url("review", base_url, generators, params, workspace)
    from lingtest.tasks.adaptive.review_app.app import bind, serve

    sock = bind(port)  # a port in use: one error before the models load
    from lingtest.tasks.adaptive.generators import make_generator
    from lingtest.tasks.adaptive.prompts import minilm_embed
    from lingtest.tasks.adaptive.review_app.session import ReviewSession

    offline = bool(params.models.offline)
    models = review_models(specs, params, workspace)

    def loader(spec: str):
        return lambda: make_generator(spec, offline=offline, base_url=base_url,
                                      root=workspace.root, names=params.models.names)

    session = ReviewSession(target, models, {spec: loader(spec) for spec in generators},
                            settings, embed=minilm_embed(offline))
    recorder = None
    if record:
        from lingtest.flows.review_session import SessionRecorder

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


def review_models(specs: list[str], params, workspace: Workspace) -> list:
    """The models under test ``lingtest review`` shows, loaded with the run's settings as the
    stages load them (``sentiment.load_configured``: label maps, names, encoder path, an LLM
    classifier's template and label words, and the project's HTTP settings for a served
    one), at the adaptive neutral band (0.5, 0.5) ``lingtest adapt`` uses."""
    from lingtest.tasks.adaptive.tested_models import load_tested_model
    from lingtest.tasks.models.sentiment import load_configured

    def sentiment(spec: str):
        return load_configured(spec, params, workspace.root, (0.5, 0.5))

    return [load_tested_model(spec, sentiment, workspace.root, bool(params.models.offline),
                              params.models.names, params.models.label_map) for spec in specs]


# `lingtest review`'s generators when none is named: Gemma 3 270M first (16 of 80 suggestions
# a person would keep in a blind reading, SmolLM2-135M 1 of 80), SmolLM2 the fallback.
REVIEW_GENERATORS = ("google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct")


def _tested_models(named: list[str] | None, params, workspace: Workspace) -> list[str]:
    """The models ``lingtest review`` starts with: those named with --model, each checked
    (a missing one is the error); without --model, those of ``adaptive.models`` that load
    here, one line per model left out saying how to add it, so a fresh clone reviews with
    VADER before ``train-sentiment`` has run. None loading is one error."""
    from lingtest.flows.validation import check_model

    if named:
        specs = list(dict.fromkeys(named))
        for spec in specs:  # any classifier, a raw-score model, or an LLM with #scorer=
            check_model("--model", spec, "tested model", params, workspace)
        return specs
    kept, missing = [], []
    for spec in dict.fromkeys(params.adaptive.models):
        try:
            check_model("adaptive.models", spec, "tested model", params, workspace)
            kept.append(spec)
        except LingtestError as error:
            missing.append(_left_out(spec, error, workspace))
    if not kept:
        raise LingtestError(f"lingtest review: no model of adaptive.models loads here: "
                            f"{'; '.join(missing)}; or name one with --model, e.g. "
                            "--model vader")
    for line in missing:
        typer.secho(f"lingtest review: {line}", fg="yellow", err=True)
    return kept


def _left_out(spec: str, error: LingtestError, workspace: Workspace) -> str:
    """Why a default model is left out and how to add it: the untrained built-in classifier
    says which stage trains it; any other model, its check's own error."""
    from lingtest.tasks.models.model_spec import parse_model
    from lingtest.tasks.models.sentiment import MINILM_CONFIG, MINILM_SST2_DIR, MINILM_SST2_ID

    if parse_model(spec).target == MINILM_SST2_ID and not (
            workspace.root / MINILM_SST2_DIR / MINILM_CONFIG).is_file():
        return (f"{spec} left out: not trained yet; add it with "
                "`lingtest run train-sentiment`")
    return f"{spec} left out: {error}"


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


def _check_base_url(command: str, base_url: str | None, generators: list[str], params,
                    workspace: Workspace) -> None:
    """``--base-url`` is read by endpoint generators only: given beside none, it would be
    silently ignored (and never checked)."""
    from lingtest.tasks.models.llm import HTTP_FORMS, parse_llm

    if base_url and not any(parse_llm(spec, "--generator", params.models.names,
                                      workspace.root).form in HTTP_FORMS
                            for spec in generators):
        raise LingtestError(f"lingtest {command} --base-url: no --generator reads an endpoint "
                            f"({', '.join(generators)}); fix: name one, e.g. --generator "
                            "openai:MODEL (the completions API) or openai-chat:MODEL, or leave "
                            "--base-url out")
