"""Embedding services as encoders: ``openai:MODEL@URL`` (``POST {URL}/embeddings``),
``ollama:MODEL@URL`` (``POST {URL}/api/embed``) and ``tei:[MODEL]@URL`` (Text Embeddings
Inference, ``POST {URL}/embed``), behind the interface the contrastive stage asks of an
encoder (``lingtest.tasks.models.any_encoder``).

A service is not a local model: each request costs time and often money, and its weights
cannot be read. So

- requests go through the LLM backends' loop (``llm_http.HTTPBackend``: timeouts, retries
  with back-off honouring Retry-After, at most ``concurrency`` requests in flight per
  endpoint across every process, the key scrubbed from errors), ``contrastive.batch_size``
  texts each (TEI: at most its ``max_client_batch_size``);
- each request's vectors go to the caller (the embedding store's ``append``) while its
  endpoint slot is held, so at most ``concurrency`` returned requests are ever unstored;
- the revision is what the server states (OpenAI: its ``/models`` entry; Ollama: the digest
  from ``/api/tags``; TEI: ``/info``'s model id, sha and dtype), prefixed
  ``endpoint:<public URL>`` — never a key or a URL's password;
- requests and input tokens are counted for the report (the server's ``usage`` /
  ``prompt_eval_count`` / ``x-compute-tokens``; otherwise characters/4, marked estimated);
- there is no tokenizer, so θ's ``vocab`` dictionary is ``contrastive.dictionary_file``'s
  words, or without one a packaged English word list (``english_words``: wordfreq's most
  frequent alphabetic English words), named in the report.

The HTTP settings are the project's (``consistency.concurrency``, ``timeout_s``, ``retries``,
``backoff_s``: ``endpoint_settings``), so one server is asked alike by every stage.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.llm import LLMSettings
from lingtest.tasks.models.llm_http import HTTPBackend, _Failure, _store_spec, public_url, resolve_endpoint
from lingtest.tasks.models.model_spec import ModelRef

ENCODER_ENDPOINTS = ("openai", "ollama", "tei")
ENDPOINT_POOLING = "endpoint"
# The input tokens' source when this run asked nothing (every vector from the store).
NO_REQUESTS = "no request made"
API = {"openai": "OpenAI embeddings API (/embeddings)", "ollama": "Ollama embed API (/api/embed)",
       "tei": "Text Embeddings Inference (/embed)"}
KEY = "contrastive.encoders"
CHARS_PER_TOKEN = 4  # the usual estimate when a server states no token count


def is_endpoint(ref: ModelRef) -> bool:
    """Whether ``ref`` names a model behind an HTTP server."""
    return ref.form in ("openai", "openai-chat", "ollama", "tei")


def _shown(ref: ModelRef) -> str:
    from lingtest.tasks.core.secrets import redact_text

    return redact_text(ref.bare)


def endpoint_dimensions(ref: ModelRef, key: str = KEY) -> int | None:
    """``#dimensions=N`` as a positive int (None when absent); one error otherwise, or when
    the protocol cannot ask for it (TEI's /embed has no such field)."""
    raw = ref.options.get("dimensions")
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise LingtestError(f"{key}: model `{ref.name}` ({_shown(ref)}): dimensions={raw!r} is "
                            f"not a positive whole number; fix: #dimensions=256 (say), or "
                            f"drop it for the model's own size")
    if ref.form == "tei":
        raise LingtestError(f"{key}: model `{ref.name}` ({_shown(ref)}): a TEI server's /embed "
                            f"takes no dimensions; fix: drop #dimensions= (TEI serves the "
                            f"model's own size)")
    return int(raw)


def check_endpoint_encoder(ref: ModelRef, key: str = KEY) -> dict:
    """``lingtest models``'s row of an endpoint encoder, checked without contacting it: an
    embeddings protocol, its URL (an ``openai:`` spec without one is refused rather than
    sent to the public API), a set key variable and a valid ``dimensions``. Whether the
    server answers is known at run time (a clear error then)."""
    if ref.form not in ENCODER_ENDPOINTS:
        raise LingtestError(f"{key}: model `{ref.name}` ({_shown(ref)}) is a `{ref.form}:` "
                            f"model (a chat API), not a sentence encoder; fix: openai:MODEL@URL "
                            f"(an embeddings API), ollama:MODEL@URL or tei:@URL")
    end = resolve_endpoint(ref, key=key)
    dimensions = endpoint_dimensions(ref, key)
    from lingtest.tasks.core.secrets import redact_text

    return {"id": redact_text(ref.spec), "name": ref.name,
            "kind": "encoder", "source": "endpoint",
            "revision": f"endpoint:{end.public} (stated by the server when the run starts)",
            "pooling": ENDPOINT_POOLING + (f", dimensions={dimensions}" if dimensions else ""),
            "path": end.public}


def endpoint_settings(params: Any = None) -> LLMSettings:
    """The project's HTTP settings (``consistency.concurrency``, ``timeout_s``, ``retries``,
    ``backoff_s``), or the defaults without a consistency section."""
    section = getattr(params, "consistency", None)
    if section is None:
        return LLMSettings()
    return LLMSettings(timeout_s=section.timeout_s, retries=section.retries,
                       backoff_s=section.backoff_s, concurrency=section.concurrency)


ENGLISH_WORDS = 30_000  # the most frequent words wordfreq lists, before non-alphabetic go


def english_words() -> list[str]:
    """The packaged English word list: wordfreq's ``ENGLISH_WORDS`` most frequent English
    words, the alphabetic ones, most frequent first (its data ships in the package)."""
    import re

    import wordfreq

    return [w for w in wordfreq.top_n_list("en", ENGLISH_WORDS) if re.fullmatch("[a-z]+", w)]


def english_words_note() -> str:
    """The word list's name and version, for provenance."""
    from importlib.metadata import version

    return (f"a packaged English word list (wordfreq {version('wordfreq')}: the alphabetic "
            f"words among the {ENGLISH_WORDS:,} most frequent English words)")


def no_vocabulary(ref: ModelRef) -> LingtestError:
    return LingtestError(
        f"contrastive: model `{ref.name}` ({_shown(ref)}) is an embedding service: it has no "
        f"tokenizer whose words could make the `vocab` dictionary (θ from the nearest "
        f"neighbours of whole words); fix: set contrastive.dictionary_file to a word list "
        f"(JSON list or one word per line), which then is this model's `vocab` dictionary, "
        f"or contrastive.thresholds: [zero] (no dictionary)")


# --------------------------------------------------------------------------- requests

@dataclass(frozen=True)
class Batch:
    """One request's outcome: ``vectors`` (rows in input order) or, after retries, ``error``."""

    vectors: np.ndarray | None
    error: str | None
    latency_s: float
    attempts: int


_ABSENT = object()  # a metadata route the server does not have


class EmbeddingClient(HTTPBackend):
    """One POST per batch of texts through ``HTTPBackend``'s request loop; subclasses name
    the route, build the body and read the vectors, token count and revision."""

    backend = "embeddings"
    path = ""

    def __init__(self, ref: ModelRef, settings: LLMSettings, dimensions: int | None,
                 key: str = KEY):
        end = resolve_endpoint(ref, key=key)
        api_key = end.key() if ref.form == "openai" or ref.key_env else None
        super().__init__(_store_spec(ref), ref.target, end.base_url, settings, api_key,
                         end.key_env if api_key else None, ref.name)
        self.ref, self.key, self.dimensions = ref, key, dimensions
        self.max_batch: int | None = None
        self.requests = self.tokens = self.estimated = 0
        self.fingerprints: set[str] = set()

    # ------------------------------------------------------------------ protocol hooks

    def _embed_body(self, texts: list[str]) -> dict[str, Any]:
        """OpenAI's and Ollama's body: the model, the texts and any ``dimensions``."""
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        return body

    def _rows(self, payload: Any, headers: httpx.Headers, n: int
              ) -> tuple[Any, int | None]:
        """(the vectors as the server sent them, its input token count or None)."""
        raise NotImplementedError

    def stated(self) -> list[str]:
        """What the server states about the model (its id, digest, ...), for the revision."""
        raise NotImplementedError

    # ------------------------------------------------------------------ requests

    def _fail(self, what: str) -> _Failure:
        return _Failure(f"{what} from {public_url(self.base_url + self.path)}", retry=False)

    def _embed_request(self, texts: list[str]) -> np.ndarray:
        """One request: a float32 (len(texts), dim) matrix, or a _Failure."""
        with self._lock:
            self.requests += 1
        payload, headers = self._exchange(self.path, self._embed_body(texts))
        rows, tokens = self._rows(payload, headers, len(texts))
        if rows and isinstance(rows[0], list) and rows[0] and isinstance(rows[0][0], list):
            raise self._fail("one vector per token, not one per text (a model served without "
                             "pooling, e.g. a causal LM in llama.cpp's server; fix: serve an "
                             "embedding model, or one whose GGUF states its pooling)")
        try:
            matrix = np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError):
            raise self._fail(f"vectors that are not rows of numbers ({rows!r:.200})") from None
        if matrix.ndim != 2 or matrix.shape[0] != len(texts) or matrix.shape[1] < 1:
            raise self._fail(f"vectors of shape {matrix.shape} for {len(texts)} texts")
        if self.dimensions is not None and matrix.shape[1] != self.dimensions:
            raise self._fail(f"{matrix.shape[1]}-dimensional vectors, dimensions="
                             f"{self.dimensions} asked")
        if not np.isfinite(matrix).all():
            raise self._fail("NaN or infinite vectors")
        with self._lock:
            if tokens is None:
                self.estimated += 1
                tokens = math.ceil(sum(len(t) for t in texts) / CHARS_PER_TOKEN)
            self.tokens += tokens
        return matrix

    def _ask_batch(self, texts: list[str], keep=None, halt=None) -> Batch | None:
        outcome = self._retrying(
            lambda: self._in_slot(lambda: self._embed_request(texts), keep, halt))
        return None if outcome is None else Batch(*outcome)

    def embed_batches(self, batches: list[list[str]],
                      on_batch: Callable[[list[tuple[int, Batch]]], None] | None = None
                      ) -> list[Batch | None]:
        """Every batch's outcome in order, up to ``concurrency`` in flight; each goes to
        ``on_batch`` as it returns, its endpoint slot held until that returns."""
        return self._each(batches, self._ask_batch, on_batch, "embedding requests")

    def metadata(self, path: str) -> Any:
        """``GET path``'s JSON, retried as a request is; ``_ABSENT`` when the server has no
        such route; one clear error when it cannot be reached or refuses the key."""
        def get() -> Any:
            try:
                return self._exchange(path)[0]
            except _Failure as failure:
                if failure.retry or failure.status in (401, 403):
                    raise
                return _ABSENT

        outcome = self._retrying(lambda: self._in_slot(get))
        if outcome is None or outcome[1] is not None:
            error = outcome[1] if outcome else "stopped"
            raise LingtestError(
                f"{self.key}: model `{self.name}` ({self.model_id}): cannot read "
                f"{public_url(self.base_url)}{path} ({error}); fix: start the server, correct "
                f"its URL in the spec, or set the API key's variable "
                f"({self.ref.key_env or 'OPENAI_API_KEY'})")
        return outcome[0]

    def parameters(self) -> dict:
        return {"backend": self.backend, "spec": self.model_id, "model": self.model,
                "base_url": public_url(self.base_url), "dimensions": self.dimensions}

    def _absent_model(self, listed: list[str], fix: str) -> LingtestError:
        shown = ", ".join(sorted(listed)[:8]) or "none"
        return LingtestError(f"{self.key}: model `{self.name}` ({self.model_id}): "
                             f"{public_url(self.base_url)} does not serve `{self.model}` (it "
                             f"lists: {shown}); fix: {fix}")


