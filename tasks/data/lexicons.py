"""Lexicons: word polarity, first names by gender, gendered word pairs.

Table ``word_polarity`` (the offline stand-in for SentiWordNet, one row per word):

=========  =======  ===================================================================
column     dtype    meaning
=========  =======  ===================================================================
word       str      lowercased word
polarity   str      ``neg`` / ``neutral`` / ``pos``
strength   float64  in [-1, 1]; SST: (mean label − 2) / 2, Hu & Liu: ±1
source     str      ``sst`` / ``hu_liu`` / ``sst+hu_liu``
=========  =======  ===================================================================

SST part: every single-word node ``(k word)`` of all SST trees (all splits), grouped by
lowercased word, keeping only words with at least one letter (punctuation and numbers are
not words with a sentiment); strength = (mean k − 2) / 2, polarity ``neutral`` when
|strength| < 0.25 (mean label strictly between 1.5 and 2.5), else by sign.
Hu & Liu part: ``positive-words.txt`` (+1) and ``negative-words.txt`` (−1); the three
words listed in both (envious, enviously, enviousness) are dropped as self-contradictory.
Merging a word found in both: if both are polar with the same sign, strength is their mean;
a polar judgement beats a neutral one (a word either source calls polar is never offered
as a neutral filler) and takes its strength; between opposite polar judgements SST wins,
because it was labelled on movie reviews, the domain of every sentiment test here.

Table ``names`` (first names by gender; one row per (name, gender, source), first-seen
order, which for CheckList is frequency order):

======  ====  ======================================================================
name    str   first name as published (title case)
gender  str   ``male`` / ``female``
source  str   ``checklist`` (names.json men/women plus basic.json male/female, which is
              a subset) or ``nltk`` (names corpus male.txt / female.txt)
======  ====  ======================================================================

A name listed under both genders by one source keeps both rows (nltk has 365 such names,
e.g. "Alexis"); consumers that need an unambiguous gender drop names with two genders.

Table ``gender_pairs`` (from ``gender_pairs.tsv`` beside this module; one row per word):

======  ====  ===================================================================
word    str   lowercased gendered word
swap    str   its counterpart of the other gender
gender  str   gender of ``word``: ``male`` / ``female``
======  ====  ===================================================================

The TSV lists ``male``, ``female``, ``direction``: ``both`` adds both swaps,
``male_to_female`` / ``female_to_male`` only one, so ambiguous words get one swap:
``her`` → ``his`` (her↔his, him→her, hers→his), ``lady`` → ``gentleman``,
``mrs`` → ``mr``.
"""
from __future__ import annotations

import csv
import json
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Iterable

import pandas as pd

from lingtest.tasks.core.errors import InputFormatError
from lingtest.tasks.data.sst import SPLITS, iter_sst_trees, preterminal_labels

NEUTRAL_BAND = 0.25
GENDER_PAIRS_TSV = Path(__file__).with_name("gender_pairs.tsv")
_DIRECTIONS = {"both": ("male", "female"), "male_to_female": ("male",),
               "female_to_male": ("female",)}


def _polarity(strength: float) -> str:
    return "neutral" if abs(strength) < NEUTRAL_BAND else ("pos" if strength > 0 else "neg")


def sst_word_strengths(tree_files: Iterable[str | Path]) -> dict[str, float]:
    """Lowercased word → (mean single-word label − 2) / 2 over the given SST tree files."""
    labels: dict[str, list[int]] = defaultdict(list)
    for path in tree_files:
        for _, _, tree in iter_sst_trees(path):
            for word, label in preterminal_labels(tree):
                word = word.lower()
                if any(ch.isalpha() for ch in word):
                    labels[word].append(label)
    return {word: (sum(ks) / len(ks) - 2) / 2 for word, ks in labels.items()}


def read_opinion_lexicon(zip_path: str | Path) -> dict[str, float]:
    """Hu & Liu's lexicon from nltk's ``opinion_lexicon.zip``: word → +1 / −1."""
    zip_path = Path(zip_path)
    found: dict[str, set[float]] = defaultdict(set)
    with zipfile.ZipFile(zip_path) as archive:
        for name, sign in (("positive-words.txt", 1.0), ("negative-words.txt", -1.0)):
            member = f"opinion_lexicon/{name}"
            if member not in archive.namelist():
                raise InputFormatError(zip_path, None, f"{member} is missing",
                                       "use nltk_data's corpora/opinion_lexicon.zip")
            for line in archive.read(member).decode("utf-8").splitlines():
                word = line.strip().lower()
                if word and not word.startswith(";"):
                    found[word].add(sign)
    return {word: signs.pop() for word, signs in found.items() if len(signs) == 1}


