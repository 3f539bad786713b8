"""Any encoder a model spec names, behind the one interface the contrastive stage and the
repair use (``encode``, ``model_id``, ``revision``, ``pooling``, ``cache_key``,
``vocabulary``, ``normal_forms``, ``parameters``, ``cache_token``).

Three paths, chosen by what the spec points at (``lingtest.tasks.models.model_spec``):

- **lingtest's own** (``encoders.Encoder``): a hub id or folder whose sentence-transformers
  modules are Transformer + Pooling (+ Normalize), or a plain HF encoder. lingtest runs the
  forward passes itself, texts of one exact token count per pass, so a vector is the same
  bytes in any company. The default MiniLM takes this path, unchanged.
- **its own encode** (``STEncoder``): a sentence-transformers folder with any other module
  (a Dense layer, several pooling modes, ...) loads with ``SentenceTransformer`` (local files
  only when offline) and embeds through its ``encode``, in batches of
  ``contrastive.batch_size``: exact-length passes do not apply, so a vector may depend on its
  batch's company in the last bits. Its revision hashes every module's files.
- **python:** (``PythonEncoder``): an object with ``encode(texts) -> (n, d) array`` or a
  function returning it; its revision is ``UserObject.revision`` (the module file's sha256 and
  an optional ``revision`` attribute), so editing the module is a store and cache miss. Every
  call's output is checked (shape, row count, finite) before anything is stored.

The θ dictionary ``vocab`` needs the model's whole-word vocabulary: lingtest's and
sentence-transformers models take it from their tokenizer; a python: object from its own
``vocabulary()`` method, else its ``tokenizer`` attribute (a Hugging Face tokenizer); a model
with neither has no vocabulary, and then ``contrastive.dictionary_file`` must be set: its words
are that model's ``vocab`` dictionary (``vocabulary_source`` says which; the stage records it).

An embedding **service** (``openai:MODEL@URL``, ``ollama:MODEL@URL``, ``tei:[MODEL]@URL``) is
an encoder too (``embedding_endpoints.EndpointEncoder``): pooling "endpoint", its revision what
the server states, no vocabulary (``contrastive.dictionary_file`` then), never repaired.

Every encoder's ``model_id`` is the spec's display name (``ModelRef.name``), never a path:
report files, metric keys, result rows and task names carry it.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.model_spec import (CLASSIFIER_OPTIONS, ENCODER_OPTIONS, ModelRef, parse_model,
                                     refuse_options)
from lingtest.tasks.models.registry import OWN_ENCODE, Resolution, resolve, st_modules

ENCODER_FORMS = ("hub", "folder", "python")
NO_EXACT_LENGTH = ("exact-length passes do not apply (its own encode, in batches of "
                   "contrastive.batch_size: a vector may depend on its batch's company in the "
                   "last bits)")
OWN_VOCABULARY, TOKENIZER = "own vocabulary()", "tokenizer"
FIX_FORMS = "encoder specs: a hub id, a model folder, python:MODULE:ATTR, python:file.py:ATTR"


def as_ref(spec_or_ref: str | ModelRef, key: str = "model", names: dict | None = None,
           root: Path | None = None) -> ModelRef:
    """A ``ModelRef`` from a spec string (parsed with ``names`` and ``root``) or as given."""
    if isinstance(spec_or_ref, ModelRef):
        return spec_or_ref
    return parse_model(spec_or_ref, key, names, root)


def _show(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


# --------------------------------------------------------------------------- checks

def _resolution(ref: ModelRef, offline: bool) -> Resolution:
    """The registry's answer for a hub id or folder (``missing``: one error with its fix)."""
    return resolve(ref.target, "encoder", offline=offline).require()


def _light_user_attr(ref: ModelRef, root: Path | None) -> tuple[Any, str, str]:
    """(attribute, revision, file) of a python: spec without instantiating a class (its
    ``__init__`` may load weights): the module is imported, the attribute looked up."""
    from lingtest.tasks.models.user_code import load_user_object

    user = load_user_object(ref, root, instantiate=False)
    return user.obj, user.revision, user.file


def _can_encode(obj: Any) -> bool:
    """An object or class with a callable ``encode``, or something callable (a function, a
    class whose instances are callable)."""
    if isinstance(obj, type):  # instances are called: __call__ defined by the class
        return callable(getattr(obj, "encode", None)) or any(
            "__call__" in vars(klass) for klass in obj.__mro__ if klass is not object)
    return callable(getattr(obj, "encode", None)) or callable(obj)


