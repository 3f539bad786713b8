"""Validate a stage's inputs before Prefect starts: every configured model id resolves and
every input file the stage reads parses, so bad input costs one line and no written output.

``validate_inputs`` runs in ``lingtest run`` ahead of ``run_stage``; it reads files with the
same readers the flows use (so the checks cannot drift) and never loads model weights.
"""
from __future__ import annotations

from pathlib import Path

from tasks.core.config import Params
from tasks.core.errors import LingtestError
from tasks.core.paths import Workspace
from tasks.core.publish import ENCODER_SECTIONS


def _path(value: str, workspace: Workspace) -> Path:
    """A parameter's path: as given when absolute (``~`` expanded), else under the root."""
    given = Path(value).expanduser()
    return given if given.is_absolute() else workspace.root / given


def _keyed(key: str, error: LingtestError) -> LingtestError:
    """The reader's message, prefixed by the parameter that named the file."""
    return LingtestError(f"{key}: {error}")


def configured_models(params: Params) -> list[tuple[str, str, str]]:
    """(parameter key, model spec, kind) of every model a stage may load."""
    out = [("models.encoders", m, "encoder") for m in params.models.encoders]
    out += [("contrastive.encoders", m, "encoder") for m in params.contrastive.encoders or []]
    out += [("models.causal_lm", params.models.causal_lm, "causal_lm"),
            ("models.spacy", params.models.spacy, "spacy")]
    out += [("capabilities.models", m, "classifier") for m in params.capabilities.models]
    out.append(("capabilities.fill_model", params.capabilities.fill_model, "fill"))
    out += [("consistency.llms", spec, "llm") for spec in params.consistency.llms]
    out += [("adaptive.models", m, "tested model") for m in params.adaptive.models]
    out.append(("adaptive.debug.model", params.adaptive.debug.model, "trainable classifier"))
    first = (params.contrastive.encoders or params.models.encoders)[0]  # repair's default
    out += [("repair.models", m, "repair") for m in params.repair.models or [first]]
    return out


def check_model(key: str, model_id: str, kind: str, params: Params,
                workspace: Workspace) -> dict[str, str | None]:
    """The `lingtest models` row of one configured spec; LingtestError (naming ``key``) when
    it cannot load. Loads no weights; a ``python:`` model's module is imported."""
    try:
        return {**_check_model(key, model_id, kind, params, workspace), "key": key}
    except LingtestError as error:
        raise (error if str(error).startswith(key) else _keyed(key, error)) from None


def _check_model(key: str, model_id: str, kind: str, params: Params,
                 workspace: Workspace) -> dict[str, str | None]:
    from tasks.models.model_spec import parse_model
    from tasks.models.registry import resolve

    offline, names = params.models.offline, params.models.names
    row = {"key": key, "id": model_id, "name": model_id, "kind": kind, "source": "",
           "revision": None, "pooling": None, "path": None, "reason": ""}
    if kind == "repair":
        return _check_repair(model_id, params, workspace, row)
    if kind == "llm":  # an LLM under test, or a suggestion generator
        from tasks.models.llm import check_llm, parse_llm
        ref = parse_llm(model_id, key, names, workspace.root)
        return {**row, **check_llm(ref, offline, workspace.root, key=key)}
    if kind == "tested model":  # AdaTest's: any classifier, a raw-score or scored model
        from tasks.models.checks import check_scorer
        ref = parse_model(model_id, key, names, workspace.root)
        scorer = ref.options.get("scorer")
        if scorer:
            check_scorer(scorer, f"{key} scorer", names, workspace.root, offline)
            return _check_model(key, ref.bare, "llm", params, workspace)
        kind = "any classifier"
    if kind in ("classifier", "trainable classifier", "any classifier"):
        from tasks.models.checks import check_classifier
        ref = parse_model(model_id, key, names, workspace.root)
        return {**row, **check_classifier(ref, offline, workspace.root, params.models.label_map,
                                          trainable=kind == "trainable classifier",
                                          own_labels=kind == "any classifier")}
    if kind == "encoder":
        from tasks.contrastive.thresholds import needs_dictionaries
        from tasks.models.any_encoder import check_contrastive_encoder
        c = params.contrastive
        ref = parse_model(model_id, key, names, workspace.root)
        return {**row, **check_contrastive_encoder(ref, offline, workspace.root,
                                                   c.dictionary_file, c.pooling,
                                                   needs_dictionaries(c.thresholds))}
    if kind == "fill":
        from tasks.capabilities.fill import fill_kind
        kind = fill_kind(model_id)
    found = resolve(model_id, kind, offline=offline).require()
    return {**row, **found.as_row(), "name": model_id, "kind": kind}


