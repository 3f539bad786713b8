"""LLM backends behind one interface, for combinatorial consistency testing of LLMs.

A consistency test asks one model many related prompts and compares the answers, so every
backend (local transformers, Ollama, an OpenAI-compatible server) answers a list of prompts
in order, reports a failed prompt as an ``LLMResponse`` with ``error`` instead of raising
(one flaky call must not lose a whole run), and says in ``parameters()`` everything that
determines its answers, so results can be traced to the exact model and decoding.

Spec grammar for ``load_llm`` (``lingtest.tasks.models.model_spec``): ``ollama:<model>[@URL]``,
``openai:<model>[@URL]`` (``openai-chat:`` is the same chat API here), ``#key_env=VAR`` for
the key's variable; ``hf:<id-or-path>`` or a bare Hugging Face id / local folder (the local
backend); ``python:<module or file.py>:<attr>`` for the user's own code (``UserLLM``). Every
backend carries its display ``name``; ``model_id`` is the spec without options or URL
credentials, the key under which a result store keeps its answers.
"""
from __future__ import annotations

import inspect
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.model_spec import ModelRef, parse_model

# How local models end an answer (``lingtest.tasks.models.json_stop``), recorded with their answers.
STOP_RULE = "after the JSON answer or a repetition loop"

if TYPE_CHECKING:
    from lingtest.tasks.models.causal_lm import CausalLM
    from lingtest.tasks.models.user_code import UserObject

log = logging.getLogger(__name__)

DEFAULT_LOCAL_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SPEC_FORMS = ("ollama:<model>[@URL]", "openai:<model>[@URL]", "openai-chat:<model>[@URL]",
              "python:<module or file.py>:<attr>", "hf:<hub id or folder>",
              "seq2seq:<hub id or folder> (T5 and other encoder-decoders)",
              "<hub id or folder>")
LLM_PREFIXES = ("hf", "ollama", "openai", "openai-chat", "python", "seq2seq")
HTTP_FORMS = ("ollama", "openai", "openai-chat")
LOCAL_FORMS = ("hf", "hub", "folder")


@dataclass(frozen=True)
class LLMSettings:
    """How to ask: decoding, robustness (timeouts, retries, concurrency) and local loading.

    ``retries`` counts the extra attempts after the first, so a call makes at most
    ``retries + 1`` requests. ``temperature``/``seed`` apply to the HTTP backends; the local
    backend always decodes greedily.
    """

    max_new_tokens: int = 32
    temperature: float = 0.0
    seed: int = 0
    system: str | None = None
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 1.0
    concurrency: int = 4
    offline: bool = True
    device: str = "auto"
    batch_size: int = 8
    lm_engine: str = "transformers"  # models.lm_engine / lm_precision (local LMs)
    lm_precision: str = "float32"

    def __post_init__(self) -> None:
        checks = {"max_new_tokens": self.max_new_tokens >= 1,
                  "temperature": self.temperature >= 0, "timeout_s": self.timeout_s > 0,
                  "retries": self.retries >= 0, "backoff_s": self.backoff_s >= 0,
                  "concurrency": self.concurrency >= 1, "batch_size": self.batch_size >= 1}
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
            raise LingtestError(f"LLM settings out of range: {values} (max_new_tokens, "
                                f"concurrency, batch_size >= 1; timeout_s > 0; retries, "
                                f"backoff_s, temperature >= 0)")


@dataclass(frozen=True)
class LLMResponse:
    """One prompt's outcome: ``text`` (never empty) or, after the last retry, ``error``."""

    text: str | None
    error: str | None
    latency_s: float
    attempts: int


@runtime_checkable
class LLMBackend(Protocol):
    """What consistency testing needs from a model: ordered answers and their provenance."""

    model_id: str

    def parameters(self) -> dict: ...

    def answer(self, prompts: list[str]) -> list[LLMResponse]: ...


# Told the (index in ``prompts``, response) pairs that just came back, in the caller's
# thread, before anything more is awaited: so a caller can store each answer as it returns
# (one that arrived is never lost with the rest of the call, nor paid for twice).
OnAnswer = Callable[[list[tuple[int, LLMResponse]]], None]


def answer_each(backend: LLMBackend, prompts: list[str], on_answer: OnAnswer
                ) -> list[LLMResponse]:
    """``backend.answer(prompts)``, handing each answer (or each batch a local model
    returns at once) to ``on_answer`` as it returns; a backend whose ``answer`` takes no
    ``on_answer`` (the user's own wrapper) hands over all its answers when it returns."""
    if accepted_keywords(backend.answer, {"on_answer": on_answer}):
        return backend.answer(prompts, on_answer=on_answer)  # type: ignore[call-arg]
    answers = backend.answer(prompts)
    on_answer(list(enumerate(answers)))
    return answers


