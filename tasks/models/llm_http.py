"""HTTP LLM backends: Ollama (``/api/generate``) and OpenAI-compatible (``/chat/completions``).

Both share one request loop: a per-call timeout, bounded exponential back-off (honouring
``Retry-After``) on connection errors, timeouts, 429 and 5xx, no retry on other 4xx, and a
limit of in-flight requests **per endpoint across every process** of the machine
(``EndpointLimit``: the Dask runner's worker processes and the flow's own threads share
it). A prompt that finally fails becomes ``LLMResponse(text=None, error=...)``. The API key
is held only for the Authorization header and scrubbed from any error text; it never appears
in ``parameters()``, ``repr`` or logs, only the name of the variable it came from.

Where a model answers (``resolve_endpoint``): the spec's ``@URL``, else ``OLLAMA_HOST`` /
``OPENAI_BASE_URL``; Ollama defaults to its local port, while an ``openai:`` model without
either is refused rather than sent to the public API (name ``@https://api.openai.com/v1``
to mean it). The key comes from the spec's ``#key_env=VAR``, else ``OPENAI_API_KEY``.
"""
from __future__ import annotations

import contextlib
import email.utils
import hashlib
import logging
import os
import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import httpx

from lingtest.tasks.core import stopping
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.llm import LLMResponse, LLMSettings, OnAnswer

if TYPE_CHECKING:
    from lingtest.tasks.models.model_spec import ModelRef

try:  # POSIX; elsewhere the limit holds per process only (EndpointLimit says so)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

MAX_DELAY_S = 30.0       # cap for both back-off and Retry-After
METADATA_TIMEOUT_S = 5.0  # best-effort model digest lookup
ERROR_BODY_CHARS = 300


class _Failure(Exception):
    """A failed attempt; ``retry`` says whether another attempt may succeed."""

    def __init__(self, message: str, retry: bool, retry_after: float | None = None,
                 status: int | None = None):
        super().__init__(message)
        self.retry, self.retry_after, self.status = retry, retry_after, status


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


# ---------------------------------------------------------------------- endpoints and keys

OLLAMA_DEFAULT = "http://127.0.0.1:11434"
OPENAI_PUBLIC = "https://api.openai.com/v1"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


@dataclass(frozen=True)
class Endpoint:
    """Where one model answers and which variable holds its key (the key itself is read
    only when a backend is built, never stored here)."""

    base_url: str
    key_env: str
    source: str  # "spec", "OPENAI_BASE_URL", "OLLAMA_HOST" or "default"

    @property
    def public(self) -> str:
        return public_url(self.base_url)

    def key(self) -> str | None:
        return os.environ.get(self.key_env) or None


