"""``lingtest review``'s session without a browser: a copy of the mirror's hotel tree, VADER
under test, the scripted completions endpoint as generator. Each change is on disk at once,
in AdaTest's layout, and undo puts the file back byte for byte."""
from __future__ import annotations

import json
import shutil

import pytest
from test_adaptive_generators import CompletionsServer
from test_adaptive_review_flow import ROOM_LINES, room_script

from lingtest.tasks.adaptive.generators import HTTPGenerator
from lingtest.tasks.adaptive.prompts import PromptSettings
from lingtest.tasks.adaptive.review_app.session import ReviewSession, ReviewSettings
from lingtest.tasks.adaptive.tree import read_tree, tree_csv
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.llm import LLMSettings
from lingtest.tasks.models.sentiment import VaderModel

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


SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def minilm_root(tmp_path_factory, table):
    """A project root holding ``lingtest/minilm-sst2``: the checkout's trained one when the
    train-sentiment stage has run there, else a tiny fine-tuning (32 SST sentences, one
    epoch: ~25 s; a clean checkout has none)."""
    from lingtest.tasks.core.paths import PACKAGE_ROOT
    from lingtest.tasks.models.sentiment import MINILM_SST2_DIR, MINILM_CONFIG
    from lingtest.tasks.training.sentiment import train_minilm_sst2

    root = tmp_path_factory.mktemp("minilm-root")
    (root / MINILM_SST2_DIR).parent.mkdir(parents=True)
    trained = PACKAGE_ROOT / MINILM_SST2_DIR
    if (trained / MINILM_CONFIG).is_file():
        (root / MINILM_SST2_DIR).symlink_to(trained)
    else:
        train_minilm_sst2(table("sst"), root / MINILM_SST2_DIR, seed=3, epochs=1,
                          max_train=32, max_test=8, batch_size=32, threads=1)
    return root


def two_model_session(path, server, root) -> ReviewSession:
    """VADER driving, MiniLM-SST2 beside it; the scripted endpoint and SmolLM2 to choose."""
    from lingtest.tasks.adaptive.generators import LocalGenerator
    from lingtest.tasks.models.sentiment import load_sentiment_model

    review = ReviewSettings(reviewer="ada", seed=7, prompts=2, completions=4,
                            binary_labels=HOTEL,
                            prompt_settings=PromptSettings(prompt_diversity=False))
    generators = {f"openai:{name}": (lambda name=name: HTTPGenerator(
        name, server.url, settings=LLMSettings(retries=0))) for name in ("gpt-test", "gpt-b")}
    generators[SMOLLM2] = lambda: LocalGenerator(SMOLLM2)
    minilm = load_sentiment_model("lingtest/minilm-sst2", root=root)
    return ReviewSession(path, [VaderModel(), minilm], generators, review)


def test_switching_the_driving_model_reranks_and_gives_the_filed_output(
        hotel_copy, completions, minilm_root):
    session = two_model_session(hotel_copy, completions, minilm_root)
    session.suggest("/Rooms")
    view = session.view("/Rooms")
    assert (view["driving"], view["model_ids"]) == ("vader", ["vader", "lingtest/minilm-sst2"])
    by_vader = [s["input"] for s in view["suggestions"]]
    session.choose(model="lingtest/minilm-sst2")
    view = session.view("/Rooms")
    assert view["driving"] == "lingtest/minilm-sst2"
    assert view["model_ids"] == ["vader", "lingtest/minilm-sst2"]  # the menu keeps its order
    shown = view["suggestions"]
    assert [m["id"] for m in shown[0]["models"]] == ["lingtest/minilm-sst2", "vader"]
    scores = [s["models"][0]["score"] for s in shown]
    assert scores == sorted(scores, reverse=True) and sorted(by_vader) == sorted(
        s["input"] for s in shown)
    assert [s["input"] for s in shown] != by_vader  # the two models rank them differently
    rid = session.accept("/Rooms", shown[-1]["sid"], "pass")
    minilm = session.models[0]
    assert read_tree(hotel_copy).frame.at[rid, "output"] == minilm.predict(
        [shown[-1]["input"]])[0]
    with pytest.raises(LingtestError, match="choose one of vader, lingtest/minilm-sst2"):
        session.choose(model="roberta")
    with pytest.raises(LingtestError, match=f"one of openai:gpt-test, openai:gpt-b, {SMOLLM2}"):
        session.choose(generator="gpt-5")