def _check_repair(model_id: str, params: Params, workspace: Workspace, row: dict) -> dict:
    """A ``repair.models`` entry (null: the first encoder tested): ``all``, or an encoder the
    contrastive stage is told to test (by display name or spec), that lingtest can fine-tune."""
    from tasks.core.sections import REPAIR_ALL
    from tasks.models.model_spec import parse_models

    from tasks.models.any_encoder import check_repairable

    specs = params.contrastive.encoders or params.models.encoders
    refs = parse_models(specs, "contrastive.encoders", params.models.names, workspace.root)
    if model_id == REPAIR_ALL:
        for ref in refs:
            check_repairable(ref, params.models.offline, workspace.root)
        return {**row, "source": "contrastive", "reason": "every encoder tested"}
    match = [ref for ref in refs if model_id in (ref.name, ref.bare, ref.spec)]
    if not match:
        raise LingtestError(
            f"`{model_id}` is not among the encoders the contrastive stage tests "
            f"({', '.join(ref.name for ref in refs)}); fix: name one of those, or [{REPAIR_ALL}]")
    check_repairable(match[0], params.models.offline, workspace.root)
    return {**row, "name": match[0].name, "source": "contrastive", "path": match[0].bare}


def describe_configured(params: Params, workspace: Workspace) -> list[dict[str, str | None]]:
    """Every configured id, per parameter, with where it resolves or why it cannot."""
    rows, seen = [], set()
    for key, model_id, kind in configured_models(params):
        if (key, model_id) in seen:
            continue
        seen.add((key, model_id))
        try:
            rows.append(check_model(key, model_id, kind, params, workspace))
        except LingtestError as error:
            rows.append({"key": key, "id": model_id, "name": _name_of(model_id, params,
                                                                    workspace),
                         "kind": kind, "source": "missing", "reason": str(error)})
    return rows


def _name_of(spec: str, params: Params, workspace: Workspace) -> str:
    """A spec's display name when it parses at all (a missing model still has one)."""
    from tasks.models.model_spec import parse_model

    try:
        return parse_model(spec, "model", params.models.names, workspace.root).name
    except LingtestError:
        return ""


# The model parameters each stage loads (its check before the run; the contrastive stage's
# own encoders replace models.encoders when set).
STAGE_MODEL_KEYS = {
    "contrastive": ("contrastive.encoders", "models.encoders", "models.spacy"),
    "capabilities": ("capabilities.models", "capabilities.fill_model", "models.spacy"),
    "consistency": ("consistency.llms",),
    "adaptive": ("adaptive.models",),
    "adaptive-debug": ("adaptive.debug.model",),
    "repair": ("repair.models",),
}


def _check_stage_models(stage: str, params: Params, workspace: Workspace) -> list[dict]:
    """Every model the stage loads resolves; their `lingtest models` rows."""
    from tasks.models.model_spec import parse_models

    keys = STAGE_MODEL_KEYS.get(stage, ())
    entries = [e for e in configured_models(params) if e[0] in keys]
    if stage == "contrastive" and params.contrastive.encoders is not None:
        entries = [e for e in entries if e[0] != "models.encoders"]
    for key in dict.fromkeys(e[0] for e in entries):  # two models with one name: refused
        if key in ("capabilities.models", "adaptive.models", "contrastive.encoders",
                   "models.encoders"):
            parse_models([e[1] for e in entries if e[0] == key], key, params.models.names,
                         workspace.root)
    return [check_model(key, model_id, kind, params, workspace)
            for key, model_id, kind in entries]


def hub_notice(rows: list[dict], reachable=None) -> str | None:
    """One line when models resolve only through the Hugging Face hub (``models.offline:
    false``, no package or local folder) and this machine cannot reach it: which models,
    and what to do instead. None when no model needs the hub or the hub answers.
    ``reachable``: ``registry.hub_reachable`` (a test passes its own)."""
    from tasks.models.registry import hub_cache_snapshot, hub_reachable

    needed: dict[str, list[str]] = {}
    for row in rows:
        if row.get("source") == "hub" and hub_cache_snapshot(row["id"]) is None:
            needed.setdefault(row["key"], []).append(row["id"])
    if not needed:
        return None
    online, why = (reachable or hub_reachable)()
    if online:
        return None
    count = sum(len(ids) for ids in needed.values())
    which = "; ".join(f"{key}: {', '.join(ids)}" for key, ids in needed.items())
    return (f"offline: {count} model(s) load only from the Hugging Face hub, which this machine "
            f"cannot reach ({why}), so they cannot load — {which}; fix: the default "
            f"profile, models.offline: true (packaged models and the Hugging Face cache), or "
            f"HF_ENDPOINT pointing at a mirror of the weights")