def resolve_endpoint(ref: "ModelRef", base_url: str | None = None,
                     key: str = "consistency.llms") -> Endpoint:
    """The endpoint of an ``openai:``/``openai-chat:``/``ollama:``/``tei:`` spec: its ``@URL``, else
    ``base_url`` (a command's ``--base-url``), else the protocol's environment variable.
    An ``openai:`` model with none of them is refused: it would silently go to the public
    API (and spend the key there); ``@https://api.openai.com/v1`` says so explicitly. A
    ``tei:`` spec always names its server. A ``#key_env=VAR`` whose variable is unset is
    refused too (the user said a key exists)."""
    if ref.base_url and base_url and public_url(ref.base_url) != public_url(base_url):
        raise LingtestError(f"{key}: model `{ref.name}` names its endpoint "
                            f"{public_url(ref.base_url)} and --base-url names "
                            f"{public_url(base_url)}; fix: keep one of them")
    url, source = (ref.base_url, "spec") if ref.base_url else (base_url, "option")
    if not url and ref.form == "tei":
        raise LingtestError(f"{key}: model `{ref.name}` ({ref.bare}): a TEI server has no "
                            f"default address; fix: tei:@http://HOST:PORT (the server's URL)")
    if not url and ref.form == "ollama":
        host = os.environ.get("OLLAMA_HOST")
        url, source = (host, "OLLAMA_HOST") if host else (OLLAMA_DEFAULT, "default")
        if "://" not in url:  # Ollama accepts a bare host:port in OLLAMA_HOST
            url = f"http://{url}"
    elif not url:
        url, source = os.environ.get("OPENAI_BASE_URL"), "OPENAI_BASE_URL"
        if not url:
            raise LingtestError(
                f"{key}: model `{ref.name}` ({ref.bare}) names no server and OPENAI_BASE_URL "
                f"is not set, so it would go to the public OpenAI API; fix: "
                f"{ref.form}:{ref.target}@http://HOST:PORT/v1 (your server), set "
                f"OPENAI_BASE_URL, or write {ref.form}:{ref.target}@{OPENAI_PUBLIC} to mean "
                f"the public API")
    from lingtest.tasks.core.secrets import redact_text

    named = {"option": "--base-url"}.get(source, source)
    if not re.match(r"^https?://[^/\s]+", url):  # httpx would take `notaurl` as a path
        raise LingtestError(f"{key}: model `{ref.name}`: endpoint {redact_text(url)} ({named}) "
                            "is not an http(s) URL; fix: e.g. http://127.0.0.1:8000/v1")
    try:
        httpx.URL(url)
    except httpx.InvalidURL:  # its reason may quote part of a password: not shown
        raise LingtestError(f"{key}: model `{ref.name}`: endpoint {redact_text(url)} ({named}) "
                            "is not a valid URL; fix: %-encode / @ : # ? % in its user name or "
                            "password (e.g. / as %2F, @ as %40)") from None
    key_env = ref.key_env or DEFAULT_KEY_ENV
    if ref.key_env and httpx.URL(url).password:  # httpx would send the URL's, not the key
        raise LingtestError(f"{key}: model `{ref.name}`: its URL holds a password and #key_env="
                            f" names a key; only the URL's would reach the server; fix: drop "
                            f"one of them (the key goes as 'Authorization: Bearer')")
    if ref.key_env and not os.environ.get(ref.key_env):
        raise LingtestError(f"{key}: model `{ref.name}` reads its API key from ${ref.key_env} "
                            f"(key_env), which is not set; fix: export {ref.key_env}=<key>, "
                            f"or drop #key_env= for a server without keys")
    return Endpoint(url.rstrip("/"), key_env, source)


# ---------------------------------------------------------------------- in-flight limit

def slots_root() -> Path:
    """``$LINGTEST_CACHE/http-slots`` (default ``~/.cache/lingtest/http-slots``)."""
    base = os.environ.get("LINGTEST_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "lingtest")
    return Path(base) / "http-slots"


class EndpointLimit:
    """At most ``n`` requests in flight to one endpoint (base URL) from every process and
    thread on this machine: a semaphore of ``n`` slot files, each held by ``flock``.

    Why files and not Prefect's global concurrency limits: a limit must hold wherever a
    backend runs — Dask workers, the flow's threads, ``lingtest adapt``, a test without a
    Prefect server — and cost nothing per request; Prefect's limits need an API server, a
    limit object created (and kept in sync with ``concurrency``) beforehand, pass silently
    when the limit is missing (``strict=False``), poll the server to acquire and hold a
    lease renewed in a thread (a killed holder blocks the slot until its lease expires,
    300 s by default). A ``flock`` is released by the kernel when its holder dies, so a
    killed worker never leaves a slot taken, and an acquire is a system call. The cost: the
    limit is per machine; a remote Dask cluster (``runtime.dask_address``) gets one limit
    per machine (flock over network file systems is not dependable). Processes that ask
    with different ``n`` share slots ``0..n-1``, so the largest ``n`` among them is the
    bound. A per-process semaphore in front keeps threads from polling the files.
    """

    POLL_S = (0.005, 0.1)  # first and longest wait between attempts when all slots are held

    def __init__(self, base_url: str, n: int, root: Path | None = None):
        self.n = n
        self.endpoint = public_url(base_url)
        digest = hashlib.sha256(self.endpoint.encode()).hexdigest()[:16]
        self.folder = (root or slots_root()) / digest
        self._local = threading.Semaphore(n)
        self._warned = False

    @contextlib.contextmanager
    def slot(self) -> Iterator[int]:
        """Hold one slot while the body runs; yields its index (-1: this process's limit
        only, when the slot folder cannot be written)."""
        with self._local:
            try:
                acquired = self._acquire() if fcntl is not None else None
            except OSError as exc:
                if not self._warned:
                    self._warned = True
                    log.warning("%s: no slot files in %s (%s); the in-flight limit holds "
                                "per process only", self.endpoint, self.folder, exc)
                acquired = None
            if acquired is None:
                yield -1
                return
            handle, index = acquired
            try:
                yield index
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()

    def _acquire(self):
        if not self.folder.is_dir():  # endpoint.txt: which server a folder of slots is for
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / "endpoint.txt").write_text(self.endpoint + "\n", encoding="utf-8")
        wait = self.POLL_S[0]
        while True:
            for index in range(self.n):
                handle = open(self.folder / f"slot-{index}.lock", "a+b")
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    handle.close()
                    continue
                return handle, index
            time.sleep(wait)
            wait = min(wait * 2, self.POLL_S[1])