def check_encoder(ref: ModelRef, offline: bool = True, root: Path | None = None,
                  key: str = "contrastive.encoders") -> dict:
    """One ``lingtest models`` row of an encoder spec, without loading weights: id (the spec),
    name, kind, source, revision, pooling ("own encode" for a model lingtest does not run
    itself) and path. Raises one LingtestError naming the problem and the fix: a form that is
    not an encoder, a hub id missing offline, a folder without weights, a python: module or
    attribute that is missing, or an object with neither ``encode`` nor a call; an
    endpoint spec (``embedding_endpoints.check_endpoint_encoder``, errors naming ``key``)
    without contacting its server."""
    from lingtest.tasks.models import embedding_endpoints as endpoints

    refuse_options(ref, CLASSIFIER_OPTIONS, "an LLM tested as a classifier, not to an "
                   "encoder", key)
    if endpoints.is_endpoint(ref):
        return endpoints.check_endpoint_encoder(ref, key)
    refuse_options(ref, ENCODER_OPTIONS, "an embedding service (openai:, ollama:)", key)
    if ref.form not in ENCODER_FORMS:
        what = ("a built-in classifier" if ref.form == "builtin" else f"a `{ref.form}:` model")
        raise LingtestError(f"model `{ref.spec}` is {what}, not a sentence encoder; "
                            f"fix: {FIX_FORMS}")
    row = {"id": ref.spec, "name": ref.name, "kind": "encoder"}
    if ref.form == "python":
        obj, revision, file = _light_user_attr(ref, root)
        if not _can_encode(obj):
            raise LingtestError(f"model `{ref.bare}`: `{ref.module_and_attr[1]}` is a "
                                f"{type(obj).__name__}, with no encode(texts) method and not "
                                f"callable; fix: name a function texts -> array (n, dim), or "
                                f"an object (or class) with encode(texts)")
        return {**row, "source": "python", "revision": revision, "pooling": OWN_ENCODE,
                "path": file}
    if ref.form == "folder" and not Path(ref.target).is_dir():
        raise LingtestError(f"model folder `{ref.target}` does not exist; fix: the path of a "
                            f"saved model folder")
    res = _resolution(ref, offline)
    return {**row, "source": res.source, "revision": res.revision, "pooling": res.pooling,
            "path": res.path}


def vocabulary_source(ref: ModelRef, root: Path | None = None) -> str | None:
    """Where the ``vocab`` dictionary of this encoder comes from, without loading weights:
    ``tokenizer`` (hub ids, folders), ``own vocabulary()`` (a python: object that defines
    it), ``tokenizer`` (a python: object or function with a ``tokenizer`` attribute), or None
    (a class may still set ``tokenizer`` in its ``__init__``: the loaded encoder decides)."""
    from lingtest.tasks.models.embedding_endpoints import is_endpoint

    if is_endpoint(ref):
        return None
    if ref.form != "python":
        return TOKENIZER
    obj = _light_user_attr(ref, root)[0]
    if callable(getattr(obj, "vocabulary", None)):
        return OWN_VOCABULARY
    return TOKENIZER if _has_tokenizer(getattr(obj, "tokenizer", None)) else None


def _has_tokenizer(tokenizer: Any) -> bool:
    return tokenizer is not None and callable(getattr(tokenizer, "get_vocab", None))


def no_vocabulary(name: str, spec: str) -> LingtestError:
    return LingtestError(
        f"contrastive: model `{name}` ({spec}) has no vocabulary for the `vocab` dictionary "
        f"(θ from the nearest neighbours of the model's whole words): it has no vocabulary() "
        f"method and no tokenizer attribute; fix: set contrastive.dictionary_file to a word "
        f"list (JSON list or one word per line), which then is this model's `vocab` "
        f"dictionary, or give the object a vocabulary() method returning its words")


