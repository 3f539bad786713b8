"""Credentials in parameters never reach a report, the provenance, the result database's run
record, ``lingtest params``, a log, an error message or the flow-run parameters and artifacts
Prefect stores; the code still uses them. Passwords hold the characters that make a URL's
password ambiguous (/ @ : # ? %), unencoded and %-encoded."""
from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from lingtest.flows.cli import app
from lingtest.flows.registry import Params
from lingtest.flows.registry import load_params
from lingtest.tasks.core.secrets import redact_text, redact_url, redact_value

PASSWORD = "hunter2-Zq9"
URL = f"postgresql+psycopg://alice:{PASSWORD}@db.example:5432/lingtest"
# Passwords as written in a URL; every piece carries a marker that must not be shown.
ODD = {"slash": "Zq9/Xk7", "at": "Zq9@Xk7", "colon-hash": "Zq9:Xk7#Wm5",
       "percent-question": "Zq9%Xk7?Wm5", "all": "Zq9/Xk7@Wm5:Yv3#Tr2%Pb4?Hn6",
       "encoded": "Zq9%2FXk7%40Wm5%3AYv3%23Tr2"}
MASKED = "postgresql+psycopg://alice:***@db.example:5432/lingtest"


def odd_url(password: str) -> str:
    return f"postgresql+psycopg://alice:{password}@db.example:5432/lingtest"


def leaks(text: str, password: str) -> list[str]:
    """The password's markers found in ``text`` (none: nothing of it is shown)."""
    return [m for m in re.findall(r"[A-Z][a-z][0-9]", password) if m in text]


def test_url_passwords_and_keys_are_masked_and_nothing_else_changes():
    assert redact_text(URL) == "postgresql+psycopg://alice:***@db.example:5432/lingtest"
    assert redact_text("http://u:p%40ss@host:11434/v1?api_key=abc&x=1") == \
        "http://u:***@host:11434/v1?api_key=***&x=1"
    for plain in ("sqlite:////tmp/a:b/results.sqlite", "http://127.0.0.1:11434",
                  "openai:gpt-4o-mini", "HuggingFaceTB/SmolLM2-135M-Instruct",
                  "sqlite:////tmp/a@b/results.sqlite", "openai:m@http://127.0.0.1:8000/v1"):
        assert redact_text(plain) == plain
        assert redact_value(plain) == plain
    assert redact_value({"api_key": "sk-1", "max_new_tokens": 8, "token": "t",
                         "urls": [URL]}) == {"api_key": "***", "max_new_tokens": 8,
                                             "token": "***", "urls": [redact_text(URL)]}


@pytest.mark.parametrize("password", ODD.values(), ids=ODD.keys())
def test_odd_passwords_are_masked_whole_in_values_and_in_text(password):
    """Masked up to the URL's last '@': a superset of what SQLAlchemy (first '@') and
    urllib (authority up to the first '/') take for the password, raw or decoded."""
    url = odd_url(password)
    assert redact_url(url) == redact_value(url) == MASKED
    spec = f"openai:m@http://alice:{password}@127.0.0.1:8000/v1#name=m"
    assert redact_value(spec) == "openai:m@http://alice:***@127.0.0.1:8000/v1#name=m"
    texts = [f"database {url}, run 3", json.dumps({"u": url, "b": "x@y", "s": spec}),
             repr({"u": url, "b": "x@y"}), yaml.safe_dump({"u": url, "llms": [spec]}),
             json.dumps(json.dumps({"u": url}))]  # JSON inside JSON: escaped quotes
    for text in texts:
        shown = redact_text(text)
        assert not leaks(shown, password), shown
        assert "alice:***@db.example:5432/lingtest" in shown
        assert "x@y" in shown or "x@y" not in text
    for parse in (make_url, urlsplit):  # what each parser takes for the password
        try:
            secret = parse(url).password or ""
        except ValueError:  # SQLAlchemy: "Wm5:Yv3#..." is no port
            continue
        assert not secret or secret not in redact_url(url)


