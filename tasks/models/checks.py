"""Checks of a model spec that load no weights, for validation before a run starts and for
``lingtest models``: each returns the model's row (name, kind, source, revision, path) or
raises one error naming the problem and the fix.

A ``python:`` model's module is imported here (a syntax error, a missing attribute or an
object without the protocol's method is caught before Prefect starts); its code is not
called. Hub ids resolve through the registry, folders are checked for weights.
"""
from __future__ import annotations

from pathlib import Path

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.model_spec import (CLASSIFIER_OPTIONS, ENCODER_OPTIONS, ModelRef,
                                     refuse_options)


def _row(ref: ModelRef, kind: str, source: str, revision: str | None = None,
         path: str | None = None, pooling: str | None = None) -> dict[str, str | None]:
    return {"id": ref.bare, "name": ref.name, "kind": kind, "source": source,
            "revision": revision, "pooling": pooling, "path": path, "reason": ""}


def check_llm_classifier(ref: ModelRef, offline: bool, root: Path,
                         label_map: dict | None, llm_classifier: dict | None
                         ) -> dict[str, str | None]:
    """An LLM tested as a classifier: its template, label words and scoring read, its
    endpoint's URL and key variable (no request), or its local weights resolved."""
    from lingtest.tasks.models.llm_classifier import prompting_for

    if label_map:
        raise LingtestError(f"models.label_map[{ref.name!r}]: an LLM classifier names its "
                            f"labels by words; fix: models.llm_classifier: {{{ref.name}: "
                            f"{{labels: {{neg: [...], pos: [...]}}}}}}")
    prompting = prompting_for(ref, llm_classifier, root)
    kind = f"classifier (LLM, {prompting.template_source} template)"
    if ref.form == "python":  # its generate(): what the classifier asks (infer_kind found it)
        from lingtest.tasks.models.user_code import load_user_object

        user = load_user_object(ref, root)
        return _row(ref, kind, "python", user.revision, user.file)
    if ref.form in ("openai", "openai-chat", "ollama"):
        from lingtest.tasks.models.llm_http import resolve_endpoint

        end = resolve_endpoint(ref, key="classifier models")
        return _row(ref, kind, "endpoint", path=end.public)
    from lingtest.tasks.models.registry import resolve

    found = resolve(ref.target, "causal_lm", offline=offline).require()
    return _row(ref, kind, found.source, found.revision, found.path)


def check_classifier(ref: ModelRef, offline: bool, root: Path,
                     label_maps: dict[str, dict[str, str]] | None = None,
                     trainable: bool = False, own_labels: bool = False,
                     llm_classifier: dict | None = None) -> dict[str, str | None]:
    """A sentiment classifier spec: built-in, folder, hub id, ``python:`` or
    ``predictions:``; ``trainable``: it must be a classifier lingtest fine-tunes (the
    debugging loop continues training one of lingtest's own classifier folders);
    ``own_labels``: a ``python:`` classifier may answer labels of its own, or be a raw-score
    model (``score(texts)``), as AdaTest tests them."""
    from lingtest.tasks.models.sentiment import MINILM_CONFIG, MINILM_SST2_DIR, MINILM_SST2_ID

    label_map = (label_maps or {}).get(ref.name) or (label_maps or {}).get(ref.bare)
    if trainable and not (ref.target == MINILM_SST2_ID or (
            ref.form == "folder" and (Path(ref.target) / MINILM_CONFIG).is_file())):
        raise LingtestError(f"model `{ref.spec}`: the debugging loop fine-tunes lingtest's own "
                            f"classifier (lingtest/minilm-sst2 or a folder train-sentiment "
                            f"wrote, with {MINILM_CONFIG}); fix: name one of those")
    if ref.form in ("tei", "seq2seq"):
        raise LingtestError(f"model `{ref.spec}` is a `{ref.form}:` model, not a sentiment "
                            f"classifier; classifiers: vader, lingtest/minilm-sst2, a hub id, "
                            f"a folder, python:MODULE:ATTR, predictions:PATH, or an LLM "
                            f"(openai:MODEL@URL, ollama:MODEL, hf:ID) asked through a prompt")
    from lingtest.tasks.models.llm_classifier import is_llm_classifier

    refuse_options(ref, ENCODER_OPTIONS, "an embedding service tested as an encoder "
                   "(contrastive), not to a classifier")
    if is_llm_classifier(ref, root):
        return check_llm_classifier(ref, offline, root, label_map, llm_classifier)
    refuse_options(ref, CLASSIFIER_OPTIONS, "an LLM tested as a classifier (openai:, "
                   "ollama:, hf:, a causal LM's hub id or folder), not to this model")
    if ref.form == "python":
        from lingtest.tasks.models.label_maps import sentiment_labels
        from lingtest.tasks.models.own_classifiers import declared_labels
        from lingtest.tasks.models.user_code import load_user_object, protocol_method

        user = load_user_object(ref, root)
        if own_labels and callable(getattr(user.obj, "score", None)) and not callable(
                getattr(user.obj, "predict_proba", None)):
            return _row(ref, "raw-score model (python)", "python", user.revision, user.file)
        protocol_method(user, "predict_proba")
        own = declared_labels(user, label_map)
        if not own:
            raise user.fail("declares no labels; fix: give it a `labels` attribute in column "
                            "order or map them in models.label_map")
        if not own_labels or label_map:
            sentiment_labels(own, label_map, ref.name)
        return _row(ref, "classifier (python)", "python", user.revision, user.file)
    if ref.form == "predictions":
        from lingtest.tasks.models.own_classifiers import check_predictions

        return {**_row(ref, "classifier (predictions)", "file"),
                **check_predictions(ref, root, label_map)}
    if label_map and ref.form == "builtin":
        raise LingtestError(f"models.label_map[{ref.name!r}]: {ref.name} already predicts "
                            f"neg/neutral/pos; a label map applies to hub, folder and python: "
                            f"classifiers")
    if ref.target == "vader":
        return _row(ref, "classifier", "package", path="vaderSentiment")
    if ref.target == MINILM_SST2_ID:  # made by `lingtest run train-sentiment`
        folder = root / MINILM_SST2_DIR
        if not (folder / MINILM_CONFIG).is_file():
            raise LingtestError(f"model `{MINILM_SST2_ID}` is missing: {folder} holds no "
                                f"fine-tuned classifier; fix: lingtest run train-sentiment "
                                f"(or drop it)")
        return _row(ref, "classifier", "local", path=str(folder))
    if ref.form == "folder" and (Path(ref.target) / MINILM_CONFIG).is_file():
        return _row(ref, "classifier", "local", path=ref.target)
    from lingtest.tasks.models.registry import resolve

    found = resolve(ref.target, "classifier", offline=offline).require()
    if not own_labels and found.path:
        check_folder_labels(ref, Path(found.path), label_map)
    return {**_row(ref, "classifier", found.source, found.revision, found.path)}


