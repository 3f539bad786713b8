"""Embedding services as encoders (``openai:``, ``ollama:``, ``tei:``) against the fake
servers: each protocol embeds in batches of ``batch_size`` and stores, retries honour
Retry-After, every returned request is stored at once (a ``kill -9`` mid-embedding loses at
most the requests in flight), the contrastive stage runs on a service and a rerun asks it
nothing, the report counts requests and tokens, bad specs are one clear error before the
run, and repair refuses a service."""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from bad_input_harness import assert_one_clear_error, project, run  # noqa: F401
from llm_servers import FakeLLMServer, bag_of_words, killed_mid_run, token_count

from lingtest.tasks.contrastive.embedding import EmbeddingStore, embed_texts
from lingtest.tasks.contrastive.report import endpoint_usage, usage_text
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT
from lingtest.tasks.models.any_encoder import (check_contrastive_encoder, check_encoder,
                                      check_repairable, describe_encoder, load_any_encoder)
from lingtest.tasks.models.embedding_endpoints import NO_REQUESTS
from lingtest.tasks.models.llm import LLMSettings
from lingtest.tasks.models.model_spec import parse_model

KEY = "sk-embed-secret-4242"
SPECS = {"openai": "openai:text-embedding-3-small@{url}", "ollama": "ollama:nomic-embed-text@{url}",
         "tei": "tei:@{url}"}
TEXTS = [f"review {i}: the film is {'good' if i % 2 else 'bad'} and {'long' if i % 3 else 'short'}"
         for i in range(10)]


