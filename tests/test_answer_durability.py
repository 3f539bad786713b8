"""Killing the consistency answering mid-batch loses no answer that arrived, and the rerun
sends only the prompts without a stored answer (a paid API is not paid twice for one).

A real OpenAI-compatible server on 127.0.0.1 answers deterministically after a short
per-prompt delay and counts requests per prompt; one prompt of each worker's first batch is
held, so a batch never completes before the kill. The answering runs as the stage runs it
(``answering.answer_pending``, in subprocesses: under a process runner each worker process
answers one run of ``batch_runs`` and writes to the SQLite store itself). After N answers
are stored the workers are killed; the rerun completes the run.

The bound the rerun is held to: a prompt is requested twice only if its request was in
flight at the kill (sent, no answer stored), and those are at most ``CONCURRENCY``: the
limit per endpoint across processes, whose slot a request holds until its answer is stored.
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pandas as pd
import pytest
from llm_servers import FakeLLMServer, verdict

from lingtest.tasks.consistency import answering
from lingtest.tasks.consistency.store import open_store

CONCURRENCY = 4  # requests in flight per endpoint: the most a kill can make us send twice
SETTINGS = {"max_new_tokens": 16, "temperature": 0.0, "seed": 0, "system": None,
            "timeout_s": 30.0, "retries": 0, "backoff_s": 0.0, "concurrency": CONCURRENCY,
            "offline": True, "device": "cpu", "batch_size": 8}
PROMPTS = {"prompt_prefix": "", "prompt_suffix": "? Return a JSON boolean."}
# A reply older than this at the kill has had time to be stored, even on a loaded machine
# (0.5 s was not: under the full suite one reply was 0.5-1 s from the server to the store).
# What bounds the loss exactly is the in-flight check: a request holds its endpoint slot
# until its answer is stored, so at most CONCURRENCY are ever sent and not stored.
GRACE_S = 5.0
WORKER = """
import json, sys
from lingtest.tasks.consistency import answering
a = json.loads(sys.argv[1])
ref = answering.model_ref(a["spec"])
ident = answering.identity(ref, a["settings"], a["prompts"])
answering.answer_pending.fn(a["url"], ref, a["root"], ident, a["settings"], a["prompts"],
                            a["queries"], a["run_id"], a["query_ids"])
"""


@dataclass
class SlowServer(FakeLLMServer):
    """The fake OpenAI server, answering each prompt after a short delay of its own (0.05 to
    0.2 s) and holding the prompts in ``held`` until ``release`` is set; ``replied`` says
    when each answer left."""

    held: set[str] = field(default_factory=set)
    release: threading.Event = field(default_factory=threading.Event, init=False)
    replied: list[tuple[float, str]] = field(default_factory=list, init=False)

    def handle(self, method, path, headers, body):
        reply = super().handle(method, path, headers, body)
        prompt = body["messages"][-1]["content"]
        if prompt in self.held:
            self.release.wait(120)  # longer than the test waits for the store
        else:
            time.sleep(0.05 + hashlib.sha256(prompt.encode()).digest()[0] % 4 * 0.05)
        with self._lock:
            self.replied.append((time.monotonic(), prompt))
        return reply

    def requests_per_prompt(self) -> collections.Counter:
        return collections.Counter(r.body["messages"][-1]["content"]
                                   for r in self.generations())


def _setup(root: Path, n_questions: int = 3, rows: int = 10) -> tuple[str, str, int]:
    """A store holding ``n_questions`` x ``rows`` distinct prompts and an open run; the
    queries file the stage writes (``store_id``, ``prompt``)."""
    questions = pd.DataFrame({"question_id": [f"q{j}" for j in range(n_questions)],
                              "source": "test", "question": [f"Is thing {j} blue?"
                                                             for j in range(n_questions)],
                              "answer": True, "passage": None})
    queries = pd.DataFrame([{"question_id": f"q{j}", "array_row": k, "row_values": [k],
                             "derived_text": f"is thing {j} variant {k} blue",
                             "prompt": f"is thing {j} variant {k} blue{PROMPTS['prompt_suffix']}"}
                            for j in range(n_questions) for k in range(rows)])
    url = f"sqlite:///{root / 'results.sqlite'}"
    with open_store(url) as store:
        store.upsert_questions(questions)
        store.add_queries(queries)
        run_id = store.start_run({"test": "durability"}, 0, "test")
    path = root / "queries.parquet"
    queries.assign(store_id=queries["question_id"]).to_parquet(path)
    return url, str(path), run_id


def _stored(db: Path) -> dict[str, str]:
    """prompt -> stored answer text (answered responses only)."""
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        return dict(conn.execute(
            "SELECT q.prompt, r.raw_text FROM responses r JOIN queries q ON q.id = r.query_id"
            " WHERE r.error IS NULL"))


def _stored_so_far(db: Path) -> dict[str, str]:
    """``_stored``, empty while the stage has not created the store's tables yet."""
    try:
        return _stored(db) if db.is_file() else {}
    except sqlite3.OperationalError:  # no such table (yet)
        return {}


