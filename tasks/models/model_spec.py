"""One grammar for every model a stage or command names, whatever its kind.

A model spec is what a user writes in ``params.yaml``, ``--set`` or a command's option:

==================================  =====================================================
``vader``, ``lingtest/minilm-sst2``  lingtest's built-in classifiers
``org/name`` (a hub id)              resolved by the registry (offline: packaged or cached)
``path/to/folder``                   a saved Hugging Face / sentence-transformers folder
``python:MODULE:ATTR``               a function, class or object in an importable module
``python:path/to/file.py:ATTR``      the same from a file (relative to the project root)
``predictions:PATH``                 scores computed elsewhere (classifiers only)
``openai:MODEL[@BASE_URL]``          an OpenAI-compatible server (``openai-chat:``: its chat API)
``ollama:MODEL[@BASE_URL]``          an Ollama server
``tei:[MODEL]@BASE_URL``             a Text Embeddings Inference server (an encoder)
``hf:ID_OR_FOLDER``                  a local causal LM, explicitly
==================================  =====================================================

What a served or local LLM is asked depends on the method that names it: consistency asks
it its questions; contrastive embeds through its embeddings API (``openai:`` →
``/embeddings``, ``ollama:`` → ``/api/embed``); capabilities and adaptive ask it to classify
each text (a prompt template and label words, ``lingtest.tasks.models.llm_classifier``).

Options follow a ``#`` (as a URL fragment, never sent anywhere): ``#name=lexicon`` sets the display name and, for the
HTTP forms, ``key_env=MY_KEY`` names the variable holding the API key; an LLM tested as a
classifier reads ``template=FILE`` (its prompt template) and ``scoring=`` (how label
probabilities are obtained); an embedding endpoint reads ``dimensions=N``; AdaTest's review and
``adapt`` read ``scorer=`` / ``fail_label=`` on a generation model (``lingtest.tasks.adaptive
.tested_models``). Every model has a
display **name** — ``#name=``, else ``models.names``, else a short default (a hub or built-in
id as written; a folder's, file's or attribute's own name; an endpoint's model) — and the
name, never a path, keys report files, metric keys, table columns, result rows and Prefect
task names. The spec and the loaded revision stay in provenance.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl

from lingtest.tasks.core.errors import LingtestError

FORMS = ("builtin", "hub", "folder", "python", "predictions", "openai", "openai-chat", "ollama",
         "tei", "hf", "seq2seq")
# Forms that name a model behind an HTTP endpoint (``@URL``, ``#key_env=``).
ENDPOINT_FORMS = ("openai", "openai-chat", "ollama", "tei")
BUILTIN = ("vader", "lingtest/minilm-sst2")
OPTION_KEYS = {"name": "the display name", "key_env": "the API key's environment variable",
               "scorer": "a generation model's scoring function (AdaTest raw-score tests)",
               "fail_label": "the scorer classifier's label that counts as a failure",
               "template": "an LLM classifier's prompt template file",
               "scoring": "how an LLM classifier's label probabilities are obtained",
               "dimensions": "an embedding endpoint's output dimensions"}
# Options read in one role only: an LLM tested as a classifier, an embedding service.
CLASSIFIER_OPTIONS = ("template", "scoring")
ENCODER_OPTIONS = ("dimensions",)
PREFIXES = ("python", "predictions", "openai", "openai-chat", "ollama", "tei", "hf", "seq2seq")
# A display name: what report files and metric keys carry. Hub and built-in ids keep their
# "org/name" form (portable across machines); every other name is one path segment.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+@-]*(/[A-Za-z0-9][A-Za-z0-9._+@-]*)?$")
SPEC_TABLE = ", ".join(("a hub id", "a local folder", "python:MODULE:ATTR",
                        "python:path/file.py:ATTR", "predictions:PATH", "openai:MODEL[@URL]",
                        "ollama:MODEL[@URL]", "tei:[MODEL]@URL", "hf:ID_OR_FOLDER",
                        "seq2seq:ID_OR_FOLDER"))


@dataclass(frozen=True)
class ModelRef:
    """A parsed spec: its ``form``, what it points at (``target``) and its display ``name``."""

    spec: str                  # as written, options included
    form: str                  # one of FORMS
    target: str                # id, folder, "module:attr" / "file.py:attr", file or model name
    name: str
    base_url: str | None = None
    key_env: str | None = None
    options: dict = field(default_factory=dict, compare=False)

    @property
    def bare(self) -> str:
        """The spec without its options (what a loader that predates specs understands)."""
        return self.spec.split("#", 1)[0] if self.options else self.spec

    @property
    def module_and_attr(self) -> tuple[str, str]:
        """``python:`` forms: (module name or file path, attribute path)."""
        module, _, attr = self.target.rpartition(":")
        return module, attr

    @property
    def is_file_module(self) -> bool:
        module = self.module_and_attr[0]
        return module.endswith(".py") or "/" in module or "\\" in module

    def describe(self) -> dict[str, str]:
        """The spec for provenance: form and target, an endpoint without credentials."""
        out = {"name": self.name, "spec": self.bare, "form": self.form}
        if self.base_url:
            out["endpoint"] = self.base_url
        if self.key_env:
            out["key variable"] = self.key_env
        return out


def _options(spec: str, key: str) -> tuple[str, dict[str, str]]:
    head, sep, query = spec.partition("#")
    if not sep:
        return spec, {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise LingtestError(f"{key}: model spec `{spec}`: options after `#` must read "
                            f"name=value, joined by & (names: {', '.join(OPTION_KEYS)}); a `#` "
                            "in a URL's password is written %23") from None
    options = dict(pairs)
    unknown = sorted(set(options) - set(OPTION_KEYS))
    if unknown or len(options) != len(pairs):
        what = f"unknown option {unknown[0]!r}" if unknown else "an option given twice"
        raise LingtestError(f"{key}: model spec `{spec}`: {what}; options: "
                            + ", ".join(f"{k} ({v})" for k, v in OPTION_KEYS.items()))
    return head, options


def _endpoint(key: str, spec: str, rest: str) -> tuple[str, str | None]:
    """``MODEL@URL`` → (model, url); a URL must be http(s)."""
    model, at, url = rest.partition("@")
    if not at:
        return rest, None
    if not re.match(r"^https?://[^/\s]+", url):
        raise LingtestError(f"{key}: model spec `{spec}`: `{url}` after `@` is not an http(s) "
                            f"URL; e.g. openai:my-model@http://127.0.0.1:8000/v1")
    return model, url.rstrip("/")


def _default_name(form: str, target: str) -> str:
    """A hub or built-in id as written; otherwise the last meaningful part, as a slug."""
    if form in ("builtin", "hub"):
        return target
    if form == "python":
        name = target.rpartition(":")[2].rsplit(".", 1)[-1]
    elif form in ("folder", "predictions"):
        path = Path(target).expanduser()
        name = path.stem if form == "predictions" else (path.resolve().name or path.name)
    elif form in ("hf", "seq2seq"):  # a local LM's folder, or a hub id kept whole
        folder = Path(target).expanduser()
        return re.sub(r"[^A-Za-z0-9._+@-]+", "-", folder.resolve().name) if folder.is_dir() \
            else target
    elif form == "tei" and not target:  # the server serves one model: named by its host
        return "tei"
    else:  # openai / ollama / a hub id as hf:: the served model's name
        name = target.rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._+@-]+", "-", name).strip("-.") or form


def check_name(name: str, key: str, spec: str) -> str:
    if not _NAME.match(name) or name in (".", ".."):
        raise LingtestError(
            f"{key}: model `{spec}`: display name `{name}` is not a name: use letters, digits "
            f"and . _ + @ - (one `/` for a hub-style org/name); fix: #name=<name> or "
            f"models.names")
    return name


def parse_model(spec: str, key: str = "model", names: dict[str, str] | None = None,
                root: Path | None = None) -> ModelRef:
    """Parse one spec; ``names`` (``models.names``) maps a bare spec to a display name and
    ``root`` is where relative folders and files are looked up (default: the working
    directory). Raises one LingtestError naming ``key`` and the fix when it cannot be read."""
    if not isinstance(spec, str) or not spec.strip():
        raise LingtestError(f"{key}: a model spec must be a non-empty string (got {spec!r}); "
                            f"forms: {SPEC_TABLE}")
    spec = spec.strip()
    head, options = _options(spec, key)
    prefix, sep, rest = head.partition(":")
    base_url = None
    local = Path(head).expanduser()  # `~/models/x`: the home folder's, not the project's
    local = root / local if root is not None and not local.is_absolute() else local
    if sep and len(prefix) > 1 and prefix.lower() in PREFIXES and not local.expanduser().exists():
        form = prefix.lower()
        if not rest:
            raise LingtestError(f"{key}: model spec `{spec}` names nothing after `{prefix}:`; "
                                f"forms: {SPEC_TABLE}")
        target = rest
        if form == "python":
            module, colon, attr = rest.rpartition(":")
            if not colon or not module or not all(p.isidentifier() for p in attr.split(".")):
                raise LingtestError(
                    f"{key}: model spec `{spec}`: expected python:MODULE:ATTR or "
                    f"python:path/to/file.py:ATTR (ATTR a function, class or object)")
        elif form in ENDPOINT_FORMS:
            target, base_url = _endpoint(key, spec, rest)
            if form == "tei" and base_url is None:
                raise LingtestError(f"{key}: model spec `{spec}`: a TEI server has no default "
                                    f"address; fix: tei:@http://HOST:PORT (the server's URL)")
            if not target and form != "tei":
                raise LingtestError(f"{key}: model spec `{spec}` names no model before `@`; "
                                    f"fix: {form}:MODEL@URL")
    elif sep and len(prefix) > 1 and "/" not in prefix and not local.expanduser().exists():
        raise LingtestError(f"{key}: model spec `{spec}`: unknown prefix `{prefix}:`; forms: "
                            f"{SPEC_TABLE}")
    elif head in BUILTIN:
        form, target = "builtin", head
    elif local.expanduser().is_dir():
        form, target = "folder", str(local.expanduser())
    elif head.startswith(("/", "./", "../", "~")) or head.count("/") > 1:
        what = "is not a folder" if local.expanduser().exists() else "does not exist"
        raise LingtestError(f"{key}: model folder `{head}` {what}; fix: the path of a "
                            f"saved model folder (relative paths start at the project root), "
                            f"or a hub id org/name")
    else:
        form, target = "hub", head
    if form not in ENDPOINT_FORMS and "key_env" in options:
        raise LingtestError(f"{key}: model spec `{spec}`: key_env applies to openai:, ollama: "
                            f"and tei: models only")
    name = options.get("name") or (names or {}).get(head) or (names or {}).get(spec) \
        or _default_name(form, target)
    hub_like = form in ("builtin", "hub") or (form in ("hf", "seq2seq") and name == target)
    if not hub_like or "name" in options or head in (names or {}):
        if "/" in name:
            raise LingtestError(f"{key}: model `{spec}`: display name `{name}` contains `/`; "
                                f"fix: #name=<one word> or models.names")
    return ModelRef(spec, form, target, check_name(name, key, spec), base_url,
                    options.get("key_env"), options)


def refuse_options(ref: ModelRef, options: tuple[str, ...], role: str,
                   key: str | None = None) -> None:
    """One error when ``ref`` carries an option its ``role`` here never reads
    (``#template=`` on an encoder, ``#dimensions=`` on a classifier): ignored, it would be a
    silent typo."""
    given = [option for option in options if option in ref.options]
    if given:
        from lingtest.tasks.core.secrets import redact_text

        shown = ", ".join(f"{option}=" for option in given)
        verb = "applies" if len(given) == 1 else "apply"
        raise LingtestError(f"{key + ': ' if key else ''}model `{ref.name}`: {shown} {verb} "
                            f"to {role}; fix: drop #{given[0]}= from `{redact_text(ref.bare)}`")


def parse_models(specs: list[str], key: str, names: dict[str, str] | None = None,
                 root: Path | None = None) -> list[ModelRef]:
    """Every spec of one parameter, refusing two models with one display name."""
    return unique_names([parse_model(spec, key, names, root) for spec in specs], key)


def unique_names(refs: list[ModelRef], key: str) -> list[ModelRef]:
    """``refs``, or one error when two different specs share a display name."""
    seen: dict[str, str] = {}
    for ref in refs:
        if seen.setdefault(ref.name, ref.spec) != ref.spec:
            raise LingtestError(f"{key}: `{seen[ref.name]}` and `{ref.spec}` are both named "
                                f"`{ref.name}`; fix: add #name=<another> to one of them, or "
                                f"set models.names")
    return refs


def model_line(ref: ModelRef, results) -> str:
    """A report's provenance line for one tested model: ``name @ revision`` (the revision its
    result rows carry), with the spec when the name is not the spec itself."""
    rows = results.loc[results["model_id"] == ref.name, "revision"] if len(results) else []
    revision = rows.iloc[0] if len(rows) else "not run"
    return f"{ref.name} @ {revision}" + (f" ({ref.bare})" if ref.bare != ref.name else "")


def refs_by_name(specs: list[str], key: str, names: dict[str, str] | None,
                 root: Path | None) -> dict[str, ModelRef]:
    """A parameter's models by display name, in order (``parse_models``)."""
    return {ref.name: ref for ref in parse_models(specs, key, names, root)}