def _check_data(params: Params, workspace: Workspace) -> None:
    """Every listed asset is in the mirror or fetchable (a subset keeps the others:
    ``assets._carry_over``)."""
    from tasks.core.assets import ASSETS, _why_not_in_mirror, mirror_folder

    d = params.data
    if d.mirror and not mirror_folder(d, workspace).is_dir():
        raise LingtestError(f"data.mirror: {mirror_folder(d, workspace)} is not a folder (set "
                            f"data.mirror to the raw-asset mirror, or null for $LINGTEST_MIRROR)")
    mirror = mirror_folder(d, workspace)
    missing = [f"{name} ({_why_not_in_mirror(ASSETS[name], mirror)})" for name in d.assets
               if not (mirror and all((mirror / r).is_file() for r in ASSETS[name].files))
               and not (d.online and ASSETS[name].fetcher is not None)]
    if missing:
        raise LingtestError(f"data.assets: cannot import {'; '.join(missing)}; fix: put the "
                            f"files in the mirror, point LINGTEST_MIRROR at it, or set "
                            f"data.online: true")


def _check_stage_files(stage: str, params: Params, workspace: Workspace) -> None:
    if stage == "data":
        _check_data(params, workspace)
    elif stage == "contrastive":
        c = params.contrastive
        if c.suite:
            from tasks.contrastive.costello_json import read_costello_suite, select_imported
            path = _path(c.suite, workspace)
            select_imported(_read("contrastive.suite", read_costello_suite, path),
                            c.relations, c.max_seeds, params.seed, path)
        if c.dictionary_file:
            from tasks.contrastive.thresholds import read_dictionary
            _read("contrastive.dictionary_file", read_dictionary,
                  _path(c.dictionary_file, workspace))
    elif stage == "capabilities":
        from tasks.capabilities.specs import BUILTIN_SPECS, load_specs
        c = params.capabilities
        folder = workspace.root / c.specs_dir if c.specs_dir else BUILTIN_SPECS
        load_specs(folder, c.capabilities)
    elif stage == "consistency":
        c = params.consistency
        from tasks.consistency.pipeline import database_url
        from tasks.consistency.store import check_sqlite
        check_sqlite(database_url(c, workspace))  # a bad URL, or a damaged SQLite file
        if c.generator != "builtin" and not c.import_dir:  # the external generator runs
            from tasks.consistency.external import PARAM, find_binary
            try:
                find_binary(c.generator, c.generator_binary)
            except LingtestError as error:
                raise _keyed(PARAM, error) from None
        if c.questions:
            from tasks.data.questions import read_questions_jsonl
            _read("consistency.questions", read_questions_jsonl, _path(c.questions, workspace))
        if c.import_dir:
            from tasks.consistency.guide_import import read_guide_folder
            _read("consistency.import_dir", read_guide_folder, _path(c.import_dir, workspace))
    elif stage == "adaptive":
        for tree in params.adaptive.trees:
            _check_tree("adaptive.trees", tree, workspace)
    elif stage == "adaptive-debug":
        _check_debug(params, workspace)


def _check_tree(key: str, tree: str, workspace: Workspace) -> None:
    """An AdaTest tree parameter's file parses (one the data stage writes: run it first)."""
    from tasks.adaptive.tree import read_tree

    path = _path(tree, workspace)
    if not path.exists() and path.is_relative_to(workspace.raw):
        raise LingtestError(f"{key}: {path} does not exist yet; fix: lingtest run data (it "
                            "imports the mirror's trees) or make run")
    _read(key, read_tree, path)


