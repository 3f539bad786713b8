"""Checks of a stage's inputs before Prefect starts, from its plug-in's declarations: every
model it loads resolves (no weights loaded) and every input file it reads parses, so bad
input costs one line and no written output. ``lingtest run`` calls ``validate_inputs`` ahead
of ``run_stage``; ``lingtest models`` lists ``describe_configured``."""
from __future__ import annotations

from lingtest.flows.registry import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.plugin_spec import ModelEntry, call, load

from lingtest.flows.registry import PLUGINS, STAGES, stage_spec

# kinds whose lists must not give two models one display name
NAMED_KINDS = ("encoder", "classifier", "tested model")


def configured_models(params: Params, stages=None) -> list[ModelEntry]:
    """Every model the stages load (all stages when None), in stage order, once each."""
    entries: dict[tuple[str, str], ModelEntry] = {}
    if stages is None:  # every shared parameter that names a model, set or overridden
        m = params.models
        shared = [*(ModelEntry("models.encoders", spec, "encoder") for spec in m.encoders),
                  ModelEntry("models.causal_lm", m.causal_lm, "causal_lm"),
                  ModelEntry("models.spacy", m.spacy, "spacy")]
        entries.update({(e.key, e.spec): e for e in shared})
    for stage in STAGES if stages is None else stages:
        for entry in call(stage_spec(stage).models, params) or []:
            entries.setdefault((entry.key, entry.spec), entry)
    return list(entries.values())


def check_model(key: str, model_id: str, kind: str, params: Params,
                workspace: Workspace) -> dict[str, str | None]:
    """The `lingtest models` row of one configured spec; LingtestError (naming ``key``) when
    it cannot load. Loads no weights; a ``python:`` model's module is imported."""
    from lingtest.tasks.models.checks import check_configured

    checks = {kind: ref for plugin in PLUGINS for kind, ref in plugin.model_checks.items()}
    row = {"key": key, "id": model_id, "name": model_id, "kind": kind, "source": "",
           "revision": None, "pooling": None, "path": None, "reason": ""}
    try:
        if kind in checks:
            found = load(checks[kind])(key, model_id, params, workspace, row)
        else:
            found = check_configured(key, model_id, kind, params.models, workspace.root)
        return {**found, "key": key}
    except LingtestError as error:
        raise (error if str(error).startswith(key) else
               LingtestError(f"{key}: {error}")) from None


def describe_configured(params: Params, workspace: Workspace) -> list[dict[str, str | None]]:
    """Every configured id, per parameter, with where it resolves or why it cannot."""
    rows = []
    for entry in configured_models(params):
        try:
            rows.append(check_model(entry.key, entry.spec, entry.kind, params, workspace))
        except LingtestError as error:
            rows.append({"key": entry.key, "id": entry.spec,
                         "name": display_name(entry.spec, params, workspace),
                         "kind": entry.kind, "source": "missing", "reason": str(error)})
    return rows


def display_name(spec: str, params: Params, workspace: Workspace) -> str:
    """A spec's display name when it parses at all (a missing model still has one)."""
    from lingtest.tasks.models.model_spec import parse_model

    try:
        return parse_model(spec, "model", params.models.names, workspace.root).name
    except LingtestError:
        return ""


def _check_stage_models(stage: str, params: Params, workspace: Workspace) -> list[dict]:
    """Every model the stage loads resolves; their `lingtest models` rows."""
    from lingtest.tasks.models.model_spec import parse_models

    entries = configured_models(params, [stage])
    for key in dict.fromkeys(e.key for e in entries if e.kind in NAMED_KINDS):
        # two models with one name: refused
        parse_models([e.spec for e in entries if e.key == key], key, params.models.names,
                     workspace.root)
    return [check_model(e.key, e.spec, e.kind, params, workspace) for e in entries]


def hub_notice(rows: list[dict], reachable=None) -> str | None:
    """One line when models resolve only through the Hugging Face hub (``models.offline:
    false``, no package or local folder) and this machine cannot reach it: which models,
    and what to do instead. None when no model needs the hub or the hub answers.
    ``reachable``: ``registry.hub_reachable`` (a test passes its own)."""
    from lingtest.tasks.models.registry import hub_cache_snapshot, hub_reachable

    needed: dict[str, list[str]] = {}
    for row in rows:
        # a hub row's path is the hub id it resolved to: a spec such as seq2seq:<id> or an
        # alias is not the name the cache knows
        if row.get("source") == "hub" and hub_cache_snapshot(row.get("path") or row["id"]) is None:
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


def validate_files(stage: str, params: Params, workspace: Workspace) -> None:
    """The input files ``stage`` reads and the processed tables its suite is built from
    (not its models): what exporting its suite needs."""
    spec = stage_spec(stage)
    call(spec.check, params, workspace)
    absent = [name for name in spec.tables
              if not (workspace.processed / f"{name}.parquet").is_file()]
    if absent:
        raise LingtestError(f"{stage}: missing processed tables {', '.join(absent)} under "
                            f"{workspace.processed}; fix: lingtest run data (or make run)")


def check_display_names(params: Params, workspace: Workspace | None = None) -> None:
    """Every ``models.names`` key is a model some stage loads, and every
    ``models.llm_classifier`` key one's display name or spec: a misspelt key would leave its
    model under the raw id in every report, or asked with the default prompt, silently."""
    configured = configured_models(params)
    stray = sorted(set(params.models.names) - {e.spec for e in configured})
    if stray:
        raise LingtestError(f"models.names: {stray} name no model of any stage; fix: keys are "
                            "model ids as the stages list them (`lingtest models`), or remove "
                            "the entry")
    if not params.models.llm_classifier:
        return
    known = set()
    for entry in configured:
        known.add(entry.spec.split("#", 1)[0])
        known.add(display_name(entry.spec, params, workspace or Workspace.current()))
    stray = sorted(set(params.models.llm_classifier) - known)
    if stray:
        raise LingtestError(f"models.llm_classifier: {stray} name no model of any stage; fix: "
                            "keys are the display names of the LLMs tested as classifiers "
                            "(`lingtest models`), or remove the entry")


def validate_inputs(stage: str, params: Params, workspace: Workspace) -> None:
    """Raise the first LingtestError a stage would hit on its inputs, before anything runs;
    models that need a hub this machine cannot reach too (``hub_notice``: all of them in
    one line)."""
    call(stage_spec(stage).check, params, workspace)  # the tables: the method's own check
    rows = _check_stage_models(stage, params, workspace)
    check_encoder_path(stage, params)
    from lingtest.flows.stage import check_runtime
    check_runtime(params)  # runtime.result_storage / dask_address
    unreachable = hub_notice(rows)
    if unreachable:
        raise LingtestError(unreachable)


def check_encoder_path(stage: str, params: Params) -> None:
    """A non-default encoder path the stage would use can run here: onnxruntime installed
    (and CUDA's provider on a GPU), bf16 kernels on the device (imports torch: only then)."""
    r = params.runtime
    section = stage_spec(stage).section
    if (section is None or not type(params.section(section)).uses_encoders
            or (r.encoder_precision, r.encoder_backend) == ("fp32", "torch")):
        return
    from lingtest.tasks.models import encoder_paths
    from lingtest.tasks.models.encoders import pick_device

    encoder_paths.require_path(r.encoder_precision, r.encoder_backend, pick_device(r.device))

