"""HTTP LLM backends: Ollama (``/api/generate``) and OpenAI-compatible (``/chat/completions``).

Both share one request loop: a per-call timeout, bounded exponential back-off (honouring
``Retry-After``) on connection errors, timeouts, 429 and 5xx, no retry on other 4xx, and a
semaphore that bounds in-flight requests across all ``answer`` calls of one backend. A
prompt that finally fails becomes ``LLMResponse(text=None, error=...)``. The API key is held
only for the Authorization header and scrubbed from any error text; it never appears in
``parameters()``, ``repr`` or logs.
"""
from __future__ import annotations

import email.utils
import logging
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tasks.models.llm import LLMResponse, LLMSettings

log = logging.getLogger(__name__)

MAX_DELAY_S = 30.0       # cap for both back-off and Retry-After
METADATA_TIMEOUT_S = 5.0  # best-effort model digest lookup
ERROR_BODY_CHARS = 300


class _Failure(Exception):
    """A failed attempt; ``retry`` says whether another attempt may succeed."""

    def __init__(self, message: str, retry: bool, retry_after: float | None = None):
        super().__init__(message)
        self.retry, self.retry_after = retry, retry_after


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP date), None if unusable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def public_url(url: str) -> str:
    """The URL without user-info, query or fragment, where credentials could hide."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(username=None, password=None, query=None, fragment=None)
               ).rstrip("/")


class HTTPBackend:
    """Shared request loop of the HTTP backends; subclasses build the body and read the text."""

    backend = "http"

    def __init__(self, spec: str, model: str, base_url: str, settings: LLMSettings,
                 api_key: str | None = None):
        self.model_id = spec
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.settings = settings
        self._key = api_key or None
        self._slots = threading.Semaphore(settings.concurrency)
        self._client = httpx.Client(
            timeout=settings.timeout_s,
            limits=httpx.Limits(max_connections=settings.concurrency),
            headers={"Authorization": f"Bearer {self._key}"} if self._key else None)
        self._sleep = time.sleep  # tests record back-off delays through this

    # ------------------------------------------------------------------ subclass hooks

    def _endpoint(self) -> str:
        raise NotImplementedError

    def _body(self, prompt: str) -> dict[str, Any]:
        raise NotImplementedError

    def _text(self, payload: dict[str, Any]) -> str | None:
        raise NotImplementedError

    # ------------------------------------------------------------------ public

    def parameters(self) -> dict:
        """Everything that determines the answers; the base URL without credentials."""
        s = self.settings
        return {"backend": self.backend, "spec": self.model_id, "model": self.model,
                "base_url": public_url(self.base_url), "temperature": s.temperature,
                "seed": s.seed, "max_tokens": s.max_new_tokens, "system": s.system,
                "decoding": "greedy" if s.temperature == 0 else "sampling"}

    def endpoint(self) -> dict:
        """Which server answers: its base URL (without credentials) and, where the API
        gives one, the model's digest. Part of a model's identity in the result store, so
        answers from another server (or another build of the model) are never reused."""
        return {"base_url": public_url(self.base_url)}

    def answer(self, prompts: list[str]) -> list[LLMResponse]:
        """Answers in prompt order; never raises for a failed prompt."""
        if not prompts:
            return []
        workers = min(self.settings.concurrency, len(prompts))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-http") as pool:
            return list(pool.map(self._ask, prompts))

    def close(self) -> None:
        """Release pooled connections."""
        self._client.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.model_id!r}, base_url="
                f"{public_url(self.base_url)!r}, key={'set' if self._key else 'none'})")

    # ------------------------------------------------------------------ request loop

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    def _ask(self, prompt: str) -> LLMResponse:
        began = time.perf_counter()
        attempts = 0
        while True:
            attempts += 1
            try:
                text = self._attempt(prompt)
                return LLMResponse(text, None, time.perf_counter() - began, attempts)
            except _Failure as failure:
                message = self._scrub(str(failure))
                if not failure.retry or attempts > self.settings.retries:
                    log.warning("%s: giving up after %d attempt(s): %s", self.model_id,
                                attempts, message)
                    return LLMResponse(None, message, time.perf_counter() - began, attempts)
                delay = min(self.settings.backoff_s * 2 ** (attempts - 1), MAX_DELAY_S)
                if failure.retry_after is not None:
                    delay = min(failure.retry_after, MAX_DELAY_S)
                log.info("%s: attempt %d failed (%s); retrying in %.2f s", self.model_id,
                         attempts, message, delay)
                self._sleep(delay)

    def _attempt(self, prompt: str) -> str:
        """One request; the text, or a _Failure saying whether to retry."""
        url = f"{self.base_url}{self._endpoint()}"
        try:
            with self._slots:
                response = self._client.post(url, json=self._body(prompt))
        except httpx.TimeoutException as exc:
            raise _Failure(f"timeout after {self.settings.timeout_s} s "
                           f"({type(exc).__name__})", retry=True) from exc
        except httpx.TransportError as exc:
            raise _Failure(f"connection error to {public_url(url)}: {exc}", retry=True) from exc
        status = response.status_code
        if status < 400 and _is_html(response):
            # A proxy's or gateway's error page sent with 200: not an answer; likely transient.
            raise _Failure(f"HTML page instead of an API response (HTTP {status}) from "
                           f"{public_url(url)}: {response.text[:ERROR_BODY_CHARS]}", retry=True)
        if status >= 400:
            detail = response.text[:ERROR_BODY_CHARS]
            retry = status == 429 or status >= 500
            raise _Failure(f"HTTP {status} from {public_url(url)}: {detail}", retry,
                           _retry_after(response.headers.get("Retry-After")) if retry else None)
        try:
            payload = response.json()
        except ValueError as exc:
            raise _Failure(f"invalid JSON from {public_url(url)}: "
                           f"{response.text[:ERROR_BODY_CHARS]}", retry=False) from exc
        if not isinstance(payload, dict):
            raise _Failure(f"unexpected response from {public_url(url)}: {payload!r:.300}",
                           retry=False)
        if payload.get("error"):
            raise _Failure(f"server error from {public_url(url)}: {payload['error']}",
                           retry=False)
        text = self._text(payload)
        if text is None or not text.strip():
            raise _Failure(f"empty response from {public_url(url)}: {payload!r:.300}",
                           retry=False)
        if _HTML_START.match(text):
            raise _Failure(f"HTML page instead of an answer from {public_url(url)}: "
                           f"{text[:ERROR_BODY_CHARS]}", retry=True)
        self._seen(payload)
        return text

    def _seen(self, payload: dict[str, Any]) -> None:
        """Hook: note provenance a reply carries (OpenAI's system_fingerprint)."""


_HTML_START = re.compile(r"^\s*(?:<!doctype\s+html|<html[\s>])", re.IGNORECASE)


def _is_html(response: httpx.Response) -> bool:
    """An HTML document, by content type or by its first bytes."""
    kind = response.headers.get("content-type", "").lower()
    return "text/html" in kind or bool(_HTML_START.match(response.text[:200]))


class OllamaLLM(HTTPBackend):
    """Ollama's native generate API, JSON-constrained output, seeded options."""

    backend = "ollama"

    def __init__(self, spec: str, model: str, settings: LLMSettings):
        host = os.environ.get("OLLAMA_HOST") or "http://127.0.0.1:11434"
        if "://" not in host:  # Ollama accepts bare host:port in OLLAMA_HOST
            host = f"http://{host}"
        super().__init__(spec, model, host, settings)
        self._digest: str | None = None
        self._digest_looked_up = False

    def _endpoint(self) -> str:
        return "/api/generate"

    def _body(self, prompt: str) -> dict[str, Any]:
        s = self.settings
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "stream": False,
                                "format": "json",
                                "options": {"seed": s.seed, "temperature": s.temperature,
                                            "num_predict": s.max_new_tokens}}
        if s.system is not None:
            body["system"] = s.system
        return body

    def _text(self, payload: dict[str, Any]) -> str | None:
        text = payload.get("response")
        return text if isinstance(text, str) else None

    def digest(self) -> str | None:
        """The model's digest from ``GET /api/tags`` (looked up once; None if unavailable)."""
        if not self._digest_looked_up:
            self._digest_looked_up = True
            names = {self.model, self.model if ":" in self.model else f"{self.model}:latest"}
            try:
                response = self._client.get(f"{self.base_url}/api/tags",
                                            timeout=min(self.settings.timeout_s,
                                                        METADATA_TIMEOUT_S))
                models = response.json().get("models", []) if response.is_success else []
                self._digest = next((m.get("digest") for m in models
                                     if names & {m.get("name"), m.get("model")}), None)
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
                log.info("%s: no model digest from %s/api/tags: %s", self.model_id,
                         public_url(self.base_url), exc)
        return self._digest

    def parameters(self) -> dict:
        return {**super().parameters(), "format": "json", "digest": self.digest()}

    def endpoint(self) -> dict:
        return {**super().endpoint(), "digest": self.digest()}


