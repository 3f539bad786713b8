"""COSTELLO test generation on small slices of the processed tables, and the JSON suites."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from lingtest.tasks.contrastive.params import ContrastiveParams
from lingtest.tasks.core.errors import InputFormatError, LingtestError
from lingtest.tasks.contrastive.costello_json import read_costello_suite, write_costello_suite
from lingtest.tasks.contrastive.suite import COLUMNS, generate_suite, table1

MAX_SEEDS = 6
SEED = 7


@pytest.fixture(scope="module")
def tables(table) -> dict[str, pd.DataFrame]:
    """Small slices: enough seeds for MAX_SEEDS triples per relation, fast to parse."""
    sst = table("sst")
    test = sst[sst["split"] == "test"].head(120)
    contrast = table("contrast_pairs")
    mrpc = table("mrpc")
    return {"sst": test, "contrast_pairs": contrast.head(12),
            "mrpc": mrpc[mrpc["split"] == "validation"].head(90),
            "word_polarity": table("word_polarity"), "names": table("names"),
            "gender_pairs": table("gender_pairs")}


@pytest.fixture(scope="module")
def params() -> ContrastiveParams:
    return ContrastiveParams(max_seeds=MAX_SEEDS)


@pytest.fixture(scope="module")
def suite(tables, nlp, wn, params) -> pd.DataFrame:
    return generate_suite(tables, nlp, wn, params, SEED)


def _prov(row: pd.Series) -> dict:
    return json.loads(row["provenance"])


def _apply(text: str, doc, edits: list[dict]) -> str:
    """Replay provenance edits on the seed's own tokens: the text the operator must produce."""
    out, cursor = [], 0
    for edit in sorted(edits, key=lambda e: e["position"]):
        token = doc[edit["position"]]
        assert token.text == edit["original"]
        out += [text[cursor:token.idx], edit["replacement"]]
        cursor = token.idx + len(token.text)
    return "".join(out) + text[cursor:]


def test_schema_and_counts(suite):
    assert list(suite.columns) == COLUMNS
    counts = suite["relation"].value_counts()
    assert set(counts.index) == {"CR1", "CR2", "CR3", "CR4"}
    assert (counts.drop("CR1") <= MAX_SEEDS).all()
    # CR1: one triple per qualifying word of MAX_SEEDS seeds
    assert suite.loc[suite["relation"] == "CR1", "seed_id"].nunique() == MAX_SEEDS
    assert counts["CR1"] >= MAX_SEEDS
    assert (suite["method"] == "contrastive").all()
    assert (suite["expectation"] == suite["relation"] + ": d(s,s+) < d(s,s-)").all()


def test_triples_differ_and_ids_are_unique(suite):
    assert (suite["seed"] != suite["positive"]).all()
    assert (suite["seed"] != suite["negative"]).all()
    assert (suite["positive"] != suite["negative"]).all()
    assert suite["case_id"].is_unique


def test_same_seed_same_suite(suite, tables, nlp, wn, params):
    again = generate_suite(tables, nlp, wn, params, SEED)
    pd.testing.assert_frame_equal(suite, again)
    other = generate_suite(tables, nlp, wn, params.model_copy(update={"relations": ["CR1"]}),
                           SEED + 1)
    assert set(other["case_id"]) != set(suite[suite["relation"] == "CR1"]["case_id"])


def test_cr1_mutates_the_same_word(suite, nlp):
    for _, row in suite[suite["relation"] == "CR1"].iterrows():
        prov = _prov(row)
        plus, minus = prov["positive"], prov["negative"]
        assert plus["operator"] == "synonym" and minus["operator"] == "antonym"
        assert plus["edits"][0]["position"] == minus["edits"][0]["position"]
        assert plus["edits"][0]["original"] == minus["edits"][0]["original"]
        assert {plus["polarity"], minus["polarity"]} == {"pos", "neg"}
        doc = nlp(row["seed"])
        assert _apply(row["seed"], doc, plus["edits"]) == row["positive"]
        assert _apply(row["seed"], doc, minus["edits"]) == row["negative"]
        assert row["label"] in ("neg", "neutral", "pos")


