"""IMDb contrast sets (Gardner et al. 2020): reviews paired with their inverted twins.

Table ``contrast_pairs`` (100 dev + 488 test rows):

==============  =====  =========================================================
column          dtype  meaning
==============  =====  =========================================================
pair_id         str    ``<split>-<row index>``, e.g. ``dev-0``
split           str    ``dev`` / ``test``
original        str    the original review (``<br />`` tags kept as published)
contrast        str    the manually edited review in the same row of ``_contrast``
original_label  str    ``Positive`` / ``Negative``
contrast_label  str    ``Positive`` / ``Negative`` (the opposite in the release)
==============  =====  =========================================================

Format: TSV with header ``Sentiment<TAB>Text``, Excel-style quoting (a text holding
``"`` is wrapped in quotes with inner quotes doubled), which the csv module undoes. Row i
of ``X_original.tsv`` pairs with row i of ``X_contrast.tsv``. A wrong header, a wrong
column count, a label outside Positive/Negative, an empty text or unequal row counts is
an InputFormatError naming the file and the 1-based line.
"""
from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

from lingtest.tasks.core.errors import InputFormatError

SPLITS = ("dev", "test")
LABELS = ("Positive", "Negative")
HEADER = ["Sentiment", "Text"]
COLUMNS = ["pair_id", "split", "original", "contrast", "original_label", "contrast_label"]
_FIX = "each line must be 'Positive|Negative<TAB>text' below the header 'Sentiment<TAB>Text'"


def read_sentiment_tsv(path: str | Path) -> list[tuple[int, str, str]]:
    """``(line, label, text)`` for each data row of a ``Sentiment<TAB>Text`` file."""
    path = Path(path)
    rows: list[tuple[int, str, str]] = []
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", strict=True)
        while True:
            line = reader.line_num + 1  # a quoted text may span lines: report its first
            try:
                record = next(reader)
            except StopIteration:
                break
            except csv.Error as error:
                raise InputFormatError(path, line, f"bad quoting: {error}", _FIX) from None
            if line == 1:
                if record != HEADER:
                    raise InputFormatError(path, 1, f"header is {record!r}, expected {HEADER!r}",
                                           _FIX)
                continue
            if not record:
                continue
            if len(record) != 2:
                raise InputFormatError(path, line, f"expected 2 columns, found {len(record)}",
                                       _FIX)
            label, text = record
            if label not in LABELS:
                raise InputFormatError(path, line, f"label {label!r} is not Positive or Negative",
                                       _FIX)
            if not text.strip():
                raise InputFormatError(path, line, "empty text", _FIX)
            rows.append((line, label, text))
    return rows


def _pair_rows(original: str | Path, contrast: str | Path, split: str) -> list[tuple]:
    left, right = read_sentiment_tsv(original), read_sentiment_tsv(contrast)
    if len(left) != len(right):
        longer, rows_longer = (original, left) if len(left) > len(right) else (contrast, right)
        raise InputFormatError(
            longer, rows_longer[min(len(left), len(right))][0],
            f"row has no partner: {Path(original).name} has {len(left)} rows, "
            f"{Path(contrast).name} has {len(right)}",
            "the two files of a split must have one row per pair, in the same order")
    return [(f"{split}-{i}", split, o_text, c_text, o_label, c_label)
            for i, ((_, o_label, o_text), (_, c_label, c_text)) in enumerate(zip(left, right))]


def read_contrast_split(original: str | Path, contrast: str | Path, split: str) -> pd.DataFrame:
    """Pair row i of ``original`` with row i of ``contrast`` as ``contrast_pairs`` rows."""
    return pd.DataFrame(_pair_rows(original, contrast, split), columns=COLUMNS)


def read_contrast_sets(folder: str | Path) -> pd.DataFrame:
    """Both splits from a folder holding ``{dev,test}_{original,contrast}.tsv``."""
    folder = Path(folder)
    # One construction, not pd.concat: chunked string columns change the Parquet bytes.
    rows = [row for split in SPLITS
            for row in _pair_rows(folder / f"{split}_original.tsv",
                                  folder / f"{split}_contrast.tsv", split)]
    return pd.DataFrame(rows, columns=COLUMNS)


def build_contrast_pairs(raw: Path) -> pd.DataFrame:
    """The ``contrast_pairs`` table from ``raw/contrast_sets/imdb``."""
    return read_contrast_sets(Path(raw) / "contrast_sets" / "imdb")
