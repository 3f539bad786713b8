"""KomMKonLLM model identity names the server: answers from another endpoint (or another
build of the model) are never reused; an HTML page sent with 200 is an error, not an answer."""
from __future__ import annotations

import pytest
from llm_servers import DIGEST, FakeLLMServer

from lingtest.tasks.consistency.answering import identity
from lingtest.tasks.models.llm import LLMSettings, load_llm

FAST = {"timeout_s": 2.0, "retries": 1, "backoff_s": 0.0, "concurrency": 2}
SETTINGS = {"max_new_tokens": 16, "temperature": 0.0, "seed": 0, "system": None,
            "timeout_s": 2.0, "retries": 1, "backoff_s": 0.0, "concurrency": 2,
            "offline": True, "device": "cpu", "batch_size": 8}
PROMPTS = {"prompt_prefix": "", "prompt_suffix": "Return a JSON Boolean."}


@pytest.fixture(autouse=True)
def _no_llm_env(monkeypatch):
    for name in ("OLLAMA_HOST", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _ollama_identity(server: FakeLLMServer, monkeypatch) -> str:
    monkeypatch.setenv("OLLAMA_HOST", server.url)
    return identity("ollama:llama3.2", SETTINGS, PROMPTS)


def test_ollama_identity_names_host_and_digest(monkeypatch):
    with FakeLLMServer("ollama") as one, FakeLLMServer("ollama") as other, \
            FakeLLMServer("ollama", digest="sha256:fedcba9876543210") as rebuilt:
        first = _ollama_identity(one, monkeypatch)
        assert _ollama_identity(one, monkeypatch) == first  # stable on the same server
        assert _ollama_identity(other, monkeypatch) != first  # another host, same digest
        assert _ollama_identity(rebuilt, monkeypatch) != _ollama_identity(other, monkeypatch)
        assert [r.path for r in one.requests] == ["/api/tags", "/api/tags"]  # no generation


def test_openai_identity_names_base_url_without_credentials(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.0.0.1:8000/v1")
    first = identity("openai:gpt-4o-mini", SETTINGS, PROMPTS)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://10.0.0.2:8000/v1")
    assert identity("openai:gpt-4o-mini", SETTINGS, PROMPTS) != first
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")  # the key is not identity
    assert identity("openai:gpt-4o-mini", SETTINGS, PROMPTS) == identity(
        "openai:gpt-4o-mini", SETTINGS, PROMPTS)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://user:pw@10.0.0.2:8000/v1?token=x")
    llm = load_llm("openai:gpt-4o-mini", LLMSettings(**FAST))
    assert llm.endpoint() == {"base_url": "http://10.0.0.2:8000/v1"}


def test_ollama_endpoint_and_openai_fingerprint_are_recorded(monkeypatch):
    with FakeLLMServer("ollama") as server:
        monkeypatch.setenv("OLLAMA_HOST", server.url)
        llm = load_llm("ollama:llama3.2", LLMSettings(**FAST))
        assert llm.endpoint() == {"base_url": server.url, "digest": DIGEST}
    with FakeLLMServer("openai") as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        llm = load_llm("openai:gpt-4o-mini", LLMSettings(**FAST))
        llm.answer(["Is the sky is blue?"])
        assert llm.fingerprints == {"fp_test"}


@pytest.mark.parametrize("protocol", ["ollama", "openai"])
def test_html_page_with_status_200_is_a_retried_error(monkeypatch, protocol):
    with FakeLLMServer(protocol, html_page=True) as server:
        if protocol == "ollama":
            monkeypatch.setenv("OLLAMA_HOST", server.url)
            llm = load_llm("ollama:llama3.2", LLMSettings(**FAST))
        else:
            monkeypatch.setenv("OPENAI_BASE_URL", server.url)
            llm = load_llm("openai:gpt-4o-mini", LLMSettings(**FAST))
        out = llm.answer(["Is the sky blue?"])[0]
        assert out.text is None and "HTML page" in out.error
        assert out.attempts == 2 and len(server.generations()) == 2  # retried, then given up
