"""Bad-input sweep, reliability round two (issue 27): leaked secrets, silently inverted or
coerced values, corrupt stores; and every reader's hostile files (items 4-5: nesting beyond
Python's parser, numbers beyond int64 or Python's digit limit, /dev/zero, named pipes,
folders, files above the size limit, ``~`` in every path parameter, oversized covering
arrays, ``adapt``'s tree and models, endpoints). The contract of ``bad_input_harness`` (shared with
``test_bad_input.py``): exit status 2, one ``lingtest: error:`` line naming the file/key and
the fix, no traceback, nothing under data/, reports/ or inputs/ changed, no flow started; and
here also no piece of a password in the output."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bad_input_harness import (FIFO, FOLDER, NOT_UTF8, REVIEW_TREE, assert_one_clear_error,
                               link, project, run)  # noqa: F401

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


DEEP_JSON = b"[" * 150_000 + b"]" * 150_000 + b"\n"  # Python's parser stops near 1,000
DEEP_YAML = b"[" * 100_000 + b"]" * 100_000 + b"\n"
HUGE = b"1" * 5000  # beyond Python's 4,300-digit limit of int(str)
QUESTION = b'{"question": "is it", "answer": true}\n'
PY = "python:inputs/models/m.py:f"
ADAPT = ["adapt", "--topic", "/Rooms", "--oracle", "vader"]
OLLAMA = "consistency.llms=['ollama:llama3']"  # a stage whose other inputs check quickly

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

    # ---- readers: JSON/YAML nested beyond Python's parser (150,000 levels)
    ("suite-nested", run("contrastive", "contrastive.suite=inputs/s.json"),
     {"inputs/s.json": DEEP_JSON}, "s.json: JSON nested deeper than Python's parser"),
    ("dictionary-nested", run("contrastive", "contrastive.dictionary_file=inputs/d.json"),
     {"inputs/d.json": DEEP_JSON}, "d.json: JSON nested deeper"),
    ("questions-nested", run("consistency", "consistency.questions=inputs/q.jsonl"),
     {"inputs/q.jsonl": QUESTION + DEEP_JSON}, "q.jsonl:2: JSON nested deeper"),
    ("guide-questions-nested", run("consistency", "consistency.import_dir=inputs/guide"),
     guide(DEEP_JSON), "public_questions.jsonl:1: JSON nested deeper"),
    ("predictions-nested", run("adaptive", "adaptive.models=[predictions:inputs/s.jsonl]"),
     {"inputs/s.jsonl": DEEP_JSON}, "cannot be read as jsonl"),
    ("params-nested", ["params"], {"params.yaml": b"seed: " + DEEP_YAML},
     "params.yaml: YAML nested deeper than Python's parser reaches (about 1000 levels) (nest "
     "it less deeply)"),
    ("profile-nested", ["params", "--profile", "deep"],
     {"params/deep.yaml": b"data: " + DEEP_YAML}, "deep.yaml: YAML nested deeper"),
    ("spec-nested", run("capabilities", "capabilities.specs_dir=inputs/specs"),
     {"inputs/specs/LC1.yaml": b"id: " + DEEP_YAML}, "LC1.yaml: YAML nested deeper"),
    ("set-nested", ["params", "--set", "seed=" + "[" * 100_000], {},
     "[[[... (100,005 characters): bad value for `seed`"),
    # ---- readers: numbers no reader can hold
    ("suite-huge-integer", run("contrastive", "contrastive.suite=inputs/s.json"),
     {"inputs/s.json": b'{"SenWordFuzz": [["a", "b", "c", ' + HUGE + b"]]}"},
     "s.json: an integer of more than 4,300 digits, beyond Python's limit"),
    ("questions-huge-integer", run("consistency", "consistency.questions=inputs/q.jsonl"),
     {"inputs/q.jsonl": b'{"question": "is it", "answer": ' + HUGE + b"}\n"},
     "q.jsonl:1: an integer of more than 4,300 digits"),
    ("dictionary-huge-integer", run("contrastive", "contrastive.dictionary_file=inputs/d.json"),
     {"inputs/d.json": b"[" + HUGE + b"]"}, "d.json: an integer of more than 4,300 digits"),
    ("ca-values-1e23", ["covering-array", "--values", "100000000000000000000000,2"], {},
     "levels must be a non-empty list of integers 1..1048576"),
    ("ca-check-value-1e23", ["covering-array", "--values", "2,2", "--check", "inputs/ca.csv"],
     {"inputs/ca.csv": b"0,0\n1,100000000000000000000000\n"}, "ca.csv:2: value 1000"),
    ("ca-check-value-5000-digits", ["covering-array", "--values", "2,2", "--check",
                                    "inputs/ca.csv"],
     {"inputs/ca.csv": b"0,0\n1," + HUGE + b"\n"}, "ca.csv:2: not an integer"),
    ("guide-ca-value-1e23", run("consistency", "consistency.import_dir=inputs/guide"),
     {**guide(b'{"question": "is it", "answer": true}\n'),
      "inputs/guide/ca-1.csv": b"0,0\n1,100000000000000000000000\n"}, "ca-1.csv:2: value"),
    # ---- readers: a device that never ends (/dev/zero), refused by type before a read
    ("dictionary-dev-zero", run("contrastive", "contrastive.dictionary_file=/dev/zero"), {},
     "/dev/zero: is a character device, not a regular file (give the path of the file"),
    ("suite-dev-zero", run("contrastive", "contrastive.suite=/dev/zero"), {},
     "contrastive.suite: /dev/zero: is a character device"),
    ("questions-dev-zero", run("consistency", "consistency.questions=/dev/zero"), {},
     "consistency.questions: /dev/zero: is a character device"),
    ("tree-dev-zero", run("adaptive", "adaptive.trees=[/dev/zero]"), {},
     "adaptive.trees: /dev/zero: is a character device"),
    ("corrections-dev-zero", run("adaptive-debug", "adaptive.debug.conditions=[adatest-tree]",
                                 "adaptive.debug.corrections=/dev/zero"), {},
     "/dev/zero: is a character device"),
    ("classify-dev-zero", ["classify-answers", "/dev/zero", "--column", "r"], {},
     "/dev/zero: is a character device"),
    ("ca-check-dev-zero", ["covering-array", "--values", "2,2", "--check", "/dev/zero"], {},
     "/dev/zero: is a character device"),
    ("predictions-link-to-dev-zero",
     run("capabilities", "capabilities.models=[predictions:inputs/z.csv]"),
     {"inputs/z.csv": link("/dev/zero")}, "z.csv: is a character device"),
    ("user-code-link-to-dev-zero", run("capabilities", f"capabilities.models=[{PY}]"),
     {"inputs/models/m.py": link("/dev/zero")}, "m.py: is a character device"),
    ("params-link-to-dev-zero", ["params"], {"params.yaml": link("/dev/zero")},
     "params.yaml: is a character device"),
    ("spec-link-to-dev-zero", run("capabilities", "capabilities.specs_dir=inputs/specs"),
     {"inputs/specs/LC1.yaml": link("/dev/zero")}, "LC1.yaml: is a character device"),
    ("guide-synonyms-link-to-dev-zero", run("consistency", "consistency.import_dir=inputs/guide"),
     {**guide(b'{"question": "is it", "answer": true}\n'),
      "inputs/guide/synonyms-1.txt": link("/dev/zero")}, "synonyms-1.txt: is a character"),
    # ---- readers: a named pipe would block the read forever
    ("encoder-folder-fifo", run("contrastive", "contrastive.encoders=[./inputs/m]"),
     {"inputs/m": FIFO}, "model folder `./inputs/m` is not a folder"),
    ("suite-fifo", run("contrastive", "contrastive.suite=inputs/s.json"),
     {"inputs/s.json": FIFO}, "s.json: is a named pipe (FIFO), not a regular file"),
    ("dictionary-fifo", run("contrastive", "contrastive.dictionary_file=inputs/d.txt"),
     {"inputs/d.txt": FIFO}, "d.txt: is a named pipe"),
    ("questions-fifo", run("consistency", "consistency.questions=inputs/q.jsonl"),
     {"inputs/q.jsonl": FIFO}, "q.jsonl: is a named pipe"),
    ("tree-fifo", run("adaptive", "adaptive.trees=[inputs/t.csv]"), {"inputs/t.csv": FIFO},
     "t.csv: is a named pipe"),
    ("corrections-fifo", run("adaptive-debug", "adaptive.debug.conditions=[adatest-tree]",
                             "adaptive.debug.corrections=inputs/c.csv"),
     {"inputs/c.csv": FIFO}, "c.csv: is a named pipe"),
    ("classify-fifo", ["classify-answers", "inputs/a.csv", "--column", "r"],
     {"inputs/a.csv": FIFO}, "a.csv: is a named pipe"),
    ("classify-output-fifo", ["classify-answers", "inputs/a.csv", "--column", "r", "--output",
                              "inputs/out.csv"],
     {"inputs/a.csv": b"r\nyes\n", "inputs/out.csv": FIFO}, "out.csv: is a named pipe"),
    ("ca-check-fifo", ["covering-array", "--values", "2,2", "--check", "inputs/ca.csv"],
     {"inputs/ca.csv": FIFO}, "ca.csv: is a named pipe"),
    ("spec-fifo", run("capabilities", "capabilities.specs_dir=inputs/specs"),
     {"inputs/specs/LC1.yaml": FIFO}, "LC1.yaml: is a named pipe"),
    ("guide-ca-fifo", run("consistency", "consistency.import_dir=inputs/guide"),
     {**guide(b'{"question": "is it", "answer": true}\n'), "inputs/guide/ca-1.csv": FIFO},
     "ca-1.csv: is a named pipe"),
    ("guide-questions-fifo", run("consistency", "consistency.import_dir=inputs/guide"),
     {**guide(b""), "inputs/guide/public_questions.jsonl": FIFO},
     "public_questions.jsonl: is a named pipe"),
    ("predictions-fifo", run("capabilities", "capabilities.models=[predictions:inputs/p.csv]"),
     {"inputs/p.csv": FIFO}, "p.csv: is a named pipe"),
    ("user-code-fifo", run("capabilities", f"capabilities.models=[{PY}]"),
     {"inputs/models/m.py": FIFO}, "m.py: is a named pipe"),
    ("params-fifo", ["params"], {"params.yaml": FIFO}, "params.yaml: is a named pipe"),
    ("adapt-tree-fifo", ADAPT + ["--tree", "inputs/t.csv"], {"inputs/t.csv": FIFO},
     "lingtest adapt --tree: {root}/inputs/t.csv: is a named pipe"),
    # ---- readers: a folder where a file belongs
    ("suite-folder", run("contrastive", "contrastive.suite=inputs"), {},
     "inputs: is a folder, not a regular file"),
    ("dictionary-folder", run("contrastive", "contrastive.dictionary_file=inputs"), {},
     "inputs: is a folder"),
    ("questions-folder", run("consistency", "consistency.questions=inputs"), {},
     "inputs: is a folder"),
    ("tree-folder", run("adaptive", "adaptive.trees=[inputs]"), {}, "inputs: is a folder"),
    ("corrections-folder", run("adaptive-debug", "adaptive.debug.conditions=[adatest-tree]",
                               "adaptive.debug.corrections=inputs"), {}, "inputs: is a folder"),
    ("classify-folder", ["classify-answers", "inputs", "--column", "r"], {},
     "inputs: is a folder, not a regular file (give the path of the file itself; give the "
     "CSV of responses)"),
    ("ca-check-folder", ["covering-array", "--values", "2,2", "--check", "inputs"], {},
     "inputs: is a folder"),
    ("predictions-folder", run("capabilities", "capabilities.models=[predictions:inputs/p.csv]"),
     {"inputs/p.csv": FOLDER}, "p.csv: is a folder"),
    ("user-code-folder", run("capabilities", f"capabilities.models=[{PY}]"),
     {"inputs/models/m.py": FOLDER}, "m.py: is a folder"),
    ("adapt-tree-folder", ADAPT + ["--tree", "inputs"], {}, "inputs: is a folder"),
    # ---- readers: a file above the size limit (LINGTEST_MAX_INPUT_MB), and a bad limit
    ("suite-above-size-limit", run("contrastive", "contrastive.suite=inputs/s.json"),
     {"inputs/s.json": b" " * 100_000, "$LINGTEST_MAX_INPUT_MB": "0.05"},
     "s.json: is 0.0954 MB, above the 0.05 MB limit for an input file (give a smaller file, "
     "or raise the limit with LINGTEST_MAX_INPUT_MB=<MB>)"),
    ("questions-above-size-limit", run("consistency", "consistency.questions=inputs/q.jsonl"),
     {"inputs/q.jsonl": QUESTION * 2000, "$LINGTEST_MAX_INPUT_MB": "0.05"},
     "q.jsonl: is 0.0725 MB, above the 0.05 MB limit"),
    ("classify-above-size-limit", ["classify-answers", "inputs/a.csv", "--column", "r"],
     {"inputs/a.csv": b"r\n" + b"yes\n" * 20_000, "$LINGTEST_MAX_INPUT_MB": "0.05"},
     "a.csv: is 0.0763 MB, above the 0.05 MB limit"),
    ("size-limit-not-a-number", run("contrastive", "contrastive.suite=inputs/s.json"),
     {"inputs/s.json": b"{}", "$LINGTEST_MAX_INPUT_MB": "lots"},
     "LINGTEST_MAX_INPUT_MB='lots': expected a number of megabytes > 0"),
    # ---- `~` in every path parameter is the home folder (here: the project), named expanded
    ("tilde-suite", run("contrastive", "contrastive.suite=~/inputs/s.json"),
     {"inputs/s.json": b'{"a": [1,\n'}, "{root}/inputs/s.json:2: not valid JSON"),
    ("tilde-dictionary", run("contrastive", "contrastive.dictionary_file=~/inputs/d.txt"),
     {"inputs/d.txt": b"only\n"}, "{root}/inputs/d.txt: 1 distinct word"),
    ("tilde-questions", run("consistency", "consistency.questions=~/inputs/q.jsonl"),
     {"inputs/q.jsonl": b'{"question": "is it"}\n'}, "{root}/inputs/q.jsonl:1"),
    ("tilde-import-dir", run("consistency", "consistency.import_dir=~/inputs/guide"),
     {"inputs/guide/notes.txt": b"x\n"}, "no ca-N.csv / synonyms-N.txt files in {root}/inputs"),
    ("tilde-specs-dir", run("capabilities", "capabilities.specs_dir=~/inputs/specs"),
     {"inputs/specs/LC1.yaml": b"id: LC1\ndescription: [unclosed\n"},
     "{root}/inputs/specs/LC1.yaml:"),
    ("tilde-trees", run("adaptive", "adaptive.trees=[~/inputs/t.csv]"),
     {"inputs/t.csv": b",topic,input\nab,/A,x,extra\n"}, "{root}/inputs/t.csv"),
    ("tilde-corrections", run("adaptive-debug", "adaptive.debug.conditions=[adatest-tree]",
                              "adaptive.debug.corrections=~/inputs/c.csv"),
     {"inputs/c.csv": b"tree,topic,input,old_label,new_label,reason\nt.csv,/a,b,pos,meh,r\n"},
     "{root}/inputs/c.csv line 2"),
    ("tilde-mirror", run("data", "data.mirror=~/inputs/nomirror"), {},
     "data.mirror: {root}/inputs/nomirror is not a folder"),
    ("tilde-generator-binary", run("consistency", "consistency.generator=pict",
                                   "consistency.generator_binary=~/inputs/pict"), {},
     "consistency.generator_binary: pict: '{root}/inputs/pict' not found"),
    ("tilde-model-folder", run("capabilities", "capabilities.models=[~/inputs]"), {},
     "holds no model weights"),
    ("tilde-python-file", run("capabilities", "capabilities.models=[python:~/inputs/models/"
                                              "m.py:nope]"),
     {"inputs/models/m.py": b"x = 1\n"}, "has no attribute `nope`"),
    ("tilde-predictions", run("capabilities", "capabilities.models=[predictions:~/inputs/s.csv]"),
     {"inputs/s.csv": b"text,positive\nok,0.5\n"}, "{root}/inputs/s.csv: expected one"),
    ("tilde-classify", ["classify-answers", "~/inputs/a.csv", "--column", "zz"],
     {"inputs/a.csv": b"r\ntrue\n"}, "{root}/inputs/a.csv: no column 'zz'"),
    ("tilde-classify-output-fifo", ["classify-answers", "inputs/a.csv", "--column", "r",
                                    "--output", "~/inputs/out.csv"],
     {"inputs/a.csv": b"r\nyes\n", "inputs/out.csv": FIFO}, "{root}/inputs/out.csv: is a named"),
    ("tilde-ca-check", ["covering-array", "--values", "2,2", "--check", "~/inputs/ca.csv"],
     {"inputs/ca.csv": NOT_UTF8}, "{root}/inputs/ca.csv:1: not UTF-8"),
    ("tilde-adapt-tree", ADAPT + ["--tree", "~/inputs/t.csv"],
     {"inputs/t.csv": b",topic,input\nab,/A,x,extra\n"}, "--tree: {root}/inputs/t.csv"),
    ("tilde-review-tree", ["review", "~/inputs/t.csv"],
     {"inputs/t.csv": b",topic,input,output,label,labeler,description\nt1,Rooms,a,pos,pass,a,\n"},
     "{root}/inputs/t.csv"),
    # ---- covering-array: the size guard before generating or checking
    ("ca-too-many-tuples", ["covering-array", "--values", ",".join(["3"] * 50), "--strength", "3"],
     {}, "50 parameters at strength 3 have 529,200 3-tuples to cover, above the bound of "
         "500,000 (about 15 s to generate); fix: fewer parameters or values, a lower --strength, "
         "or raise the bound with --max-tuples N"),
    ("ca-thousands-of-parameters", ["covering-array", "--values", ",".join(["2"] * 5000)], {},
     "5000 parameters at strength 2 have 49,990,000 2-tuples"),
    ("ca-check-too-many-tuples", ["covering-array", "--values", ",".join(["3"] * 50),
                                  "--strength", "3", "--check", "inputs/ca.csv"],
     {"inputs/ca.csv": b"0\n"}, "--max-tuples N"),
    ("ca-max-tuples-zero", ["covering-array", "--values", "2,2", "--max-tuples", "0"], {},
     "--max-tuples 0: give a bound >= 1"),
    ("ca-strength-not-a-number", ["covering-array", "--values", "2,2", "--strength", "x"], {},
     "lingtest covering-array: Invalid value for '--strength'"),
    # ---- classify-answers: an earlier classification is not overwritten without a word
    ("classify-parsed-exists", ["classify-answers", "inputs/a.csv", "--column", "r"],
     {"inputs/a.csv": b"r,parsed\nyes,true\n"},
     "a.csv: already has a `parsed` column (an earlier classification); it is left as it is "
     "(pass --overwrite to replace it"),
    ("classify-parsed-exists-output-folder", ["classify-answers", "inputs/a.csv", "--column",
                                              "r", "--output", "reports"],
     {"inputs/a.csv": b"r,parsed\nyes,true\n"}, "--overwrite"),
    # ---- lingtest adapt: tree, topic and models checked before Prefect starts
    ("adapt-tree-malformed", ADAPT + ["--tree", "inputs/t.csv"],
     {"inputs/t.csv": b",topic,input,output,label,labeler,description\nt1,Rooms,a,pos,pass,a,\n"},
     "lingtest adapt --tree: {root}/inputs/t.csv:2: topic 'Rooms' does not start with '/'"),
    ("adapt-tree-not-utf8", ADAPT + ["--tree", "inputs/t.csv"], {"inputs/t.csv": NOT_UTF8},
     "t.csv:1: not UTF-8"),
    ("adapt-start-from-malformed", ADAPT + ["--tree", "inputs/adaptive/new.csv", "--start-from",
                                            "inputs/s.csv"],
     {"inputs/s.csv": b",topic,input\nab,/A,x,extra\n"}, "lingtest adapt --start-from: "),
    ("adapt-topic-no-slash", ["adapt", "--topic", "Rooms", "--tree", "inputs/t.csv", "--oracle",
                              "vader"], {"inputs/t.csv": REVIEW_TREE},
     "lingtest adapt --topic: topic 'Rooms' does not start with '/'; fix: a tree topic"),
    ("adapt-model-unknown", ADAPT + ["--tree", "inputs/t.csv", "--model", "nobody/clf"],
     {"inputs/t.csv": REVIEW_TREE}, "--model: "),
    ("adapt-oracle-unknown", ["adapt", "--topic", "/Rooms", "--tree", "inputs/t.csv",
                              "--oracle", "nobody/ref"], {"inputs/t.csv": REVIEW_TREE},
     "--oracle: "),
    ("adapt-generator-openai-no-server", ADAPT + ["--tree", "inputs/t.csv", "--generator",
                                                  "openai:gpt-x"],
     {"inputs/t.csv": REVIEW_TREE}, "OPENAI_BASE_URL is not set, so it would go to the public "
                                    "OpenAI API; fix: "),
    ("adapt-base-url-not-a-url", ADAPT + ["--tree", "inputs/t.csv", "--generator", "openai:gpt-x",
                                          "--base-url", "notaurl"],
     {"inputs/t.csv": REVIEW_TREE}, "endpoint notaurl (--base-url) is not an http(s) URL; fix:"),
    ("adapt-base-url-password-slash", ADAPT + ["--tree", "inputs/t.csv", "--generator",
                                               "openai:gpt-x", "--base-url",
                                               f"http://alice:{SLASH}@127.0.0.1:9/v1"],
     {"inputs/t.csv": REVIEW_TREE}, "fix: %-encode / @ : # ? %"),
    # ---- openai: without a server anywhere is refused, never sent to the public API
    ("openai-chat-no-server", run("consistency", "consistency.llms=[openai-chat:gpt-x]"), {},
     "consistency.llms: model `gpt-x` (openai-chat:gpt-x) names no server and OPENAI_BASE_URL"),
    ("openai-env-not-a-url", run("consistency", "consistency.llms=[openai:gpt-x]"),
     {"$OPENAI_BASE_URL": "localhost:8000/v1"},
     "endpoint localhost:8000/v1 (OPENAI_BASE_URL) is not an http(s) URL"),
    ("adaptive-scored-llm-no-server", run("adaptive", "adaptive.models=[openai:gpt-x#scorer="
                                                      "vader]"), {}, "OPENAI_BASE_URL is not set"),
    ("review-generator-openai-no-server", ["review", "inputs/t.csv", "--generator", "openai:x"],
     {"inputs/t.csv": REVIEW_TREE}, "--generator: model `x` (openai:x) names no server"),
    # ---- repair.models: checked before the run like every stage's models
    ("repair-all-python-encoder", run("repair", "contrastive.encoders=[python:inputs/models/"
                                                "m.py:embed]", "repair.models=[all]"),
     {"inputs/models/m.py": b"def embed(texts):\n    return [[1.0]] * len(texts)\n"},
     "repair.models"),
    ("repair-unknown-display-name", run("repair", "repair.models=[minilm]"), {},
     "repair.models: `minilm` is not among the encoders the contrastive stage tests"),
    ("repair-models-empty", run("repair", "repair.models=[]"), {}, "repair.models"),
    ("repair-encoder-missing", run("repair", "contrastive.encoders=[nobody/enc]"), {},
     "nobody/enc"),
    # ---- the debugging experiment's tree, alert metric files, review, compare
    ("debug-tree-missing", run("adaptive-debug", "adaptive.debug.conditions=[adatest-tree]",
                               "adaptive.debug.tree=inputs/none.csv"), {},
     "adaptive.debug.tree: {root}/inputs/none.csv does not exist"),
    ("debug-tree-malformed", run("adaptive-debug", "adaptive.debug.conditions=[adatest-tree]",
                                 "adaptive.debug.tree=inputs/t.csv"),
     {"inputs/t.csv": b",topic,input\nab,/A,x,extra\n"}, "adaptive.debug.tree: {root}/inputs/t.csv"),
    ("debug-tree-fifo", run("adaptive-debug", "adaptive.debug.conditions=[adatest-tree]",
                            "adaptive.debug.tree=~/inputs/t.csv"), {"inputs/t.csv": FIFO},
     "adaptive.debug.tree: {root}/inputs/t.csv: is a named pipe"),
    ("alert-metric-fifo", run("data", "runtime.alerts=[{metric: 'inputs/m.json:k', above: 1}]"),
     {"inputs/m.json": FIFO}, "inputs/m.json is neither a metrics file of dvc.yaml nor an "
                              "existing file"),
    ("review-tree-fifo", ["review", "inputs/t.csv"], {"inputs/t.csv": FIFO},
     "{root}/inputs/t.csv: is a named pipe"),
    ("compare-markdown-folder", ["compare", "HEAD", "--markdown", "inputs"], {},
     "lingtest compare --markdown inputs: not a regular file"),
    ("result-storage-unknown-protocol", run("consistency", OLLAMA, "runtime.result_storage=nosuchfs://b/x"),
     {}, "runtime.result_storage nosuchfs://b/x: fsspec cannot open nosuchfs:// here"),
    ("dask-address-not-an-address", run("consistency", OLLAMA, "runtime.task_runner=dask",
                                        "runtime.dask_address=notanaddress"), {},
     "runtime.dask_address`: Value error, expected a Dask scheduler address"),
    ("dask-address-http-url", run("consistency", OLLAMA, "runtime.dask_address=http://h:1"), {},
     "expected a Dask scheduler address, e.g. tcp://10.0.0.5:8786"),
    ("dask-address-without-storage", run("consistency", OLLAMA, "runtime.task_runner=dask",
                                         "runtime.dask_address=tcp://127.0.0.1:9"), {},
     "runtime.dask_address tcp://127.0.0.1:9: set runtime.result_storage"),
    # ---- command line: a usage error is one line too
    ("usage-unknown-option", ["classify-answers", "inputs/a.csv", "--colum", "r"], {},
     "lingtest classify-answers: No such option: --colum"),
    ("usage-missing-option", ["classify-answers", "inputs/a.csv"], {},
     "Missing option '--column'"),
    ("usage-unknown-command", ["frobnicate"], {}, "lingtest: No such command 'frobnicate'; fix: "
                                                  "see `lingtest --help`"),
    # ---- a blind sweep's findings (session 18): each was accepted, misread or found late
    ("blind-binary-labels-twice", run("adaptive", "adaptive.binary_labels=[neg,neg]"), {},
     "binary_labels names 'neg' twice"),
    ("blind-binary-labels-not-in-trees", run("adaptive", "adaptive.binary_labels=[bad,good]"),
     {}, "no test of adaptive.trees outputs either label (they output: neg, pos)"),
    ("blind-result-storage-device", run("consistency", OLLAMA, "runtime.result_storage=/dev/null"),
     {},
     "runtime.result_storage /dev/null: /dev/null is not a folder"),
    ("blind-cache-device", run("consistency", OLLAMA), {"$LINGTEST_CACHE": "/dev/null"},
     "LINGTEST_CACHE=/dev/null: /dev/null is not a folder"),
    ("blind-empty-set-value", run("consistency", "consistency.questions="), {},
     "no value after `=`; fix: consistency.questions=null"),
    ("blind-timeout-inf", run("consistency", OLLAMA, "consistency.timeout_s=inf"), {},
     "`consistency.timeout_s`: Input should be a finite number"),
    ("blind-backoff-inf", run("consistency", OLLAMA, "consistency.backoff_s=.inf"), {},
     "`consistency.backoff_s`: Input should be a finite number"),
    ("blind-duplicate-key", ["params"], {"params.yaml": b"seed: 1\nseed: 2\n"},
     "params.yaml:2: not valid YAML: the key 'seed' appears twice"),
    ("blind-duplicate-nested-key", ["params", "--profile", "dup"],
     {"params/dup.yaml": b"data:\n  online: false\n  online: true\n"},
     "dup.yaml:3: not valid YAML: the key 'online' appears twice"),
    ("blind-profile-fifo", ["params", "--profile", "pipe"], {"params/pipe.yaml": FIFO},
     "pipe.yaml is not a regular file"),
    ("blind-pooling-unknown", run("contrastive", "contrastive.pooling=weird"), {},
     "pooling `weird`: expected one of cls"),
    ("blind-generator-not-executable", run("consistency", OLLAMA, "consistency.generator=pict",
                                           "consistency.generator_binary=/etc/passwd"), {},
     "/etc/passwd is not executable"),
    ("blind-database-not-sqlite", run("consistency", OLLAMA,
                                      "consistency.database_url=sqlite:///inputs/q.jsonl"),
     {"inputs/q.jsonl": QUESTION}, "q.jsonl is not an SQLite database"),
    ("blind-database-folder", run("consistency", OLLAMA,
                                  "consistency.database_url=sqlite:///inputs/store"),
     {"inputs/store": FOLDER}, "inputs/store is not a file"),
    ("blind-database-server-down", run("consistency", OLLAMA, pg(SLASH)), {},
     "cannot open the result database 'postgresql+psycopg://alice:***@127.0.0.1:9/lingtest'"),
    ("blind-alert-file-unknown-at-validate",
     ["validate", "data", "--set", 'runtime.alerts=[{metric: "reports/nope/m.json:x", above: 1}]'],
     {}, "reports/nope/m.json is neither a metrics file of dvc.yaml nor an existing file"),
    ("blind-notify-env-not-a-url", ["validate", "data"], {"$LINGTEST_NOTIFY_URL": "notaurl"},
     "LINGTEST_NOTIFY_URL (serve --notify): expected an http(s):// webhook URL"),
    ("blind-prefect-api-down", run("consistency", OLLAMA),
     {"$PREFECT_API_URL": "http://127.0.0.1:9/api"},
     "PREFECT_API_URL=http://127.0.0.1:9/api does not answer"),
    ("blind-user-module-exits", run("capabilities", f"capabilities.models=[{PY}]"),
     {"inputs/models/m.py": b"import sys\nsys.exit(3)\n"}, "failed: SystemExit: 3"),
    ("blind-debug-lm-missing", run("adaptive-debug", "models.causal_lm=nope/nope"), {},
     "models.causal_lm: model `nope/nope` (causal_lm) is missing"),
    ("blind-debug-tree-topic-unknown",
     run("adaptive-debug", "adaptive.debug.conditions=[adatest-tree]",
         "adaptive.debug.tree=data/raw/adatest/imdb_hotel_conversion.csv",
         "adaptive.debug.tree_topics=[/Nope]"), {},
     "adaptive.debug.tree_topics: ['/Nope'] hold no test"),
    ("blind-unknown-stage-leaves-no-lock", ["run", "nonstage"], {}, "unknown stage `nonstage`"),
    ("blind-covering-strength-over-parameters",
     ["covering-array", "--values", "3,3,3", "--strength", "10"], {},
     "--strength 10: an array over 3 parameter(s)"),
    ("blind-classify-oracle-unknown",
     ["classify-answers", "inputs/a.csv", "--column", "response", "--oracle", "fuzzy"],
     {"inputs/a.csv": b"response\ntrue\n"}, "classify-answers --oracle 'fuzzy'"),
    ("blind-test-max-fail-negative", ["test", "vader", "--max-fail", "-5"], {},
     "Invalid value for '--max-fail'"),
    ("blind-test-max-broken-negative", ["test", "vader", "--max-broken", "-1"], {},
     "Invalid value for '--max-broken'"),
    ("blind-octal-seed-in-profile", ["params", "--profile", "oct"],
     {"params/oct.yaml": b"seed: 010\n"}, "oct.yaml:1: not valid YAML: 010 would be read as a"),
    ("blind-sexagesimal-set-value", ["params", "--set", "seed=1:30"], {},
     "1:30 would be read as a base-8 or base-60 number"),
    ("blind-display-name-of-no-model", run("capabilities", "models.names={nonexist/model: foo}"),
     {}, "models.names: ['nonexist/model'] name no model of any stage"),
    ("blind-dask-scheduler-down", run("consistency", OLLAMA, "runtime.task_runner=dask",
                                      "runtime.dask_address=tcp://127.0.0.1:9",
                                      "runtime.result_storage=inputs/results"), {},
     "runtime.dask_address tcp://127.0.0.1:9: no scheduler answers there"),
    ("blind-database-in-memory", run("consistency", OLLAMA, "consistency.database_url=sqlite://"),
     {}, "is an in-memory database"),
    ("blind-database-folder-not-writable",
     run("consistency", OLLAMA, "consistency.database_url=sqlite:////proc/x.sqlite"), {},
     "cannot create /proc/x.sqlite"),
    ("blind-cache-not-writable", run("consistency", OLLAMA), {"$LINGTEST_CACHE": "/proc"},
     "LINGTEST_CACHE=/proc: /proc is not writable"),
    ("blind-database-folder-outside-missing",
     run("consistency", OLLAMA, "consistency.database_url=sqlite:////nonexistent/dir/x.sqlite"),
     {}, "the folder /nonexistent/dir does not exist; fix: mkdir -p /nonexistent/dir"),
    ("blind-compare-markdown-folder-missing",
     ["compare", "HEAD", "--markdown", "/nonexistent/dir/x.md"], {},
     "the folder /nonexistent/dir does not exist"),
    ("blind-test-unknown-hub-id", ["test", "nope-org/nope-model"], {},
     "model `nope-org/nope-model` is missing: no packaged model"),
    ("blind-test-empty-name", ["test", "vader", "--name", ""], {},
     "lingtest test --name '': give the run folder a name"),
    ("blind-adapt-rounds-zero", ADAPT + ["--tree", "inputs/t.csv", "--rounds", "0"],
     {"inputs/t.csv": REVIEW_TREE}, "Invalid value for '--rounds'"),
    ("blind-review-base-url-unread",
     ["review", "inputs/t.csv", "--base-url", "http://127.0.0.1:9/v1", "--no-record",
      "--generator", "HuggingFaceTB/SmolLM2-135M-Instruct"], {"inputs/t.csv": REVIEW_TREE},
     "lingtest review --base-url: no --generator reads an endpoint"),
]


@pytest.mark.parametrize("argv, files, needle", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input_is_one_clear_error(argv, files, needle, project, monkeypatch, capsys):
    """The harness's contract, and no piece of a password in the output."""
    output = assert_one_clear_error(argv, files, needle, project, monkeypatch, capsys)
    assert not re.findall(r"Zq9|Xk7|Wm5|Yv3|Tr2|Pb4|Hn6", output), output


def test_sweep_cases_are_distinct_and_many():
    assert len({c[0] for c in CASES}) == len(CASES) >= 130