class HTTPBackend:
    """Shared request loop of the HTTP backends; subclasses build the body and read the text."""

    backend = "http"

    def __init__(self, spec: str, model: str, base_url: str, settings: LLMSettings,
                 api_key: str | None = None, key_env: str | None = None,
                 name: str | None = None):
        self.model_id = spec  # the spec without options or credentials (the store's key)
        self.name = name or spec
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.settings = settings
        self._key = api_key or None
        self.key_env = key_env
        self._limit = EndpointLimit(self.base_url, settings.concurrency)
        self._client = httpx.Client(
            timeout=settings.timeout_s,
            limits=httpx.Limits(max_connections=settings.concurrency),
            headers={"Authorization": f"Bearer {self._key}"} if self._key else None)
        self._sleep = time.sleep  # tests record back-off delays through this
        self.cut = 0  # answers the server stopped at the output cap
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ subclass hooks

    def _endpoint(self) -> str:
        raise NotImplementedError

    def _body(self, prompt: str) -> dict[str, Any]:
        raise NotImplementedError

    def _text(self, payload: dict[str, Any]) -> str | None:
        raise NotImplementedError

    # ------------------------------------------------------------------ public

    def parameters(self) -> dict:
        """Everything that determines the answers; the base URL without credentials. (Not
        the key's variable: a result store keys a model by these, and which variable holds
        the key changes no answer.)"""
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

    def answer(self, prompts: list[str], on_answer: OnAnswer | None = None
               ) -> list[LLMResponse]:
        """Answers in prompt order; never raises for a failed prompt. Each answer goes to
        ``on_answer`` as it returns, in this thread, so the caller can store it at once;
        the request's endpoint slot is held until ``on_answer`` returns, so at most
        ``concurrency`` prompts are ever sent and not yet stored (what a kill can make a
        rerun send again). Interrupted (Ctrl-C, or ``on_answer`` raising), no further prompt
        is sent and the requests in flight are awaited and handed over before the
        exception goes on (a second Ctrl-C stops the wait); so after a stop request
        (``lingtest.tasks.core.stopping``: SIGTERM)."""
        return self._each(prompts, self._ask, on_answer, "prompts")

    def _each(self, items: list, ask: Callable[[Any, contextlib.ExitStack | None,
                                                   threading.Event], Any],
              on_result: Callable[[list[tuple[int, Any]]], None] | None = None,
              what: str = "requests") -> list:
        """``answer``'s loop for any request kind: ``ask(item, keep, halt)`` per item on up
        to ``concurrency`` threads, each result handed to ``on_result`` in this thread while
        its endpoint slot is held (see ``answer``); results in item order."""
        if not items:
            return []
        out: list[Any] = [None] * len(items)
        workers = min(self.settings.concurrency, len(items))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm-http")
        keep = on_result is not None

        halt = threading.Event()  # set when interrupted: a queued item is not sent

        def run(item: Any) -> tuple[Any, contextlib.ExitStack]:
            held = contextlib.ExitStack()
            return ask(item, held if keep else None, halt), held

        futures = {pool.submit(run, item): i for i, item in enumerate(items)}
        handed: set[Future] = set()

        def hand_over(future: Future) -> None:
            handed.add(future)
            response, held = future.result()
            if response is None:  # never sent: the call was interrupted first
                return
            with held:  # the slot, released once the result is stored
                out[futures[future]] = response
                if on_result is not None:
                    on_result([(futures[future], response)])

        try:
            for future in as_completed(futures):
                hand_over(future)
                stopping.check(f"sending the remaining {what}")  # a SIGTERM: send no more
        except BaseException:
            halt.set()  # a worker already waiting for a slot sends nothing either
            for future in futures:
                future.cancel()  # queued: never sent
            with contextlib.suppress(BaseException):  # the sink failed, or a 2nd Ctrl-C
                for future in as_completed([f for f in futures if f not in handed
                                            and not f.cancelled()]):
                    hand_over(future)
            raise
        finally:
            for future in futures:  # never handed over (an interrupted wait): free its slot
                if future not in handed:
                    future.add_done_callback(_free_slot)
            pool.shutdown(wait=False, cancel_futures=True)
        return out

    def close(self) -> None:
        """Release pooled connections."""
        self._client.close()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.model_id!r}, base_url="
                f"{public_url(self.base_url)!r}, key={'set' if self._key else 'none'})")

    # ------------------------------------------------------------------ request loop

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    def _ask(self, prompt: str, keep: contextlib.ExitStack | None = None,
             halt: threading.Event | None = None) -> LLMResponse | None:
        """The prompt's answer after up to ``retries`` more attempts; ``keep``: takes over
        the endpoint slot of the attempt that answered (the caller frees it). None: not
        sent, because ``halt`` (the call interrupted) or a stop request came first."""
        outcome = self._retrying(lambda: self._attempt(prompt, keep, halt))
        return None if outcome is None else LLMResponse(*outcome)

    def _retrying(self, attempt: Callable[[], Any]
                  ) -> tuple[Any, str | None, float, int] | None:
        """(value, None, seconds, attempts) once ``attempt`` succeeds, or (None, error,
        seconds, attempts) after up to ``retries`` more attempts, waiting between them
        (doubling from ``backoff_s``, or the server's Retry-After; both capped); a failure
        that says it cannot succeed is not retried. None: ``attempt`` sent nothing (it
        returned None: the call was interrupted first)."""
        began = time.perf_counter()
        attempts = 0
        while True:
            attempts += 1
            try:
                value = attempt()
                if value is None:
                    return None
                return value, None, time.perf_counter() - began, attempts
            except _Failure as failure:
                message = self._scrub(str(failure))
                if not failure.retry or attempts > self.settings.retries:
                    log.warning("%s: giving up after %d attempt(s): %s", self.model_id,
                                attempts, message)
                    return None, message, time.perf_counter() - began, attempts
                delay = min(self.settings.backoff_s * 2 ** (attempts - 1), MAX_DELAY_S)
                if failure.retry_after is not None:
                    delay = min(failure.retry_after, MAX_DELAY_S)
                log.info("%s: attempt %d failed (%s); retrying in %.2f s", self.model_id,
                         attempts, message, delay)
                self._sleep(delay)

    def _attempt(self, prompt: str, keep: contextlib.ExitStack | None = None,
                 halt: threading.Event | None = None) -> str | None:
        """One request in an endpoint slot; the text (``keep`` takes the slot), or a
        _Failure saying whether to retry (the slot freed); None, unsent, when the call was
        interrupted (or a stop requested) while this prompt waited for its slot."""
        return self._in_slot(lambda: self._request(prompt), keep, halt)

    def _in_slot(self, request: Callable[[], Any], keep: contextlib.ExitStack | None = None,
                 halt: threading.Event | None = None) -> Any:
        """``request()`` in an endpoint slot (``_attempt``'s rules, for any request kind)."""
        with contextlib.ExitStack() as slot:
            slot.enter_context(self._limit.slot())
            if (halt is not None and halt.is_set()) or stopping.requested():
                return None
            value = request()
            if keep is not None:
                keep.enter_context(slot.pop_all())
            return value

    def _exchange(self, path: str, body: Any = None) -> tuple[Any, httpx.Headers]:
        """One request to ``base_url + path`` (POST ``body``, or GET when it is None): its
        decoded JSON and headers, or a _Failure saying whether to retry (connection errors,
        timeouts, 429, 5xx and an HTML error page may pass; other errors will not)."""
        url = f"{self.base_url}{path}"
        try:
            response = (self._client.get(url) if body is None
                        else self._client.post(url, json=body))
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
                           _retry_after(response.headers.get("Retry-After")) if retry else None,
                           status)
        try:
            payload = response.json()
        except ValueError as exc:
            raise _Failure(f"invalid JSON from {public_url(url)}: "
                           f"{response.text[:ERROR_BODY_CHARS]}", retry=False) from exc
        if isinstance(payload, dict) and payload.get("error"):
            raise _Failure(f"server error from {public_url(url)}: {payload['error']}",
                           retry=False)
        return payload, response.headers

    def _request(self, prompt: str) -> str:
        """One request: the text, or a _Failure saying whether to retry."""
        url = f"{self.base_url}{self._endpoint()}"
        payload, _ = self._exchange(self._endpoint(), self._body(prompt))
        if not isinstance(payload, dict):
            raise _Failure(f"unexpected response from {public_url(url)}: {payload!r:.300}",
                           retry=False)
        text = self._text(payload)
        if text is None or not text.strip():
            raise _Failure(f"empty response from {public_url(url)}: {payload!r:.300}",
                           retry=False)
        if _HTML_START.match(text):
            raise _Failure(f"HTML page instead of an answer from {public_url(url)}: "
                           f"{text[:ERROR_BODY_CHARS]}", retry=True)
        self._seen(payload)
        if self._finish(payload) == "length":
            with self._lock:
                self.cut += 1
            log.warning("%s: the answer reached the output cap (max_new_tokens=%d) and was cut; "
                        "raise consistency.max_new_tokens", self.model_id,
                        self.settings.max_new_tokens)
        return text

    def _seen(self, payload: dict[str, Any]) -> None:
        """Hook: note provenance a reply carries (OpenAI's system_fingerprint)."""

    def _finish(self, payload: dict[str, Any]) -> str | None:
        """Hook: why the server stopped generating ("length": the cap cut the answer)."""
        return None


