"""``lingtest test openai:MODEL@URL --methods contrastive`` end to end, as the docs show it:
an OpenAI-compatible embedding server (the fake one, stating no ``usage``) tested as an
encoder beside the pipeline's baseline encoder, its reports under ``runs/<name>/``; the
requests and vectors the report counts are the server's own, the tokens are marked as
estimated, the provenance names the endpoint and the revision the server states and no
secret, and the same command again asks the server nothing."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from unittest import mock

import pandas as pd
import pytest
from llm_servers import FakeLLMServer
from test_embedding_endpoints import tiny_project
from test_own_encoders import HASHING

from lingtest.tasks.models.embedding_endpoints import NO_REQUESTS

KEY = "sk-served-encoder-7031"
MODEL = "text-embedding-3-small"  # one the fake server lists at /v1/models
BASELINE = "HashingEncoder"
TINY = ["runtime.task_runner=threads", "contrastive.suite=suite.json",
        "contrastive.relations=[CR1]", "contrastive.dictionary_file=words.txt",
        "contrastive.n_classifiers=5", "contrastive.classifier_epochs=2",
        "contrastive.batch_size=8", "consistency.backoff_s=0"]


def _state(root: Path) -> dict[str, bytes]:
    """The pipeline's own outputs (reports and interim files), by path."""
    return {str(p): p.read_bytes() for top in ("reports", "data/interim")
            for p in sorted((root / top).rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def served_cli(tmp_path_factory, prefect_harness):
    """A tiny project whose pipeline ran the contrastive stage on a python: hashing encoder
    (the baseline), then ``lingtest test`` on the served model twice, as a user types it,
    with what the server got during each."""
    from typer.testing import CliRunner

    from lingtest.flows.cli import app
    from lingtest.flows.registry import load_params
    from lingtest.flows.stage import run_stage
    from lingtest.tasks.core.paths import Workspace

    root = tmp_path_factory.mktemp("served-encoder-cli")
    tiny_project(root)
    (root / "models").mkdir()
    (root / "models" / "hashing.py").write_text(HASHING.format(n=256))
    baseline = f"contrastive.encoders=[python:models/hashing.py:{BASELINE}]"
    env = {"LINGTEST_ROOT": str(root), "EMBED_KEY": KEY}
    with FakeLLMServer("openai", usage=False) as server, mock.patch.dict(os.environ, env):
        run_stage("contrastive", load_params(root, [*TINY, baseline]), Workspace(root))
        pipeline = _state(root)
        command = ["test", f"openai:{MODEL}@{server.url}#key_env=EMBED_KEY",
                   "--methods", "contrastive", *[a for s in TINY for a in ("--set", s)]]
        runs = []
        for _ in range(2):
            before = len(server.embeddings())
            done = CliRunner().invoke(app, command)
            assert done.exit_code == 0, done.output
            reports = root / "runs" / MODEL / "reports"
            runs.append({"output": done.output, "requests": len(server.embeddings()) - before,
                         "endpoints": pd.read_csv(reports / "contrastive"
                                                  / "contrastive-endpoints.csv"),
                         "provenance": json.loads((reports / "contrastive"
                                                   / "provenance.json").read_text())})
        yield {"root": root, "url": server.url, "runs": runs, "pipeline": pipeline,
               "bodies": [r.body["input"] for r in server.embeddings()],
               "auth": {r.headers.get("authorization") for r in server.embeddings()}}


def test_the_served_model_is_reported_beside_the_baseline(served_cli):
    root = served_cli["root"]
    assert _state(root) == served_cli["pipeline"]  # the pipeline's files as they were
    run = root / "runs" / MODEL
    assert (run / "reports" / "contrastive" / f"contrastive-table2-{MODEL}.md").is_file()
    results = pd.read_parquet(run / "interim" / "contrastive" / "results.parquet")
    assert set(results["model_id"]) == {MODEL} and set(results["pooling"]) == {"endpoint"}
    [side] = (run / "reports" / "contrastive-vs-baseline").glob("*-side-by-side.csv")
    table = pd.read_csv(side)
    assert {f"{MODEL} fail %", f"{BASELINE} fail %"} <= set(table.columns)
    assert table[f"{MODEL} fail %"].notna().any() and table[f"{BASELINE} fail %"].notna().any()
    # per case against the baseline: this run's cases only, each answered by both models
    [changes] = (run / "reports" / "contrastive-vs-baseline").glob("*-changes.csv")
    [row] = pd.read_csv(changes).to_dict("records")
    assert row["removed"] == row["added"] == 0 and row["unchanged"] > 0, row
    assert f"lingtest test [1/1]: contrastive on {MODEL}" in served_cli["runs"][0]["output"]
    assert served_cli["auth"] == {f"Bearer {KEY}"}  # the key reached every request


def test_the_report_counts_what_the_server_counted(served_cli):
    first = served_cli["runs"][0]
    [row] = first["endpoints"].to_dict("records")
    bodies = served_cli["bodies"]
    sent = [t for body in bodies for t in body]
    assert first["requests"] == len(bodies) > 1
    assert (row["model_id"], row["endpoint"]) == (MODEL, served_cli["url"])
    assert row["requests"] == first["requests"]
    assert len(set(sent)) == len(sent)  # each text sent once
    assert (row["embedded_now"], row["from_store"]) == (len(sent), 0)  # a vector per text
    # the server stated no usage: characters/4 per request, and said so
    assert row["tokens"] == "estimated (characters/4)"
    assert row["input_tokens"] == sum(math.ceil(sum(map(len, b)) / 4) for b in bodies)


def test_the_provenance_names_the_endpoint_and_its_stated_revision_not_a_secret(served_cli):
    url, root = served_cli["url"], served_cli["root"]
    [row] = served_cli["runs"][0]["endpoints"].to_dict("records")
    revision = row["revision"]
    assert revision.startswith(f"endpoint:{url}|{MODEL}|") and "owned_by=system" in revision
    results = pd.read_parquet(root / "runs" / MODEL / "interim" / "contrastive"
                              / "results.parquet")
    assert set(results["revision"]) == {revision}
    services = served_cli["runs"][0]["provenance"]["embedding services"]
    assert services.startswith(f"{MODEL}: {url}, revision {revision} (stated by the server)")
    shown = [r["output"] for r in served_cli["runs"]] + [
        p.read_text(errors="replace") for p in (root / "runs" / MODEL / "reports").rglob("*")
        if p.is_file() and p.suffix in (".md", ".csv", ".json")]
    assert shown and not [text for text in shown if KEY in text]


def test_the_same_command_again_asks_nothing_and_serves_the_store(served_cli):
    first, again = served_cli["runs"]
    assert again["requests"] == 0
    [row] = again["endpoints"].to_dict("records")
    sent = sum(map(len, served_cli["bodies"]))
    assert (row["requests"], row["input_tokens"], row["embedded_now"]) == (0, 0, 0)
    assert row["from_store"] == sent
    assert row["tokens"] == NO_REQUESTS  # no request, so no token source to claim
    assert row["revision"] == first["endpoints"].loc[0, "revision"]
    assert f"0 requests, 0 input tokens ({NO_REQUESTS}), {sent} vectors from the embedding " \
           "store" in again["provenance"]["embedding services"]


def test_a_baseline_run_with_other_settings_is_named_and_its_encoder_left_out(served_cli):
    """Another θ dictionary size gives other verdicts on the same cases, so the stored rows
    cannot stand beside such a run; the stored hashing encoder is not among params.yaml's
    contrastive models (models.encoders, as contrastive.encoders is unset there), so it
    cannot be rerun and the words say so."""
    from lingtest.flows.own_models import baseline_to_run_here
    from lingtest.flows.registry import load_params

    root = served_cli["root"]
    spec = f"contrastive.encoders=['openai:{MODEL}@{served_cli['url']}#key_env=EMBED_KEY']"
    with mock.patch.dict(os.environ, {"EMBED_KEY": KEY}):
        params = load_params(root, [*TINY, spec, "contrastive.dictionary_max_words=50"])
    here, why = baseline_to_run_here("contrastive", params, root, root / "runs" / MODEL,
                                     [MODEL])
    assert here == []
    assert why == ("this run's contrastive.dictionary_max_words differs from the stored "
                   "results' (another suite, or other verdicts on the same cases); "
                   f"{BASELINE} left out (not among params.yaml's contrastive models, so it "
                   "cannot be rerun)")
    same = load_params(root, [*TINY, spec])
    assert baseline_to_run_here("contrastive", same, root, root / "runs" / MODEL,
                                [MODEL]) == ([], "")
