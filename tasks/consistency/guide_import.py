"""Import the guide's own artefacts (KomMKonLLM ``example/``): ``ca-N.csv`` + ``synonyms-N.txt``
per test sentence N, and the sentences with their labels from ``test_runs.csv`` (columns id,
sentence, correct_answer_label; one row per sentence and model, so ids repeat) or, without
it, ``public_questions.jsonl`` (line N is sentence N). A run on such a folder sends exactly
the guide's derived questions, so its published example can be re-run as it was.

The derived questions are built as the guide's meta-runner builds them
(``meta-runner/src/payload_generator/payload_generator.py``, ``consume_payload_from_ca``):
row 0 is the first synonym of every token joined by single spaces, then one question per
covering-array row, skipping all-zero rows (row 0 already is that question), each token
replaced by its synonym with ``_`` read as a space.
"""
from __future__ import annotations

import ast
import csv
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd

from lingtest.tasks.consistency.covering import missing_tuples, read_ca_csv
from lingtest.tasks.consistency.ipm import derive_prompt
from lingtest.tasks.core.errors import InputFormatError, LingtestError, read_utf8
from lingtest.tasks.core.io import parse_json
from lingtest.tasks.data.questions import question_record

PARAM = "consistency.import_dir"
_FILE = re.compile(r"^(ca|synonyms)-(\d+)\.(csv|txt)$")
QUERY_COLUMNS = ["question_id", "store_id", "array_row", "row_values", "derived_text", "prompt"]


def guide_folder(import_dir: str, root: Path) -> Path:
    """``consistency.import_dir`` as a path (relative to the project ``root``)."""
    folder = Path(import_dir).expanduser()
    return folder if folder.is_absolute() else root / folder


def labels_file(folder: Path) -> Path:
    """The file the imported questions' labels come from: ``test_runs.csv``, else
    ``public_questions.jsonl`` (named in the report's provenance)."""
    labels = folder / "test_runs.csv"
    return labels if labels.is_file() else folder / "public_questions.jsonl"


def read_synonyms(path: Path) -> list[list[str]]:
    """One list of strings per line (the guide writes Python list literals, ``['is']``)."""
    fix = "each line must be a list of strings, the token first: ['roof', 'ceiling']"
    tokens: list[list[str]] = []
    for line, text in enumerate(read_utf8(path).splitlines(), start=1):
        if not text.strip():
            continue
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            raise InputFormatError(path, line, f"not a list literal: {text[:60]!r}", fix) from None
        if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
            raise InputFormatError(path, line, f"not a non-empty list of strings: {text[:60]!r}",
                                   fix)
        tokens.append(value)
    if not tokens:
        raise InputFormatError(path, None, "no tokens", fix)
    return tokens


def derived_questions(synonyms: list[list[str]], array: np.ndarray) -> list[tuple[list[int], str]]:
    """(row values, derived question) in the guide's order: the original, then every
    covering-array row that is not all zeros."""
    original = [0] * len(synonyms)
    rows = [original] + [list(map(int, row)) for row in np.asarray(array) if np.any(row)]
    return [(row, " ".join(synonyms[k][v].replace("_", " ") for k, v in enumerate(row)))
            for row in rows]


def _sentences(folder: Path) -> dict[int, tuple[str, bool]]:
    """Sentence id → (sentence, label) from test_runs.csv, else public_questions.jsonl."""
    runs = folder / "test_runs.csv"
    found: dict[int, tuple[str, bool]] = {}
    if runs.exists():  # a pipe or folder of that name: refused by the reader
        with io.StringIO(read_utf8(runs), newline="") as handle:
            reader = csv.DictReader(handle)
            missing = {"id", "sentence", "correct_answer_label"} - set(reader.fieldnames or [])
            if missing:
                raise InputFormatError(runs, 1, f"no column(s) {', '.join(sorted(missing))}",
                                       "the guide's header is id,sentence,date,"
                                       "correct_answer_label,model_name,note,strength")
            for line, row in enumerate(reader, start=2):
                label = str(row["correct_answer_label"]).strip().lower()
                if label not in ("true", "false") or not str(row["id"]).strip().isdigit():
                    raise InputFormatError(runs, line, f"id {row['id']!r} / label {label!r}",
                                           "ids are integers, labels true or false")
                found[int(row["id"])] = (row["sentence"], label == "true")
        return found
    questions = folder / "public_questions.jsonl"
    if not questions.exists():
        raise LingtestError(f"{PARAM}: {folder} has neither test_runs.csv nor "
                            "public_questions.jsonl (the guide's example/ folder has both)")
    lines = [t for t in read_utf8(questions).splitlines() if t.strip()]
    for number, text in enumerate(lines, start=1):
        record = parse_json(text, questions, "one {\"question\", \"answer\"} JSON object per "
                            "line", number)
        # the guide writes "answer": true/false; the string "false" must not become True
        _, answer, _ = question_record(record, questions, number)
        found[number] = (record["question"], answer)  # as written: it keys the store
    return found


