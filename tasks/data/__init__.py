"""Readers that turn raw data files into tables (pandas DataFrames, written as Parquet).

``TABLES`` maps each table name to ``build(raw) -> DataFrame``, where ``raw`` is a folder
laid out like the mirror (``raw/sst/trees/train.txt``, ``raw/nltk_data/corpora/…``).
Each reader module documents its table's schema; malformed input raises
``InputFormatError`` naming the file and line.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from lingtest.tasks.data.checklist import build_checklist_suite
from lingtest.tasks.data.contrast_sets import build_contrast_pairs
from lingtest.tasks.data.lexicons import build_gender_pairs, build_names, build_word_polarity
from lingtest.tasks.data.mrpc import build_mrpc
from lingtest.tasks.data.questions import build_questions
from lingtest.tasks.data.sst import build_sst
from lingtest.tasks.data.treebank import build_ptb_trees

TABLES: dict[str, Callable[[Path], pd.DataFrame]] = {
    "sst": build_sst,
    "word_polarity": build_word_polarity,
    "mrpc": build_mrpc,
    "questions": build_questions,
    "contrast_pairs": build_contrast_pairs,
    "ptb_trees": build_ptb_trees,
    "checklist_suite": build_checklist_suite,
    "names": build_names,
    "gender_pairs": build_gender_pairs,
}

__all__ = ["TABLES"]