@pytest.fixture(autouse=True)
def _no_endpoint_env(monkeypatch):
    for name in ("OLLAMA_HOST", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def encoder(server: FakeLLMServer, options: str = "", **settings):
    spec = SPECS[server.protocol].format(url=server.url) + options
    http = LLMSettings(**{"backoff_s": 0.0, "timeout_s": 5.0, "concurrency": 2, **settings})
    return load_any_encoder(parse_model(spec, "contrastive.encoders"), http=http)


def batch_sizes(server: FakeLLMServer) -> list[int]:
    key = "inputs" if server.protocol == "tei" else "input"
    return sorted(len(r.body[key]) for r in server.embeddings())


# --------------------------------------------------------------------------- protocols

@pytest.mark.parametrize("protocol", ["openai", "ollama", "tei"])
def test_each_protocol_embeds_in_batches_and_stores(protocol, tmp_path):
    with FakeLLMServer(protocol) as server:
        model = encoder(server)
        store = EmbeddingStore.for_encoder(tmp_path, model)
        vectors = embed_texts(model, TEXTS + TEXTS[:3], store, batch_size=4)
        assert batch_sizes(server) == [2, 4, 4]  # each distinct text once, 4 per request
        assert sorted(server.embedded_texts()) == sorted(TEXTS)
        expected = np.array([bag_of_words(t) for t in TEXTS + TEXTS[:3]], dtype=np.float32)
        assert vectors.tobytes() == expected.tobytes()  # openai's rows sorted by index
        assert len(store) == 10 and not store.journal_files() and store.shard_files()
        first = server.embeddings()[0].body
        if protocol == "tei":
            assert set(first) == {"inputs"}
        else:
            assert first["model"] == {"openai": "text-embedding-3-small",
                                      "ollama": "nomic-embed-text"}[protocol]
        stated = {"openai": "|text-embedding-3-small|owned_by=system",
                  "ollama": "|nomic-embed-text|sha256:0123456789abcdef",
                  "tei": "|BAAI/bge-small-en-v1.5|5c38ec7c405ec4b44b94cc5a9bb96e73|float16"}
        assert model.revision == f"endpoint:{server.url}{stated[protocol]}"
        assert model.cache_key == f"endpoint|{server.url}" and model.pooling == "endpoint"
        usage = model.usage()
        assert (usage["requests"], usage["input_tokens"], usage["tokens"]) == (
            3, token_count(TEXTS), "server-stated")
        again = encoder(server)  # another run: the same store, nothing asked
        before = len(server.embeddings())
        embed_texts(again, TEXTS, EmbeddingStore.for_encoder(tmp_path, again), batch_size=4)
        assert len(server.embeddings()) == before and again.usage()["requests"] == 0


def test_dimensions_key_and_url_password_reach_the_request_not_the_record(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("EMBED_KEY", KEY)
    with FakeLLMServer("openai") as server:
        url = server.url.replace("http://", "http://user:hunter2@")
        spec = f"openai:text-embedding-3-small@{url}#dimensions=16"
        model = load_any_encoder(parse_model(spec, "contrastive.encoders"),
                                 http=LLMSettings(backoff_s=0.0))
        vectors = model.encode(TEXTS[:3], batch_size=8)
        assert server.embeddings()[0].body["dimensions"] == 16 and vectors.shape == (3, 16)
        assert model.cache_key == f"endpoint|{server.url}|dimensions=16"
        keyed = encoder(server, "#key_env=EMBED_KEY")
        keyed.encode(TEXTS[:1])
        assert server.embeddings()[-1].headers["authorization"] == f"Bearer {KEY}"
        assert "dimensions" not in server.embeddings()[-1].body
        assert (EmbeddingStore.for_encoder(tmp_path, model).path
                != EmbeddingStore.for_encoder(tmp_path, keyed).path)
        shown = json.dumps([[m.revision, m.cache_key, m.parameters(), m.usage(), repr(m),
                             describe_encoder(m)] for m in (model, keyed)])
        assert "hunter2" not in shown and KEY not in shown


def test_tei_batches_stop_at_its_max_client_batch_size(tmp_path):
    with FakeLLMServer("tei", usage=False) as server:
        server.info["max_client_batch_size"] = 3
        model = encoder(server)
        embed_texts(model, TEXTS, EmbeddingStore.for_encoder(tmp_path, model), batch_size=8)
        assert batch_sizes(server) == [1, 3, 3, 3]
        usage = model.usage()
        assert usage["tokens"] == "estimated (characters/4)"
        assert usage["input_tokens"] == sum(-(-sum(len(t) for t in b) // 4) for b in
                                            [r.body["inputs"] for r in server.embeddings()])


def test_429_then_200_honours_retry_after(tmp_path):
    with FakeLLMServer("openai", fail_first=2, fail_status=429, retry_after="3") as server:
        model = encoder(server, retries=3, concurrency=1)
        delays: list[float] = []
        model.client._sleep = delays.append  # record instead of waiting
        embed_texts(model, TEXTS[:4], EmbeddingStore.for_encoder(tmp_path, model), batch_size=4)
        assert delays == [3.0, 3.0] and len(server.embeddings()) == 3
        assert model.usage()["requests"] == 3


def _retried_once(server: FakeLLMServer, tmp_path: Path, caplog, **settings) -> str:
    """Embed four texts in one request through ``server``, which fails its first attempt:
    the second attempt's vectors are stored, and the one back-off's log line is returned."""
    model = encoder(server, retries=2, concurrency=1, backoff_s=0.25, **settings)
    delays: list[float] = []
    model.client._sleep = delays.append  # record instead of waiting
    store = EmbeddingStore.for_encoder(tmp_path, model)
    with caplog.at_level("INFO", logger="lingtest.tasks.models.llm_http"):
        vectors = embed_texts(model, TEXTS[:4], store, batch_size=4)
    assert delays == [0.25]  # one back-off: backoff_s, no Retry-After
    assert len(server.embeddings()) == 2 and model.usage()["requests"] == 2
    expected = np.array([bag_of_words(t) for t in TEXTS[:4]], dtype=np.float32)
    assert vectors.tobytes() == expected.tobytes() and len(store) == 4
    [line] = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    return line


def test_503_then_200_is_retried(tmp_path, caplog):
    with FakeLLMServer("openai", fail_first=1, fail_status=503) as server:
        line = _retried_once(server, tmp_path, caplog)
        assert server.replied == 1 and "attempt 1 failed (HTTP 503 from" in line


def test_a_timed_out_embedding_request_is_sent_again(tmp_path, caplog):
    """The first request outlasts ``timeout_s`` (the server answers it too late); the
    second, answered at once, is the one whose vectors are stored."""
    with FakeLLMServer("openai", sleep_s=1.5, slow_first=1) as server:
        started = time.monotonic()
        line = _retried_once(server, tmp_path, caplog, timeout_s=0.3)
        assert time.monotonic() - started < 1.5  # not waited out: the client gave up
        assert "attempt 1 failed (timeout after 0.3 s" in line


def test_failed_requests_are_one_error_and_the_others_stay_stored(tmp_path):
    with FakeLLMServer("ollama", fail_first=1, fail_status=400) as server:
        model = encoder(server, retries=0, concurrency=1)
        store = EmbeddingStore.for_encoder(tmp_path, model)
        with pytest.raises(LingtestError, match=r"contrastive\.encoders: model `nomic-embed-"
                           r"text` .*1 of 3 embedding requests to .* failed after retries "
                           r"\(first: HTTP 400.*fix: check the server, then rerun"):
            embed_texts(model, TEXTS, store, batch_size=4)
        assert len(store.missing(TEXTS)) == 4 and not store.journal_files()
        server.requests.clear()
        embed_texts(model, TEXTS, store, batch_size=4)
        assert sorted(server.embedded_texts()) == sorted(TEXTS[:4])


# --------------------------------------------------------------------------- the store

def test_the_journal_survives_a_torn_record_and_compacts(tmp_path):
    store = EmbeddingStore(tmp_path, "svc", "endpoint:x|m", "endpoint|x", n_shards=16)
    vectors = np.array([bag_of_words(t, 8) for t in TEXTS], dtype=np.float32)
    store.append(TEXTS[:6], vectors[:6])
    journals = store.journal_files()
    assert journals and not store.shard_files()
    with open(journals[0], "ab") as fh:  # a killed writer's half record
        fh.write(b"0" * 40)
    reopened = EmbeddingStore(tmp_path, "svc", "endpoint:x|m", "endpoint|x", n_shards=16)
    assert len(reopened) == 6 and reopened.get(TEXTS[:6]).tobytes() == vectors[:6].tobytes()
    reopened.append(TEXTS[6:], vectors[6:])  # cuts the torn record off first
    damaged = reopened.journal_files()[-1]
    raw = bytearray(damaged.read_bytes())
    raw[70] ^= 0xFF  # a vector byte of the file's first record: its CRC fails
    damaged.write_bytes(bytes(raw))
    again = EmbeddingStore(tmp_path, "svc", "endpoint:x|m", "endpoint|x", n_shards=16)
    assert len(again.missing(TEXTS)) == 1
    assert again.compact() == 9 and not again.journal_files()
    final = EmbeddingStore(tmp_path, "svc", "endpoint:x|m", "endpoint|x", n_shards=16)
    assert len(final) == 9 and final.shard_files()


KILLED = """
import json, sys
from pathlib import Path
from lingtest.tasks.contrastive.embedding import EmbeddingStore, embed_texts
from lingtest.tasks.models.any_encoder import load_any_encoder
from lingtest.tasks.models.llm import LLMSettings
spec, root, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
model = load_any_encoder(spec, http=LLMSettings(concurrency=2, backoff_s=0.0))
embed_texts(model, texts, EmbeddingStore.for_encoder(Path(root), model), batch_size=2)
"""


def test_kill_9_mid_embedding_keeps_every_returned_request(tmp_path):
    texts = [f"sentence {i} about a {'fine' if i % 2 else 'poor'} movie" for i in range(40)]
    with FakeLLMServer("openai", sleep_s=0.2) as server:
        spec = SPECS["openai"].format(url=server.url)
        replied = killed_mid_run(KILLED, [spec, str(tmp_path), json.dumps(texts)],
                                 lambda: server.replied, 6)
        model = encoder(server)
        store = EmbeddingStore.for_encoder(tmp_path, model)
        assert store.journal_files()  # not compacted: the kill came first
        missing = store.missing(texts)
        assert len(texts) - len(missing) >= 2 * (replied - 2)  # at most 2 in flight lost
        assert 0 < len(missing) < len(texts)
        while server._in_flight:  # the killed run's requests, still being served
            time.sleep(0.02)
        server.requests.clear()
        server.max_in_flight = 0
        embed_texts(model, texts, store, batch_size=2)
        assert sorted(server.embedded_texts()) == sorted(missing)
        assert len(store) == 40 and not store.journal_files()
        assert server.max_in_flight == 2  # requests in parallel, up to the concurrency


# --------------------------------------------------------------------------- checks

def test_bad_specs_and_options_are_one_clear_error_without_a_request(monkeypatch):
    def check(spec: str, **kwargs):
        return check_contrastive_encoder(parse_model(spec, "contrastive.encoders"),
                                         dictionary_file="words.txt", **kwargs)

    cases = [
        ("openai:e@http://127.0.0.1:9/v1#dimensions=0", r"dimensions='0' is not a positive"),
        ("openai:e@http://127.0.0.1:9/v1#dimensions=big", r"dimensions='big' is not a positive"),
        ("tei:@http://127.0.0.1:9#dimensions=8", r"a TEI server's /embed takes no dimensions"),
        ("openai:text-embedding-3-small", r"names no server and OPENAI_BASE_URL is not set"),
        ("openai:e@http://127.0.0.1:9/v1#key_env=NO_SUCH_KEY_VAR",
         r"reads its API key from \$NO_SUCH_KEY_VAR \(key_env\), which is not set; fix"),
        ("openai-chat:e@http://127.0.0.1:9/v1", r"\(a chat API\), not a sentence encoder; fix"),
        ("sentence-transformers/all-MiniLM-L6-v2#dimensions=8", r"dimensions= applies to an "
                                                                 r"embedding service"),
    ]
    for spec, match in cases:
        with pytest.raises(LingtestError, match=r"^contrastive\.encoders: .*" + match) as caught:
            check(spec)
        assert "\n" not in str(caught.value)
    # no dictionary file: the packaged English word list (test below), not an error
    check_contrastive_encoder(parse_model("tei:@http://127.0.0.1:9"))
    with pytest.raises(LingtestError, match=r"contrastive\.pooling `cls`"):
        check("tei:@http://127.0.0.1:9", pooling="cls")
    row = check("tei:@http://127.0.0.1:9")  # nothing listens there: not contacted
    assert (row["kind"], row["source"], row["path"]) == ("encoder", "endpoint",
                                                         "http://127.0.0.1:9")
    assert check_encoder(parse_model("openai:e@http://127.0.0.1:9/v1#dimensions=64"),
                         )["pooling"] == "endpoint, dimensions=64"


def test_an_unreachable_server_is_one_clear_error_at_run_time():
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ref = parse_model(f"ollama:nomic-embed-text@http://127.0.0.1:{port}", "contrastive.encoders")
    with pytest.raises(LingtestError, match=rf"cannot read http://127\.0\.0\.1:{port}/api/tags "
                                            r"\(connection error.*fix: start the server"):
        load_any_encoder(ref, http=LLMSettings(retries=1, backoff_s=0.0))


def test_a_served_model_the_server_lacks_is_one_clear_error():
    with FakeLLMServer("openai") as server, pytest.raises(
            LingtestError, match=r"does not serve `nope` \(it lists: gpt-4o-mini, text-embedding"):
        load_any_encoder(parse_model(f"openai:nope@{server.url}"), http=LLMSettings())
    with FakeLLMServer("tei") as server, pytest.raises(
            LingtestError, match=r"serves `BAAI/bge-small-en-v1\.5`, not `other/model`"):
        load_any_encoder(parse_model(f"tei:other/model@{server.url}"), http=LLMSettings())


def test_a_bad_spec_stops_lingtest_run_before_the_stage(project, monkeypatch, capsys):
    assert_one_clear_error(
        run("contrastive", "contrastive.encoders=[openai:e@http://127.0.0.1:9/v1#dimensions=-3]",
            "contrastive.dictionary_file=words.txt"),
        {"words.txt": b"good\nbad\n"}, "dimensions='-3' is not a positive whole number",
        project, monkeypatch, capsys)


def test_repair_refuses_an_endpoint_encoder(project, monkeypatch, capsys):
    with pytest.raises(LingtestError, match=r"^repair\.models: `tei:@http://127\.0\.0\.1:9` "
                                            r"\(tei\) is an embedding service.*fix: remove it"):
        check_repairable(parse_model("tei:@http://127.0.0.1:9"))
    assert_one_clear_error(
        run("repair", "contrastive.encoders=[tei:@http://127.0.0.1:9]",
            "contrastive.dictionary_file=words.txt"),
        {"words.txt": b"good\nbad\n"}, "repair.models: `tei:@http://127.0.0.1:9` (tei) is an "
                                       "embedding service", project, monkeypatch, capsys)


# --------------------------------------------------------------------------- the stage

POSITIVE = ("good", "great", "fine", "lovely", "superb")
NEGATIVE = ("bad", "awful", "dull", "poor", "boring")


def _sentences(n: int, offset: int = 0) -> list[tuple[str, str]]:
    out = []
    for i in range(n):
        good = (i + offset) % 2 == 0
        word = (POSITIVE if good else NEGATIVE)[i % 5]
        out.append((f"the {('film', 'plot', 'cast')[i % 3]} was {word} number {i + offset}",
                    "pos" if good else "neg"))
    return out


def tiny_project(root: Path) -> None:
    """A project with small processed SST and MRPC tables, a CR1 suite in COSTELLO's layout
    and a word list: the contrastive stage runs in seconds without the data stage."""
    (root / "params").mkdir(parents=True)
    (root / "params.yaml").write_bytes((PACKAGE_ROOT / "params.yaml").read_bytes())
    processed = root / "data" / "processed"
    processed.mkdir(parents=True)
    rows = [(t, label, "train") for t, label in _sentences(30)]
    rows += [(t, label, "test") for t, label in _sentences(12, 100)]
    pd.DataFrame(rows, columns=["text", "label2", "split"]).to_parquet(processed / "sst.parquet")
    pd.DataFrame({"sentence1": ["a b"] * 4, "sentence2": ["a c"] * 4, "label": [0, 1] * 2,
                  "split": ["train", "train", "test", "test"]}).to_parquet(
        processed / "mrpc.parquet")
    triples = [[f"the film was {p}", f"the film was {p} indeed", f"the film was {n}"]
               for p, n in zip(POSITIVE, NEGATIVE)]
    (root / "suite.json").write_text(json.dumps({"SenWordFuzz": triples}))
    (root / "words.txt").write_text("\n".join([*POSITIVE, *NEGATIVE, "film", "plot", "cast"]))


@pytest.fixture(scope="module")
def stage_run(tmp_path_factory, prefect_harness):
    """The contrastive stage on an OpenAI-compatible embedding service, then again."""
    from lingtest.flows.registry import load_params
    from lingtest.flows.stage import run_stage
    from lingtest.tasks.core.paths import Workspace

    root = tmp_path_factory.mktemp("endpoint-project")
    tiny_project(root)
    with FakeLLMServer("openai") as server:
        sets = ["runtime.task_runner=threads", "contrastive.suite=suite.json",
                "contrastive.relations=[CR1]", "contrastive.dictionary_file=words.txt",
                "contrastive.n_classifiers=5", "contrastive.classifier_epochs=2",
                "contrastive.batch_size=8", "consistency.backoff_s=0",
                f"contrastive.encoders=[{SPECS['openai'].format(url=server.url)}]"]
        params, workspace = load_params(root, sets), Workspace(root)
        first = run_stage("contrastive", params, workspace)
        asked = [len(r.body["input"]) for r in server.embeddings()]
        sent = server.embedded_texts()
        table = pd.read_csv(workspace.reports / "contrastive" / "contrastive-endpoints.csv")
        again = run_stage("contrastive", params, workspace)
        rerun = pd.read_csv(workspace.reports / "contrastive" / "contrastive-endpoints.csv")
        yield {"workspace": workspace, "params": params, "server_url": server.url,
               "first": first,
               "again": again, "asked": asked, "sent": sent, "table": table, "rerun": rerun,
               "requests_after": len(server.embeddings())}


def test_the_stage_runs_on_a_service_and_a_rerun_asks_nothing(stage_run):
    first, again = stage_run["first"], stage_run["again"]
    asked = stage_run["asked"]
    assert first["endpoint_requests"] == {"text-embedding-3-small": len(asked)}
    assert max(asked) == 8 and len(asked) == -(-len(stage_run["sent"]) // 8)
    assert len(set(stage_run["sent"])) == len(stage_run["sent"])  # each text once
    assert again["endpoint_requests"] == {"text-embedding-3-small": 0}
    assert again["embedded_now"] == {"text-embedding-3-small": 0}
    assert stage_run["requests_after"] == len(asked)  # the rerun sent no embedding request
    results = pd.read_parquet(stage_run["workspace"].interim / "contrastive" / "results.parquet")
    assert set(results["model_id"]) == {"text-embedding-3-small"}
    assert results["revision"].str.startswith(
        f"endpoint:{stage_run['server_url']}|text-embedding-3-small|").all()
    assert set(results["pooling"]) == {"endpoint"}
    assert set(results["dictionary"]) == {"vocab", "dataset"}


def test_the_report_counts_requests_tokens_and_store_hits(stage_run):
    [row] = stage_run["table"].to_dict("records")
    sent = stage_run["sent"]
    assert row["endpoint"] == stage_run["server_url"] and row["requests"] == len(stage_run["asked"])
    assert (row["input_tokens"], row["tokens"]) == (token_count(sent), "server-stated")
    assert (row["embedded_now"], row["from_store"]) == (len(sent), 0)
    assert row["revision"].startswith(f"endpoint:{stage_run['server_url']}|")
    [again] = stage_run["rerun"].to_dict("records")
    assert (again["requests"], again["input_tokens"], again["from_store"]) == (0, 0, len(sent))
    assert again["tokens"] == NO_REQUESTS  # no request: no source of the 0 tokens claimed
    table2 = (stage_run["workspace"].reports / "contrastive"
              / "contrastive-table2-text-embedding-3-small.md").read_text()
    assert (f"text-embedding-3-small: {stage_run['server_url']}, revision "
            f"endpoint:{stage_run['server_url']}|text-embedding-3-small|") in table2
    assert f"0 requests, 0 input tokens ({NO_REQUESTS})" in table2
    assert ("text-embedding-3-small: contrastive.dictionary_file's words (the model has no "
            "vocabulary)") in table2


def test_the_token_source_is_claimed_only_when_requests_were_made(tmp_path):
    """The encoder's ``tokens`` label: none before it asks the server (every vector from the
    store), then where the counts came from (here estimated: the server states no usage)."""
    with FakeLLMServer("openai", usage=False) as server:
        model = encoder(server)
        assert model.usage()["tokens"] == NO_REQUESTS
        store = EmbeddingStore.for_encoder(tmp_path, model)
        embed_texts(model, TEXTS[:2], store, batch_size=4)
        assert model.usage()["tokens"] == "estimated (characters/4)"
        infos = [{"model_id": "m", "endpoint": {**encoder(server).usage(), "from_store": 2}}]
    assert endpoint_usage(infos)["tokens"].tolist() == [NO_REQUESTS]
    assert usage_text(infos[0]["endpoint"]) == (f"0 requests, 0 input tokens ({NO_REQUESTS}), "
                                                "2 vectors from the embedding store")


def test_a_service_has_no_share_in_the_process_runners_preparation(stage_run):
    """Under Dask the local encoders embed in shard tasks first; a service embeds in its own
    unit (its concurrency, its counts), so the preparation holds nothing for it."""
    from lingtest.tasks.contrastive.method import ContrastiveMethod

    method = ContrastiveMethod(stage_run["params"], stage_run["workspace"])
    phases = method.preparation(pd.read_parquet(method.suite_path))
    assert next(phases) == [] and phases.send([]) == []


def test_without_a_dictionary_file_a_service_takes_the_packaged_english_words() -> None:
    """θ's ``vocab`` dictionary of a service with no contrastive.dictionary_file: wordfreq's
    most frequent alphabetic English words, capped as any dictionary is, and named so."""
    from lingtest.tasks.contrastive.embedding_tasks import _dictionaries, vocabulary_note
    from lingtest.tasks.contrastive.params import ContrastiveParams
    from lingtest.tasks.models.embedding_endpoints import (ENGLISH_WORDS, english_words,
                                                  load_endpoint_encoder)

    words = english_words()
    assert words[:5] == ["the", "to", "and", "of", "a"]
    assert 0.9 * ENGLISH_WORDS < len(words) <= ENGLISH_WORDS
    assert all(w.isalpha() and w.islower() for w in words)
    with FakeLLMServer("openai") as server:
        encoder = load_endpoint_encoder(parse_model(SPECS["openai"].format(url=server.url)))
        params = ContrastiveParams(dictionary_max_words=500)
        vocab = _dictionaries(encoder, params, 7, {})["vocab"]
        assert len(vocab) == 500 and set(vocab) <= set(words)
        note = vocabulary_note(encoder, user_dictionary=False)
        assert note.startswith("a packaged English word list (wordfreq 3.")
        mine = _dictionaries(encoder, params, 7, {"user": ["alpha", "beta"]})
        assert mine == {"vocab": ["alpha", "beta"]}  # the user's file wins
        assert vocabulary_note(encoder, user_dictionary=True).startswith(
            "contrastive.dictionary_file's words")