def read_guide_folder(folder: str | Path) -> tuple[pd.DataFrame, dict[str, list[list[str]]],
                                                   dict[str, np.ndarray]]:
    """The questions (``questions`` table columns, ids ``guide-<N>``), and per question its
    synonym lists and covering array, checked against each other."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise LingtestError(f"{PARAM}: {folder} is not a folder (give the folder holding the "
                            "guide's ca-N.csv and synonyms-N.txt files)")
    files: dict[int, dict[str, Path]] = {}
    for path in folder.iterdir():
        match = _FILE.match(path.name)
        if match and (match[1] == "ca") == (match[3] == "csv"):
            files.setdefault(int(match[2]), {})[match[1]] = path
    if not files:
        raise LingtestError(f"{PARAM}: no ca-N.csv / synonyms-N.txt files in {folder}")
    sentences = _sentences(folder)
    rows, synonyms, arrays = [], {}, {}
    for number in sorted(files):
        pair = files[number]
        for kind, name in (("ca", f"ca-{number}.csv"), ("synonyms", f"synonyms-{number}.txt")):
            if kind not in pair:
                raise LingtestError(f"{PARAM}: {folder / name} is missing (every sentence N "
                                    "needs both ca-N.csv and synonyms-N.txt)")
        if number not in sentences:
            raise LingtestError(f"{PARAM}: no sentence {number} in {folder} (test_runs.csv id "
                                "or public_questions.jsonl line) for ca-{number}.csv")
        tokens = read_synonyms(pair["synonyms"])
        array = read_ca_csv(pair["ca"])
        _check_array(pair["ca"], array, tokens)
        question_id = f"guide-{number:02d}"
        text, answer = sentences[number]
        rows.append((question_id, "kommkonllm-example", text, answer, ""))
        synonyms[question_id], arrays[question_id] = tokens, array
    questions = pd.DataFrame(rows, columns=["question_id", "source", "question", "answer",
                                            "passage"]).astype({"answer": "bool"})
    return questions, synonyms, arrays


def _check_array(path: Path, array: np.ndarray, tokens: list[list[str]]) -> None:
    if array.shape[1] != len(tokens):
        raise InputFormatError(path, 1, f"{array.shape[1]} columns, but its synonyms file has "
                               f"{len(tokens)} token lines", "column k is the k-th token line")
    levels = np.array([len(values) for values in tokens])
    bad = np.argwhere(array >= levels)
    if len(bad):
        line, column = (int(v) for v in bad[0])
        raise InputFormatError(path, line + 1, f"value {array[line, column]} in column "
                               f"{column + 1}, but token {tokens[column][0]!r} has only "
                               f"{levels[column]} value(s)", "indices start at 0")


def coverage_gaps(arrays: dict[str, np.ndarray], synonyms: dict[str, list[list[str]]],
                  strength: int) -> dict[str, int]:
    """Per question, the ``strength``-tuples its imported array misses (0: a covering array)."""
    gaps = {}
    for question_id, array in arrays.items():
        levels = [len(values) for values in synonyms[question_id]]
        t = min(strength, len(levels))
        gaps[question_id] = missing_tuples(array, levels, t) if t > 0 else 0
    return gaps


def guide_queries(questions: pd.DataFrame, synonyms: dict[str, list[list[str]]],
                  arrays: dict[str, np.ndarray], prefix: str, suffix: str,
                  join: str = "space") -> pd.DataFrame:
    """One row per derived question (the stage's ``queries`` table)."""
    ids = dict(zip(questions["question_id"], questions["store_id"]))
    rows = []
    for question_id in questions["question_id"]:
        for index, (values, text) in enumerate(derived_questions(synonyms[question_id],
                                                                 arrays[question_id])):
            rows.append((question_id, ids[question_id], index, values, text,
                         derive_prompt(text, prefix, suffix, join)))
    return pd.DataFrame(rows, columns=QUERY_COLUMNS)