def answer_in_batches(model_id: str, prompts: list[str], size: int,
                      generate: Callable[[list[str]], list[str]],
                      on_answer: OnAnswer | None = None) -> list[LLMResponse]:
    """A local model's answers in prompt order, ``size`` prompts per ``generate`` call; a
    batch that fails (or an empty generation) becomes error responses rather than an
    exception. ``latency_s`` is the batch's wall time shared equally among its prompts.
    ``on_answer`` gets each batch when it returns (one forward pass: the unit of saving)."""
    out: list[LLMResponse] = []
    for start in range(0, len(prompts), size):
        chunk = prompts[start:start + size]
        began = time.perf_counter()
        try:
            texts: list[str | None] = list(generate(chunk))
            errors: list[str | None] = [None if t else "empty response" for t in texts]
        except (LingtestError, RuntimeError, ValueError) as exc:
            log.warning("%s: batch of %d prompts failed: %s", model_id, len(chunk), exc)
            texts, errors = [None] * len(chunk), [f"generation failed: {exc}"] * len(chunk)
        share = (time.perf_counter() - began) / len(chunk)
        done = [LLMResponse(text or None, error, share, 1) for text, error in zip(texts, errors)]
        if on_answer is not None:
            on_answer(list(enumerate(done, start)))
        out += done
    return out


class LocalLLM:
    """A transformers causal LM (GGUF included) answering greedily through its chat template."""

    def __init__(self, model_id: str, lm: CausalLM, settings: LLMSettings,
                 name: str | None = None):
        self.model_id = model_id
        self.name = name or model_id
        self.lm = lm
        self.settings = settings
        if settings.temperature > 0:
            log.warning("%s: the local backend decodes greedily; temperature=%s is ignored "
                        "(parameters() records greedy decoding)", model_id,
                        settings.temperature)

    def parameters(self) -> dict:
        """The model's own record (revision, greedy decoding, template hash) plus what this
        backend adds to the prompt and the output budget; batch size is kept because padding
        in a batch can change float32 logits, hence a greedy answer."""
        return {**self.lm.parameters(), "backend": self.lm.engine, "spec": self.model_id,
                "max_new_tokens": self.settings.max_new_tokens, "system": self.settings.system,
                "chat_template": True, "batch_size": self.settings.batch_size,
                "stop": STOP_RULE}

    def answer(self, prompts: list[str], on_answer: OnAnswer | None = None
               ) -> list[LLMResponse]:
        """Answers in prompt order (``answer_in_batches``), each batch to ``on_answer``."""
        return answer_in_batches(self.model_id, prompts, self.settings.batch_size,
                                 lambda chunk: self.lm.generate_batch(
                                     chunk, self.settings.max_new_tokens, chat=True,
                                     system=self.settings.system,
                                     batch_size=self.settings.batch_size,
                                     stop_after_json=True), on_answer)

    def __repr__(self) -> str:
        return f"LocalLLM({self.model_id!r}, {self.lm!r})"


def _split_spec(spec: str) -> tuple[str, str]:
    """(prefix, rest): ``hf`` for bare ids and local paths (a Windows drive letter or an
    existing folder is not a prefix); a Hugging Face id never contains ':'."""
    prefix, sep, rest = spec.partition(":")
    if not sep or len(prefix) == 1 or Path(spec).expanduser().exists():
        return "hf", spec
    return prefix.lower(), rest


def parse_llm(spec: "str | ModelRef", key: str = "consistency.llms",
              names: dict[str, str] | None = None, root: Path | None = None) -> ModelRef:
    """A spec read as an LLM (``SPEC_FORMS``): one LingtestError naming ``key``, the spec
    and the accepted forms when it is none of them."""
    if isinstance(spec, ModelRef):
        return spec
    prefix, name = _split_spec(str(spec).strip())
    if prefix not in LLM_PREFIXES:
        raise LingtestError(f"{key}: LLM spec `{spec}`: unknown backend prefix `{prefix}:`; "
                            f"accepted forms: {', '.join(SPEC_FORMS)} (default: "
                            f"{DEFAULT_LOCAL_MODEL})")
    if not name.split("#", 1)[0]:
        raise LingtestError(f"{key}: LLM spec `{spec}` names no model; accepted forms: "
                            f"{', '.join(SPEC_FORMS)}")
    ref = parse_model(str(spec), key, names, root)
    if ref.form not in (*LOCAL_FORMS, *HTTP_FORMS, "python", "seq2seq"):
        raise LingtestError(f"{key}: `{spec}` is a {ref.form} model, not an LLM; accepted "
                            f"forms: {', '.join(SPEC_FORMS)}")
    return ref