@pytest.mark.parametrize("password", ODD.values(), ids=ODD.keys())
def test_set_echoes_in_errors_mask_the_password(password, tmp_path, monkeypatch):
    """A bad --set beside a database URL: the error quotes every --set, the password masked."""
    from lingtest.tasks.core.errors import LingtestError

    (tmp_path / "params.yaml").write_text("seed: 1\n")
    url = odd_url(password)
    for sets in ([f"consistency.database_url={url}", "seed=-1"],
                 [f"consistency.databse_url={url}"], [f"consistency.llms={url}"],
                 [f"consistency.database_url={url}", ".seed=1"]):
        with pytest.raises(LingtestError) as caught:
            load_params(tmp_path, sets)
        assert not leaks(str(caught.value), password), str(caught.value)
        assert "alice:***@" in str(caught.value) or sets[-1] == ".seed=1"


@pytest.mark.parametrize("password", [PASSWORD, *ODD.values()], ids=["plain", *ODD])
def test_params_dumps_mask_the_database_password_but_the_attribute_keeps_it(password):
    url = odd_url(password)
    params = Params(consistency={"database_url": url})
    assert params.consistency.database_url == url
    for dumped in (params.model_dump_json(), json.dumps(params.model_dump(mode="json")),
                   params.consistency.model_dump_json(), repr(params.model_dump())):
        assert not leaks(dumped, password) and "alice:***@db.example" in dumped
    # the password is no cache or run identity: a rotated password keeps every key
    rotated = Params(consistency={"database_url": url.replace(password, "other")})
    assert rotated.section_hash() == params.section_hash()
    assert Params().section_hash() != params.section_hash()


@pytest.mark.parametrize("password", [PASSWORD, *ODD.values()], ids=["plain", *ODD])
def test_lingtest_params_and_models_print_no_password(password):
    url, spec = odd_url(password), f"openai:m@http://alice:{password}@127.0.0.1:9/v1"
    shown = CliRunner().invoke(app, ["params", "--set", f"consistency.database_url={url}",
                                     "--set", f"consistency.llms=['{spec}']"])
    assert shown.exit_code == 0, shown.output
    assert not leaks(shown.output, password) and "alice:***@db.example" in shown.output
    assert "openai:m@http://alice:***@127.0.0.1:9/v1" in shown.output
    listed = CliRunner().invoke(app, ["models", "--set", f"consistency.llms=['{spec}']"])
    assert listed.exit_code == 0, listed.output
    assert not leaks(listed.output, password) and "alice:***@" in listed.output


@pytest.mark.parametrize("password", ODD.values(), ids=ODD.keys())
def test_log_records_mask_the_password(password, caplog):
    url = odd_url(password)
    with caplog.at_level(logging.INFO):
        logging.getLogger("lingtest.test").info("database %s: run %d", url, 3)
        logging.getLogger("prefect.flow_runs").info(f"spec openai:m@http://u:{password}@h/v1")
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2 and not any(leaks(m, password) for m in messages), messages
    assert messages[0] == f"database {MASKED}: run 3"


@pytest.mark.parametrize("password", ODD.values(), ids=ODD.keys())
def test_the_runs_table_stores_the_parameters_masked(password, tmp_path):
    """Even a caller that hands ``start_run`` raw parameters stores none of the password."""
    from sqlalchemy import text

    from lingtest.tasks.consistency.store import open_store

    url = odd_url(password)
    with open_store(f"sqlite:///{tmp_path}/results.sqlite") as store:
        store.start_run({"consistency": {"database_url": url, "llms": [
            f"openai:m@http://u:{password}@h/v1"]}}, 1, "abc")
        with store.engine.connect() as conn:
            rows = [str(tuple(row)) for row in conn.execute(text("SELECT * FROM runs")).all()]
    assert len(rows) == 1 and not leaks(rows[0], password) and "alice:***@" in rows[0]


@pytest.mark.parametrize("password", ["Zq9/Xk7:Wm5#Yv3%Tr2?Pb4", "Zq9%2FXk7%40Wm5", "Zq9@Xk7"],
                         ids=["unencoded", "encoded", "at"])