class OpenAIEmbeddings(EmbeddingClient):
    """``POST /embeddings`` of an OpenAI-compatible server (OpenAI, vLLM, llama.cpp, ...)."""

    backend, path = "openai-embeddings", "/embeddings"

    def _rows(self, payload, headers, n):
        data = payload.get("data") if isinstance(payload, dict) else None
        try:
            ordered = sorted(data, key=lambda item: item["index"])
            rows = [item["embedding"] for item in ordered]
            indices = [item["index"] for item in ordered]
        except (KeyError, TypeError):
            raise self._fail(f"no data[].index/embedding in {payload!r:.200}") from None
        if indices != list(range(n)):
            raise self._fail(f"indices {indices[:10]} for {n} inputs")
        fingerprint = payload.get("system_fingerprint")
        if isinstance(fingerprint, str) and fingerprint:
            with self._lock:
                self.fingerprints.add(fingerprint)
        usage = payload.get("usage")
        tokens = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return rows, tokens if isinstance(tokens, int) else None

    def stated(self) -> list[str]:
        listed = self.metadata("/models")
        if listed is _ABSENT:
            return [self.model, "no /models"]
        entries = listed.get("data") if isinstance(listed, dict) else None
        entries = [e for e in entries or [] if isinstance(e, dict)]
        entry = next((e for e in entries if e.get("id") == self.model), None)
        if entry is None:
            raise self._absent_model([str(e.get("id")) for e in entries],
                                     f"openai:<one of them>@{public_url(self.base_url)}")
        # not `created`: vLLM's and lmdeploy's model cards stamp it with the time of each
        # request, so it would make every run a new revision (and re-embed everything)
        return [str(entry["id"]), *(f"{field}={entry[field]}" for field in ("owned_by", "root")
                                    if entry.get(field) not in (None, ""))]