def load_llm(spec: "str | ModelRef", settings: LLMSettings | None = None,
             root: Path | None = None, names: dict[str, str] | None = None) -> LLMBackend:
    """The backend a spec names; HTTP backends connect lazily, the local one loads now, a
    ``python:`` one imports its module (``root``: where relative files are)."""
    settings = settings or LLMSettings()
    ref = parse_llm(spec, names=names, root=root)
    if ref.form == "ollama":
        from lingtest.tasks.models.llm_http import OllamaLLM
        return OllamaLLM(ref, settings)
    if ref.form in ("openai", "openai-chat"):
        from lingtest.tasks.models.llm_http import OpenAILLM
        return OpenAILLM(ref, settings)
    if ref.form == "python":
        from lingtest.tasks.models.user_code import load_user_object
        return UserLLM(load_user_object(ref, root), settings)
    if ref.form == "seq2seq":
        from lingtest.tasks.models.seq2seq import Seq2SeqLLM
        return Seq2SeqLLM(ref, settings)
    from lingtest.tasks.models.causal_lm import load_causal_lm
    return LocalLLM(ref.bare, load_causal_lm(ref.target, settings.offline, settings.device,
                                             settings.lm_engine, settings.lm_precision),
                    settings, ref.name)


# ---------------------------------------------------------------------- the user's own code

def accepted_keywords(fn: Callable, wanted: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``wanted`` that ``fn`` takes (all of them when it takes ``**kw``): a
    user's ``generate(prompts)`` need not list settings it ignores."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: pass nothing extra
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(wanted)
    names = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                 inspect.Parameter.KEYWORD_ONLY)}
    return {k: v for k, v in wanted.items() if k in names}


def _short(prompt: str, chars: int = 80) -> str:
    return repr(prompt if len(prompt) <= chars else prompt[:chars] + "…")


class UserLLM:
    """A ``python:`` LLM behind ``LLMBackend``: an object with ``generate(prompts,
    **settings) -> list[str]`` or a function named ``generate`` (called per batch, with the
    keywords of ``max_new_tokens``, ``temperature``, ``seed``, ``system`` its signature
    takes), or any other function ``prompt -> str`` (called per prompt, same keywords).

    Failure semantics, as for the other backends: an **exception** in the user's code is an
    error response for the prompts it hit (a batch that raises is asked again one prompt at
    a time, so only the prompts that fail are lost); the run goes on, the failed prompts are
    recorded and asked again next run, and the stage ends with ``FailedCalls``. An empty
    string is an error response too ("empty response"). A **broken contract** — a
    non-string answer, or not one answer per prompt — is a bug no retry fixes: one
    ``LingtestError`` naming the model and the first bad prompt, raised at once.
    """

    backend = "python"

    def __init__(self, user: "UserObject", settings: LLMSettings):
        from lingtest.tasks.core.secrets import redact_text
        from lingtest.tasks.models.user_code import batch_protocol, protocol_method

        self.user, self.settings = user, settings
        self.model_id = redact_text(user.ref.bare)
        self.name = user.ref.name
        self.batched = batch_protocol(user, "generate")
        self._fn = protocol_method(user, "generate")
        self._kwargs = accepted_keywords(self._fn, {
            "max_new_tokens": settings.max_new_tokens, "temperature": settings.temperature,
            "seed": settings.seed, "system": settings.system})

    def revision(self) -> str:
        """The module's revision (file hash + ``revision`` attribute), as a server's states
        its model's: what an LLM classifier's answers are stored under."""
        return self.user.revision

    def parameters(self) -> dict:
        """The module's revision (file hash + ``revision`` attribute) and the settings the
        code is given: what decides its answers."""
        s = self.settings
        return {"backend": self.backend, "spec": self.model_id, "revision": self.user.revision,
                "file": self.user.file, "protocol": "generate" if self.batched else "function",
                "max_new_tokens": s.max_new_tokens, "temperature": s.temperature,
                "seed": s.seed, "system": s.system}

    def answer(self, prompts: list[str], on_answer: OnAnswer | None = None
               ) -> list[LLMResponse]:
        """Answers in prompt order; each call of the user's code to ``on_answer``."""
        size = self.settings.batch_size if self.batched else 1
        out: list[LLMResponse] = []
        for start in range(0, len(prompts), size):
            done = self._batch(prompts[start:start + size])
            if on_answer is not None:
                on_answer(list(enumerate(done, start)))
            out += done
        return out

    def _call(self, prompts: list[str]) -> list:
        if self.batched:
            texts = self._fn(list(prompts), **self._kwargs)
            if isinstance(texts, (str, bytes)) or not hasattr(texts, "__len__"):
                raise self.user.fail(
                    f"generate() returned {type(texts).__name__} for {len(prompts)} prompts "
                    f"(first: {_short(prompts[0])}); fix: return a list of one str per prompt")
            texts = list(texts)
            if len(texts) != len(prompts):
                raise self.user.fail(
                    f"generate() returned {len(texts)} answers for {len(prompts)} prompts "
                    f"(first prompt: {_short(prompts[0])}); fix: one str per prompt, in order")
            return texts
        return [self._fn(prompts[0], **self._kwargs)]

    def _batch(self, prompts: list[str]) -> list[LLMResponse]:
        began = time.perf_counter()
        try:
            texts = self._call(prompts)
        except LingtestError:
            raise
        except Exception as exc:  # the user's code: any error is that call's failure
            if len(prompts) > 1:  # which prompts fail? ask them one at a time
                return [r for p in prompts for r in self._batch([p])]
            message = (f"model `{self.name}` ({self.model_id}) raised {type(exc).__name__}: "
                       f"{exc} on prompt {_short(prompts[0])}")
            log.warning("%s", message)
            return [LLMResponse(None, message, time.perf_counter() - began, 1)]
        share = (time.perf_counter() - began) / len(prompts)
        out = []
        for prompt, text in zip(prompts, texts):
            if not isinstance(text, str):
                raise self.user.fail(
                    f"answered {type(text).__name__} {text!r:.60} to prompt {_short(prompt)}; "
                    f"fix: return a str per prompt")
            out.append(LLMResponse(text or None, None if text else "empty response", share, 1))
        return out

    def __repr__(self) -> str:
        return f"UserLLM({self.model_id!r}, revision={self.user.revision!r})"


