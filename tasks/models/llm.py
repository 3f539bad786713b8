"""LLM backends behind one interface, for combinatorial consistency testing of LLMs.

A consistency test asks one model many related prompts and compares the answers, so every
backend (local transformers, Ollama, an OpenAI-compatible server) answers a list of prompts
in order, reports a failed prompt as an ``LLMResponse`` with ``error`` instead of raising
(one flaky call must not lose a whole run), and says in ``parameters()`` everything that
determines its answers, so results can be traced to the exact model and decoding.

Spec grammar for ``load_llm``: ``ollama:<model>``, ``openai:<model>``, ``hf:<id-or-path>``
or a bare Hugging Face id / local folder (the local backend).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tasks.core.errors import LingtestError

if TYPE_CHECKING:
    from tasks.models.causal_lm import CausalLM

log = logging.getLogger(__name__)

DEFAULT_LOCAL_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SPEC_FORMS = ("ollama:<model>", "openai:<model>", "hf:<hub id or folder>",
              "<hub id or folder>")


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


class LocalLLM:
    """A transformers causal LM (GGUF included) answering greedily through its chat template."""

    def __init__(self, model_id: str, lm: CausalLM, settings: LLMSettings):
        self.model_id = model_id
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
        return {**self.lm.parameters(), "backend": "transformers", "spec": self.model_id,
                "max_new_tokens": self.settings.max_new_tokens, "system": self.settings.system,
                "chat_template": True, "batch_size": self.settings.batch_size}

    def answer(self, prompts: list[str]) -> list[LLMResponse]:
        """Answers in prompt order; a batch that fails (or an empty generation) becomes error
        responses rather than an exception. ``latency_s`` is the batch's wall time shared
        equally among its prompts."""
        out: list[LLMResponse] = []
        size = self.settings.batch_size
        for start in range(0, len(prompts), size):
            chunk = prompts[start:start + size]
            began = time.perf_counter()
            try:
                texts: list[str | None] = list(self.lm.generate_batch(
                    chunk, self.settings.max_new_tokens, chat=True,
                    system=self.settings.system, batch_size=size))
                errors: list[str | None] = [None if t else "empty response" for t in texts]
            except (LingtestError, RuntimeError, ValueError) as exc:
                log.warning("%s: batch of %d prompts failed: %s", self.model_id, len(chunk), exc)
                texts, errors = [None] * len(chunk), [f"generation failed: {exc}"] * len(chunk)
            share = (time.perf_counter() - began) / len(chunk)
            out += [LLMResponse(text or None, error, share, 1)
                    for text, error in zip(texts, errors)]
        return out

    def __repr__(self) -> str:
        return f"LocalLLM({self.model_id!r}, {self.lm!r})"


def _split_spec(spec: str) -> tuple[str, str]:
    """(prefix, rest): ``hf`` for bare ids and local paths (a Windows drive letter or an
    existing folder is not a prefix); a Hugging Face id never contains ':'."""
    prefix, sep, rest = spec.partition(":")
    if not sep or len(prefix) == 1 or Path(spec).expanduser().exists():
        return "hf", spec
    return prefix.lower(), rest


def load_llm(spec: str, settings: LLMSettings | None = None) -> LLMBackend:
    """The backend a spec names; HTTP backends connect lazily, the local one loads now."""
    settings = settings or LLMSettings()
    prefix, name = _split_spec(spec.strip())
    if not name:
        raise LingtestError(f"LLM spec `{spec}` names no model; accepted forms: "
                            f"{', '.join(SPEC_FORMS)}")
    if prefix == "ollama":
        from tasks.models.llm_http import OllamaLLM
        return OllamaLLM(spec, name, settings)
    if prefix == "openai":
        from tasks.models.llm_http import OpenAILLM
        return OpenAILLM(spec, name, settings)
    if prefix == "hf":
        from tasks.models.causal_lm import load_causal_lm
        return LocalLLM(spec, load_causal_lm(name, settings.offline, settings.device), settings)
    raise LingtestError(f"LLM spec `{spec}`: unknown backend prefix `{prefix}:`; accepted "
                        f"forms: {', '.join(SPEC_FORMS)} (default: {DEFAULT_LOCAL_MODEL})")