def _check_debug(params: Params, workspace: Workspace) -> None:
    """The debugging experiment's topics name CheckList MFT tests a binary model can learn
    (when the data stage has written the suite) and its label corrections parse."""
    d = params.adaptive.debug
    if set(d.conditions) - {"adatest-tree"} and not d.topics:
        raise LingtestError("adaptive.debug.topics: empty; the adatest and checklist-data "
                            "conditions fix CheckList topics; fix: name at least one CheckList "
                            "MFT test (e.g. 'used to, but now')")
    suite = workspace.processed / "checklist_suite.parquet"
    if d.topics and suite.is_file():
        import pandas as pd

        from tasks.adaptive.checklist_topics import learnable_topics
        known = learnable_topics(pd.read_parquet(suite))
        unknown = [t for t in d.topics if t not in known]
        if unknown:
            raise LingtestError(f"adaptive.debug.topics: {unknown} are no CheckList MFT test "
                                f"with a negative or positive label; fix: pick from {known}")
    if "adatest-tree" in d.conditions:  # the tree it trains on
        _check_tree("adaptive.debug.tree" if d.tree else "adaptive.trees",
                    d.tree or params.adaptive.trees[0], workspace)
    if "adatest-tree" in d.conditions and d.corrections is not None:
        from tasks.adaptive.corrections import read_corrections
        _read("adaptive.debug.corrections", read_corrections, _path(d.corrections, workspace))


def _read(key: str, reader, path: Path):
    """``reader(path)``; its errors as one line naming ``key``."""
    if not path.exists():
        raise LingtestError(f"{key}: {path} does not exist (fix the path in params.yaml or "
                            f"--set {key}=...; relative paths start at the project root)")
    try:
        return reader(path)
    except LingtestError as error:
        raise (error if str(error).startswith(key) else _keyed(key, error)) from None
    except UnicodeDecodeError as exc:
        from tasks.core.errors import read_utf8
        if path.is_file():  # name the line when the whole file is the culprit
            try:
                read_utf8(path)
            except LingtestError as error:
                raise _keyed(key, error) from None
        raise LingtestError(f"{key}: {path}: not UTF-8 text ({exc})") from None
    except RecursionError:  # a reader's own parsing, nested beyond Python's stack
        raise LingtestError(f"{key}: {path}: nested deeper than Python's parser reaches; fix: "
                            "a flatter file") from None
    except (OSError, ValueError, OverflowError) as exc:  # a reader's unforeseen case
        raise LingtestError(f"{key}: {path}: cannot read it ({type(exc).__name__}: "
                            f"{exc})") from None


def validate_files(stage: str, params: Params, workspace: Workspace) -> None:
    """The input files ``stage`` reads (not its models): what exporting its suite needs."""
    from flows import STAGES

    if stage not in STAGES:
        raise LingtestError(f"unknown stage `{stage}`; stages: {', '.join(STAGES)}")
    _check_stage_files(stage, params, workspace)
    _check_processed(stage, workspace)


def _check_processed(stage: str, workspace: Workspace) -> None:
    """The data stage's tables a method reads exist (else: run the data stage first)."""
    from tasks.capabilities.method import TABLES

    needed = {"capabilities": TABLES}
    absent = [name for name in needed.get(stage, ()) if not
              (workspace.processed / f"{name}.parquet").is_file()]
    if absent:
        raise LingtestError(f"{stage}: missing processed tables {', '.join(absent)} under "
                            f"{workspace.processed}; fix: lingtest run data (or make run)")


def validate_inputs(stage: str, params: Params, workspace: Workspace) -> str | None:
    """Raise the first LingtestError a stage would hit on its inputs, before anything runs;
    return a one-line notice when models need a hub this machine cannot reach
    (``hub_notice``), which the command line prints."""
    from flows import STAGES

    if stage not in STAGES:
        raise LingtestError(f"unknown stage `{stage}`; stages: {', '.join(STAGES)}")
    _check_stage_files(stage, params, workspace)
    rows = _check_stage_models(stage, params, workspace)
    _check_encoder_path(stage, params)
    from flows.stage import check_runtime
    check_runtime(params)  # runtime.result_storage / dask_address
    return hub_notice(rows)


def _check_encoder_path(stage: str, params: Params) -> None:
    """A non-default encoder path the stage would use can run here: onnxruntime installed
    (and CUDA's provider on a GPU), bf16 kernels on the device (imports torch: only then)."""
    r = params.runtime
    if (stage.replace("-", ".") not in ENCODER_SECTIONS
            or (r.encoder_precision, r.encoder_backend) == ("fp32", "torch")):
        return
    from tasks.models import encoder_paths
    from tasks.models.encoders import pick_device

    encoder_paths.require_path(r.encoder_precision, r.encoder_backend, pick_device(r.device))