def _start(args: dict, env: dict, log: Path) -> subprocess.Popen:
    with log.open("w") as err:  # a file, not a pipe: a full pipe would stall the worker
        return subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(args)], env=env,
                                stdout=subprocess.DEVNULL, stderr=err)


def test_kill_mid_batch_loses_no_answer_and_rerun_sends_only_the_rest(tmp_path):
    """Two worker processes (a process runner's two runs of whole batches), one killed with
    SIGKILL, the other with SIGTERM, while each one's first batch is still open."""
    url, queries_path, run_id = _setup(tmp_path)
    db = tmp_path / "results.sqlite"
    prompts = pd.read_parquet(queries_path)["prompt"].tolist()
    env = {**os.environ, "LINGTEST_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]),
                                          os.environ.get("PYTHONPATH", "")])}
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        env.pop(name, None)
    with SlowServer("openai") as server:
        spec = f"openai:fake-model@{server.url}"
        ref = answering.model_ref(spec)
        ident = answering.identity(ref, SETTINGS, PROMPTS)
        args = {"spec": spec, "settings": SETTINGS, "prompts": PROMPTS, "url": url,
                "root": str(tmp_path), "queries": queries_path, "run_id": run_id}
        # as the process runner: one registration, then runs of whole batches
        key = answering.register_model.fn(url, ref, str(tmp_path), ident, SETTINGS, PROMPTS)
        ids = answering.pending_ids(url, key, queries_path)
        parts = answering.batch_runs(ids, answering.answer_chunk(SETTINGS, ref), 2)
        assert [len(p) for p in parts] == [16, 14]
        # the third prompt of each worker's first batch is held: no batch ever completes
        server.held = {prompts[2], prompts[16 + 2]}
        logs = [tmp_path / f"worker-{i}.log" for i in range(len(parts))]
        procs = [_start({**args, "query_ids": part}, env, log) for part, log in zip(parts, logs)]
        deadline = time.monotonic() + 60
        def both_held_sent() -> bool:
            with server._lock:
                return server.held <= set(server.requests_per_prompt())

        # while both first batches are still open (each worker's held prompt sent: a slow
        # worker may not have reached it when the other has stored ten)
        while len(_stored(db)) < 10 or not both_held_sent():
            assert all(p.poll() is None for p in procs), logs[0].read_text()[-2000:]
            assert time.monotonic() < deadline, (
                f"{len(server.replied)} answers came back, {len(_stored(db))} stored: "
                "answers are not saved as they return")
            time.sleep(0.05)
        killed_at = time.monotonic()
        for proc, sig in zip(procs, (signal.SIGKILL, signal.SIGTERM)):
            proc.send_signal(sig)
        for proc, sig in zip(procs, (signal.SIGKILL, signal.SIGTERM)):
            assert proc.wait(30) == -sig
        with server._lock:
            replied = list(server.replied)
            requested = server.requests_per_prompt()
        stored = _stored(db)

        # every answer that had come back (GRACE_S before the kill) is in the store
        old = {p for t, p in replied if t < killed_at - GRACE_S}
        assert old <= set(stored), f"lost answers: {sorted(old - set(stored))}"
        assert all(stored[p] == verdict(p) for p in stored)  # each under its own prompt
        in_flight = set(requested) - set(stored)
        assert server.held <= in_flight and len(in_flight) <= CONCURRENCY

        server.release.set()  # the rerun, as the thread runner's one pass: to completion
        done = answering.answer_pending.fn(url, ref, str(tmp_path), ident, SETTINGS, PROMPTS,
                                           queries_path, run_id)
        total = server.requests_per_prompt()
    assert done["sent"] == len(prompts) - len(stored) and done["errors"] == 0
    final = _stored(db)
    assert sorted(final) == sorted(prompts) and all(final[p] == verdict(p) for p in final)
    twice = {p for p, n in total.items() if n > 1}
    assert twice <= in_flight, f"answered before the kill, sent again: {twice - in_flight}"
    assert max(total.values()) == (2 if twice else 1)
    assert sum(total.values()) == len(prompts) + len(twice) <= len(prompts) + CONCURRENCY
    with open_store(url) as store:  # one answered response per prompt, no failed ones
        assert store.counts()["responses"] == len(prompts)


USER_LLM = """
import json, os, sqlite3


def generate(prompts):
    with sqlite3.connect(os.environ["DURABILITY_DB"]) as conn:
        stored = conn.execute("SELECT count(*) FROM responses").fetchone()[0]
    with open(os.environ["DURABILITY_CALLS"], "a") as out:
        out.write(json.dumps([len(prompts), stored]) + "\\n")
    return ['{"answer": true}' for _ in prompts]
"""


