"""Credentials in parameters never reach a report, the provenance, the result database's run
record, ``lingtest params`` or the flow-run parameters Prefect stores; the code still uses them."""
from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tasks.core.cli import app
from tasks.core.config import Params, load_params
from tasks.core.secrets import redact_text, redact_value

PASSWORD = "hunter2-Zq9"
URL = f"postgresql+psycopg://alice:{PASSWORD}@db.example:5432/lingtest"


def test_url_passwords_and_keys_are_masked_and_nothing_else_changes():
    assert redact_text(URL) == "postgresql+psycopg://alice:***@db.example:5432/lingtest"
    assert redact_text("http://u:p%40ss@host:11434/v1?api_key=abc&x=1") == \
        "http://u:***@host:11434/v1?api_key=***&x=1"
    for plain in ("sqlite:////tmp/a:b/results.sqlite", "http://127.0.0.1:11434",
                  "openai:gpt-4o-mini", "HuggingFaceTB/SmolLM2-135M-Instruct"):
        assert redact_text(plain) == plain
    assert redact_value({"api_key": "sk-1", "max_new_tokens": 8, "token": "t",
                         "urls": [URL]}) == {"api_key": "***", "max_new_tokens": 8,
                                             "token": "***", "urls": [redact_text(URL)]}


def test_params_dumps_mask_the_database_password_but_the_attribute_keeps_it():
    params = Params(consistency={"database_url": URL})
    assert params.consistency.database_url == URL
    for dumped in (params.model_dump_json(), json.dumps(params.model_dump(mode="json")),
                   params.consistency.model_dump_json(), repr(params.model_dump())):
        assert PASSWORD not in dumped and "alice:***@db.example" in dumped
    # the password is no cache or run identity: a rotated password keeps every key
    rotated = Params(consistency={"database_url": URL.replace(PASSWORD, "other")})
    assert rotated.section_hash() == params.section_hash()
    assert Params().section_hash() != params.section_hash()


def test_lingtest_params_prints_no_password():
    shown = CliRunner().invoke(app, ["params", "--set", f"consistency.database_url={URL}"])
    assert shown.exit_code == 0, shown.output
    assert PASSWORD not in shown.output and "alice:***@db.example" in shown.output


def test_prefect_stores_masked_flow_parameters_while_the_flow_gets_the_real_ones(
        prefect_harness):
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.context import get_run_context

    @flow(name="secret-params")
    def echo(params: Params) -> tuple[str, str]:
        return params.consistency.database_url, str(get_run_context().flow_run.id)

    seen, run_id = echo(params=Params(consistency={"database_url": URL}))
    assert seen == URL

    async def stored() -> dict:
        async with get_client() as client:
            return (await client.read_flow_run(run_id)).parameters

    parameters = json.dumps(asyncio.run(stored()))
    assert PASSWORD not in parameters and "alice:***@db.example" in parameters


# --------------------------------------------------------------------------- end to end

_spec = importlib.util.spec_from_file_location("pg_server", Path(__file__).with_name("pg_server.py"))
pg_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pg_server)
postgres_url = pg_server.postgres_url


@pytest.mark.slow
def test_consistency_run_with_a_database_password_writes_it_nowhere(
        data_project, postgres_url, tmp_path):
    """The smallest real run (one question, SmolLM2, PostgreSQL with a password in the URL)."""
    from prefect.client.orchestration import get_client
    from sqlalchemy import create_engine, text

    from flows.stage import run_stage

    workspace, overrides = data_project
    # the test server trusts local connections, so any password is accepted and must be hidden
    url = postgres_url.replace("postgres@", f"postgres:{PASSWORD}@")
    questions = tmp_path / "one.jsonl"
    questions.write_text(json.dumps({"question": "Is the old car red?", "answer": False}) + "\n")
    params = load_params(workspace.root, overrides + [
        f"consistency.questions={questions}", "consistency.n_questions=0",
        "consistency.max_values=2", "consistency.strength=1", "consistency.max_new_tokens=4",
        "consistency.bootstrap=0", f"consistency.database_url={url}"])
    summary = run_stage("consistency", params, workspace)
    assert summary["sent"] > 0 and PASSWORD not in json.dumps(summary)

    written = [workspace.reports / "consistency-metrics.json",
               workspace.data / "consistency" / "last-run.json",
               *(p for p in (workspace.reports / "consistency").rglob("*") if p.is_file())]
    assert any(p.name == "provenance.json" for p in written)
    for path in written:
        assert PASSWORD not in path.read_text(encoding="utf-8", errors="replace"), path

    engine = create_engine(url.replace(PASSWORD, ""))  # trust: connects without it
    with engine.connect() as conn:
        records = [str(tuple(row)) for row in conn.execute(text("SELECT * FROM runs")).all()]
    engine.dispose()
    assert records and not any(PASSWORD in r for r in records)

    async def stored() -> list[str]:
        async with get_client() as client:
            runs = [*await client.read_flow_runs(), *await client.read_task_runs()]
            return [r.model_dump_json() for r in runs]

    records = asyncio.run(stored())  # flow runs (their parameters) and task runs, whole
    assert any("postgres:***@" in r for r in records)
    assert not any(PASSWORD in r for r in records)
