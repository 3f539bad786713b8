"""CheckList's released sentiment suite (38 tests), one row per test example.

Table ``checklist_suite``:

===========  =========  ==============================================================
column       dtype      meaning
===========  =========  ==============================================================
test         str        test name, e.g. ``single positive words``
type         str        ``MFT`` / ``INV`` / ``DIR``
capability   str        CheckList capability (Vocabulary, Robustness, NER, Negation, …)
description  str        the test's description ("" when the release has none)
example_id   int64      index of the example within its test (0-based)
texts        list[str]  the example's texts; an MFT example is one string → one-item
                        list, an INV/DIR example is the original followed by its variants
label        Int64      0 neg, 1 neutral, 2 pos: the example's own label when the test
                        has a label list, the test's label when it has one, else null
expectation  str        the test's expectation, e.g. ``label == labels[i]``,
                        ``label != 0``, ``INV: prediction must not change``
===========  =========  ==============================================================

Input: the gzipped JSON list ``sentiment_suite.json.gz`` of objects with ``name``,
``type``, ``capability``, ``description``, ``data``, ``labels``, ``expectation``.
A malformed test is an InputFormatError naming the file and the test.
"""
from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pandas as pd

from lingtest.tasks.core.errors import InputFormatError

TYPES = ("MFT", "INV", "DIR")
LABELS = (0, 1, 2)
COLUMNS = ["test", "type", "capability", "description", "example_id", "texts", "label",
           "expectation"]
_FIX = "restore sentiment_suite.json.gz from the mirror (run `lingtest run data`)"


def _is_label(value: object) -> bool:
    return type(value) is int and value in LABELS


def _texts(example: object) -> list[str] | None:
    """An example as a list of strings (None when it is neither a string nor such a list)."""
    if isinstance(example, str):
        return [example]
    if isinstance(example, list) and example and all(isinstance(t, str) for t in example):
        return list(example)
    return None


def read_checklist_suite(path: str | Path) -> pd.DataFrame:
    """The ``checklist_suite`` table from CheckList's suite exported as gzipped JSON."""
    path = Path(path)
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            tests = json.load(handle)
    except json.JSONDecodeError as error:
        raise InputFormatError(path, error.lineno, f"invalid JSON: {error.msg}", _FIX) from None
    except (OSError, EOFError, zlib.error) as error:
        raise InputFormatError(path, None, f"not a readable gzip file: {error}", _FIX) from None
    if not isinstance(tests, list) or not tests:
        raise InputFormatError(path, None, "expected a non-empty JSON list of tests", _FIX)
    rows = []
    for number, test in enumerate(tests):
        name = test.get("name") if isinstance(test, dict) else None

        def bad(problem: str) -> InputFormatError:
            return InputFormatError(path, None, f"test {number} ({name!r}): {problem}", _FIX)

        if not isinstance(name, str) or not name:
            raise bad("missing 'name'")
        kind, data, labels = test.get("type"), test.get("data"), test.get("labels")
        if kind not in TYPES:
            raise bad(f"type {kind!r} is not one of {TYPES}")
        if not isinstance(data, list):
            raise bad("'data' is not a list of examples")
        if isinstance(labels, list):
            if len(labels) != len(data):
                raise bad(f"{len(labels)} labels for {len(data)} examples")
            if not all(_is_label(label) for label in labels):
                raise bad("labels must be 0, 1 or 2")
            per_example = labels
        elif labels is None or _is_label(labels):
            per_example = [labels] * len(data)
        else:
            raise bad(f"labels {labels!r} are neither a list, a label 0-2 nor null")
        common = (name, kind, str(test.get("capability") or ""),
                  str(test.get("description") or ""))
        expectation = str(test.get("expectation") or "")
        for example_id, (example, label) in enumerate(zip(data, per_example)):
            texts = _texts(example)
            if texts is None:
                raise bad(f"example {example_id} is not a string or a list of strings")
            rows.append((*common, example_id, texts, label, expectation))
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.astype({"example_id": "int64", "label": "Int64"})


def build_checklist_suite(raw: Path) -> pd.DataFrame:
    """The ``checklist_suite`` table from ``raw/checklist/sentiment_suite.json.gz``."""
    return read_checklist_suite(Path(raw) / "checklist" / "sentiment_suite.json.gz")
