"""lingtest against a real OpenAI-compatible server, as a user runs it: llama.cpp's server
(llama-cpp-python) serving the packaged SmolLM2 as a sentiment classifier (chat with token
log-probabilities) and the packaged MiniLM, converted to GGUF, as an embedding endpoint.
A counting proxy in front of it shows what each run sent, so a rerun's 0 is measured."""
from __future__ import annotations

import contextlib
import io
import json
import sys
import time

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.models.embedding_endpoints import NO_REQUESTS
from tests.projects import fewer_rows, sibling_project
from tests.real_servers import serving
from tests.test_embedding_endpoints import tiny_project
from tests.test_own_classifiers import SMALL

pytestmark = pytest.mark.slow

SENTENCES = [
    "The film was a delight from start to finish.",
    "A dull, lifeless plot that goes nowhere.",
    "I loved every minute of it.",
    "Not my cup of tea, but the acting is fine.",
    "The worst two hours I have spent in a cinema.",
    "An honest, moving story about a family.",
    "The soundtrack is forgettable and the jokes fall flat.",
    "It is neither good nor bad; it simply exists.",
    "A stunning achievement in animation.",
    "The sequel is even better than the original!",
    "Boring, predictable and far too long.",
    "I would happily watch it again tomorrow.",
    "The director's cut fixes nothing.",
    "Great performances rescue a weak script.",
    "She bought a new bicycle on Tuesday.",
    "The train to Paris leaves at nine.",
    "Rain is expected over the weekend.",
    "Quantum computers use qubits instead of bits.",
    "He could not stop laughing at the ending.",
    "What a waste of a talented cast.",
]
CHAT, EMBED = "/chat/completions", "/embeddings"
SERVED, EMBEDDER = "smollm2-served", "minilm-served"  # display names (#name=)
IN_PROCESS = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One llama.cpp server (SmolLM2 as ``smollm2``, MiniLM as ``minilm``) behind a counting
    proxy for the module; stopped however the tests end."""
    start = time.monotonic()
    with serving(tmp_path_factory.mktemp("llama-server")) as (llama, proxy):
        print(f"llama.cpp server up in {llama.started_s:.1f} s "
              f"({time.monotonic() - start:.1f} s with the MiniLM conversion)")
        yield llama, proxy


def test_minilm_served_by_llama_cpp_embeds_as_lingtest_does(server) -> None:
    """The converted MiniLM, pooled by llama.cpp, gives the in-process MiniLM's sentence
    vectors (cosine ≥ 0.99; the server does not L2-normalise)."""
    import httpx

    from lingtest.tasks.models.encoders import load_encoder

    proxy = server[1]
    reply = httpx.post(f"{proxy.url}{EMBED}", json={"model": "minilm", "input": SENTENCES},
                       timeout=120).json()
    served = np.array([item["embedding"] for item in sorted(reply["data"],
                                                             key=lambda i: i["index"])])
    own = np.asarray(load_encoder(IN_PROCESS).encode(SENTENCES))
    assert served.shape == own.shape == (len(SENTENCES), 384)
    cosine = (served * own).sum(1) / np.linalg.norm(served, axis=1) / np.linalg.norm(own, axis=1)
    print(f"cosine llama.cpp vs in-process MiniLM: min {cosine.min():.6f}, "
          f"mean {cosine.mean():.6f}")
    assert cosine.min() >= 0.99
    assert reply["usage"]["prompt_tokens"] > len(SENTENCES)


def test_a_model_the_server_does_not_pool_is_one_clear_error(server) -> None:
    """SmolLM2's GGUF names no pooling, so llama.cpp answers a vector per token: lingtest
    stops with one error naming the endpoint instead of reading them as sentence vectors."""
    from lingtest.tasks.core.errors import LingtestError
    from lingtest.tasks.models.any_encoder import load_any_encoder
    from lingtest.tasks.models.llm import LLMSettings
    from lingtest.tasks.models.model_spec import parse_model

    proxy = server[1]
    ref = parse_model(f"openai:smollm2-tokens@{proxy.url}", "contrastive.encoders")
    encoder = load_any_encoder(ref, http=LLMSettings(retries=0, backoff_s=0.0))
    with pytest.raises(LingtestError, match=r"one vector per token, not one per text .* from "
                                            r"http://127\.0\.0\.1:\d+/v1/embeddings"):
        encoder.encode(["a good film", "a bad one, really"])


# --------------------------------------------------------------------------- a served LLM

CHECKLIST_TESTS = ("single positive words", "single negative words", "single neutral words")


@pytest.fixture(scope="module")
def served_classifier(server, data_project, tmp_path_factory):
    """``lingtest test openai:smollm2@URL#name=... --methods capabilities`` twice, in a copy
    of the data project whose CheckList table keeps three one-word tests (at ~1 s a request,
    the whole sample would be ~500 requests), with the chat requests each run sent."""
    workspace = sibling_project(data_project[0], tmp_path_factory.mktemp("served") / "project")
    fewer_rows(workspace, sst_per_split=None, checklist_tests=CHECKLIST_TESTS)
    proxy = server[1]
    sets = [arg for s in [*data_project[1], *SMALL, "capabilities.checklist_max_examples=2"]
            for arg in ("--set", s)]
    spec = f"openai:smollm2@{proxy.url}#name={SERVED}"
    runs = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        for _ in range(2):
            before, start = proxy.count(CHAT), time.monotonic()
            err = lingtest_test(monkeypatch, workspace.root, spec, "--methods", "capabilities",
                                *sets)
            runs.append({"err": err, "requests": proxy.count(CHAT) - before,
                         "seconds": time.monotonic() - start, "latency": proxy.latency(CHAT)})
    return workspace, runs, proxy.url


def lingtest_test(monkeypatch, root, *args: str) -> str:
    """``lingtest test ARGS`` in this process, in project ``root``; its stderr (exit 0
    asserted)."""
    from lingtest.flows import cli

    monkeypatch.setenv("LINGTEST_ROOT", str(root))
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, "argv", ["lingtest", "test", *args])
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code in (0, None), err.getvalue()[-3000:]
    return err.getvalue()


def test_lingtest_test_reads_probabilities_from_the_servers_logprobs(served_classifier) -> None:
    """Reports under runs/<name>/ naming the endpoint; each defined row's probabilities sum
    to 1, and they come from the server's token log-probabilities (a parsed answer alone
    would give one-hot rows)."""
    workspace, runs, url = served_classifier
    run = workspace.root / "runs" / SERVED
    reports = run / "reports" / "capabilities"
    assert (reports / f"capabilities-table3-{SERVED}.md").is_file()
    results = pd.read_parquet(run / "interim" / "capabilities" / "results.parquet")
    assert set(results["model_id"]) == {SERVED} and len(results) >= 2
    probs = results[["p_neg", "p_neutral", "p_pos"]].dropna()
    assert len(probs) >= 1  # an answer naming no label is undefined: a NaN row
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-6)
    assert not probs.isin([0.0, 1.0]).all(axis=1).all(), probs
    checklist = pd.read_csv(reports / "capabilities-checklist.csv")
    assert set(checklist["test"]) == set(CHECKLIST_TESTS)
    provenance = json.loads((reports / "provenance.json").read_text())
    assert f"{SERVED} @ endpoint {url} model smollm2" in provenance["models"]
    print(f"{len(results)} case rows; first run: {runs[0]['requests']} chat requests in "
          f"{runs[0]['seconds']:.1f} s ({runs[0]['latency']:.2f} s a request); rerun: "
          f"{runs[1]['requests']} in {runs[1]['seconds']:.1f} s")


def test_a_rerun_sends_no_chat_request(served_classifier) -> None:
    """Every answer went to the answer store as it returned: the same command again sends
    the server nothing (counted at the proxy, not by lingtest)."""
    runs = served_classifier[1]
    assert runs[0]["requests"] >= 2 + len(CHECKLIST_TESTS)  # the cases and CheckList texts
    assert runs[1]["requests"] == 0


# --------------------------------------------------------------------------- an embedding endpoint

# tiny_project's suite and word list; 30 dictionary words keep the in-process MiniLM's θ
# from embedding its whole 30k-word vocabulary (minutes)
TINY_CONTRASTIVE = {"runtime.task_runner": "threads", "contrastive.suite": "suite.json",
                    "contrastive.relations": "[CR1]", "contrastive.dictionary_file": "words.txt",
                    "contrastive.dictionary_max_words": 30, "contrastive.n_classifiers": 5,
                    "contrastive.classifier_epochs": 2, "contrastive.batch_size": 8}


@pytest.fixture(scope="module")
def served_encoder(server, tmp_path_factory, prefect_harness):
    """The contrastive stage on the served MiniLM beside the in-process one (a tiny project:
    CR1 on five triples, small SST/MRPC tables, 30 dictionary words), then again, with the
    embedding requests each run sent."""
    from lingtest.flows.registry import load_params
    from lingtest.flows.stage import run_stage
    from lingtest.tasks.core.paths import Workspace

    root = tmp_path_factory.mktemp("served-encoder") / "project"
    tiny_project(root)
    proxy = server[1]
    encoders = f"['openai:minilm@{proxy.url}#name={EMBEDDER}', {IN_PROCESS}]"
    sets = [f"{key}={value}" for key, value in {**TINY_CONTRASTIVE,
                                                "contrastive.encoders": encoders}.items()]
    params, workspace = load_params(root, sets), Workspace(root)
    runs = []
    for _ in range(2):
        before, start = proxy.count(EMBED), time.monotonic()
        summary = run_stage("contrastive", params, workspace)
        runs.append({"summary": summary, "requests": proxy.count(EMBED) - before,
                     "seconds": time.monotonic() - start})
    return workspace, runs


def test_the_contrastive_stage_embeds_through_the_server_once(served_encoder) -> None:
    """The stage's own request count is the proxy's, and a rerun sends no embedding request."""
    workspace, runs = served_encoder
    first, again = runs
    print(f"contrastive: first run {first['requests']} embedding requests in "
          f"{first['seconds']:.1f} s; rerun {again['requests']} in {again['seconds']:.1f} s")
    assert first["requests"] > 0
    assert first["summary"]["endpoint_requests"] == {EMBEDDER: first["requests"]}
    assert again["requests"] == 0
    assert again["summary"]["endpoint_requests"] == {EMBEDDER: 0}
    [row] = pd.read_csv(workspace.reports / "contrastive" /
                        "contrastive-endpoints.csv").to_dict("records")
    assert (row["requests"], row["tokens"]) == (0, NO_REQUESTS)  # no source to claim


def test_the_served_minilm_measures_what_the_in_process_one_does(served_encoder) -> None:
    """Cosine distances (scale-free: llama.cpp does not L2-normalise, MiniLM's own
    pipeline does) agree within 1e-3, and so do the zero-threshold verdicts."""
    workspace = served_encoder[0]
    results = pd.read_parquet(workspace.interim / "contrastive" / "results.parquet")
    cos = results[(results["distance"] == "cos") & (results["threshold_kind"] == "zero")]
    served = cos[cos["model_id"] == EMBEDDER].set_index("case_id").sort_index()
    own = cos[cos["model_id"] == IN_PROCESS].set_index("case_id").sort_index()
    assert len(served) == len(own) == 5
    assert served["d_pos"].to_numpy() == pytest.approx(own["d_pos"].to_numpy(), abs=1e-3)
    assert served["d_neg"].to_numpy() == pytest.approx(own["d_neg"].to_numpy(), abs=1e-3)
    assert served["verdict"].tolist() == own["verdict"].tolist()
