"""``lingtest review``'s session without a browser: a copy of the mirror's hotel tree, VADER
under test, the scripted completions endpoint as generator. Each change is on disk at once,
in AdaTest's layout, and undo puts the file back byte for byte."""
from __future__ import annotations

import json
import shutil

import pytest
from test_adaptive_generators import CompletionsServer
from test_adaptive_review_flow import ROOM_LINES, room_script

from tasks.adaptive.generators import HTTPGenerator
from tasks.adaptive.prompts import PromptSettings
from tasks.adaptive.review_app.session import ReviewSession, ReviewSettings
from tasks.adaptive.tree import read_tree, tree_csv
from tasks.core.errors import LingtestError
from tasks.models.llm import LLMSettings
from tasks.models.sentiment import VaderModel

HOTEL = ("neg", "pos")


@pytest.fixture()
def hotel_copy(mirror, tmp_path):
    return shutil.copy(mirror / "adatest" / "imdb_hotel_conversion.csv", tmp_path / "hotel.csv")


@pytest.fixture()
def completions():
    with CompletionsServer(script=room_script) as server:
        yield server


def session_on(path, server, **settings) -> ReviewSession:
    review = ReviewSettings(reviewer="ada", seed=7, prompts=2, completions=4,
                            binary_labels=HOTEL,
                            prompt_settings=PromptSettings(prompt_diversity=False), **settings)
    return ReviewSession(path, [VaderModel()], lambda: HTTPGenerator(
        "gpt-test", server.url, settings=LLMSettings(retries=0)), review)


def test_a_suggestion_filed_in_one_call_is_on_disk_and_undo_restores_the_bytes(
        hotel_copy, completions):
    before = hotel_copy.read_bytes()
    session = session_on(hotel_copy, completions)
    assert session.suggest("/Rooms") == 8  # 2 prompts × 4 completions, all new
    shown = session.view("/Rooms")["suggestions"]
    scores = [s["models"][0]["score"] for s in shown]
    assert scores == sorted(scores, reverse=True)
    assert {s["input"] for s in shown} == set(ROOM_LINES[:4] + ROOM_LINES[12:16])
    top = shown[0]
    rid = session.accept("/Rooms", top["sid"], "fail")
    tree = read_tree(hotel_copy)
    row = tree.frame.loc[rid]
    assert (row["topic"], row["input"], row["label"], row["labeler"]) == \
        ("/Rooms", top["input"], "fail", "ada")
    assert row["output"] == VaderModel().predict([top["input"]])[0]
    provenance = json.loads(row["provenance"])
    assert provenance["round"] == 1 and provenance["generator"] == "openai:gpt-test"
    assert provenance["seed"] in (7, 8) and len(provenance["prompt_id"]) == 12
    assert top["sid"] not in {s["sid"] for s in session.view("/Rooms")["suggestions"]}
    # the filed test is listed with its failure score: a fail row asks for the other class
    listed = {t["id"]: t for t in session.view("/Rooms")["tests"]}[rid]
    assert listed["models"][0]["verdict"] == "fail" and listed["models"][0]["score"] > 0.5
    assert tree_csv(tree) == hotel_copy.read_text()  # round trip
    assert session.undo().startswith("file ")
    assert hotel_copy.read_bytes() == before


def test_edit_write_expect_move_rename_create_delete(hotel_copy, completions):
    session = session_on(hotel_copy, completions)
    session.suggest("/Rooms")
    first = session.view("/Rooms")["suggestions"][0]
    edited = session.accept("/Rooms", first["sid"], "pass", text="  The room was filthy  ")
    row = read_tree(hotel_copy).frame.loc[edited]
    assert row["input"] == "The room was filthy"
    assert json.loads(row["provenance"])["edited_from"] == first["input"]
    second = session.view("/Rooms")["suggestions"][0]
    off = session.accept("/Rooms", second["sid"], "off_topic")
    row = read_tree(hotel_copy).frame.loc[off]
    assert (row["input"], row["label"], row["labeler"]) == (second["input"], "off_topic", "ada")
    assert off not in session.scored_tests().index  # an off-topic row is no test
    preview = session.preview("/Rooms", "The bathroom was disgusting")
    assert [m["id"] for m in preview] == ["vader"] and 0 <= preview[0]["score"] <= 1
    written = session.add_test("/Rooms", "The bathroom was disgusting", "pass")
    assert json.loads(read_tree(hotel_copy).frame.at[written, "provenance"]) == {"written": True}
    sheets = "02076434c5fc4a389f127e542c479c64"  # "Sheets didn't seem clean": expects neg
    session.set_expected(sheets, "pos")
    tree = read_tree(hotel_copy)
    assert tuple(tree.frame.loc[sheets, ["output", "label", "labeler"]]) == ("pos", "pass", "ada")
    session.move(sheets, "/Service")
    session.create_topic("/Rooms", "Bath rooms")
    assert "/Rooms/Bath%20rooms" in read_tree(hotel_copy).topics()
    session.move(written, "/Rooms/Bath%20rooms")
    assert session.rename_topic("/Rooms", "Bedrooms") == "/Bedrooms"
    tree = read_tree(hotel_copy)
    assert tree.frame.at[written, "topic"] == "/Bedrooms/Bath%20rooms"
    assert tree.frame.at[sheets, "topic"] == "/Service"
    assert not any(t == "/Rooms" or t.startswith("/Rooms/") for t in tree.topics())
    session.delete_topic("/Bedrooms/Bath%20rooms")
    assert written not in read_tree(hotel_copy).frame.index
    session.delete(sheets)
    assert sheets not in read_tree(hotel_copy).frame.index
    assert session.undo() == "delete \"Sheets didn't seem clean\""
    assert sheets in read_tree(hotel_copy).frame.index
    assert tree_csv(read_tree(hotel_copy)) == hotel_copy.read_text()


def test_refusals_name_the_problem(hotel_copy, completions):
    session = session_on(hotel_copy, completions)
    before = hotel_copy.read_bytes()
    with pytest.raises(LingtestError, match="exists already"):
        session.rename_topic("/Rooms", "Service")
    with pytest.raises(LingtestError, match="without '/'"):
        session.create_topic("/Rooms", "a/b")
    with pytest.raises(LingtestError, match="not shown any more"):
        session.accept("/Rooms", "9-9", "fail")
    with pytest.raises(LingtestError, match="verdict 'maybe'"):
        session.add_test("/Rooms", "A fine room", "maybe")
    with pytest.raises(LingtestError, match="empty input"):
        session.add_test("/Rooms", "   ", "fail")
    with pytest.raises(LingtestError, match="no topic '/Nowhere'"):
        session.view("/Nowhere")
    with pytest.raises(LingtestError, match="nothing to undo"):
        session.undo()
    with pytest.raises(LingtestError, match="--completions 0"):
        ReviewSettings(completions=0)
    assert hotel_copy.read_bytes() == before