def check_contrastive_encoder(ref: ModelRef, offline: bool = True, root: Path | None = None,
                              dictionary_file: str | None = None,
                              pooling: str | None = None,
                              vocabulary_needed: bool = True,
                              key: str = "contrastive.encoders") -> dict:
    """``check_encoder``, then what the contrastive stage asks beyond it: a vocabulary (or
    ``contrastive.dictionary_file``) unless no θ needs one (``vocabulary_needed``: False for
    ``thresholds: [zero]``), and no ``contrastive.pooling`` override for a model that runs
    its own encode. The row, as ``check_encoder``'s."""
    from lingtest.tasks.models import embedding_endpoints as endpoints

    row = check_encoder(ref, offline, root, key)
    if pooling is not None and (row["pooling"] == OWN_ENCODE or endpoints.is_endpoint(ref)):
        raise LingtestError(f"contrastive.pooling `{pooling}`: model `{ref.name}` "
                            f"({endpoints._shown(ref)}) runs its own encode, whose pooling "
                            f"lingtest cannot change; fix: contrastive.pooling: null, or test "
                            f"it alone")
    if vocabulary_needed and dictionary_file is None and ref.form == "python":
        obj = _light_user_attr(ref, root)[0]
        if vocabulary_source(ref, root) is None and not (
                isinstance(obj, type) and _may_set_tokenizer(obj)):
            raise no_vocabulary(ref.name, ref.bare)
    return row


def _may_set_tokenizer(cls: type) -> bool:
    """Whether a method of the class names a ``tokenizer`` attribute (``self.tokenizer =
    ...`` in ``__init__``): only then can an instance have a vocabulary the class does not
    show, so a class without one is refused before its ``__init__`` runs."""
    return any("tokenizer" in getattr(getattr(member, "__code__", None), "co_names", ())
               for klass in cls.__mro__ if klass is not object
               for member in vars(klass).values())


def check_repairable(ref: ModelRef, offline: bool = True, root: Path | None = None,
                     key: str = "repair.models") -> dict:
    """``check_encoder``'s row when lingtest's repair can fine-tune the model; otherwise one
    error naming ``key`` and the reason: repair trains the weights of a transformers encoder
    through lingtest's own forward pass (Transformer + Pooling (+ Normalize)), which a
    python: object, a model with other sentence-transformers modules or an embedding
    service does not have."""
    from lingtest.tasks.models import embedding_endpoints as endpoints

    if endpoints.is_endpoint(ref):
        raise LingtestError(
            f"{key}: `{endpoints._shown(ref)}` ({ref.name}) is an embedding service; lingtest's "
            f"repair fine-tunes an encoder's weights, which a service does not expose; fix: "
            f"remove it from {key} (the contrastive stage can still test it)")
    row = check_encoder(ref, offline, root)
    if ref.form == "python":
        raise LingtestError(
            f"{key}: `{ref.bare}` ({ref.name}) is a python: encoder; lingtest's repair "
            f"fine-tunes a transformers encoder's weights through its own forward pass and "
            f"cannot train user code; fix: remove it from {key} (it can still be tested by "
            f"the contrastive stage)")
    if row["pooling"] == OWN_ENCODE:
        modules = ", ".join(st_module_names(Path(row["path"])))
        raise LingtestError(
            f"{key}: `{ref.bare}` ({ref.name}) has sentence-transformers modules {modules}, "
            f"which run through their own encode; lingtest's repair trains Transformer + "
            f"Pooling (+ Normalize) only; fix: remove it from {key}")
    return row


def st_module_names(folder: Path) -> list[str]:
    return [m.get("type", "").rsplit(".", 1)[-1] for m in st_modules(folder) or []]


# --------------------------------------------------------------------------- encoders

class OwnEncode:
    """What the own-encode paths share: the interface the contrastive stage asks of an
    encoder, with ``pooling`` "own encode" and no exact-length passes."""

    exact_length = False
    pooling = OWN_ENCODE
    ref: ModelRef
    revision: str
    dim: int | None

    @property
    def model_id(self) -> str:
        return self.ref.name

    @property
    def cache_key(self) -> str:
        """Only the model decides its vectors (its revision is the store's other key)."""
        return OWN_ENCODE

    def describe(self) -> str:
        return f"{self.ref.bare}: {self.form_text()}; {NO_EXACT_LENGTH}"

    def parameters(self) -> dict[str, object]:
        return {"model_id": self.model_id, "spec": self.ref.bare, "form": self.ref.form,
                "revision": self.revision, "pooling": self.pooling, "dim": self.dim,
                "exact_length_passes": False}

    def cache_token(self) -> dict[str, object]:
        return {**self.parameters(), "cache_key": self.cache_key}

    def form_text(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_id!r}, revision={self.revision!r})"


