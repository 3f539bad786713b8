"""Lexicons (word polarity, names, gendered pairs) and WordNet from an explicit folder."""
from __future__ import annotations

import zipfile
from pathlib import Path

import pandas as pd
import pytest

from lingtest.tasks.core.errors import InputFormatError, LingtestError
from lingtest.tasks.data import TABLES
from lingtest.tasks.data.lexicons import (merge_polarity, read_gender_pairs, read_opinion_lexicon,
                                 sst_word_strengths)
from lingtest.tasks.text.wordnet import synonyms, wordnet


@pytest.fixture(scope="module")
def polarity(mirror: Path) -> pd.DataFrame:
    return TABLES["word_polarity"](mirror).set_index("word")


def test_word_polarity_real(polarity: pd.DataFrame) -> None:
    assert polarity.index.is_unique and len(polarity) > 20000
    assert (polarity.index == polarity.index.str.lower()).all()
    assert polarity["strength"].between(-1, 1).all()
    assert set(polarity["source"]) == {"sst", "hu_liu", "sst+hu_liu"}
    expected = polarity["strength"].map(
        lambda s: "neutral" if abs(s) < 0.25 else ("pos" if s > 0 else "neg"))
    assert (polarity["polarity"] == expected).all()
    assert polarity.loc["good", "polarity"] == "pos" and polarity.loc["bad", "polarity"] == "neg"
    assert polarity.loc["terrible", "strength"] < -0.5
    assert polarity.loc["the", "polarity"] == "neutral" and polarity.loc["the", "source"] == "sst"
    # In Hu & Liu only (SST never uses it as a single word): strength exactly ±1.
    assert tuple(polarity.loc["abominable", ["polarity", "strength", "source"]]) == (
        "neg", -1.0, "hu_liu")
    # "funny" is negative for Hu & Liu, positive in SST's movie reviews: SST wins.
    assert tuple(polarity.loc["funny", ["polarity", "source"]]) == ("pos", "sst+hu_liu")
    # Listed as both positive and negative by Hu & Liu: only SST's judgement remains.
    assert polarity.loc["envious", "source"] == "sst"
    assert "," not in polarity.index and "1998" not in polarity.index


def test_merge_polarity_rules() -> None:
    sst = {"agree": 0.5, "neutral_sst": 0.0, "clash": 0.75, "sst_only": -0.1}
    hu_liu = {"agree": 1.0, "neutral_sst": -1.0, "clash": -1.0, "hl_only": 1.0}
    table = merge_polarity(sst, hu_liu).set_index("word")
    assert table.loc["agree"].tolist() == ["pos", 0.75, "sst+hu_liu"]
    assert table.loc["neutral_sst"].tolist() == ["neg", -1.0, "sst+hu_liu"]
    assert table.loc["clash"].tolist() == ["pos", 0.75, "sst+hu_liu"]
    assert table.loc["sst_only"].tolist() == ["neutral", -0.1, "sst"]
    assert table.loc["hl_only"].tolist() == ["pos", 1.0, "hu_liu"]


def test_sst_word_strengths_average_single_word_nodes(tmp_path: Path) -> None:
    trees = tmp_path / "trees.txt"
    trees.write_text("(3 (4 Great) (2 (2 film) (2 .)))\n(1 (1 great) (2 1998))\n")
    assert sst_word_strengths([trees]) == {"great": 0.25, "film": 0.0}


def test_opinion_lexicon(mirror: Path, tmp_path: Path) -> None:
    lexicon = read_opinion_lexicon(mirror / "nltk_data" / "corpora" / "opinion_lexicon.zip")
    values = pd.Series(lexicon)
    assert (values == 1).sum() == 2006 - 3 and (values == -1).sum() == 4783 - 3
    assert lexicon["a+"] == 1.0 and lexicon["naïve"] == -1.0 and "envious" not in lexicon
    empty = tmp_path / "opinion_lexicon.zip"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("opinion_lexicon/positive-words.txt", "good\n")
    with pytest.raises(InputFormatError, match="negative-words.txt is missing"):
        read_opinion_lexicon(empty)


def test_names_real(mirror: Path) -> None:
    names = TABLES["names"](mirror)
    assert not names.duplicated().any()
    assert names.groupby(["source", "gender"]).size().to_dict() == {
        ("checklist", "female"): 8052, ("checklist", "male"): 5393,
        ("nltk", "female"): 5000, ("nltk", "male"): 2943}
    checklist = names[names["source"] == "checklist"]
    assert checklist.iloc[0].tolist() == ["Michael", "male", "checklist"]
    assert set(checklist.loc[checklist["gender"] == "female", "name"]) >= {"Jennifer", "Sarah"}
    nltk_names = names[names["source"] == "nltk"]
    assert set(nltk_names.loc[nltk_names["name"] == "Alexis", "gender"]) == {"male", "female"}


def test_gender_pairs_table() -> None:
    pairs = TABLES["gender_pairs"](Path("/unused"))
    assert pairs["word"].is_unique and len(pairs) >= 160
    swap = dict(zip(pairs["word"], pairs["swap"]))
    gender = dict(zip(pairs["word"], pairs["gender"]))
    assert (swap["he"], swap["she"], swap["him"], swap["his"], swap["her"], swap["hers"]) == (
        "she", "he", "her", "her", "his", "his")
    assert (swap["actor"], swap["waitress"], swap["mr"], swap["mrs"], swap["sir"]) == (
        "actress", "waiter", "mrs", "mr", "madam")
    assert gender["her"] == "female" and gender["king"] == "male"
    # Every swap is itself a listed word of the other gender; most pairs round-trip.
    assert all(gender[other] != gender[word] for word, other in swap.items())
    two_way = [w for w in swap if swap.get(swap[w]) == w]
    assert len(two_way) >= 160


@pytest.mark.parametrize("row, problem", [
    ("king\tqueen", "expected 3 columns"),
    ("king\tqueen\tsometimes", "bad row"),
    ("he\tshe\tboth", "already has a swap"),
])
def test_gender_pairs_malformed(tmp_path: Path, row: str, problem: str) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_text("# comment\nmale\tfemale\tdirection\nhe\tshe\tboth\n" + row + "\n")
    with pytest.raises(InputFormatError) as info:
        read_gender_pairs(path)
    assert info.value.line == 4 and f"{path}:4" in str(info.value)
    assert problem in str(info.value)


def test_wordnet_from_folder(mirror: Path, tmp_path: Path) -> None:
    folder = mirror / "nltk_data"
    reader = wordnet(folder)
    assert wordnet(str(folder) + "/") is reader  # cached per resolved folder
    assert reader.synset("good.a.01").lemmas()[0].antonyms()[0].name() == "bad"
    assert "film" in synonyms("movie", "NOUN", folder)
    assert "movie" not in synonyms("movie", "n", folder)
    assert synonyms("movie", "PUNCT", folder) == []
    with pytest.raises(LingtestError, match=r"wordnet\.zip.*lingtest run data"):
        wordnet(tmp_path)
