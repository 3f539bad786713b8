"""Yes/no questions in BoolQ's format (KomMKonLLM's input): BoolQ validation + KomMKonLLM.

Table ``questions`` (3270 BoolQ + 27 KomMKonLLM rows):

===========  =====  ===============================================================
column       dtype  meaning
===========  =====  ===============================================================
question_id  str    ``<source>-<index>``, zero-padded to the width of the largest
                    index (at least 2): ``boolq-0000``, ``kommkonllm-00``
source       str    ``boolq`` / ``kommkonllm`` (or the name given for a user file)
question     str    the question
answer       bool   the annotated answer
passage      str    supporting passage; "" when the file has none
===========  =====  ===============================================================

Record rules: ``question`` a non-empty string and ``answer`` a JSON boolean are required;
``passage`` is optional (KomMKonLLM leaves it empty, the method does not need it) but
must be a string when present; other keys (BoolQ's ``title``) are ignored. A bad JSON
line or field is an InputFormatError naming the file and the 1-based line (for a JSON
list file: the list index).
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from lingtest.tasks.core.errors import InputFormatError
from lingtest.tasks.core.io import parse_json, read_input_json, read_input_text

COLUMNS = ["question_id", "source", "question", "answer", "passage"]
_FIX = 'each record must be {"question": "...", "answer": true|false, "passage": "..."}'


def question_record(obj: object, path: Path, line: int | None, where: str = "") -> tuple[str, bool, str]:
    """Validate one record (a real JSON boolean answer: ``bool("false")`` would be True);
    ``where`` names the list index when there is no line."""
    def bad(problem: str) -> InputFormatError:
        return InputFormatError(path, line, where + problem, _FIX)

    if not isinstance(obj, dict):
        raise bad(f"expected a JSON object, found {type(obj).__name__}")
    question, answer, passage = obj.get("question"), obj.get("answer"), obj.get("passage", "")
    if not isinstance(question, str) or not question.strip():
        raise bad("field 'question' is missing or not a non-empty string")
    if not isinstance(answer, bool):
        raise bad(f"field 'answer' must be true or false, found {answer!r}")
    if passage is None:
        passage = ""
    if not isinstance(passage, str):
        raise bad(f"field 'passage' must be a string, found {type(passage).__name__}")
    return question.strip(), answer, passage


Record = tuple[str, bool, str]


def _rows(records: list[Record], source: str) -> list[tuple]:
    width = max(2, len(str(max(len(records) - 1, 0))))
    return [(f"{source}-{i:0{width}d}", source, q, a, p) for i, (q, a, p) in enumerate(records)]


def _table(rows: list[tuple]) -> pd.DataFrame:
    # One construction, not pd.concat: chunked string columns change the Parquet bytes.
    return pd.DataFrame(rows, columns=COLUMNS).astype({"answer": "bool"})


def _jsonl_records(path: Path) -> list[Record]:
    records = []
    for number, line in enumerate(read_input_text(path, _FIX).splitlines(), start=1):
        if line.strip():
            records.append(question_record(parse_json(line, path, _FIX, number), path, number))
    if not records:
        raise InputFormatError(path, None, "no questions in the file", _FIX)
    return records


def _json_list_records(path: Path) -> list[Record]:
    data = read_input_json(path, _FIX)
    if not isinstance(data, list):
        raise InputFormatError(path, 1, "expected a JSON list of question records", _FIX)
    return [question_record(obj, path, None, f"item {i}: ") for i, obj in enumerate(data)]


def read_questions_jsonl(path: str | Path, source: str = "user") -> pd.DataFrame:
    """A JSONL file of BoolQ-style records (blank lines skipped) as ``questions`` rows."""
    return _table(_rows(_jsonl_records(Path(path)), source))


def read_questions_json(path: str | Path, source: str = "boolq") -> pd.DataFrame:
    """A JSON list of BoolQ-style records (HF's BoolQ export) as ``questions`` rows."""
    return _table(_rows(_json_list_records(Path(path)), source))


def build_questions(raw: Path) -> pd.DataFrame:
    """``questions`` from ``raw/boolq/validation.json`` and KomMKonLLM's public questions."""
    raw = Path(raw)
    return _table(
        _rows(_json_list_records(raw / "boolq" / "validation.json"), "boolq")
        + _rows(_jsonl_records(raw / "kommkonllm" / "public_questions.jsonl"), "kommkonllm"))