class STEncoder(OwnEncode):
    """A sentence-transformers model through its own ``encode`` (modules lingtest does not
    reproduce, e.g. a Dense layer)."""

    def __init__(self, ref: ModelRef, resolution: Resolution, model, modules: list[str],
                 max_length_set: bool):
        self.ref, self.resolution, self.model = ref, resolution, model
        self.modules = modules
        self.revision = resolution.revision
        self.max_length = int(model.max_seq_length) if model.max_seq_length else None
        self.max_length_set = max_length_set
        self.dim = int(model.get_embedding_dimension())
        self.tokenizer = model.tokenizer
        first = model[0] if len(model) else None
        self.lowercase = bool(getattr(first, "do_lower_case", False))

    @property
    def cache_key(self) -> str:
        return OWN_ENCODE + (f"|max_length={self.max_length}" if self.max_length_set else "")

    def form_text(self) -> str:
        return (f"sentence-transformers modules {', '.join(self.modules)} through its own "
                f"encode")

    def encode(self, sentences: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """float32 embeddings (len(sentences), dim) from ``SentenceTransformer.encode``."""
        if isinstance(sentences, str):
            raise LingtestError("encode() takes a list of sentences, not one string")
        if len(sentences) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        out = self.model.encode(list(sentences), batch_size=batch_size, convert_to_numpy=True,
                                show_progress_bar=False)
        return np.asarray(out, dtype=np.float32)

    def token_counts(self, sentences: Sequence[str]) -> list[int]:
        """Tokens per text (for longest-first ordering; the batches are the model's own)."""
        if len(sentences) == 0:
            return []
        texts = [s.lower() for s in sentences] if self.lowercase else list(sentences)
        ids = self.tokenizer(texts, truncation=True, max_length=self.max_length)["input_ids"]
        return [len(i) for i in ids]

    vocabulary_source = TOKENIZER

    def vocabulary(self, ascii_only: bool = True) -> list[str]:
        from lingtest.tasks.models.encoders import whole_words

        return whole_words(self.tokenizer, ascii_only)

    def normal_forms(self, words: list[str]) -> list[str]:
        return tokenizer_forms(self.tokenizer, words, self.lowercase)

    def parameters(self) -> dict[str, object]:
        return {**super().parameters(), "source": self.resolution.source,
                "modules": "+".join(self.modules), "max_length": self.max_length,
                "device": str(self.model.device)}


def tokenizer_forms(tokenizer, words: list[str], lowercase: bool = False) -> list[str]:
    """Each word as the tokenizer's normaliser leaves it (see ``Encoder.normal_forms``)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    normalizer = getattr(backend, "normalizer", None)
    forms = [w.lower() if lowercase else w for w in words]
    return [normalizer.normalize_str(w) for w in forms] if normalizer is not None else forms


class PythonEncoder(OwnEncode):
    """A python: object's ``encode(texts)`` (or the function itself), each call checked."""

    def __init__(self, user):
        from lingtest.tasks.models.user_code import protocol_method

        self.user, self.ref = user, user.ref
        self.revision = user.revision
        self._encode = protocol_method(user, "encode")
        self.dim: int | None = None
        own = getattr(user.obj, "vocabulary", None)
        tokenizer = getattr(user.obj, "tokenizer", None)
        self._own_vocabulary = own if callable(own) else None
        self.tokenizer = tokenizer if _has_tokenizer(tokenizer) else None
        self.vocabulary_source = (OWN_VOCABULARY if self._own_vocabulary else
                                  TOKENIZER if self.tokenizer is not None else None)

    def form_text(self) -> str:
        what = "encode(texts)" if self._encode is not self.user.obj else "the function"
        return f"python object {type(self.user.obj).__name__}, {what} ({self.user.file})"

    def _fail(self, what: str, text: str, fix: str) -> LingtestError:
        return self.user.fail(f"{what} (first bad input text: {_show(text)}); fix: {fix}")

    def _matrix(self, raw: Any, part: list[str]) -> np.ndarray:
        """The call's output as a float32 (len(part), dim) matrix, or one error."""
        fix = "encode(texts) must return one row of finite numbers per text, (len(texts), dim)"
        if hasattr(raw, "toarray"):  # a scipy sparse matrix
            raw = raw.toarray()
        if hasattr(raw, "detach"):  # a torch tensor
            raw = raw.detach().float().cpu().numpy()
        try:
            matrix = np.asarray(raw, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise self._fail(f"encode returned {type(raw).__name__}, not numbers ({exc})",
                             part[0], fix) from None
        if matrix.ndim != 2 or matrix.shape[1] < 1:
            raise self._fail(f"encode returned shape {matrix.shape} for {len(part)} texts",
                             part[0], fix)
        if matrix.shape[0] != len(part):
            raise self._fail(f"encode returned {matrix.shape[0]} rows for {len(part)} texts",
                             part[0], fix)
        if self.dim is not None and matrix.shape[1] != self.dim:
            raise self._fail(f"encode returned {matrix.shape[1]} columns, earlier calls "
                             f"{self.dim}", part[0], "give every text the same dimension")
        bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
        if bad.size:
            raise self._fail(f"encode returned NaN or inf for {bad.size} of {len(part)} texts",
                             part[int(bad[0])], fix)
        return matrix

    def encode(self, sentences: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """float32 (len(sentences), dim): the user's encode on ``batch_size`` texts per call,
        every output checked before any is returned, so a bad call stores nothing."""
        if isinstance(sentences, str):
            raise LingtestError("encode() takes a list of sentences, not one string")
        if batch_size < 1:
            raise LingtestError(f"batch_size must be >= 1 (got {batch_size})")
        texts, parts = list(sentences), []
        for start in range(0, len(texts), batch_size):
            part = texts[start:start + batch_size]
            try:
                raw = self._encode(part)
            except LingtestError:
                raise
            except Exception as exc:  # the user's code: any error, named with its input
                raise self._fail(f"encode raised {type(exc).__name__}: {exc}", part[0],
                                 "correct the model's code (its traceback is chained)") from exc
            parts.append(self._matrix(raw, part))
            self.dim = int(parts[-1].shape[1])
        if not parts:
            return np.empty((0, self.dim or 0), dtype=np.float32)
        return np.concatenate(parts)

    def vocabulary(self, ascii_only: bool = True) -> list[str]:
        """The object's own ``vocabulary()`` (strings, at least two), else its tokenizer's
        whole words, else the error that tells the user to set a dictionary file."""
        if self._own_vocabulary is not None:
            try:
                words = list(self._own_vocabulary())
            except Exception as exc:
                raise self.user.fail(f"vocabulary() raised {type(exc).__name__}: {exc}") from exc
            if len(words) < 2 or not all(isinstance(w, str) and w.strip() for w in words):
                raise self.user.fail("vocabulary() must return at least two non-empty strings "
                                     "(the model's words)")
            return list(dict.fromkeys(w.strip() for w in words))
        if self.tokenizer is not None:
            from lingtest.tasks.models.encoders import whole_words

            return whole_words(self.tokenizer, ascii_only)
        raise no_vocabulary(self.model_id, self.ref.bare)

    def normal_forms(self, words: list[str]) -> list[str]:
        """The object's own ``normal_forms(words)`` when defined, else its tokenizer's
        normaliser, else each word as written (words the model maps to one vector then
        count twice: give ``normal_forms`` when yours lower-cases or strips accents)."""
        own = getattr(self.user.obj, "normal_forms", None)
        if callable(own):
            forms = list(own(list(words)))
            if len(forms) != len(words) or not all(isinstance(f, str) for f in forms):
                raise self.user.fail(f"normal_forms(words) must return one string per word "
                                     f"(got {len(forms)} for {len(words)})")
            return forms
        if self.tokenizer is not None:
            return tokenizer_forms(self.tokenizer, list(words))
        return list(words)

    def parameters(self) -> dict[str, object]:
        return {**super().parameters(), "source": "python", "file": self.user.file,
                "vocabulary": self.vocabulary_source or "none"}


# --------------------------------------------------------------------------- loading

def _hub_own_encode(res: Resolution) -> Resolution | None:
    """Online, a hub model with modules lingtest does not reproduce: its resolution with
    pooling "own encode" and the commit of its downloaded sentence-transformers files as
    revision (the weights are fetched by ``SentenceTransformer``); None otherwise."""
    from lingtest.tasks.models.encoders import _hub_st_folder
    from lingtest.tasks.models.registry import modules_sha16, st_own_modules

    folder = _hub_st_folder(res.model_id)
    if folder is None or st_own_modules(folder) is None:
        return None
    return Resolution(res.model_id, "encoder", "hub", res.model_id, None,
                      f"{folder.name}+modules@sha256:{modules_sha16(folder)}", OWN_ENCODE)


def _load_st(ref: ModelRef, res: Resolution, offline: bool, device: str,
             max_length: int | None) -> STEncoder:
    from sentence_transformers import SentenceTransformer

    from lingtest.tasks.models.encoders import pick_device
    from lingtest.tasks.models.registry import hub_offline

    folder = Path(res.path)  # online from the hub: the id
    try:
        with hub_offline(offline):
            model = SentenceTransformer(res.path, device=str(pick_device(device)),
                                        local_files_only=offline)
    except Exception as exc:  # sentence-transformers raises many types for a bad folder
        raise LingtestError(f"model `{ref.name}` ({ref.bare}, {folder}) failed to load with "
                            f"sentence-transformers: {type(exc).__name__}: {exc}") from exc
    model.eval()
    if max_length is not None:
        model.max_seq_length = int(max_length)
    modules = [type(module).__name__ for module in model]
    return STEncoder(ref, res, model, modules, max_length is not None)


def load_any_encoder(spec_or_ref: str | ModelRef, offline: bool = True, device: str = "auto",
                     pooling: str | None = None, max_length: int | None = None,
                     pass_tokens: int | None = None, precision: str | None = None,
                     backend: str | None = None, names: dict | None = None,
                     root: Path | None = None, key: str = "model", http=None):
    """The encoder a spec names (see the module docstring for the three paths), its
    ``model_id`` the display name. ``pooling``, ``pass_tokens``, ``precision`` and
    ``backend`` reach lingtest's own encoder only (a pooling override on an own-encode model
    is an error); ``max_length`` also caps a sentence-transformers model's own encode;
    a python: encoder takes none of them; an embedding service takes ``http`` (its
    ``LLMSettings``: concurrency, timeout, retries) and reads its revision from the server."""
    from lingtest.tasks.models import embedding_endpoints as endpoints

    ref = as_ref(spec_or_ref, key, names, root)
    if endpoints.is_endpoint(ref):
        if pooling is not None:
            check_contrastive_encoder(ref, offline, root, "", pooling)  # the pooling error
        return endpoints.load_endpoint_encoder(ref, http, key if key != "model" else
                                               endpoints.KEY)
    if ref.form == "python":
        from lingtest.tasks.models.user_code import load_user_object

        check_encoder(ref, offline, root)  # neither encode nor callable: the clear error
        encoder = PythonEncoder(load_user_object(ref, root))
        if pooling is not None:
            raise LingtestError(f"contrastive.pooling `{pooling}`: model `{ref.name}` is a "
                                f"python: encoder with its own pooling; fix: "
                                f"contrastive.pooling: null")
        return encoder
    check_encoder(ref, offline, root)
    res = _resolution(ref, offline)
    if res.source == "hub":  # online: its sentence-transformers files decide the path
        res = _hub_own_encode(res) or res
    if res.pooling == OWN_ENCODE:
        if pooling is not None:
            raise LingtestError(f"contrastive.pooling `{pooling}`: model `{ref.name}` "
                                f"({ref.bare}) runs its own encode (sentence-transformers "
                                f"modules lingtest does not reproduce); fix: "
                                f"contrastive.pooling: null")
        return _load_st(ref, res, offline, device, max_length)
    from lingtest.tasks.models.encoders import load_encoder

    encoder = load_encoder(ref.target, offline=offline, device=device, pooling=pooling,
                           max_length=max_length, pass_tokens=pass_tokens,
                           precision=precision, backend=backend)
    encoder.model_id = ref.name  # the display name; the default MiniLM's is its id
    encoder.ref = ref
    return encoder


def describe_encoder(encoder) -> str:
    """One provenance line of what ran: name, spec (when it differs), revision and pooling,
    or for an own-encode model what it is and that exact-length passes do not apply."""
    from lingtest.tasks.core.secrets import redact_text

    ref = getattr(encoder, "ref", None)
    spec = f" = {redact_text(ref.bare)}" if ref is not None and ref.bare != encoder.model_id \
        else ""
    head = f"{encoder.model_id}{spec} @ {encoder.revision}"
    if getattr(encoder, "exact_length", True):
        return f"{head} ({encoder.pooling})"
    return f"{head} ({encoder.form_text()}; {NO_EXACT_LENGTH})"


__all__ = ["OWN_ENCODE", "PythonEncoder", "STEncoder", "as_ref", "check_contrastive_encoder",
           "check_encoder", "check_repairable", "describe_encoder", "load_any_encoder",
           "vocabulary_source"]
