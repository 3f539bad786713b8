"""Fake Ollama and OpenAI-compatible servers on 127.0.0.1, for testing the HTTP backends.

Each records the requests it gets, answers deterministically (a JSON object with a verdict,
"true" when the prompt says the sky is blue, and the prompt itself so tests can check order),
can fail the first N generation calls with a status (and Retry-After), always fail, sleep
past the client's timeout, answer empty text, answer with an HTML error page and status 200
(``html_page``), serve another model digest (``digest``), answer a long JSON object that a
small token cap cuts (``long_answer``: that many filler words, one token each, cut at the
request's max_tokens / num_predict, finish reason "length"), and tracks the peak of
in-flight requests.

The same servers embed (``protocol`` "openai": ``POST /v1/embeddings``, ``GET /v1/models``;
"ollama": ``POST /api/embed``; "tei": Text Embeddings Inference's ``POST /embed`` and
``GET /info``): deterministic vectors (``bag_of_words``: similar texts are similar), token
counts unless ``usage`` is off, the same failure modes, and ``replied`` counts the embedding
replies sent.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from typing_extensions import Self

DIGEST = "sha256:0123456789abcdef"
# What a reverse proxy sends with status 200 when the model server behind it is down.
HTML_PAGE = ("<!DOCTYPE html>\n<html><head><title>Service unavailable</title></head>"
             "<body><h1>Yes, we are down</h1><p>Try again later.</p></body></html>")


@dataclass
class Recorded:
    """One request as the server saw it (header names lower-cased)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


def verdict(prompt: str) -> str:
    """The fake model's answer to one prompt."""
    if "empty" in prompt:
        return ""
    return json.dumps({"answer": "true" if "sky is blue" in prompt.lower() else "false",
                       "prompt": prompt})


EMBED_ROUTES = {"openai": "/v1/embeddings", "ollama": "/api/embed", "tei": "/embed"}
GENERATE_ROUTES = {"openai": "/v1/chat/completions", "ollama": "/api/generate"}
OPENAI_MODELS = [{"id": "gpt-4o-mini", "object": "model", "created": 1721172741,
                  "owned_by": "system"},
                 {"id": "text-embedding-3-small", "object": "model", "created": 1705948997,
                  "owned_by": "system"}]
TEI_INFO = {"model_id": "BAAI/bge-small-en-v1.5", "model_sha": "5c38ec7c405ec4b44b94cc5a9bb96e73",
            "model_dtype": "float16", "max_client_batch_size": 32}


def bag_of_words(text: str, dim: int = 64) -> list[float]:
    """The fake model's vector: each word hashed into one of ``dim`` columns, L2-normalised
    (a text without words: the first column)."""
    vector = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        vector[int(hashlib.sha256(word.encode()).hexdigest(), 16) % dim] += 1.0
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else [1.0] + [0.0] * (dim - 1)


def token_count(texts: list[str]) -> int:
    return sum(len(re.findall(r"\w+|[^\w\s]", t)) for t in texts)


