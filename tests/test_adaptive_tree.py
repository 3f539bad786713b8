"""AdaTest CSV test trees: lossless reading and writing, and clear errors on malformed files."""
from __future__ import annotations

import pytest

from lingtest.tasks.adaptive.tree import (ensure_topic_markers, is_subtopic, marker_id, parent_topics,
                                 parse_tree, read_tree, topic_name, tree_csv, write_tree)
from lingtest.tasks.core.errors import InputFormatError

HEADER = ",topic,input,output,label,labeler,description"


@pytest.mark.parametrize("name, rows, tests", [("imdb_hotel_conversion.csv", 198, 190),
                                               ("abstract_capabilities.csv", 138, 0)])
def test_mirror_trees_round_trip_byte_identical(mirror, tmp_path, name, rows, tests):
    path = mirror / "adatest" / name
    tree = read_tree(path)
    assert len(tree.frame) == rows and len(tree.tests) == tests
    assert tree.score_columns == ["model score"]
    out = write_tree(tree, tmp_path / name)
    assert out.read_bytes() == path.read_bytes()


def test_mirror_tree_cells_stay_text(mirror):
    tree = read_tree(mirror / "adatest" / "imdb_hotel_conversion.csv")
    frame = tree.frame
    assert list(frame.columns) == ["topic", "input", "output", "label", "labeler",
                                   "description", "author", "model score"]
    assert frame.index[0] == "00f2dfd40977438f9942793768959e8a"
    assert frame.loc["04189a46ab1642789a5f59fb5a758e29", "model score"] == "0.0"  # not 0.0
    assert frame.loc["00f2dfd40977438f9942793768959e8a", "topic"] == ""  # root, not NaN
    assert tree.frame["label"].value_counts().to_dict() == {"pass": 126, "fail": 64,
                                                           "topic_marker": 8}


def test_crlf_multiline_inputs_unknown_labels_and_extra_columns_survive():
    text = (HEADER + ",author,test_ids,vader score\r\n"
            "m1,/A%20B,,,topic_marker,anonymous,Things about A B,,,\r\n"
            't1,/A%20B,"two\r\nlines, and a comma",pos,Unknown,imputed,,me,"[1, 2]",\r\n'
            "t2,,NA,,,imputed,,,,0.5|0.25\r\n")
    tree = parse_tree(text, "t.csv")
    assert tree.lineterminator == "\r\n"
    assert tree.frame.loc["t1", "input"] == "two\r\nlines, and a comma"
    assert tree.frame.loc["t2", "input"] == "NA"  # no NA conversion
    assert tree.description("/A%20B") == "Things about A B"
    assert topic_name("/A%20B") == "A B"
    assert tree_csv(tree) == text


@pytest.mark.parametrize("text, line, words", [
    ("", 1, "empty"),
    (",topic,input,label\nx,/A,hi,pass\n", 1, "'output'"),
    (HEADER + "\na,/A,x,pos,pass,u,\nb,/A,x,pos,pass,u,,extra\n", 3, "well-formed"),
    (HEADER + '\na,/A,"two\nlines",pos,pass,u,\nb,/A,x,pos,maybe,u,\n', 4, "label 'maybe'"),
    (HEADER + "\na,/A,x,pos,pass,u,\nb,/A,y,pos,pass,u,\na,/A,z,pos,fail,u,\n", 4,
     "repeats the row on line 2"),
    (HEADER + "\na,Rooms,x,pos,pass,u,\n", 2, "does not start with '/'"),
    (HEADER + "\na,/A//B,x,pos,pass,u,\n", 2, "empty path part"),
    (HEADER + "\n,/A,x,pos,pass,u,\n", 2, "no id"),
])
def test_malformed_files_name_file_line_and_fix(tmp_path, text, line, words):
    path = tmp_path / "bad.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFormatError) as caught:
        read_tree(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert words in message and "(" in message  # the fix comes in parentheses


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(InputFormatError, match="no such test tree file"):
        read_tree(tmp_path / "absent.csv")


def test_topic_paths():
    assert parent_topics("/A/B") == ["", "/A", "/A/B"]
    assert is_subtopic("/A", "/A/B") and is_subtopic("", "/A") and is_subtopic("/A", "/A")
    assert not is_subtopic("/A", "/AB")


def test_ensure_topic_markers_adds_missing_ancestors_with_stable_ids():
    tree = parse_tree(HEADER + "\nm,/A,,,topic_marker,u,desc\nt,/A/B,x,pos,pass,u,\n")
    frame = ensure_topic_markers(tree.frame)
    added = frame.iloc[2:]
    assert list(added["topic"]) == ["", "/A/B"]
    assert list(added.index) == [marker_id(""), marker_id("/A/B")]
    assert set(added["label"]) == {"topic_marker"} and set(added["labeler"]) == {"imputed"}
    assert frame.loc["m", "description"] == "desc"