def test_a_database_that_cannot_be_reached_is_named_without_its_password(password):
    """Nothing listens on port 9: the error names the URL, masked, and the fix; an
    unencoded '@' (SQLAlchemy would take the rest for the host) is refused first."""
    from lingtest.tasks.consistency.store import open_store
    from lingtest.tasks.core.errors import LingtestError

    with pytest.raises(LingtestError) as caught:
        open_store(f"postgresql+psycopg://alice:{password}@127.0.0.1:9/lingtest")
    message = str(caught.value)
    assert not leaks(message, password), message
    assert "postgresql+psycopg://alice:***@127.0.0.1:9/lingtest" in message
    assert ("%40" if password == "Zq9@Xk7" else "start the server") in message


def test_reports_and_provenance_mask_a_password_given_to_them(tmp_path):
    """``publish`` masks the provenance and the artifact description even when a method
    passes a raw URL or spec into them (the files are written outside a flow run here)."""
    import pandas as pd

    from lingtest.tasks.core.artifacts import artifact_description
    from lingtest.tasks.core.paths import Workspace
    from lingtest.tasks.core.publish import Report, provenance, publish

    password = ODD["all"]
    workspace = Workspace(tmp_path)
    params = Params(consistency={"database_url": odd_url(password)})
    report = Report("secret-check", metrics={"setting": "s", "m": {"n": 1}},
                    provenance=provenance(
        params, workspace, "consistency", database=odd_url(password),
        models=[f"openai:m@http://alice:{password}@h:1/v1"]))
    report.add("secret-table", pd.DataFrame({"a": [1]}), "A table")
    publish(report, workspace)
    written = [p for p in tmp_path.joinpath("reports").rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"provenance.json", "secret-table.md", "metrics.json"}
    for path in written:
        assert not leaks(path.read_text(encoding="utf-8"), password), path
    assert "alice:***@db.example" in (tmp_path / "reports/secret-check/provenance.json").read_text()
    described = artifact_description("t", f"see {odd_url(password)}", {"database": "x"})
    assert not leaks(described, password) and MASKED in described


def test_prefect_stores_masked_flow_parameters_while_the_flow_gets_the_real_ones(
        prefect_harness):
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.context import get_run_context

    import pandas as pd
    from prefect import get_run_logger
    from prefect.client.schemas.filters import (ArtifactFilter, ArtifactFilterFlowRunId,
                                                LogFilter, LogFilterFlowRunId)

    from lingtest.tasks.core.artifacts import publish_table

    password = ODD["all"]
    url, spec = odd_url(password), f"openai:m@http://alice:{password}@127.0.0.1:9/v1"

    @flow(name="secret-params")
    def echo(params: Params) -> tuple[str, str]:
        get_run_logger().info("database %s, model %s", params.consistency.database_url,
                              params.consistency.llms[0])
        publish_table("secret-artifact", pd.DataFrame({"a": [1]}), "t",
                      provenance={"database": params.consistency.database_url})
        return params.consistency.database_url, str(get_run_context().flow_run.id)

    seen, run_id = echo(params=Params(consistency={"database_url": url, "llms": [spec]}))
    assert seen == url
    from prefect.logging.handlers import APILogWorker
    APILogWorker.drain_all(timeout=10)  # logs go to the API in background batches

    async def stored() -> tuple[dict, list[str], list[str]]:
        async with get_client() as client:
            parameters = (await client.read_flow_run(run_id)).parameters
            logs = await client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
            artifacts = await client.read_artifacts(artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))
            return (parameters, [log.message for log in logs],
                    [a.model_dump_json() for a in artifacts])

    parameters, logs, artifacts = asyncio.run(stored())
    parameters = json.dumps(parameters)
    assert not leaks(parameters, password) and "alice:***@db.example" in parameters
    assert any("alice:***@db.example" in m for m in logs), logs
    assert artifacts and any("alice:***@db.example" in a for a in artifacts), artifacts
    for text in (*logs, *artifacts):
        assert not leaks(text, password), text