def test_cr2_swaps_gender(suite, nlp):
    rows = suite[suite["relation"] == "CR2"]
    assert len(rows) > 0
    for _, row in rows.iterrows():
        prov = _prov(row)
        assert prov["positive"]["operator"] == "gender_swap"
        assert prov["negative"]["operator"] == "senti_synonym_rewrite"
        doc = nlp(row["seed"])
        assert _apply(row["seed"], doc, prov["positive"]["edits"]) == row["positive"]
        assert _apply(row["seed"], doc, prov["negative"]["edits"]) == row["negative"]


def test_cr3_uses_the_contrast_review(suite, tables):
    contrast = tables["contrast_pairs"].set_index("pair_id")
    rows = suite[suite["relation"] == "CR3"]
    assert len(rows) == MAX_SEEDS
    for _, row in rows.iterrows():
        pair = contrast.loc[row["seed_id"]]
        assert row["seed"] == pair["original"] and row["negative"] == pair["contrast"]
        assert row["label"] == pair["original_label"]
        assert _prov(row)["positive"]["operator"] == "synonym_rewrite"


def test_cr4_mutates_both_halves_alike(suite, tables):
    mrpc = tables["mrpc"].set_index("pair_id")
    rows = suite[suite["relation"] == "CR4"]
    assert len(rows) > 0
    for _, row in rows.iterrows():
        pair = mrpc.loc[row["seed_id"]]
        assert pair["label"] == 1 and row["label"] == "1"
        assert row["seed"] == pair["sentence1"] + " [SEP] " + pair["sentence2"]
        prov = _prov(row)
        for text, key in ((row["positive"], "positive"), (row["negative"], "negative")):
            halves = text.split(" [SEP] ")
            assert len(halves) == 2
            assert halves[0] != pair["sentence1"] and halves[1] != pair["sentence2"]
            first, second = prov[key]
            assert first["substitute"] == second["substitute"]
            assert first["lemma"] == second["lemma"]


def test_max_seeds_none_takes_every_seed(tables, nlp, wn):
    small = dict(tables, contrast_pairs=tables["contrast_pairs"].head(3))
    params = ContrastiveParams(relations=["CR3"])
    got = generate_suite(small, nlp, wn, params, SEED)
    assert list(got["seed_id"]) == list(small["contrast_pairs"]["pair_id"])


def test_missing_table_is_named(nlp, wn):
    with pytest.raises(LingtestError, match="`mrpc` table"):
        generate_suite({}, nlp, wn, ContrastiveParams(relations=["CR4"]), SEED)


def test_table1(suite):
    table = table1(suite)
    assert list(table["relation"]) == ["CR1", "CR2", "CR3", "CR4"]
    assert list(table["paper_triples"]) == [1417, 681, 588, 408]
    assert (table["duplicates"] == 0).all()
    assert table["triples"].sum() == len(suite)


# --------------------------------------------------------------------------- COSTELLO JSON

def test_contrastive_round_trip(suite, tmp_path):
    path = write_costello_suite(suite, tmp_path / "suite.json")
    data = json.loads(path.read_text())
    assert set(data) == {"CR1", "CR2", "CR3", "CR4"}
    assert data["CR4"][0][3] == 1  # integer labels stay integers, as in COSTELLO's MRPC file
    back = read_costello_suite(path)
    keep = ["case_id", "relation", "seed", "positive", "negative", "label"]
    ordered = suite.sort_values(["relation", "case_id"])[keep].reset_index(drop=True)
    pd.testing.assert_frame_equal(back.sort_values(["relation", "case_id"])[keep]
                                  .reset_index(drop=True), ordered)
    assert json.loads(back["provenance"][0])["imported_from"] == str(path)


def test_contrastive_import_of_paper_format(tmp_path):
    path = tmp_path / "mrpc_ct.json"
    path.write_text(json.dumps({"mrpc_fuzz": [["a [SEP] b", "c [SEP] b", "d [SEP] b", 1],
                                              ["x", "y", "z"], ["x", "y", "z"]],
                                "my-own": [["p", "q", "r"]]}))
    got = read_costello_suite(path)
    # COSTELLO's names map to CR1–CR4; a repeated triple is kept (the paper counts it)
    assert list(got["relation"]) == ["CR4", "CR4", "CR4", "my-own"]
    assert got["case_id"].is_unique
    assert json.loads(got["provenance"][2])["duplicate_of"] == 1
    assert json.loads(got["provenance"][0])["relation"] == "mrpc_fuzz"
    assert got["label"][0] == "1" and pd.isna(got["label"][1])
    assert list(got["seed_id"]) == ["mrpc_fuzz:0", "mrpc_fuzz:1", "mrpc_fuzz:2", "my-own:0"]
    table = table1(got).set_index("relation")
    assert table.loc["CR4", "triples"] == 3 and table.loc["CR4", "duplicates"] == 1
    assert table.loc["CR4", "paper_triples"] == 408 and pd.isna(table.loc["my-own", "paper_triples"])


