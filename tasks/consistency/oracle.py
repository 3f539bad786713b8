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
3. JSON (or a Python literal): a boolean; the number 1 or 0; a string that is a boolean
   word; an object whose answer fields (answer/response/result/boolean/value/output/…,
   searched in nested objects) hold exactly one distinct boolean-like value, or, without
   answer fields, whose only boolean value (under any key, nested too) is that value. Text
   that starts like JSON but does not parse is undefined.
4. Plain text: the first word (after an optional "answer:" / "the answer is" label) is
   yes/true or no/false (or the whole response is ``1``/``0``). When that word stands alone
   as the first clause ("No, that's not true.", "Yes, there is no doubt") it decides, as in
   the guide's oracle (KomMKonLLM ``ResultStore/services/OracleService.py`` reads the first
   word), unless a later clause contradicts it: a clause that is only the opposite word
   ("Yes. No.") or an un-negated opposite true/false ("Yes. Actually, it is false.").
   Otherwise no word of the opposite polarity may occur anywhere ("Yes and no").
5. An HTML document (a proxy's error page) is never an answer.

Everything else (empty, "maybe", "I cannot answer", "true or false", "Yes. No.") is
undefined. ``strict=True`` follows the guide's prompt to the letter: only a response that
is a JSON Boolean (``true``/``false``, whitespace aside) is an answer.

Mode ``guide`` (the default) is the guide's own oracle, KomMKonLLM
``ResultStore/services/OracleService.py`` (``initial_oracle_function``): drop ``Result is: ``
and ``<pad>``, delete every character but ASCII letters, digits and spaces, lower-case, and
read the first word: yes/true/1 → true, no/false/0 → false, anything else (or nothing) →
undefined. It agrees with all 3,288 published responses of the guide's ``example/queries.csv``
(``tests/data/kommkonllm_responses.csv`` keeps a sample). The guide also deletes the prompt
from a response that echoes it; a result store keeps no prompt beside the answer, so that
step is left out (4 published responses echo their prompt, and each reads the same either
way).
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

from lingtest.tasks.core.errors import InputFormatError, LingtestError

ORACLE_VERSION = "2"  # bump whenever a rule changes: cached/parsed answers depend on it
GUIDE_VERSION = "guide-1"  # the guide's first-word rule (its own version line)
MODES = ("guide", "lenient", "strict")

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
_CLAUSE = re.compile(r"[.!?;,:\n]+")
_NEGATION = {"not", "t", "never", "isn", "wasn", "aren"}
_HTML = re.compile(r"^\s*(?:<!doctype\s+html|<html[\s>])", re.IGNORECASE)


def oracle_version(mode: str = "guide") -> str:
    """The version verdicts are stored under: the rules' version, plus the mode if strict;
    the guide's rule has its own."""
    if mode not in MODES:
        raise LingtestError(f"consistency.oracle: {mode!r} is not one of {', '.join(MODES)}")
    if mode == "guide":
        return GUIDE_VERSION
    return ORACLE_VERSION if mode == "lenient" else f"{ORACLE_VERSION}-strict"


_GUIDE_DROP = re.compile(r"[^a-zA-Z0-9 ]")
_GUIDE_WORDS = {"yes": TRUE, "true": TRUE, "1": TRUE, "no": FALSE, "false": FALSE, "0": FALSE}


def guide_answer(text: str | None) -> str:
    """The guide's reading (see the module docstring): the first word after deleting every
    character but ASCII letters, digits and spaces."""
    if not isinstance(text, str):
        return UNDEFINED
    words = _GUIDE_DROP.sub("", text.replace("Result is: ", "").replace("<pad>", ""))
    words = words.lower().split()
    return _GUIDE_WORDS.get(words[0], UNDEFINED) if words else UNDEFINED


def read_answer(text: str | None, mode: str = "guide") -> str:
    """The reading of ``mode`` (``MODES``): the guide's first word, lenient or strict."""
    if mode not in MODES:
        raise LingtestError(f"consistency.oracle: {mode!r} is not one of {', '.join(MODES)}")
    return guide_answer(text) if mode == "guide" else parse_answer(text, strict=mode == "strict")


def parse_answer(text: str | None, strict: bool = False) -> str:
    """Return ``"true"``, ``"false"`` or ``"undefined"`` for one model response."""
    if not isinstance(text, str) or _HTML.match(text):
        return UNDEFINED
    if strict:
        found, value = _load_json(text.strip())
        return (TRUE if value else FALSE) if found and isinstance(value, bool) else UNDEFINED
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


def _load_json(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None


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
    if isinstance(value, int) and value in (0, 1):
        return TRUE if value else FALSE
    if isinstance(value, str):
        return _boolean_word(value)
    if isinstance(value, dict):
        answers = _answer_values(value)
        if answers:
            return _agree(answers)
        booleans = _booleans(value)
        return (TRUE if booleans[0] else FALSE) if len(booleans) == 1 else UNDEFINED
    return UNDEFINED


def _booleans(obj: dict) -> list[bool]:
    """Every JSON Boolean in an object, nested objects included."""
    found: list[bool] = []
    for value in obj.values():
        if isinstance(value, bool):
            found.append(value)
        elif isinstance(value, dict):
            found += _booleans(value)
    return found


def _answer_values(obj: dict) -> list[str]:
    """Boolean-like values under answer keys, searched through nested objects."""
    found: list[str] = []
    for key, value in obj.items():
        if isinstance(value, dict):
            found += _answer_values(value)
        elif str(key).strip().lower() in _ANSWER_KEYS:
            reading = _from_json(value) if isinstance(value, (int, str)) else UNDEFINED
            if reading != UNDEFINED:
                found.append(reading)
    return found


def _boolean_word(text: str) -> str:
    """A string that is nothing but one boolean word (punctuation aside)."""
    tokens = _TOKEN.findall(text.lower())
    return _WORDS[tokens[0]] if len(tokens) == 1 and tokens[0] in _WORDS else UNDEFINED


def _from_words(text: str) -> str:
    text = _LABEL.sub("", text, count=1).lower()
    tokens = _TOKEN.findall(text)
    if re.fullmatch(r"\W*[01]\W*", text):
        return TRUE if "1" in text else FALSE
    if not tokens or tokens[0] not in _WORDS:
        return UNDEFINED
    if len(tokens) > 1 and (tokens[1] == "or" or (tokens[0] == "no" and tokens[1] in _DECLINE)):
        return UNDEFINED
    first = _WORDS[tokens[0]]
    clauses = [_TOKEN.findall(clause) for clause in _CLAUSE.split(text)]
    clauses = [clause for clause in clauses if clause]
    if clauses[0] == tokens[:1]:  # "Yes, …": the word is the answer, the rest explains it
        return UNDEFINED if any(_contradicts(clause, first) for clause in clauses[1:]) else first
    polarities = {_WORDS[token] for token in tokens if token in _WORDS}
    return polarities.pop() if len(polarities) == 1 else UNDEFINED


def _contradicts(clause: list[str], answer: str) -> bool:
    """A later clause that says the opposite: only the opposite word, or an un-negated
    opposite true/false ("Actually, it is false"; "that's not true" agrees with "No")."""
    if len(clause) == 1 and _WORDS.get(clause[0], answer) != answer:
        return True
    for index, token in enumerate(clause):
        if token in ("true", "false"):
            negated = index > 0 and clause[index - 1] in _NEGATION
            reading = _WORDS[token] if not negated else (FALSE if token == "true" else TRUE)
            if reading != answer:
                return True
    return False


def classified_path(path: str | Path, output: str | Path | None) -> Path:
    """Where ``classify_csv`` writes: ``output`` (in it, under ``path``'s name, when it is a
    folder or ends with ``/``), else ``path`` itself."""
    path = Path(path).expanduser()
    target = Path(output).expanduser() if output is not None else path
    folder = target.is_dir() or str(output or "").endswith("/")
    return target / path.name if folder else target


def classify_csv(path: str | Path, column: str, output: str | Path | None = None,
                 mode: str = "guide", overwrite: bool = False) -> dict[str, int]:
    """Add a ``parsed`` column to a CSV of responses; return the count of each value.

    Cells are read as text (``dtype=str``) so that a column of bare ``True``/``False`` is
    not turned into Python booleans and the other columns are written back unchanged.
    ``output`` defaults to ``path``; a folder receives a file of ``path``'s name (as ``cp``);
    either way the file is replaced atomically. A ``parsed`` column the file already has
    (an earlier classification, perhaps by another oracle) is replaced only with
    ``overwrite``.
    """
    from lingtest.tasks.core.io import check_input_file, write_csv

    path = check_input_file(Path(path).expanduser(), "give the CSV of responses")
    target = classified_path(path, output)
    if target.exists() and not target.is_file():
        check_input_file(target, "--output names the CSV to write, or a folder for it")
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
    if "parsed" in table.columns and not overwrite:
        raise InputFormatError(path, None, "already has a `parsed` column (an earlier "
                               "classification); it is left as it is",
                               "pass --overwrite to replace it, or --output another file "
                               "after renaming that column")
    table["parsed"] = [read_answer(cell, mode) for cell in table[column]]
    write_csv(target, table)
    counts = Counter(table["parsed"])
    return {value: counts.get(value, 0) for value in VALUES}
