"""The oracle: map an LLM's free-text response to a yes/no question onto true/false/undefined.

The oracle is deliberately conservative: a response is only read as an answer when it
commits to one truth value and never mentions the other one. A wrong "undefined" costs
a little accuracy; a wrong "true" or "false" would fake consistency (or inconsistency).

Rules, in order:

1. Reasoning blocks (``<think>…</think>``, also ``thinking``/``reasoning``/``thought``)
   are removed; an opening tag that is never closed means the model ran out of tokens
   while thinking, so the response is undefined. A closing tag without an opening one
   (the template put ``<think>`` into the prompt) keeps only the text after it.
2. Markdown code fences (```` ```json … ``` ````) are replaced by their contents; several
   fences must agree; an unclosed fence is undefined (truncated output).
3. JSON (or a Python literal): a boolean; a string that is a boolean word; an object
   whose answer fields (answer/response/result/boolean/value/output/…, searched in nested
   objects) hold exactly one distinct boolean-like value. Text that starts like JSON but
   does not parse is undefined.
4. Plain text: the first word (after an optional "answer:" / "the answer is" label) is
   yes/true or no/false, and no word of the opposite polarity occurs anywhere.

Everything else (empty, "maybe", "I cannot answer", "true or false", "Yes. No.") is
undefined.
"""
from __future__ import annotations

import ast
import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from tasks.core.errors import InputFormatError, LingtestError

ORACLE_VERSION = "1"  # bump whenever a rule changes: cached/parsed answers depend on it

TRUE, FALSE, UNDEFINED = "true", "false", "undefined"
VALUES = (TRUE, FALSE, UNDEFINED)

_WORDS = {"true": TRUE, "yes": TRUE, "false": FALSE, "no": FALSE}
_ANSWER_KEYS = {"answer", "response", "result", "boolean", "value", "output", "prediction",
                "label", "final_answer", "verdict", "bool"}
_TAGS = r"think|thinking|reasoning|thought"
_BLOCK = re.compile(rf"<({_TAGS})>.*?</\1>", re.IGNORECASE | re.DOTALL)
_OPEN = re.compile(rf"<(?:{_TAGS})>", re.IGNORECASE)
_CLOSE = re.compile(rf"</(?:{_TAGS})>", re.IGNORECASE)
_FENCE = re.compile(r"```[\w-]*[ \t]*\n?(.*?)```", re.DOTALL)
_LABEL = re.compile(r"^\W*(?:the\s+)?(?:final\s+)?answer\s*(?:is\b)?\s*[:\-]?\s*", re.IGNORECASE)
_TOKEN = re.compile(r"[a-z]+")
# "No answer", "No idea": a leading "no" that declines to answer rather than says false.
_DECLINE = {"answer", "idea", "comment", "clue", "information", "way", "definitive", "clear"}


def parse_answer(text: str | None) -> str:
    """Return ``"true"``, ``"false"`` or ``"undefined"`` for one model response."""
    if not isinstance(text, str):
        return UNDEFINED
    body = _strip_reasoning(text)
    if body is None:
        return UNDEFINED
    if "```" in body:
        parts = _FENCE.findall(body)
        if not parts:
            return UNDEFINED
        return _agree(_parse_plain(part) for part in parts)
    return _parse_plain(body)


def _strip_reasoning(text: str) -> str | None:
    """The text outside reasoning blocks, or None while a block is still open."""
    text = _BLOCK.sub(" ", text)
    closes = list(_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end():]
    if _OPEN.search(text):
        return None
    return text.strip()


def _agree(values: Iterable[str]) -> str:
    """The common value of several readings; undefined if they differ or there are none."""
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else UNDEFINED


def _parse_plain(text: str) -> str:
    text = text.strip()
    if not text:
        return UNDEFINED
    if text[0] in "{[\"'":
        found, value = _load_literal(text)
        if found:
            return _from_json(value)
        if text[0] in "{[":
            return UNDEFINED  # malformed or truncated JSON: do not guess from its words
    return _from_words(text)


def _load_literal(text: str) -> tuple[bool, Any]:
    """Parse ``text`` as JSON, else as a Python literal (``{'answer': True}``)."""
    try:
        return True, json.loads(text)
    except ValueError:
        pass
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _from_json(value: Any) -> str:
    if isinstance(value, bool):
        return TRUE if value else FALSE
    if isinstance(value, str):
        return _boolean_word(value)
    if isinstance(value, dict):
        return _agree(_answer_values(value))
    return UNDEFINED


def _answer_values(obj: dict) -> list[str]:
    """Boolean-like values under answer keys, searched through nested objects."""
    found: list[str] = []
    for key, value in obj.items():
        if isinstance(value, dict):
            found += _answer_values(value)
        elif str(key).strip().lower() in _ANSWER_KEYS:
            reading = _from_json(value) if isinstance(value, (bool, str)) else UNDEFINED
            if reading != UNDEFINED:
                found.append(reading)
    return found


def _boolean_word(text: str) -> str:
    """A string that is nothing but one boolean word (punctuation aside)."""
    tokens = _TOKEN.findall(text.lower())
    return _WORDS[tokens[0]] if len(tokens) == 1 and tokens[0] in _WORDS else UNDEFINED


def _from_words(text: str) -> str:
    tokens = _TOKEN.findall(_LABEL.sub("", text, count=1).lower())
    if not tokens or tokens[0] not in _WORDS:
        return UNDEFINED
    if tokens[0] == "no" and len(tokens) > 1 and tokens[1] in _DECLINE:
        return UNDEFINED
    polarities = {_WORDS[token] for token in tokens if token in _WORDS}
    return polarities.pop() if len(polarities) == 1 else UNDEFINED


def classify_csv(path: str | Path, column: str,
                 output: str | Path | None = None) -> dict[str, int]:
    """Add a ``parsed`` column to a CSV of responses; return the count of each value.

    Cells are read as text (``dtype=str``) so that a column of bare ``True``/``False`` is
    not turned into Python booleans and the other columns are written back unchanged.
    ``output`` defaults to ``path``; either way the file is replaced atomically.
    """
    from tasks.core.io import write_csv

    path = Path(path)
    if not path.is_file():
        raise LingtestError(f"{path}: no such file (check the path of the CSV of responses)")
    if column == "parsed":
        raise LingtestError("--column parsed would overwrite the responses with their "
                            "classification (name the column that holds the raw responses)")
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        line = re.search(r"line (\d+)", str(error))
        raise InputFormatError(path, int(line.group(1)) if line else None,
                               f"not a readable CSV ({str(error).strip()})",
                               "save it as UTF-8 CSV with a header row") from error
    if column not in table.columns:
        available = ", ".join(map(str, table.columns)) or "none"
        raise InputFormatError(path, None, f"no column {column!r}; columns: {available}",
                               "pass one of them with --column")
    table["parsed"] = [parse_answer(cell) for cell in table[column]]
    write_csv(output if output is not None else path, table)
    counts = Counter(table["parsed"])
    return {value: counts.get(value, 0) for value in VALUES}
