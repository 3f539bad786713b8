"""A test tree's tests as lingtest cases with explicit expectations, and back to the CSV."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from lingtest.tasks.adaptive.cases import (CONTRACT, INVARIANCE, Expectation, cases_to_tree,
                                  parse_expectation, tree_to_cases)
from lingtest.tasks.adaptive.tree import marker_id, parse_tree, read_tree, tree_csv
from lingtest.tasks.core.cases import case_id
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.schema import check_cases

HEADER = ",topic,input,output,label,labeler,description,author,model score"
BINARY = ("neg", "pos")


@pytest.fixture(scope="module")
def hotel(mirror):
    return read_tree(mirror / "adatest" / "imdb_hotel_conversion.csv")


def test_hotel_tree_gives_190_contract_cases(hotel):
    cases = tree_to_cases(hotel, BINARY)
    check_cases(cases, CONTRACT)
    assert len(cases) == 190
    # 126 pass (their output is gold) + 64 fail (the other class is gold)
    passing = hotel.tests[hotel.tests["label"] == "pass"]["output"].value_counts()
    failing = hotel.tests[hotel.tests["label"] == "fail"]["output"].value_counts()
    expected_neg = passing.get("neg", 0) + failing.get("pos", 0)
    assert cases["expectation"].value_counts().to_dict() == {
        "should output neg": expected_neg, "should output pos": 190 - expected_neg}
    row = cases.set_index("tree_id").loc["029c3b23ed7c491bb0f5b35687dd3f8c"]
    assert (row["input"], row["tree_output"], row["tree_label"]) == \
        ("Far from the best beaches", "pos", "fail")
    assert row["expectation"] == "should output neg" and row["topic"] == "/Location"
    assert row.name and row["case_id"] == case_id("adaptive", [row["input"]], row["expectation"])
    assert json.loads(row["tree_extra"]) == {"author": "anonymous",
                                             "model score": "0.8619214039468347"}


def test_cases_back_into_their_tree_are_byte_identical(hotel, mirror):
    cases = tree_to_cases(hotel, BINARY)
    path = mirror / "adatest" / "imdb_hotel_conversion.csv"
    assert tree_csv(cases_to_tree(cases, hotel)).encode("utf-8") == path.read_bytes()
    skeleton = read_tree(mirror / "adatest" / "abstract_capabilities.csv")
    assert tree_to_cases(skeleton).empty
    assert tree_csv(cases_to_tree(tree_to_cases(skeleton), skeleton)) == tree_csv(skeleton)


def test_cases_without_a_base_keep_every_csv_cell(hotel):
    rebuilt = cases_to_tree(tree_to_cases(hotel, BINARY)).frame
    tests = hotel.tests
    assert list(rebuilt.columns) == list(hotel.frame.columns)
    pd.testing.assert_frame_equal(rebuilt.loc[tests.index, tests.columns].astype(object),
                                  tests.astype(object), check_dtype=False)
    markers = rebuilt[rebuilt["label"] == "topic_marker"]
    assert set(markers["topic"]) == {"", "/Rooms", "/Price", "/Facilities", "/Location",
                                     "/Service", "/Facilities/Restaurant", "/Facilities/Pool"}
    assert markers.loc[marker_id("/Facilities"), "labeler"] == "imputed"


def test_failing_test_without_binary_labels_should_not_output():
    tree = parse_tree(HEADER + "\nt1,,Great stay,neg,fail,me,,,\nt2,/A,Awful,neg,pass,me,,,\n"
                      "m,/A,,,topic_marker,me,about A,,\nu,/A,Meh,pos,,imputed,,,\n"
                      "o,/A,Off,pos,off_topic,me,,,\n")
    cases = tree_to_cases(tree)
    check_cases(cases, CONTRACT)
    assert list(cases["expectation"]) == ["should not output neg", "should output neg"]
    assert list(cases["topic"]) == ["/", "/A"]  # the root is "/" in the cases
    assert tree_csv(cases_to_tree(cases, tree)) == tree_csv(tree)


def test_new_cases_become_rows_and_invariance_uses_input_b():
    cases = pd.DataFrame([
        {"case_id": "a" * 16, "method": "adaptive", "topic": "/Negation", "input": "Not bad",
         "input_b": "", "expectation": "should output pos", "provenance": "{}"},
        {"case_id": "b" * 16, "method": "adaptive", "topic": "/Negation/Double",
         "input": "Not unpleasant", "input_b": "", "expectation": "should not output neg",
         "provenance": "{}"},
        {"case_id": "c" * 16, "method": "adaptive", "topic": "/Names", "input": "Anna was rude",
         "input_b": "Omar was rude", "expectation": INVARIANCE, "provenance": "{}"}])
    tree = cases_to_tree(cases)
    frame = tree.frame
    assert list(frame.columns) == ["topic", "input", "output", "label", "labeler",
                                   "description", "input_b"]
    assert frame.loc["a" * 32, ["output", "label"]].tolist() == ["pos", "pass"]
    assert frame.loc["b" * 32, ["output", "label"]].tolist() == ["neg", "fail"]
    assert frame.loc["c" * 32, ["input_b", "label"]].tolist() == ["Omar was rude", ""]
    assert set(frame[frame["label"] == "topic_marker"]["topic"]) == {
        "", "/Negation", "/Negation/Double", "/Names"}
    # read back: the labelled rows are cases again; an invariance row needs a label to be a test
    frame.loc["c" * 32, "label"] = "fail"
    again = tree_to_cases(parse_tree(tree_csv(tree)))
    check_cases(again, CONTRACT)
    assert list(again["expectation"]) == ["should output pos", "should not output neg",
                                          INVARIANCE]
    assert again["input_b"].iloc[2] == "Omar was rude"


def test_expectations_parse_and_bad_ones_are_named():
    assert parse_expectation("should output pos") == Expectation("output", "pos")
    assert parse_expectation("should not output pos") == Expectation("not_output", "pos")
    assert parse_expectation(INVARIANCE).kind == "invariance"
    assert Expectation("not_output", "neg").text == "should not output neg"
    with pytest.raises(LingtestError, match="'must be pos'"):
        parse_expectation("must be pos")


def test_duplicate_tests_and_unlabelled_outputs_are_errors():
    same = parse_tree(HEADER + "\nt1,/A,Nice,pos,pass,me,,,\nt2,/B,Nice,pos,pass,me,,,\n", "d.csv")
    with pytest.raises(LingtestError, match="rows t1 and t2 are the same test"):
        tree_to_cases(same)
    empty = parse_tree(HEADER + "\nt1,/A,Nice,,pass,me,,,\n", "e.csv")
    with pytest.raises(LingtestError, match="e.csv: test row t1 .* has no output"):
        tree_to_cases(empty)
    with pytest.raises(LingtestError, match="binary_labels"):
        tree_to_cases(empty, ("pos", "pos"))