class OpenAILLM(HTTPBackend):
    """An OpenAI-compatible chat completions API (OpenAI, vLLM, llama.cpp server, ...)."""

    backend = "openai"

    def __init__(self, spec: str, model: str, settings: LLMSettings):
        base = os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        super().__init__(spec, model, base, settings, os.environ.get("OPENAI_API_KEY"))
        # Known only after replies, so recorded with the run, not in the model's identity.
        self.fingerprints: set[str] = set()
        self._lock = threading.Lock()

    def _endpoint(self) -> str:
        return "/chat/completions"

    def _body(self, prompt: str) -> dict[str, Any]:
        s = self.settings
        messages = [{"role": "system", "content": s.system}] if s.system is not None else []
        messages.append({"role": "user", "content": prompt})
        return {"model": self.model, "messages": messages, "temperature": s.temperature,
                "seed": s.seed, "max_tokens": s.max_new_tokens}

    def _text(self, payload: dict[str, Any]) -> str | None:
        try:
            text = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            return None
        return text if isinstance(text, str) else None

    def parameters(self) -> dict:
        return {**super().parameters(), "format": "text"}

    def _seen(self, payload: dict[str, Any]) -> None:
        fingerprint = payload.get("system_fingerprint")
        if isinstance(fingerprint, str) and fingerprint:
            with self._lock:
                self.fingerprints.add(fingerprint)