def _store_spec(ref: "ModelRef") -> str:
    """The spec as stores and logs may keep it: no ``#`` options, no URL password."""
    from lingtest.tasks.core.secrets import redact_text

    return redact_text(ref.bare)


def _free_slot(future: Future) -> None:
    """Release the endpoint slot an answer that was never handed over still holds."""
    if not future.cancelled() and future.exception() is None:
        future.result()[1].close()


_HTML_START = re.compile(r"^\s*(?:<!doctype\s+html|<html[\s>])", re.IGNORECASE)


def _is_html(response: httpx.Response) -> bool:
    """An HTML document, by content type or by its first bytes."""
    kind = response.headers.get("content-type", "").lower()
    return "text/html" in kind or bool(_HTML_START.match(response.text[:200]))


class OllamaLLM(HTTPBackend):
    """Ollama's native generate API, JSON-constrained output, seeded options."""

    backend = "ollama"

    def __init__(self, ref: "ModelRef", settings: LLMSettings, key: str = "consistency.llms"):
        end = resolve_endpoint(ref, key=key)
        # Ollama itself takes no key; one named by key_env is sent (a proxy in front may ask)
        super().__init__(_store_spec(ref), ref.target, end.base_url, settings,
                         end.key() if ref.key_env else None, ref.key_env, ref.name)
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

    def _finish(self, payload: dict[str, Any]) -> str | None:
        return payload.get("done_reason")

    def digest(self) -> str | None:
        """The model's digest from ``GET /api/tags`` (looked up once; None if unavailable)."""
        if not self._digest_looked_up:
            self._digest_looked_up = True
            names = {self.model, self.model if ":" in self.model else f"{self.model}:latest"}
            try:
                with self._limit.slot():  # a single-threaded server counts this one too
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

    def __init__(self, ref: "ModelRef", settings: LLMSettings, key: str = "consistency.llms"):
        end = resolve_endpoint(ref, key=key)
        super().__init__(_store_spec(ref), ref.target, end.base_url, settings, end.key(),
                         end.key_env, ref.name)
        # Known only after replies, so recorded with the run, not in the model's identity.
        self.fingerprints: set[str] = set()

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

    def _finish(self, payload: dict[str, Any]) -> str | None:
        try:
            return payload["choices"][0].get("finish_reason")
        except (KeyError, IndexError, TypeError, AttributeError):
            return None

    def _seen(self, payload: dict[str, Any]) -> None:
        fingerprint = payload.get("system_fingerprint")
        if isinstance(fingerprint, str) and fingerprint:
            with self._lock:
                self.fingerprints.add(fingerprint)
