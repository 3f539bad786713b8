"""Microsoft Research Paraphrase Corpus (GLUE splits) from COSTELLO's JSON files.

Table ``mrpc`` (one row per sentence pair; 3668 train / 408 validation / 1725 test):

=========  =====  ==================================================================
column     dtype  meaning
=========  =====  ==================================================================
pair_id    str    ``<split>-<key in the file>``, e.g. ``train-0``
split      str    ``train`` / ``validation`` / ``test``
sentence1  str    first sentence, verbatim (the files are tokenised: ``Dominick 's``)
sentence2  str    second sentence, verbatim
label      int64  1 = paraphrase, 0 = not
=========  =====  ==================================================================

Input: a JSON object ``{"0": ["sentence1 [SEP] sentence2", label], ...}``; rows keep the
file's order. Invalid JSON is reported with its line; an entry that is not a
``[text, 0|1]`` pair or whose text lacks exactly one `` [SEP] `` is reported with its key
and the line where the key appears.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from lingtest.tasks.core.errors import InputFormatError

SPLITS = ("train", "validation", "test")
SEP = " [SEP] "
COLUMNS = ["pair_id", "split", "sentence1", "sentence2", "label"]
_FIX = 'each entry must be "key": ["sentence1 [SEP] sentence2", 0 or 1]'


def _key_line(text: str, key: str) -> int | None:
    """1-based line where ``"key":`` first appears in ``text`` (None if not found)."""
    match = re.search(r'"' + re.escape(key) + r'"\s*:', text)
    return text.count("\n", 0, match.start()) + 1 if match else None


def _rows(path: str | Path, split: str) -> list[tuple]:
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputFormatError(path, error.lineno, f"invalid JSON: {error.msg}", _FIX) from None
    if not isinstance(data, dict):
        raise InputFormatError(path, 1, "expected a JSON object keyed by pair index", _FIX)
    rows = []
    for key, entry in data.items():
        def bad(problem: str) -> InputFormatError:
            return InputFormatError(path, _key_line(text, key), f"entry {key!r}: {problem}", _FIX)

        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str):
            raise bad("not a [text, label] pair")
        pair, label = entry
        if pair.count(SEP) != 1:
            raise bad(f"text holds {pair.count(SEP)} ' [SEP] ' separators, expected 1")
        if type(label) is not int or label not in (0, 1):
            raise bad(f"label {label!r} is not 0 or 1")
        first, second = pair.split(SEP)
        rows.append((f"{split}-{key}", split, first.strip(), second.strip(), int(label)))
    return rows


def _table(rows: list[tuple]) -> pd.DataFrame:
    # One construction, not pd.concat: chunked string columns change the Parquet bytes.
    return pd.DataFrame(rows, columns=COLUMNS).astype({"label": "int64"})


def read_mrpc_split(path: str | Path, split: str) -> pd.DataFrame:
    """One MRPC JSON file as ``mrpc`` rows of ``split``."""
    return _table(_rows(path, split))


def read_mrpc(folder: str | Path) -> pd.DataFrame:
    """All splits from a folder holding ``mrpc_{train,validation,test}.json``."""
    return _table([row for split in SPLITS
                   for row in _rows(Path(folder) / f"mrpc_{split}.json", split)])


def build_mrpc(raw: Path) -> pd.DataFrame:
    """The ``mrpc`` table from ``raw/mrpc``."""
    return read_mrpc(Path(raw) / "mrpc")
