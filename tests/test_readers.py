"""Readers: real mirror files give the published sizes and content; malformed copies fail
with an InputFormatError naming the file and the right 1-based line."""
from __future__ import annotations

import gzip
import json
import pickle
import re
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from lingtest.tasks.core.errors import InputFormatError
from lingtest.tasks.core.io import sha256_file, write_parquet
from lingtest.tasks.data import TABLES
from lingtest.tasks.data.checklist import read_checklist_suite
from lingtest.tasks.data.contrast_sets import read_contrast_split
from lingtest.tasks.data.mrpc import read_mrpc_split
from lingtest.tasks.data.questions import read_questions_json, read_questions_jsonl
from lingtest.tasks.data.sst import detokenize, read_sst_split
from lingtest.tasks.data.treebank import (Node, clean_tree, iter_bracketed, leaves, parse_one,
                                 read_treebank_zip, to_string)


def _raises_at(path: Path, line: int | None, call, *args) -> InputFormatError:
    """Run ``call`` expecting an InputFormatError located at ``path:line``."""
    with pytest.raises(InputFormatError) as info:
        call(*args)
    error = info.value
    assert Path(str(error.path)) == path or str(path) in str(error.path)
    assert error.line == line
    assert (f"{path}:{line}" if line is not None else str(path)) in str(error)
    return error


def test_tables_registry_names() -> None:
    assert set(TABLES) == {"sst", "word_polarity", "mrpc", "questions", "contrast_pairs",
                           "ptb_trees", "checklist_suite", "names", "gender_pairs"}


# --- bracketed trees -----------------------------------------------------------------

def test_iter_bracketed_multiline_reports_start_lines(tmp_path: Path) -> None:
    text = "( (S (NP (DT The)\n  (NN cat))\n (VP (VBZ sits))) )\n\n(X (Y z))\n"
    found = list(iter_bracketed(text, tmp_path / "t.mrg"))
    assert [line for line, _ in found] == [1, 5]
    assert to_string(found[1][1]) == "(X (Y z))"
    assert leaves(found[0][1]) == ["The", "cat", "sits"]


@pytest.mark.parametrize("text, line, problem", [
    ("(S (NP a)\n(VP b)", 1, "not closed"),
    ("(S (NP a))\n(S b))", 2, "closes nothing"),
    ("(S (NP a))\nstray (S b)", 2, "outside brackets"),
    ("(S (NP a)\n (VP))", 2, "empty constituent"),
])
def test_iter_bracketed_errors(tmp_path: Path, text: str, line: int, problem: str) -> None:
    path = tmp_path / "bad.mrg"
    error = _raises_at(path, line, lambda: list(iter_bracketed(text, path)))
    assert problem in str(error)


def test_clean_tree_drops_traces_tags_and_unary_duplicates() -> None:
    raw = parse_one("( (S (NP-SBJ-1 (NP (-NONE- *T*-1))) (NP-SBJ=2 (NP (PRP it))) "
                    "(VP (VBD said) (-LRB- -LCB-) (SBAR (-NONE- 0) (S (-NONE- *T*-2)))) "
                    "(PP-LOC|ADV (IN in) (NP (NNP May))) (. .)) )", "x", 1)
    cleaned = clean_tree(raw.children[0])
    assert to_string(cleaned) == ("(S (NP (PRP it)) (VP (VBD said) (-LRB- -LCB-)) "
                                  "(PP (IN in) (NP (NNP May))) (. .))")
    assert clean_tree(Node("-NONE-", ["*"])) is None


# --- SST ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sst(mirror: Path) -> pd.DataFrame:
    return TABLES["sst"](mirror)


def test_sst_sizes_and_first_sentence(sst: pd.DataFrame) -> None:
    assert sst.groupby("split").size().to_dict() == {"train": 8544, "dev": 1101, "test": 2210}
    assert sst["sentence_id"].is_unique
    first = sst.iloc[0]
    assert first.sentence_id == "train-00000"
    assert first.text.startswith("The Rock is destined to be the 21st Century's new \"Conan\"")
    assert first.text.endswith("Steven Segal.")
    assert (first.label5, first.label3, first.label2) == (3, "pos", "pos")
    assert list(first.tokens[:3]) == ["The", "Rock", "is"]
    assert first.tree.startswith("(3 (2 (2 The) (2 Rock))")
    assert sst.iloc[8544].sentence_id == "dev-00000"


