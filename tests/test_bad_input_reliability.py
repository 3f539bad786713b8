"""Bad-input sweep, reliability round two (issue 27): leaked secrets, silently inverted or
coerced values, corrupt stores. The same contract as ``test_bad_input.py`` (whose project
fixture and in-process runner this reuses): exit status 2, one ``lingtest: error:`` line
naming the file/key and the fix, no traceback, nothing under data/, reports/ or inputs/
changed, no flow started; and here also no piece of a password in the output."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "bad_input_sweep", Path(__file__).with_name("test_bad_input.py"))
_sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_sweep)
project, lingtest, run = _sweep.project, _sweep.lingtest, _sweep.run

# Passwords with the characters that make a URL's password ambiguous; each piece carries a
# marker ([A-Z][a-z][0-9]) that must not appear in any output.
SLASH, AT, ALL = "Zq9/Xk7", "Zq9@Xk7", "Zq9/Xk7@Wm5:Yv3#Tr2%Pb4?Hn6"
COLONS = "Zq9:Xk7#Wm5%Yv3?Tr2"  # SQLAlchemy reads it whole, urllib not at all


def guide(questions: bytes) -> dict[str, bytes]:
    """A guide folder (one sentence of two tokens) with these public_questions.jsonl lines."""
    return {"inputs/guide/ca-1.csv": b"0,0\n1,1\n", "inputs/guide/synonyms-1.txt":
            b"['is', 'be']\n['it', 'that']\n", "inputs/guide/public_questions.jsonl": questions}


def _damaged_sqlite() -> bytes:
    """An answer database (WAL, like the store's) with garbage over pages mid-file."""
    import contextlib
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "results.sqlite"
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("CREATE TABLE questions (id TEXT PRIMARY KEY, text TEXT)")
            conn.executemany("INSERT INTO questions VALUES (?, ?)",
                             [(f"q{i}", "x" * 200) for i in range(3000)])
            conn.commit()
        data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 8192] = b"garbage!" * 1024
    return bytes(data)


DAMAGED_DB = _damaged_sqlite()
RESULTS = "data/consistency/results.sqlite"


def pg(password: str, host: str = "127.0.0.1:9") -> str:
    return f"consistency.database_url=postgresql+psycopg://alice:{password}@{host}/lingtest"


def llm(password: str) -> str:
    return f"consistency.llms=['openai:m@http://alice:{password}@127.0.0.1:9/v1']"


# (id, argv, {relative path: bytes}, text the message must contain)
CASES: list[tuple[str, list[str], dict[str, bytes], str]] = [
    # ---- secrets in --set echoes and URL checks before the run
    ("secret-slash-echoed-beside-bad-seed", run("consistency", pg(SLASH), "seed=-1"), {},
     "alice:***@127.0.0.1:9"),
    ("secret-all-echoed-beside-bad-seed", run("consistency", pg(ALL), "seed=-1"), {},
     "bad value for `seed`"),
    ("secret-colons-echoed-beside-unknown-key",
     ["params", "--set", pg(COLONS).replace("database_url", "databse_url")], {},
     "unknown key `consistency.databse_url`"),
    ("secret-in-a-list-key", run("consistency", pg(SLASH).replace("database_url", "llms")), {},
     "alice:***@"),
    ("secret-set-without-equals",
     ["run", "consistency", "--set", "postgresql://alice:Zq9/Xk7@h/db"], {}, "key=value"),
    ("database-url-unencoded-at", run("consistency", pg(AT)), {},
     "unencoded '@'"),
    ("database-url-port-unreadable", run("consistency", pg(ALL)), {},
     "consistency.database_url 'postgresql+psycopg://alice:***@127.0.0.1:9/lingtest' is not "
     "a database URL"),
    ("database-url-not-a-url", run("consistency", "consistency.database_url=notaurl"), {},
     "consistency.database_url 'notaurl' is not a database URL"),
    ("database-url-unsupported", run("consistency", "consistency.database_url=mysql://alice:"
                                                    f"{SLASH}@h/db"), {}, "only sqlite"),
    ("llm-url-password-slash", run("consistency", llm(SLASH)), {},
     "fix: %-encode / @ : # ? %"),
    ("llm-url-password-hash", run("consistency", llm("Zq9#Xk7")), {},
     "a `#` in a URL's password is written %23"),
    # ---- values that would silently flip or coerce: a string label, true/false as a number
    ("guide-answer-string-false", run("consistency", "consistency.import_dir=inputs/guide"),
     guide(b'{"question": "is it", "answer": "false"}\n'),
     "public_questions.jsonl:1: field 'answer' must be true or false, found 'false'"),
    ("guide-answer-number", run("consistency", "consistency.import_dir=inputs/guide"),
     guide(b'{"question": "is it", "answer": true}\n{"question": "is it", "answer": 0}\n'),
     "public_questions.jsonl:2: field 'answer' must be true or false, found 0"),
    ("guide-question-not-text", run("consistency", "consistency.import_dir=inputs/guide"),
     guide(b'{"question": 7, "answer": true}\n'), "public_questions.jsonl:1: field 'question'"),
    ("seed-true", run("data", "seed=true"), {}, "bad value for `seed`: Value error, expected a "
                                                "number, got true/false"),
    ("seed-yes-in-params-file", ["params"], {"params.yaml": b"seed: yes\n"},
     "bad value for `seed`"),
    ("threads-true", run("data", "runtime.threads=true"), {}, "runtime.threads"),
    ("temperature-true", run("consistency", "consistency.temperature=true"), {},
     "consistency.temperature"),
    ("max-seeds-false", run("contrastive", "contrastive.max_seeds=false"), {},
     "contrastive.max_seeds"),
    ("band-bool", run("capabilities", "capabilities.neutral_band=[true,1]"), {},
     "capabilities.neutral_band"),
    ("coverage-sizes-bool", run("capabilities", "capabilities.coverage_sizes=[true,50]"), {},
     "capabilities.coverage_sizes"),
    ("debug-lr-true", run("adaptive-debug", "adaptive.debug.lr=true"), {},
     "adaptive.debug.lr"),
    # ---- damaged stores, found before a run asks or rewrites anything
    ("answer-database-garbage-mid-file", run("consistency"), {RESULTS: DAMAGED_DB},
     "results.sqlite: the result database is damaged"),
    ("answer-database-not-sqlite", run("consistency"), {RESULTS: b"not a database\n" * 500},
     "fix: move it away (mv "),
    ("answer-database-elsewhere-damaged",
     run("consistency", "consistency.database_url=sqlite:///inputs/old.sqlite"),
     {"inputs/old.sqlite": DAMAGED_DB}, "inputs/old.sqlite: the result database is damaged"),
]


@pytest.mark.parametrize("argv, files, needle", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_error(argv, files, needle, project, monkeypatch, capsys):
    """``test_bad_input``'s checks, then: one error line, and no piece of a password."""
    outputs: list[str] = []

    def recorded(*args):
        status, output, started = lingtest(*args)
        outputs.append(output)
        return status, output, started

    monkeypatch.setattr(_sweep, "lingtest", recorded)
    _sweep.test_bad_input_is_one_clear_error(argv, files, needle, project, monkeypatch, capsys)
    output = outputs[0]
    assert output.count("lingtest: error:") == 1 and len(output.strip().splitlines()) <= 3, output
    assert not re.findall(r"Zq9|Xk7|Wm5|Yv3|Tr2|Pb4|Hn6", output), output