def merge_polarity(sst: dict[str, float], hu_liu: dict[str, float]) -> pd.DataFrame:
    """The ``word_polarity`` table from both sources (merge rule: module docstring)."""
    rows = []
    for word in sorted(set(sst) | set(hu_liu)):
        if word not in hu_liu:
            strength, source = sst[word], "sst"
        elif word not in sst:
            strength, source = hu_liu[word], "hu_liu"
        else:
            s, h = sst[word], hu_liu[word]
            source = "sst+hu_liu"
            if _polarity(s) == "neutral":
                strength = h
            elif (s > 0) == (h > 0):
                strength = (s + h) / 2
            else:
                strength = s
        rows.append((word, _polarity(strength), float(strength), source))
    return pd.DataFrame(rows, columns=["word", "polarity", "strength", "source"])


def build_word_polarity(raw: Path) -> pd.DataFrame:
    """``word_polarity`` from ``raw/sst/trees`` and nltk's ``opinion_lexicon.zip`` under raw."""
    raw = Path(raw)
    sst = sst_word_strengths(raw / "sst" / "trees" / f"{split}.txt" for split in SPLITS)
    return merge_polarity(sst, read_opinion_lexicon(raw / "nltk_data" / "corpora"
                                                    / "opinion_lexicon.zip"))


def _load_json(path: Path) -> object:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as error:
        raise InputFormatError(path, error.lineno, f"invalid JSON: {error.msg}",
                               "restore the file from the CheckList release") from None


def _name_list(data: object, key: str, path: Path) -> list[str]:
    values = data.get(key) if isinstance(data, dict) else None
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise InputFormatError(path, None, f"key {key!r} must hold a list of names",
                               "restore the file from the CheckList release")
    return [v.strip() for v in values if v.strip()]


def read_names(names_json: str | Path, basic_json: str | Path,
               nltk_names_zip: str | Path) -> pd.DataFrame:
    """The ``names`` table from CheckList's two lexicons and nltk's names corpus."""
    names_json, basic_json, nltk_names_zip = map(Path, (names_json, basic_json, nltk_names_zip))
    names, basic = _load_json(names_json), _load_json(basic_json)
    found: list[tuple[str, str, str]] = []
    for gender, keys in (("male", [(names, "men", names_json), (basic, "male", basic_json)]),
                         ("female", [(names, "women", names_json),
                                     (basic, "female", basic_json)])):
        for data, key, path in keys:
            found += [(name, gender, "checklist") for name in _name_list(data, key, path)]
    with zipfile.ZipFile(nltk_names_zip) as archive:
        for gender in ("male", "female"):
            member = f"names/{gender}.txt"
            if member not in archive.namelist():
                raise InputFormatError(nltk_names_zip, None, f"{member} is missing",
                                       "use nltk_data's corpora/names.zip")
            text = archive.read(member).decode("utf-8")
            found += [(n.strip(), gender, "nltk") for n in text.splitlines() if n.strip()]
    rows = list(dict.fromkeys(found))
    return pd.DataFrame(rows, columns=["name", "gender", "source"])


def build_names(raw: Path) -> pd.DataFrame:
    """``names`` from ``raw/checklist/{names,basic}.json`` and nltk's ``names.zip``."""
    raw = Path(raw)
    return read_names(raw / "checklist" / "names.json", raw / "checklist" / "basic.json",
                      raw / "nltk_data" / "corpora" / "names.zip")


def read_gender_pairs(path: str | Path = GENDER_PAIRS_TSV) -> pd.DataFrame:
    """The ``gender_pairs`` table from a TSV ``male<TAB>female<TAB>direction`` ('#' comments)."""
    path = Path(path)
    fix = "write 'male<TAB>female<TAB>both|male_to_female|female_to_male'"
    rows: dict[str, tuple[str, str, str]] = {}
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        for record in reader:
            line = reader.line_num
            if not record or record[0].startswith("#") or record == ["male", "female", "direction"]:
                continue
            if len(record) != 3:
                raise InputFormatError(path, line, f"expected 3 columns, found {len(record)}", fix)
            male, female, direction = (field.strip().lower() for field in record)
            if not male or not female or direction not in _DIRECTIONS:
                raise InputFormatError(path, line, f"bad row {record!r}", fix)
            for gender in _DIRECTIONS[direction]:
                word, swap = (male, female) if gender == "male" else (female, male)
                if word in rows:
                    raise InputFormatError(path, line, f"{word!r} already has a swap "
                                           f"({rows[word][1]!r})", "give each word one swap; "
                                           "use a one-way direction for ambiguous words")
                rows[word] = (word, swap, gender)
    return pd.DataFrame(list(rows.values()), columns=["word", "swap", "gender"])


def build_gender_pairs(raw: Path) -> pd.DataFrame:
    """``gender_pairs`` from the packaged TSV (``raw`` is unused: the list is ours)."""
    return read_gender_pairs(GENDER_PAIRS_TSV)