def test_sst_labels_are_consistent(sst: pd.DataFrame) -> None:
    expected3 = sst["label5"].map({0: "neg", 1: "neg", 2: "neutral", 3: "pos", 4: "pos"})
    assert (sst["label3"] == expected3).all()
    neutral = sst["label3"] == "neutral"
    assert sst.loc[neutral, "label2"].isna().all()
    assert (sst.loc[~neutral, "label2"] == sst.loc[~neutral, "label3"]).all()
    assert sst["label3"].value_counts().to_dict() == {"pos": 4963, "neg": 4650, "neutral": 2242}


def test_sst_text_is_detokenised(sst: pd.DataFrame) -> None:
    for leftover in (" 's ", " n't ", "-LRB-", "-RRB-", "``", "''", " ,", " .", "\\/"):
        assert not sst["text"].str.contains(leftover, regex=False).any(), leftover
    # tokens are the tree's leaves, verbatim
    row = sst.iloc[5]
    assert list(row.tokens) == re.findall(r"\(\d ([^()\s]+)\)", row.tree)


def test_sst_parquet_bytes_survive_a_pickle_round_trip(sst: pd.DataFrame, tmp_path: Path) -> None:
    """Prefect caches tables pickled; a cached rerun must write byte-identical Parquet."""
    write_parquet(tmp_path / "fresh.parquet", sst)
    write_parquet(tmp_path / "cached.parquet", pickle.loads(pickle.dumps(sst)))
    assert sha256_file(tmp_path / "fresh.parquet") == sha256_file(tmp_path / "cached.parquet")
    back = pd.read_parquet(tmp_path / "fresh.parquet")
    assert list(back.iloc[0].tokens[:2]) == ["The", "Rock"] and back["label2"].isna().sum() == 2242


def test_detokenize_rules() -> None:
    tokens = ("I do n't think it 's a -LRB- very -RRB- `` good '' film , ca n't you see ? "
              "The students ' work costs $ 5 ... writer\\/director").split()
    assert detokenize(tokens) == ("I don't think it's a (very) \"good\" film, can't you see? "
                                  "The students' work costs $5... writer/director")


def test_sst_malformed_lines(tmp_path: Path) -> None:
    good = "(3 (2 A) (3 (3 fine) (2 film)))\n"
    truncated = tmp_path / "truncated.txt"
    truncated.write_text(good + good + "(3 (2 A) (3 (3 fine) (2 fi\n" + good)
    assert "truncated" in str(_raises_at(truncated, 3, read_sst_split, truncated, "train"))
    bad_label = tmp_path / "label.txt"
    bad_label.write_text(good + "(3 (x A) (3 film))\n")
    assert "'x'" in str(_raises_at(bad_label, 2, read_sst_split, bad_label, "train"))
    out_of_range = tmp_path / "range.txt"
    out_of_range.write_text(good + good + good + "(7 (2 A) (3 film))\n")
    _raises_at(out_of_range, 4, read_sst_split, out_of_range, "dev")
    two = tmp_path / "two.txt"
    two.write_text(good + "(2 a) (2 b)\n")
    _raises_at(two, 2, read_sst_split, two, "dev")


# --- MRPC ---------------------------------------------------------------------------

def test_mrpc_real(mirror: Path) -> None:
    mrpc = TABLES["mrpc"](mirror)
    assert mrpc.groupby("split").size().to_dict() == {"train": 3668, "validation": 408,
                                                       "test": 1725}
    first = mrpc.iloc[0]
    assert (first.pair_id, first.label) == ("train-0", 1)
    assert first.sentence1.startswith("Amrozi accused his brother")
    assert first.sentence2.startswith("Referring to him as only")
    assert set(mrpc["label"]) == {0, 1} and mrpc["pair_id"].is_unique
    assert not mrpc["sentence1"].str.contains(r"\[SEP\]").any()


def test_mrpc_malformed(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "0": ["a [SEP] b", 1],\n  "1": ["c [SEP] d" 0]\n}\n')
    _raises_at(broken, 3, read_mrpc_split, broken, "train")
    no_sep = tmp_path / "nosep.json"
    no_sep.write_text('{\n  "0": ["a [SEP] b", 1],\n  "1": [\n    "c d",\n    0\n  ]\n}\n')
    assert "entry '1'" in str(_raises_at(no_sep, 3, read_mrpc_split, no_sep, "train"))
    bad_label = tmp_path / "label.json"
    bad_label.write_text('{"0": ["a [SEP] b", 1], "7": ["c [SEP] d", "yes"]}')
    error = _raises_at(bad_label, 1, read_mrpc_split, bad_label, "test")
    assert "entry '7'" in str(error) and "'yes'" in str(error)