def check_folder_labels(ref: ModelRef, folder: Path, label_map: dict[str, str] | None) -> None:
    """A Hugging Face classifier's ``config.json`` labels read as sentiment labels (or
    ``models.label_map`` maps them): a 5-star or topic model is refused here, before a run,
    not when the flow loads it."""
    import json

    from lingtest.tasks.models.label_maps import sentiment_labels

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # the loader reports an unreadable folder
    id2label = config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        try:
            own = [str(id2label[key]) for key in sorted(id2label, key=int)]
        except (TypeError, ValueError):
            return
        sentiment_labels(own, label_map, ref.name)


# Base-model architectures (``BertModel``, ``RobertaModel``) and pre-training heads are
# encoders; a config without ``architectures`` is read by its ``model_type``, for the
# encoder-only families COSTELLO tests (importing transformers' own tables takes seconds).
ARCHITECTURE_KINDS = (("ForSequenceClassification", "classifier"), ("ForCausalLM", "llm"),
                      ("ForConditionalGeneration", "llm"), ("ForMaskedLM", "encoder"),
                      ("ForPreTraining", "encoder"), ("Model", "encoder"))
ENCODER_MODEL_TYPES = ("bert", "roberta", "albert", "distilbert", "electra", "xlm-roberta",
                       "camembert", "deberta", "deberta-v2", "mpnet")
PROTOCOLS = (("classifier", "predict_proba"), ("encoder", "encode"), ("llm", "generate"))
# attributes that only a classifier's object carries (its labels in column order)
LABEL_ATTRIBUTES = ("labels", "classes_", "id2label")


def _python_kind(ref: ModelRef, root: Path) -> tuple[str, str]:
    from lingtest.tasks.models.user_code import load_user_object

    user = load_user_object(ref, root, instantiate=False)
    obj = user.obj
    found = [(kind, f"its {method}() method") for kind, method in PROTOCOLS
             if callable(getattr(obj, method, None))]
    attr = ref.module_and_attr[1].rsplit(".", 1)[-1]
    if not found and callable(obj):
        found = [(kind, f"a function named {method}") for kind, method in PROTOCOLS
                 if attr == method]
        if not found:  # a scoring function that declares its labels is a classifier
            found = [("classifier", f"a callable with a `{name}` attribute")
                     for name in LABEL_ATTRIBUTES if getattr(obj, name, None) is not None][:1]
        if not found and getattr(user.module, "labels", None) is not None:
            found = [("classifier", "a function whose module defines `labels`")]
    if len(found) == 1:
        return found[0]
    raise LingtestError(f"model `{ref.spec}`: cannot tell whether it is a classifier "
                        f"(predict_proba, or a callable with a `labels` attribute), an encoder "
                        f"(encode) or an LLM (generate); fix: name the methods, e.g. --methods "
                        f"capabilities")