def test_subtopic_names_from_the_chosen_generator_each_created_in_one_call(
        hotel_copy, completions, minilm_root):
    session = two_model_session(hotel_copy, completions, minilm_root)
    assert session._loaded == {}  # generators load on first use
    session.choose(generator=SMOLLM2)
    names = session.suggest_topics("/Facilities")
    assert list(session._loaded) == [SMOLLM2]
    # the names of the session's first round: the seeded generator's, cleaned, at most 10
    from lingtest.tasks.adaptive.topic_suggestions import suggest_topic_names

    again = suggest_topic_names(session.tree, "/Facilities", session.load_generator(SMOLLM2),
                                session.settings.seed, ["Restaurant", "Pool"], 10,
                                settings=session.settings.prompt_settings,
                                embed=session.embed if session.settings.prompt_settings
                                .prompt_diversity else None)
    assert names == again and names and len({n.casefold() for n in names}) == len(names)
    assert not {"restaurant", "pool"} & {n.casefold() for n in names}  # existing subtopics
    assert all(n and "/" not in n and len(n) <= 40 for n in names)
    assert session.view("/Facilities")["topic_names"] == names
    path = session.create_topic("/Facilities", names[0])
    assert path in read_tree(hotel_copy).topics()
    assert session.view("/Facilities")["topic_names"] == names[1:]
    # a round of tests comes from the generator chosen then (two named on one endpoint)
    session.choose(generator="openai:gpt-b")
    session.suggest("/Rooms")
    assert set(session.suggestions["/Rooms"]["generator"]) == {"openai:gpt-b"}
    assert list(session._loaded) == [SMOLLM2, "openai:gpt-b"]


def test_a_second_round_for_the_same_topic_is_refused_while_one_runs(hotel_copy, completions):
    import threading

    from fastapi.testclient import TestClient

    from lingtest.tasks.adaptive.review_app.app import create_app

    session = session_on(hotel_copy, completions)
    release, entered = threading.Event(), threading.Event()
    real = session.load_generator("generator")

    class Held:  # the scripted generator, held open until the second request is answered
        generator_id = real.generator_id

        def complete(self, prompts, n, seed):
            entered.set()
            release.wait(30)
            return real.complete(prompts, n, seed)

    session._loaded["generator"] = Held()
    client = TestClient(create_app(session))
    first = threading.Thread(target=lambda: client.post("/api/suggest",
                                                        json={"topic": "/Rooms"}))
    first.start()
    assert entered.wait(30)
    second = client.post("/api/suggest", json={"topic": "/Rooms"})
    assert second.status_code == 400
    assert "suggestions for Rooms are being made already" in second.json()["error"]
    release.set()
    first.join(30)
    assert session.rounds == {"/Rooms": 1} and len(session.suggestions["/Rooms"]) == 8
    assert client.post("/api/suggest", json={"topic": "/Rooms"}).status_code == 200
    assert session.rounds == {"/Rooms": 2}  # once the first is done, the next is welcome
    refused = client.post("/api/choose", json={"model": "roberta"})
    assert refused.status_code == 400 and "choose one of vader" in refused.json()["error"]