class OllamaEmbeddings(EmbeddingClient):
    """Ollama's ``POST /api/embed``."""

    backend, path = "ollama-embed", "/api/embed"

    def _rows(self, payload, headers, n):
        rows = payload.get("embeddings") if isinstance(payload, dict) else None
        if rows is None:
            raise self._fail(f"no embeddings in {payload!r:.200}")
        tokens = payload.get("prompt_eval_count")
        return rows, tokens if isinstance(tokens, int) else None

    def stated(self) -> list[str]:
        tags = self.metadata("/api/tags")
        models = tags.get("models", []) if isinstance(tags, dict) else []
        names = {self.model, self.model if ":" in self.model else f"{self.model}:latest"}
        digest = next((m.get("digest") for m in models if isinstance(m, dict)
                       and names & {m.get("name"), m.get("model")}), None)
        if tags is not _ABSENT and not digest:
            raise self._absent_model([str(m.get("name")) for m in models if isinstance(m, dict)],
                                     f"ollama pull {self.model} on the server")
        return [self.model, digest or "no /api/tags"]


class TEIEmbeddings(EmbeddingClient):
    """Text Embeddings Inference's ``POST /embed`` (and ``GET /info``)."""

    backend, path = "tei", "/embed"

    def _embed_body(self, texts: list[str]) -> dict[str, Any]:
        return {"inputs": texts}

    def _rows(self, payload, headers, n):
        tokens = headers.get("x-compute-tokens")
        return payload, int(tokens) if tokens and tokens.isdigit() else None

    def stated(self) -> list[str]:
        info = self.metadata("/info")
        if not isinstance(info, dict) or not info.get("model_id"):
            raise LingtestError(f"{self.key}: model `{self.name}` ({self.model_id}): "
                                f"{public_url(self.base_url)}/info names no model_id, so this "
                                f"is not a Text Embeddings Inference server; fix: its URL")
        served = str(info["model_id"])
        if self.model and self.model != served:
            raise LingtestError(f"{self.key}: model `{self.name}` ({self.model_id}): "
                                f"{public_url(self.base_url)} serves `{served}`, not "
                                f"`{self.model}`; fix: tei:{served}@URL or tei:@URL")
        size = info.get("max_client_batch_size")
        self.max_batch = size if isinstance(size, int) and size > 0 else None
        return [served, *(str(info[f]) for f in ("model_sha", "model_dtype") if info.get(f))]