# --- questions ----------------------------------------------------------------------

def test_questions_real(mirror: Path) -> None:
    questions = TABLES["questions"](mirror)
    assert questions.groupby("source").size().to_dict() == {"boolq": 3270, "kommkonllm": 27}
    assert questions["question_id"].is_unique
    assert questions["answer"].dtype == bool
    first = questions.iloc[0]
    assert (first.question_id, first.answer) == ("boolq-0000", False)
    assert first.question.startswith("does ethanol take more energy")
    vienna = questions[questions["source"] == "kommkonllm"].iloc[0]
    assert vienna.question_id == "kommkonllm-00" and bool(vienna.answer) is True
    assert vienna.question.startswith("Is St. Stephen's Cathedral")
    assert vienna.passage == ""


def test_read_questions_jsonl_user_file(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text('{"question": "is water wet", "answer": true}\n\n'
                    '{"question": "is fire cold", "answer": false, "passage": "Fire is hot."}\n')
    table = read_questions_jsonl(path, "mine")
    assert table["question_id"].tolist() == ["mine-00", "mine-01"]
    assert table["answer"].tolist() == [True, False]
    assert table["passage"].tolist() == ["", "Fire is hot."]


@pytest.mark.parametrize("bad_line, problem", [
    ('{"question": "q", "answer": true,}', "not valid JSON"),
    ('{"answer": true, "passage": ""}', "'question'"),
    ('{"question": "q", "answer": "yes"}', "'answer'"),
    ('{"question": "q", "passage": "p"}', "'answer'"),
    ('{"question": "q", "answer": false, "passage": 3}', "'passage'"),
    ('["q", true]', "JSON object"),
])
def test_read_questions_jsonl_errors(tmp_path: Path, bad_line: str, problem: str) -> None:
    path = tmp_path / "q.jsonl"
    good = '{"question": "q", "answer": true, "passage": "p"}\n'
    path.write_text(good + "\n" + bad_line + "\n" + good)
    assert problem in str(_raises_at(path, 3, read_questions_jsonl, path))


def test_read_questions_json_list_names_the_item(tmp_path: Path) -> None:
    path = tmp_path / "v.json"
    path.write_text(json.dumps([{"question": "q", "answer": True, "passage": ""},
                                {"question": "q2", "answer": 1, "passage": ""}]))
    assert "item 1" in str(_raises_at(path, None, read_questions_json, path))


# --- contrast sets ------------------------------------------------------------------

def test_contrast_pairs_real(mirror: Path) -> None:
    pairs = TABLES["contrast_pairs"](mirror)
    assert pairs.groupby("split").size().to_dict() == {"dev": 100, "test": 488}
    assert (pairs["original_label"] != pairs["contrast_label"]).all()
    first = pairs.iloc[0]
    assert first.original_label == "Negative" and first.contrast_label == "Positive"
    assert first.original.startswith("I had quite high hopes for this film")
    # Excel-style quoting is undone: inner quotes are single, no wrapping quotes remain.
    assert 'an "orgy" where' in first.original and not first.original.startswith('"')
    assert pairs["original"].str.contains('"').sum() >= 200


def _tsv(path: Path, rows: list[str]) -> Path:
    path.write_text("Sentiment\tText\n" + "".join(row + "\n" for row in rows))
    return path


def test_contrast_pairs_malformed(tmp_path: Path) -> None:
    good = ["Positive\tA fine film.", 'Negative\t"A ""bad"" film."', "Positive\tGood."]
    contrast = _tsv(tmp_path / "c.tsv", ["Negative\tx", "Positive\ty", "Negative\tz"])
    extra_col = _tsv(tmp_path / "cols.tsv", good[:2] + ["Positive\tGood.\textra"])
    assert "found 3" in str(_raises_at(extra_col, 4, read_contrast_split, extra_col,
                                         contrast, "dev"))
    bad_label = _tsv(tmp_path / "label.tsv", good[:1] + ["Neutral\tMeh."] + good[2:])
    _raises_at(bad_label, 3, read_contrast_split, bad_label, contrast, "dev")
    longer = _tsv(tmp_path / "long.tsv", good + ["Negative\tOne more."])
    assert "no partner" in str(_raises_at(longer, 5, read_contrast_split, longer, contrast,
                                          "dev"))
    header = tmp_path / "header.tsv"
    header.write_text("Label\tText\nPositive\tx\n")
    _raises_at(header, 1, read_contrast_split, header, contrast, "dev")
    table = read_contrast_split(_tsv(tmp_path / "ok.tsv", good), contrast, "dev")
    assert table["original"].tolist()[1] == 'A "bad" film.'
    assert table["pair_id"].tolist() == ["dev-0", "dev-1", "dev-2"]


# --- Penn Treebank sample -----------------------------------------------------------

def test_ptb_trees_real(mirror: Path) -> None:
    trees = TABLES["ptb_trees"](mirror)
    assert len(trees) == 3914 and trees["tree_id"].is_unique
    assert trees["fileid"].nunique() == 199
    first = trees.iloc[0]
    assert (first.tree_id, first.fileid, first.n_tokens) == ("wsj_0001-000", "wsj_0001.mrg", 18)
    assert first.tree == ("(S (NP (NP (NNP Pierre) (NNP Vinken)) (, ,) (ADJP (NP (CD 61) "
                          "(NNS years)) (JJ old)) (, ,)) (VP (MD will) (VP (VB join) (NP (DT "
                          "the) (NN board)) (PP (IN as) (NP (DT a) (JJ nonexecutive) (NN "
                          "director))) (NP (NNP Nov.) (CD 29)))) (. .))")
    # wsj_0003's first tree ends "(VP (VBD reported) (SBAR (-NONE- 0) (S (-NONE- *T*-1))))"
    asbestos = trees.set_index("tree_id").loc["wsj_0003-000", "tree"]
    assert "(VP (VBD reported)) (. .))" in asbestos
    joined = "\n".join(trees["tree"])
    assert "-NONE-" not in joined and "*T*" not in joined
    labels = set(re.findall(r"\(([^\s()]+) ", joined))
    assert {"-LRB-", "-RRB-", "NP", "S", "PRP$"} <= labels
    assert not [label for label in labels
                if not label.startswith("-") and re.search(r"[-=|]", label)]
    sample = trees.iloc[::500]
    assert all(len(leaves(parse_one(t, "x", 1))) == n for t, n in zip(sample.tree,
                                                                        sample.n_tokens))


def test_ptb_truncated_file_names_member_and_line(tmp_path: Path) -> None:
    path = tmp_path / "treebank.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("treebank/combined/wsj_0001.mrg", "( (S (NP (NN a)) (VP (VB b))) )\n")
        archive.writestr("treebank/combined/wsj_0002.mrg",
                         "( (S (NP (NN a)) (VP (VB b))) )\n\n( (S (NP (NN a))\n  (VP (VB")
    with pytest.raises(InputFormatError) as info:
        read_treebank_zip(path)
    assert info.value.line == 3
    assert "treebank.zip!treebank/combined/wsj_0002.mrg:3" in str(info.value)


# --- CheckList suite ----------------------------------------------------------------

def test_checklist_suite_real(mirror: Path) -> None:
    suite = TABLES["checklist_suite"](mirror)
    assert suite["test"].nunique() == 38 and len(suite) == 86420
    assert str(suite["label"].dtype) == "Int64"
    by_test = suite.groupby("test", sort=False)
    positive = by_test.get_group("single positive words")
    assert (positive["type"] == "MFT").all() and (positive["label"] == 2).all()
    assert positive["example_id"].tolist() == list(range(len(positive)))
    assert all(isinstance(t, list) and len(t) == 1 for t in positive["texts"])
    assert positive["texts"].iloc[0] == ["good"]
    in_context = by_test.get_group("Sentiment-laden words in context")
    assert set(in_context["label"]) == {0, 2}
    typos = by_test.get_group("typos")
    assert (typos["type"] == "INV").all() and typos["label"].isna().all()
    assert min(len(t) for t in typos["texts"]) >= 2
    assert (typos["expectation"] == "INV: prediction must not change").all()
    assert suite.groupby("type")["test"].nunique().to_dict() == {"DIR": 5, "INV": 13, "MFT": 20}


def test_checklist_suite_malformed(tmp_path: Path) -> None:
    path = tmp_path / "suite.json.gz"
    test = {"name": "t", "type": "MFT", "capability": "c", "description": "",
            "data": ["a", "b"], "labels": [0, 2, 1], "expectation": "label == labels[i]"}
    with gzip.open(path, "wt") as handle:
        json.dump([test], handle)
    assert "3 labels for 2 examples" in str(_raises_at(path, None, read_checklist_suite, path))
    with gzip.open(path, "wt") as handle:
        handle.write('[\n{"name": "t",\n "type": }]')
    _raises_at(path, 3, read_checklist_suite, path)