def test_the_tree_is_found_from_the_current_folder_then_the_project_root(tmp_path,
                                                                        monkeypatch):
    from lingtest.tasks.adaptive.cli import _review_tree
    from lingtest.tasks.core.paths import Workspace

    root, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    for folder in (root / "inputs", elsewhere / "inputs"):
        folder.mkdir(parents=True)
        (folder / "t.csv").write_text(str(folder))
    monkeypatch.chdir(elsewhere)
    workspace = Workspace(root)
    assert _review_tree("inputs/t.csv", workspace) == (elsewhere / "inputs" / "t.csv").resolve()
    (elsewhere / "inputs" / "t.csv").unlink()
    assert _review_tree("inputs/t.csv", workspace) == (root / "inputs" / "t.csv").resolve()
    (root / "inputs" / "t.csv").unlink()
    with pytest.raises(LingtestError) as refused:
        _review_tree("inputs/t.csv", workspace)
    assert f"no tree at {elsewhere / 'inputs/t.csv'} nor {root / 'inputs/t.csv'}" in str(
        refused.value)


# ------------------------------------------------------------------ the models it starts with

LEFT_OUT = ("lingtest review: lingtest/minilm-sst2 left out: not trained yet; add it with "
            "`lingtest run train-sentiment`")


@pytest.fixture()
def untrained(mirror, tmp_path):
    """A project as a fresh clone has it after its data stage: the hotel tree under
    inputs/adaptive/, no trained lingtest/minilm-sst2."""
    from lingtest.tasks.core.paths import PACKAGE_ROOT

    root = tmp_path / "lingtest"
    (root / "inputs" / "adaptive").mkdir(parents=True)
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    shutil.copy(mirror / "adatest" / "imdb_hotel_conversion.csv",
                root / "inputs" / "adaptive" / "hotel.csv")
    return root


@pytest.mark.timeout(300)
def test_review_as_documented_starts_without_the_trained_classifier(untrained, mirror,
                                                                   prefect_harness):
    """The docs' `lingtest review` with its defaults before `train-sentiment` has run: VADER
    alone, one line naming the classifier left out and how to add it."""
    import re

    import httpx
    from commands import started, user_env
    from prefect.settings import PREFECT_API_URL

    env = user_env(mirror, PREFECT_API_URL=PREFECT_API_URL.value())
    with started("lingtest review inputs/adaptive/hotel.csv --reviewer ada", untrained, env,
                 "(Ctrl-C stops)", timeout_s=240) as log:
        output = log.read_text()
        url = re.search(r" at (http://127\.0\.0\.1:\d+/) ", output).group(1)
        assert httpx.post(url + "api/choose", json={"model": "vader"}).status_code == 200
        refused = httpx.post(url + "api/choose", json={"model": "lingtest/minilm-sst2"})
    assert refused.status_code == 400 and "choose one of vader " in refused.json()["error"]
    assert LEFT_OUT in output.splitlines(), output
    assert "Traceback" not in output and "error" not in output, output


def test_a_model_named_with_model_must_load_and_none_loading_is_one_error(
        untrained, monkeypatch, capsys):
    from bad_input_harness import lingtest

    monkeypatch.chdir(untrained)
    named = ["review", "inputs/adaptive/hotel.csv", "--model", "lingtest/minilm-sst2"]
    status, output, _ = lingtest(named, monkeypatch, capsys)
    assert status == 2 and "lingtest: error: --model: model `lingtest/minilm-sst2` is " \
        "missing" in output, output
    params = untrained / "params.yaml"
    head, adaptive = params.read_text().split("\nadaptive:")
    params.write_text(head + "\nadaptive:" + adaptive.replace(
        "models: [lingtest/minilm-sst2, vader]", "models: [lingtest/minilm-sst2]", 1))
    status, output, _ = lingtest(named[:2], monkeypatch, capsys)
    assert status == 2 and output.strip().splitlines() == [
        "lingtest: error: lingtest review: no model of adaptive.models loads here: "
        + LEFT_OUT.removeprefix("lingtest review: ")
        + "; or name one with --model, e.g. --model vader"], output