# ---------------------------------------------------------------------- up-front check

def check_llm(ref: ModelRef, offline: bool, root: Path, key: str = "consistency.llms",
              base_url: str | None = None) -> dict:
    """The ``lingtest models`` row of one LLM (``id``, ``name``, ``kind``, ``source``,
    ``revision``, ``path``: endpoint or file, without secrets), or one LingtestError naming
    the problem and its fix. Loads no weights and opens no connection (a ``python:`` module
    is imported: its revision and protocol are only known then), so a run refuses a bad
    spec in well under a second instead of after the suite is built."""
    from lingtest.tasks.core.secrets import redact_text

    ref = parse_llm(ref, key, root=root)
    row = {"id": redact_text(ref.bare), "name": ref.name, "kind": "llm", "source": "",
           "revision": None, "path": None}
    if ref.form in HTTP_FORMS:
        from lingtest.tasks.models.llm_http import resolve_endpoint

        end = resolve_endpoint(ref, base_url, key)
        via = "" if end.source in ("spec", "option") else f" (from {end.source})"
        return {**row, "kind": f"llm:{ref.form}", "source": "http",
                "revision": "from the server (Ollama: model digest)" if ref.form == "ollama"
                else "unversioned (system_fingerprint recorded per run)",
                "path": f"{end.public}{via}; key {end.key_env}"
                        f" ({'set' if end.key() else 'unset'})"}
    if ref.form == "python":
        from lingtest.tasks.models.user_code import load_user_object, protocol_method

        try:
            user = load_user_object(ref, root)
            protocol_method(user, "generate")
        except LingtestError as error:
            raise LingtestError(f"{key}: {error}") from None
        path = user.file
        if ref.is_file_module:  # shown relative to the project, as the database is
            from lingtest.tasks.core.paths import root_marked
            path = root_marked(str(Path(path).resolve()), Path(root))
        return {**row, "kind": "llm:python", "source": "python", "revision": user.revision,
                "path": path}
    from lingtest.tasks.models.registry import resolve

    kind = "seq2seq" if ref.form == "seq2seq" else "causal_lm"
    try:
        found = resolve(ref.target, kind, offline=offline).require()
    except LingtestError as error:
        raise LingtestError(f"{key}: {error}") from None
    return {**row, "kind": kind, "source": found.source, "revision": found.revision,
            "path": found.path}