@dataclass
class FakeLLMServer:
    """A protocol server in a background thread; use as a context manager."""

    protocol: str  # "ollama", "openai" or "tei" (embeddings only)
    fail_first: int = 0
    fail_status: int = 500
    retry_after: str | None = None
    sleep_s: float = 0.0
    slow_first: int = 0  # > 0: only the first N generation / embedding calls sleep sleep_s
    html_page: bool = False
    digest: str = DIGEST
    long_answer: int = 0
    dim: int = 64
    usage: bool = True
    info: dict = field(default_factory=lambda: dict(TEI_INFO))
    openai_models: list = field(default_factory=lambda: list(OPENAI_MODELS))  # GET /v1/models
    requests: list[Recorded] = field(default_factory=list, init=False)
    replied: int = field(default=0, init=False)
    max_in_flight: int = field(default=0, init=False)
    _in_flight: int = field(default=0, init=False)
    _generations: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _httpd: ThreadingHTTPServer | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        """The base URL a client is configured with (OpenAI clients include /v1)."""
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}" + ("/v1" if self.protocol == "openai" else "")

    def generations(self) -> list[Recorded]:
        """The generation requests only (not metadata look-ups)."""
        return [r for r in self.requests if r.method == "POST"]

    def embeddings(self) -> list[Recorded]:
        """The embedding requests only."""
        return [r for r in self.requests if r.path == EMBED_ROUTES[self.protocol]]

    def embedded_texts(self) -> list[str]:
        """Every text the embedding requests carried, in request order."""
        key = "inputs" if self.protocol == "tei" else "input"
        return [t for r in self.embeddings() for t in r.body[key]]

    def __enter__(self) -> Self:
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._httpd is not None
        self._httpd.shutdown()
        self._httpd.server_close()

    # ------------------------------------------------------------------ behaviour

    def handle(self, method: str, path: str, headers: dict[str, str], body: Any
               ) -> tuple[int, dict[str, str], Any]:
        """(status, extra headers, JSON payload) for one request."""
        with self._lock:
            self.requests.append(Recorded(method, path, headers, body))
        if method == "GET":
            if self.protocol == "ollama" and path == "/api/tags":
                return 200, {}, {"models": [{"name": name, "model": name, "digest": self.digest}
                                            for name in ("llama3.2:latest",
                                                         "nomic-embed-text:latest")]}
            if self.protocol == "openai" and path == "/v1/models":
                return 200, {}, {"object": "list", "data": self.openai_models}
            if self.protocol == "tei" and path == "/info":
                return 200, {}, self.info
            return 404, {}, {"error": f"no route {path}"}
        if path not in (GENERATE_ROUTES.get(self.protocol), EMBED_ROUTES[self.protocol]):
            return 404, {}, {"error": f"no route {path}"}
        with self._lock:
            self._generations += 1
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
            failing = self._generations <= self.fail_first
            slow = not self.slow_first or self._generations <= self.slow_first
        try:
            time.sleep(self.sleep_s if slow else 0.0)
        finally:
            with self._lock:  # before replying, so a client slot is free only after this
                self._in_flight -= 1
        if failing:
            extra = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
            # Echo the credentials back, as some real servers do, to test scrubbing.
            echo = headers.get("authorization", "")
            return self.fail_status, extra, {"error": f"planned failure (auth: {echo})"}
        if self.html_page:
            return 200, {"Content-Type": "text/html"}, HTML_PAGE
        if path == EMBED_ROUTES[self.protocol]:
            return self._embed(body)
        return 200, {}, self._reply(body)

    def _embed(self, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        texts = body["inputs" if self.protocol == "tei" else "input"]
        vectors = [bag_of_words(t, body.get("dimensions") or self.dim) for t in texts]
        tokens = token_count(texts)
        with self._lock:
            self.replied += 1
        if self.protocol == "tei":
            return 200, {"x-compute-tokens": str(tokens)} if self.usage else {}, vectors
        if self.protocol == "ollama":
            return 200, {}, {"model": body["model"], "embeddings": vectors,
                             **({"prompt_eval_count": tokens} if self.usage else {})}
        data = [{"object": "embedding", "index": i, "embedding": v}
                for i, v in enumerate(vectors)][::-1]  # out of order: the client sorts
        return 200, {}, {"object": "list", "data": data, "model": body["model"],
                         **({"usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
                            if self.usage else {})}

    def _reply(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.protocol == "ollama":
            text, reason = self._capped(verdict(body["prompt"]),
                                        body.get("options", {}).get("num_predict"))
            return {"model": body["model"], "response": text, "done": True,
                    "done_reason": reason}
        prompt = body["messages"][-1]["content"]
        text, reason = self._capped(verdict(prompt), body.get("max_tokens"))
        return {"id": "chatcmpl-test", "object": "chat.completion", "model": body["model"],
                "system_fingerprint": "fp_test",
                "choices": [{"index": 0, "finish_reason": reason,
                             "message": {"role": "assistant", "content": text}}]}

    def _capped(self, text: str, cap: int | None) -> tuple[str, str]:
        """``long_answer``: the verdict with a long reason, cut at ``cap`` words as a model
        cuts at its token cap."""
        if not self.long_answer:
            return text, "stop"
        reason = " ".join(["because"] * self.long_answer)
        words = json.dumps({**json.loads(text), "reason": reason}).split(" ")
        if cap is not None and len(words) > cap:
            return " ".join(words[:cap]), "length"
        return " ".join(words), "stop"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeLLMServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: clients that timed out close their sockets before the reply."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, extra, payload = self.server.fake.handle(method, self.path, headers, body)
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", extra.pop("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(data)))
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging."""


def killed_mid_run(script: str, args: list[str], replied, at_least: int,
                   timeout_s: float = 60.0) -> int:
    """Run ``python -c script *args`` in the project and SIGKILL it once ``replied()`` (the
    fake server's completed replies) reaches ``at_least``: how many had replied at the
    kill. Fails when the run ended on its own first (it was never killed)."""
    import os
    import signal
    import subprocess
    import sys

    from lingtest.tasks.core.paths import PACKAGE_ROOT

    child = subprocess.Popen([sys.executable, "-c", script, *args], cwd=PACKAGE_ROOT,
                             env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)})
    deadline = time.monotonic() + timeout_s
    while replied() < at_least and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.02)
    count = replied()
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL, "the run ended before it was killed"
    return count


class LabelChat(FakeLLMServer):
    """An OpenAI-compatible chat model used as a classifier: ``rule(prompt)`` is its answer
    to each chat prompt (e.g. "good", "Negative", "I cannot tell."); with ``logprobs`` on and
    asked for, the answer comes as one token per word, its first word at probability 0.8
    beside ``rivals[first word]`` (when named) at 0.15. ``GET /v1/models`` lists ``model``
    alone, created ``created``. ``chat_prompts()``: the prompts it was asked, in order."""

    def __init__(self, rule, logprobs: bool = True, rivals: dict[str, str] | None = None,
                 model: str = "tiny-chat", created: int = 1700000000):
        super().__init__("openai")
        self.rule, self.logprobs, self.rivals = rule, logprobs, dict(rivals or {})
        self.openai_models = [{"id": model, "object": "model", "created": created}]

    def chat_prompts(self) -> list[str]:
        return [r.body["messages"][-1]["content"] for r in self.generations()]

    def _tokens(self, content: str) -> list[dict[str, Any]]:
        words = re.findall(r"\s*\S+", content)
        tokens = [{"token": w, "logprob": -0.01, "top_logprobs": [{"token": w, "logprob": -0.01}]}
                  for w in words]
        if tokens:
            first = tokens[0]
            first["logprob"] = first["top_logprobs"][0]["logprob"] = math.log(0.8)
            rival = self.rivals.get(words[0].strip())
            if rival:
                first["top_logprobs"].append({"token": rival, "logprob": math.log(0.15)})
        return tokens

    def _reply(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.replied += 1
        content = self.rule(body["messages"][-1]["content"])
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": content}}
        if self.logprobs and body.get("logprobs"):
            choice["logprobs"] = {"content": self._tokens(content)}
        return {"id": "chatcmpl-test", "object": "chat.completion", "model": body["model"],
                "choices": [choice]}
