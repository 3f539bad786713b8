"""Checks of served and prompted models that a run would otherwise ignore silently: an option
its role never reads (``#template=`` on an encoder, ``#dimensions=`` on a classifier), a
``models.llm_classifier`` entry under a name no model has, and a revision that must not move
with a server's per-request ``created`` stamp (vLLM, lmdeploy), or every rerun would pay
again."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.any_encoder import check_encoder, load_any_encoder
from lingtest.tasks.models.checks import check_classifier
from lingtest.tasks.models.llm_classifier import LLMClassifier
from lingtest.tasks.models.llm_http import LLMSettings
from lingtest.tasks.models.model_spec import parse_model
from lingtest.tasks.models.sentiment import load_sentiment_model
from tests.bad_input_harness import assert_one_clear_error, project  # noqa: F401 - a fixture
from tests.llm_servers import FakeLLMServer

URL = "http://127.0.0.1:9/v1"  # nothing listens: a check that contacted it would fail


@pytest.mark.parametrize("spec, needle", [
    ("vader#template=prompt.txt", "model `vader`: template= applies to an LLM tested as a "
                                  "classifier"),
    ("vader#scoring=text", "model `vader`: scoring= applies to an LLM tested as a classifier"),
    ("lingtest/minilm-sst2#template=p.txt&scoring=text", "template=, scoring= apply to an LLM"),
    (f"openai:m@{URL}#dimensions=8", "model `m`: dimensions= applies to an embedding service"),
    ("openai:m@http://me:hunter2@127.0.0.1:9/v1#dimensions=8",
     "from `openai:m@http://me:***@127.0.0.1:9/v1`"),  # the password is not shown
])
def test_an_option_a_classifier_never_reads_is_refused(tmp_path: Path, spec: str,
                                                       needle: str) -> None:
    with pytest.raises(LingtestError) as caught:
        check_classifier(parse_model(spec), True, tmp_path)
    assert needle in str(caught.value) and "fix: drop #" in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("spec, needle", [
    (f"openai:e@{URL}#template=prompt.txt", "model `e`: template= applies to an LLM tested "
                                            "as a classifier, not to an encoder"),
    ("tei:@http://127.0.0.1:9#scoring=text", "model `tei`: scoring= applies to an LLM"),
    ("sentence-transformers/all-MiniLM-L6-v2#scoring=text", "scoring= applies to an LLM"),
])
def test_an_option_an_encoder_never_reads_is_refused(tmp_path: Path, spec: str,
                                                     needle: str) -> None:
    with pytest.raises(LingtestError, match=r"^contrastive\.encoders: ") as caught:
        check_encoder(parse_model(spec, "contrastive.encoders"), True, tmp_path)
    assert needle in str(caught.value)


def test_the_options_each_role_reads_still_pass(tmp_path: Path) -> None:
    (tmp_path / "prompt.txt").write_text("Sentiment of: {text}\nAnswer:", encoding="utf-8")
    row = check_classifier(parse_model(f"openai:m@{URL}#template=prompt.txt&scoring=text"),
                           True, tmp_path)
    assert row["kind"] == "classifier (LLM, prompt.txt template)"
    assert check_encoder(parse_model(f"openai:e@{URL}#dimensions=64"))["pooling"] == \
        "endpoint, dimensions=64"


def test_a_misplaced_option_stops_a_run_before_it_starts(project, monkeypatch,
                                                         capsys) -> None:
    assert_one_clear_error(["run", "capabilities", "--set",
                            "capabilities.models=[vader#scoring=text]"], {},
                           "model `vader`: scoring= applies to an LLM tested as a classifier",
                           project, monkeypatch, capsys)


def test_an_llm_classifier_entry_for_no_model_stops_a_run(project, monkeypatch,
                                                          capsys) -> None:
    """A misspelt name would leave the LLM asked with the default prompt, silently."""
    assert_one_clear_error(["run", "capabilities", "--set",
                            f"capabilities.models=[vader, 'openai:smollm2@{URL}']", "--set",
                            "models.llm_classifier={smolm2: {scoring: text}}"], {},
                           "models.llm_classifier: ['smolm2'] name no model of any stage",
                           project, monkeypatch, capsys)


class StampingServer(FakeLLMServer):
    """An OpenAI-compatible server whose ``/v1/models`` stamps ``created`` with the time of
    each request, as vLLM's and lmdeploy's model cards do, and names the weights (``root``)."""

    def handle(self, method, path, headers, body):
        if method == "GET" and path == "/v1/models":
            with self._lock:
                self.requests.append(None)
            return 200, {}, {"object": "list", "data": [
                {"id": name, "object": "model", "created": time.time_ns(), "owned_by": "vllm",
                 "root": f"/weights/{name}"} for name in ("tiny-chat", "embedder")]}
        return super().handle(method, path, headers, body)


def test_a_served_revision_ignores_the_per_request_created_stamp(tmp_path: Path) -> None:
    with StampingServer("openai") as server:
        settings = LLMSettings(backoff_s=0.0, timeout_s=5.0)
        revisions = {load_any_encoder(parse_model(f"openai:embedder@{server.url}",
                                                  "contrastive.encoders"), http=settings).revision
                     for _ in range(2)}
        assert revisions == {f"endpoint:{server.url}|embedder|owned_by=vllm|root=/weights/"
                             f"embedder"}
        classifiers = [load_sentiment_model(f"openai:tiny-chat@{server.url}", root=tmp_path)
                       for _ in range(2)]
        assert all(isinstance(model, LLMClassifier) for model in classifiers)
        stated = {model.revision for model in classifiers}
        assert stated == {f"endpoint {server.url} model tiny-chat (/weights/tiny-chat)"}
        assert server.requests.count(None) >= 4  # each load asked the server again


def test_a_url_password_beside_key_env_is_refused(monkeypatch) -> None:
    """httpx sends a URL's user:password as Basic auth in place of the Bearer key, so the
    key would silently never reach the server."""
    from lingtest.tasks.models.llm_http import resolve_endpoint

    monkeypatch.setenv("EMBED_KEY", "sk-test")
    spec = "openai:e@http://user:pw@127.0.0.1:9/v1#key_env=EMBED_KEY"
    with pytest.raises(LingtestError, match="its URL holds a password and #key_env= names a "
                                            "key") as caught:
        resolve_endpoint(parse_model(spec, "contrastive.encoders"), key="contrastive.encoders")
    assert "pw" not in str(caught.value)
    end = resolve_endpoint(parse_model("openai:e@http://127.0.0.1:9/v1#key_env=EMBED_KEY"),
                           key="contrastive.encoders")
    assert end.public == "http://127.0.0.1:9/v1"