def test_adapt_stores_its_base_url_masked_while_the_flow_gets_the_real_one():
    """`lingtest adapt --base-url` reaches ``adapt_flow`` as a ``MaskedURL``: the parameters
    Prefect stores for the run (``Flow.serialize_parameters``, what the API records) hold the
    URL with its password masked, the flow's validated parameters the real URL."""
    from lingtest.flows.adapt import adapt_flow
    from lingtest.tasks.core.secrets import MaskedURL, plain_url

    password = ODD["encoded"]
    url = f"http://alice:{password}@127.0.0.1:9/v1"
    given = {"tree_path": "t.csv", "topic": "/Rooms", "base_url": MaskedURL(url=url)}
    stored = json.dumps(adapt_flow.serialize_parameters(given))
    assert not leaks(stored, password) and '"http://alice:***@127.0.0.1:9/v1"' in stored
    assert plain_url(adapt_flow.validate_parameters(given)["base_url"]) == url
    plain = {**given, "base_url": "http://127.0.0.1:9/v1"}  # a plain string stays usable
    assert plain_url(adapt_flow.validate_parameters(plain)["base_url"]) == plain["base_url"]


# --------------------------------------------------------------------------- end to end

_spec = importlib.util.spec_from_file_location("pg_server", Path(__file__).with_name("pg_server.py"))
pg_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pg_server)
postgres_url = pg_server.postgres_url


# unencoded / : # % ? (SQLAlchemy reads them as the password) and an encoded '@'
PG_PASSWORD = "Zq9/Xk7:Wm5#Yv3%Tr2?Pb4%40Hn6"


@pytest.mark.slow
def test_consistency_run_with_a_database_password_writes_it_nowhere(
        data_project, postgres_url, tmp_path):
    """The smallest real run (one question, PostgreSQL with a password in the URL):
    reports, provenance, last-run record, the runs table, and Prefect's flow runs, task
    runs, logs and artifacts hold none of the password. The model is a served one on
    127.0.0.1 (``llm_servers``): where the password goes does not depend on the model, and a
    local LM's load and answers would be most of the run's time."""
    from llm_servers import FakeLLMServer
    from prefect.client.orchestration import get_client
    from prefect.logging.handlers import APILogWorker
    from sqlalchemy import create_engine, text

    from lingtest.flows.stage import run_stage

    workspace, overrides = data_project
    # the test server trusts local connections, so any password is accepted and must be hidden
    url = postgres_url.replace("postgres@", f"postgres:{PG_PASSWORD}@")
    assert make_url(url).host == make_url(postgres_url).host  # SQLAlchemy reads it whole
    questions = tmp_path / "one.jsonl"
    questions.write_text(json.dumps({"question": "Is the old car red?", "answer": False}) + "\n")
    with FakeLLMServer("openai") as server:
        params = load_params(workspace.root, overrides + [
            f"consistency.questions={questions}", "consistency.n_questions=0",
            "consistency.max_values=2", "consistency.strength=1",
            "consistency.max_new_tokens=4", "consistency.bootstrap=0",
            f"consistency.llms=['openai:smol@{server.url}']", f"consistency.database_url={url}"])
        summary = run_stage("consistency", params, workspace)
    assert summary["sent"] == len(server.generations()) > 0
    assert not leaks(json.dumps(summary), PG_PASSWORD)

    written = [workspace.data / "consistency" / "last-run.json",
               *(p for p in (workspace.reports / "consistency").rglob("*") if p.is_file())]
    assert any(p.name == "provenance.json" for p in written)
    for path in written:
        assert not leaks(path.read_text(encoding="utf-8", errors="replace"), PG_PASSWORD), path

    engine = create_engine(url.replace(PG_PASSWORD, ""))  # trust: connects without it
    with engine.connect() as conn:
        records = [str(tuple(row)) for row in conn.execute(text("SELECT * FROM runs")).all()]
    engine.dispose()
    assert records and not any(leaks(r, PG_PASSWORD) for r in records)
    assert any("postgres:***@" in r for r in records)

    APILogWorker.drain_all(timeout=10)

    async def stored() -> list[str]:
        async with get_client() as client:
            runs = [*await client.read_flow_runs(), *await client.read_task_runs(),
                    *await client.read_logs(), *await client.read_artifacts()]
            return [r.model_dump_json() for r in runs]

    records = asyncio.run(stored())  # flow and task runs (parameters), logs, artifacts, whole
    assert any("postgres:***@" in r for r in records)
    assert not any(leaks(r, PG_PASSWORD) for r in records)