@pytest.mark.parametrize("name,relation", [("SenWordFuzz", "CR1"), ("synon_contr", "CR3"),
                                           ("swapGender_sentiSynonymSubstitution", "CR2")])
def test_contrastive_relation_names_map_to_the_papers(tmp_path, name, relation):
    path = tmp_path / "ctset1.json"
    path.write_text(json.dumps({name: [["a b", "a c", "a d"]]}))
    assert read_costello_suite(path)["relation"].tolist() == [relation]


@pytest.mark.parametrize("content,message", [
    ('{\n  "CR1": [\n    ["a", "b", "c"],\n  ]\n}', r"suite\.json:4: not valid JSON"),
    ('{\n "CR1": [["a", "b", "c"]],\n "CR2": [["a", "b"]]\n}',
     r"suite\.json:3: relation 'CR2', triple 0"),
    ('{"CR1": [["a", "b", "c"], ["a", "b", 3]]}', r"relation 'CR1', triple 1"),
    ('{"CR1": [["a", "b", "c", ["x"]]]}', r"relation 'CR1', triple 0"),
    ('{"CR1": "a b c"}', r"relation 'CR1' holds a str"),
    ('[["a", "b", "c"]]', r"not an object"),
    ('{}', r"no triples"),
    ('{"CR1": []}', r"no triples"),
])
def test_contrastive_import_errors(tmp_path, content, message):
    path = tmp_path / "suite.json"
    path.write_text(content)
    with pytest.raises(InputFormatError, match=message) as info:
        read_costello_suite(path)
    assert "[[seed, positive, negative]" in str(info.value)  # the fix is named


def test_write_refuses_an_empty_suite(suite, tmp_path):
    with pytest.raises(LingtestError, match="no triples"):
        write_costello_suite(suite.iloc[0:0], tmp_path / "empty.json")
    assert not (tmp_path / "empty.json").exists()


def test_cr1_gives_one_triple_per_qualifying_word(suite, tables, nlp, wn, params):
    cr1 = suite[suite["relation"] == "CR1"]
    positions = cr1["provenance"].map(lambda p: json.loads(p)["positive"]["edits"][0]["position"])
    assert not positions.groupby(cr1["seed_id"]).apply(lambda p: p.duplicated().any()).any()
    every = params.model_copy(update={"relations": ["CR1"], "max_seeds": None})
    per_word = generate_suite(tables, nlp, wn, every, SEED)
    per_seed = generate_suite(tables, nlp, wn, every.model_copy(update={"cr1_triples": "seed"}),
                              SEED)
    assert per_seed["seed_id"].is_unique
    assert set(per_seed["seed_id"]) == set(per_word["seed_id"])
    assert len(per_word) > len(per_seed)  # some seeds have two qualifying words


def test_cr3_rewrites_many_words_of_the_review(suite, tables, nlp, wn, params):
    """COSTELLO's s⁺ for CR3 replaces about half the replaceable words, not one."""
    cr3 = suite[suite["relation"] == "CR3"]
    changed = cr3["provenance"].map(lambda p: len(json.loads(p)["positive"]["edits"]))
    assert changed.median() >= 10
    one = generate_suite(tables, nlp, wn, params.model_copy(
        update={"relations": ["CR3"], "synonym_scope": "word"}), SEED)
    single = one["provenance"].map(lambda p: len(json.loads(p)["positive"]["edits"]))
    assert single.max() <= 2  # one word (plus an a/an fix)
    for _, row in cr3.iterrows():
        doc = nlp(row["seed"])
        assert _apply(row["seed"], doc, _prov(row)["positive"]["edits"]) == row["positive"]