def test_a_batching_model_answers_in_batches_of_batch_size_each_saved_as_it_returns(
        tmp_path, monkeypatch):
    """A model answering a batch at once (here a ``python:`` one; a local transformers
    model batches the same way) is called with ``batch_size`` prompts whatever the
    ``concurrency`` (its batches fix its greedy answers), and each batch is in the store
    before the next is asked."""
    url, queries_path, run_id = _setup(tmp_path, n_questions=1, rows=10)
    (tmp_path / "batcher.py").write_text(USER_LLM, encoding="utf-8")
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("DURABILITY_DB", str(tmp_path / "results.sqlite"))
    monkeypatch.setenv("DURABILITY_CALLS", str(calls))
    settings = {**SETTINGS, "batch_size": 3, "concurrency": 5}
    ref = answering.model_ref("python:batcher.py:generate", tmp_path)
    ident = answering.identity(ref, settings, PROMPTS, tmp_path)
    done = answering.answer_pending.fn(url, ref, str(tmp_path), ident, settings, PROMPTS,
                                       queries_path, run_id)
    assert done["sent"] == 10 and done["errors"] == 0
    seen = [json.loads(line) for line in calls.read_text().splitlines()]
    assert seen == [[3, 0], [3, 3], [3, 6], [1, 9]]  # (batch, answers stored before it)
    assert len(_stored(tmp_path / "results.sqlite")) == 10


def test_an_interrupted_http_call_sends_nothing_more_and_hands_over_what_is_in_flight(
        tmp_path, monkeypatch):
    """Ctrl-C (here: the store raising KeyboardInterrupt on the first answer) stops the call:
    the queued prompts are never sent, the requests in flight are awaited and handed over
    (their answers were paid for), and every endpoint slot is free again."""
    from lingtest.tasks.models.llm import LLMSettings, load_llm

    monkeypatch.setenv("LINGTEST_CACHE", str(tmp_path))
    prompts = [f"prompt {i}" for i in range(12)]
    handed: list[int] = []

    def store(done):
        handed.extend(i for i, _ in done)
        if len(handed) == 1:
            raise KeyboardInterrupt

    with FakeLLMServer("openai", sleep_s=0.2) as server:
        llm = load_llm(f"openai:fake-model@{server.url}",
                       LLMSettings(concurrency=2, retries=0, timeout_s=10))
        with pytest.raises(KeyboardInterrupt):
            llm.answer(prompts, on_answer=store)
        sent = sorted(prompts.index(r.body["messages"][-1]["content"])
                      for r in server.generations())
        assert len(sent) <= 1 + 2  # the first answer, and what was in flight (concurrency)
        assert sorted(handed) == sent  # none of them dropped
        again = llm.answer(prompts[:4])  # the slots were released: a new call goes through
        assert [r.text for r in again] == [verdict(p) for p in prompts[:4]]
        llm.close()


def test_sigterm_to_a_running_stage_sends_no_further_prompt_and_keeps_every_answer(tmp_path):
    """`lingtest run consistency` (thread runner) stopped with SIGTERM, as a service manager
    stops it: the answers that came back are stored, no prompt is sent after the signal but
    the one in flight (concurrency 1), and the process exits soon after (Prefect's shutdown
    would otherwise wait for the task thread to send every remaining prompt)."""
    import shutil

    from test_consistency_import import CA_1, CA_2, RUNS, SYNONYMS_1, SYNONYMS_2

    from lingtest.tasks.core.paths import PACKAGE_ROOT

    guide = tmp_path / "guide"
    guide.mkdir()
    for name, text in (("synonyms-1.txt", SYNONYMS_1), ("ca-1.csv", CA_1), ("test_runs.csv", RUNS),
                       ("synonyms-2.txt", SYNONYMS_2), ("ca-2.csv", CA_2)):
        (guide / name).write_text(text, encoding="utf-8")
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    db = root / "data" / "consistency" / "results.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "OPENAI_"))}
    env.update(PYTHONPATH=str(PACKAGE_ROOT), HF_HUB_OFFLINE="1")
    with SlowServer("openai") as server:
        args = [sys.executable, "-m", "lingtest.flows.cli", "run", "consistency",
                "--set", f"consistency.llms=[openai:fake-model@{server.url}]",
                "--set", f"consistency.import_dir={guide}", "--set", "consistency.bootstrap=0",
                "--set", "consistency.concurrency=1", "--set", "consistency.retries=0",
                "--set", "runtime.task_runner=threads"]
        with (tmp_path / "run.log").open("w") as log:
            proc = subprocess.Popen(args, cwd=root, env=env, stdout=log, stderr=log)
        deadline = time.monotonic() + 240
        while len(_stored_so_far(db)) < 2:
            assert proc.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp_path / "run.log").read_text()[-3000:]
            time.sleep(0.05)
        with server._lock:
            sent_at_signal = sum(server.requests_per_prompt().values())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) in (-signal.SIGTERM, 128 + signal.SIGTERM)
        with server._lock:
            replied = {p for _, p in server.replied}
            sent = sum(server.requests_per_prompt().values())
    log = (tmp_path / "run.log").read_text()
    assert "no further prompts are sent" in log, log[-3000:]
    # the temporary Prefect server the run started is stopped, not left running
    server_url = re.search(r"Starting temporary server on (http://\S+)", log).group(1)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{server_url}/api/health", timeout=2)
    assert sent <= sent_at_signal + 1 < 7, (sent_at_signal, sent)  # 7 prompts in all
    assert replied <= set(_stored(db)), "an answer that came back was not stored"