CLIENTS = {"openai": OpenAIEmbeddings, "ollama": OllamaEmbeddings, "tei": TEIEmbeddings}


# --------------------------------------------------------------------------- the encoder

class EndpointEncoder:
    """An embedding service as an encoder: the interface ``any_encoder``'s encoders share
    (``encode``, ``model_id``, ``revision``, ``pooling``, ``cache_key``, ``vocabulary``,
    ``normal_forms``, ``parameters``, ``cache_token``), plus ``encode_each`` (the embedding
    store's per-request path) and ``usage`` (what this run asked)."""

    exact_length = False
    pooling = ENDPOINT_POOLING
    vocabulary_source = None  # no tokenizer: contrastive.dictionary_file, else English words

    def __init__(self, ref: ModelRef, client: EmbeddingClient):
        self.ref, self.client = ref, client
        self.endpoint = public_url(client.base_url)
        self.dimensions = client.dimensions
        self.revision = "|".join([f"endpoint:{self.endpoint}", *client.stated()])
        self.dim = self.dimensions
        self.embedded = 0

    @property
    def model_id(self) -> str:
        return self.ref.name

    @property
    def cache_key(self) -> str:
        """The service decides the vectors; its public URL and ``dimensions`` key them too,
        so another server or size never reads these vectors."""
        return (f"{ENDPOINT_POOLING}|{self.endpoint}"
                + (f"|dimensions={self.dimensions}" if self.dimensions else ""))

    def form_text(self) -> str:
        size = f", dimensions={self.dimensions}" if self.dimensions else ""
        return f"{API[self.ref.form]} at {self.endpoint}{size}"

    def describe(self) -> str:
        return f"{_shown(self.ref)}: {self.form_text()}"

    def encode_each(self, texts: Sequence[str], batch_size: int,
                    on_vectors: Callable[[list[str], np.ndarray], object]) -> None:
        """Embed ``texts`` in requests of ``batch_size`` (TEI: at most its
        ``max_client_batch_size``), up to ``concurrency`` at once; each request's
        ``on_vectors(texts, vectors)`` runs as it returns. Requests that fail after their
        retries are one error at the end, the others' vectors handed over already."""
        if batch_size < 1:
            raise LingtestError(f"batch_size must be >= 1 (got {batch_size})")
        size = min(batch_size, self.client.max_batch or batch_size)
        texts = list(texts)
        batches = [texts[i:i + size] for i in range(0, len(texts), size)]

        def hand_over(done: list[tuple[int, Batch]]) -> None:
            for index, batch in done:
                if batch.vectors is not None:
                    on_vectors(batches[index], batch.vectors)
                    self.embedded += len(batches[index])
                    self.dim = int(batch.vectors.shape[1])

        outcomes = self.client.embed_batches(batches, hand_over)
        failed = [b for b in outcomes if b is None or b.error]
        if failed:
            first = next((b.error for b in failed if b is not None), "not sent")
            raise LingtestError(
                f"{self.client.key}: model `{self.model_id}` ({_shown(self.ref)}): "
                f"{len(failed)} of {len(batches)} embedding requests to {self.endpoint} "
                f"failed after retries (first: {first}); the other requests' vectors are "
                f"stored; fix: check the server, then rerun (only texts not stored are sent)")

    def encode(self, sentences: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """float32 (len(sentences), dim) in input order (``encode_each`` into a matrix)."""
        if isinstance(sentences, str):
            raise LingtestError("encode() takes a list of sentences, not one string")
        rows: dict[str, np.ndarray] = {}
        self.encode_each(list(dict.fromkeys(sentences)), batch_size,
                         lambda texts, vectors: rows.update(zip(texts, vectors)))
        if not rows:
            return np.empty((0, self.dim or 0), dtype=np.float32)
        return np.stack([rows[s] for s in sentences]).astype(np.float32)

    def vocabulary(self, ascii_only: bool = True) -> list[str]:
        """No tokenizer: the packaged English word list (``english_words``)."""
        return english_words()

    @property
    def word_list_note(self) -> str:
        return english_words_note()

    def normal_forms(self, words: list[str]) -> list[str]:
        """Each word as written: the service's normalisation is not known here."""
        return list(words)

    def usage(self) -> dict[str, object]:
        """What this encoder asked the server so far, for the embed task and the report."""
        c = self.client
        tokens = (NO_REQUESTS if not c.requests else "server-stated" if not c.estimated
                  else "estimated (characters/4)" if c.estimated == c.requests
                  else "partly estimated (characters/4)")
        return {"endpoint": self.endpoint, "revision": self.revision, "requests": c.requests,
                "input_tokens": c.tokens, "tokens": tokens, "embedded_now": self.embedded,
                "fingerprints": sorted(c.fingerprints)}

    def parameters(self) -> dict[str, object]:
        return {"model_id": self.model_id, "spec": _shown(self.ref), "form": self.ref.form,
                "revision": self.revision, "pooling": self.pooling, "dim": self.dim,
                "source": "endpoint", "endpoint": self.endpoint, "model": self.client.model,
                "dimensions": self.dimensions, "max_batch": self.client.max_batch,
                "exact_length_passes": False}

    def cache_token(self) -> dict[str, object]:
        return {**self.parameters(), "cache_key": self.cache_key}

    def close(self) -> None:
        self.client.close()

    def __repr__(self) -> str:
        return f"EndpointEncoder({self.model_id!r}, revision={self.revision!r})"


def load_endpoint_encoder(ref: ModelRef, settings: LLMSettings | None = None,
                          key: str = KEY) -> EndpointEncoder:
    """The encoder of an endpoint spec, its revision read from the server (one clear error
    when the spec is wrong, the server cannot be reached or does not serve the model)."""
    check_endpoint_encoder(ref, key)
    client = CLIENTS[ref.form](ref, settings or LLMSettings(), endpoint_dimensions(ref, key), key)
    return EndpointEncoder(ref, client)