def folder_kind(folder: Path) -> tuple[str, str] | None:
    """(kind, evidence) from a model folder's files, without loading it: lingtest's own
    classifier, a sentence-transformers folder, else ``config.json``'s architecture (or
    model type); None when the files say nothing."""
    import json

    from lingtest.tasks.models.sentiment import MINILM_CONFIG

    if (folder / MINILM_CONFIG).is_file():
        return "classifier", f"{MINILM_CONFIG} (a classifier train-sentiment wrote)"
    if (folder / "modules.json").is_file():
        return "encoder", "modules.json (a sentence-transformers model)"
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for architecture in config.get("architectures") or []:
        for suffix, kind in ARCHITECTURE_KINDS:
            if str(architecture).endswith(suffix):
                return kind, f"config.json architecture {architecture}"
    if config.get("model_type") in ENCODER_MODEL_TYPES:
        return "encoder", f"config.json model_type {config['model_type']} (an encoder family)"
    return None


def infer_kind(ref: ModelRef, root: Path) -> tuple[str, str]:
    """(kind, evidence): classifier, encoder or llm, from the spec's form, its files or
    (``python:``) the protocol method or label attribute its object has — decided without
    loading weights or running the user's code; one error when that cannot be told."""
    if ref.form in ("predictions", "builtin"):
        return "classifier", ("a predictions file" if ref.form == "predictions"
                              else "a built-in classifier")
    if ref.form == "tei":
        return "encoder", "a `tei:` spec (an embedding server)"
    if ref.form in ("openai", "openai-chat", "ollama", "hf"):
        return "llm", f"a `{ref.form}:` spec"
    if ref.form == "python":
        return _python_kind(ref, root)
    if ref.form == "folder":
        found = folder_kind(Path(ref.target))
        if found:
            return found
    from lingtest.tasks.models.registry import ALIASES, KNOWN, hub_cache_snapshot

    known = KNOWN.get(ALIASES.get(ref.target, ref.target))
    if known is not None:
        kind = {"causal_lm": "llm", "masked_lm": "encoder"}.get(known.kinds[0], known.kinds[0])
        return kind, "a model lingtest's registry knows"
    snapshot = hub_cache_snapshot(ref.target) if ref.form == "hub" else None
    if ref.form == "hub" and snapshot is None:
        raise LingtestError(f"model `{ref.spec}` is missing: no packaged model, project folder or "
                            "Hugging Face cache entry holds it; fix: a local folder, "
                            "python:file.py:ATTR, or models.offline: false to fetch it from "
                            "the hub (then name --methods if its files do not say its kind)")
    found = folder_kind(snapshot) if snapshot is not None else None
    if found:
        return found[0], f"{found[1]} in the Hugging Face cache"
    raise LingtestError(f"model `{ref.spec}`: cannot tell its kind from its files (no "
                        f"config.json architecture, modules.json or model_type lingtest "
                        f"knows); fix: name the methods, e.g. --methods capabilities,adaptive "
                        f"(classifiers), contrastive (encoders) or consistency (LLMs)")


def check_scorer(spec: str, key: str, names: dict[str, str] | None, root: Path,
                 offline: bool = True) -> None:
    """A generation model's ``#scorer=``: a ``python:`` callable (its module imports) or a
    sentiment classifier spec (it resolves)."""
    from lingtest.tasks.models.model_spec import parse_model

    ref = parse_model(spec, key, names, root)
    if ref.form == "python":
        from lingtest.tasks.models.user_code import load_user_object
        load_user_object(ref, root, instantiate=False)
    else:
        check_classifier(ref, offline, root)


GENERIC_KINDS = ("llm", "tested model", "classifier", "trainable classifier",
                 "any classifier")


def check_configured(key: str, model_id: str, kind: str, models, root: Path) -> dict:
    """The ``lingtest models`` row of a configured model of a kind every plug-in may use
    (an LLM, a classifier, AdaTest's any tested model) or one the model registry resolves
    (``causal_lm``, ``spacy``, ...). ``models``: the ``models`` parameter section. Loads no
    weights; a ``python:`` model's module is imported."""
    from lingtest.tasks.models.model_spec import parse_model
    from lingtest.tasks.models.registry import resolve

    offline, names = models.offline, models.names
    row = {"key": key, "id": model_id, "name": model_id, "kind": kind, "source": "",
           "revision": None, "pooling": None, "path": None, "reason": ""}
    if kind == "llm":  # an LLM under test, or a suggestion generator
        from lingtest.tasks.models.llm import check_llm, parse_llm
        ref = parse_llm(model_id, key, names, root)
        return {**row, **check_llm(ref, offline, root, key=key)}
    if kind == "tested model":  # AdaTest's: any classifier, a raw-score or scored model
        ref = parse_model(model_id, key, names, root)
        scorer = ref.options.get("scorer")
        if scorer:
            check_scorer(scorer, f"{key} scorer", names, root, offline)
            return check_configured(key, ref.bare, "llm", models, root)
        kind = "any classifier"
    if kind in ("classifier", "trainable classifier", "any classifier"):
        ref = parse_model(model_id, key, names, root)
        return {**row, **check_classifier(ref, offline, root, models.label_map,
                                          trainable=kind == "trainable classifier",
                                          own_labels=kind == "any classifier",
                                          llm_classifier=models.llm_classifier)}
    found = resolve(model_id, kind, offline=offline).require()
    return {**row, **found.as_row(), "name": model_id, "kind": kind}
