"""Oracle-reviewed rounds: one round end to end on the mirror's hotel tree with VADER under
test, a labelling rule as the oracle and the fake completions endpoint as the generator."""
from __future__ import annotations

import json

import pytest
from test_adaptive_generators import CompletionsServer

from lingtest.tasks.adaptive.cases import tree_to_cases
from lingtest.tasks.adaptive.generators import HTTPGenerator, SamplingSettings
from lingtest.tasks.adaptive.prompts import PromptSettings
from lingtest.tasks.adaptive.review import (ABSTAIN, ModelOracle, RuleOracle, append_accepted,
                                   not_a_test, prompt_scores, row_id, run_round)
from lingtest.tasks.adaptive.tree import read_tree, tree_csv
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.llm import LLMSettings
from lingtest.tasks.models.sentiment import VaderModel

ROUND_LINES = ("The towels were dirty", "Sheets didn't seem clean", "The weather was nice",
               "Room smelled like smoke", "Great view from the balcony",
               "Room smelled like smoke")


def round_script(prompt: str, n: int, seed: int) -> list[str]:
    """Prompt k (seed 7 + k) gets lines 3k .. 3k+2."""
    return [ROUND_LINES[((seed - 7) * 3 + k) % len(ROUND_LINES)] for k in range(n)]


def hotel_rule(topic: str, text: str) -> str | None:
    """The expected sentiment of a hotel-review snippet; weather is off topic."""
    words = text.lower()
    if "weather" in words:
        return None
    return "neg" if any(w in words for w in ("dirty", "didn't", "smoke", "noisy")) else "pos"


@pytest.fixture()
def hotel(mirror):
    return read_tree(mirror / "adatest" / "imdb_hotel_conversion.csv")


def test_one_oracle_round_end_to_end(hotel, tmp_path):
    before = tree_csv(hotel)
    out = tmp_path / "hotel.csv"
    with CompletionsServer(script=round_script) as server:
        generator = HTTPGenerator("gpt-test", server.url, sampling=SamplingSettings(),
                                  settings=LLMSettings(retries=0, timeout_s=5.0))
        result = run_round(hotel, "/Rooms", generator, RuleOracle("hotel-rule", hotel_rule),
                           [VaderModel()], round_no=1, seed=7, prompts=2, completions=3,
                           settings=PromptSettings(prompt_diversity=False), path=out,
                           binary_labels=("neg", "pos"))
    assert len(server.generations()) == 2
    # 6 generated; a repeat and a test /Rooms holds dropped; weather off topic
    assert result.counts == {"round": 1, "topic": "/Rooms", "generator": "openai:gpt-test",
                             "oracle": "oracle:hotel-rule", "generated": 6, "shown": 4,
                             "off_topic": 1, "abstained": 0, "accepted": 3, "failures": 1}
    review = result.suggestions
    assert review["input"].iloc[0] == "Room smelled like smoke"  # VADER's worst first
    assert review["vader verdict"].iloc[0] == "fail"
    assert list(review["review"]) == ["accepted"] * 3 + ["off_topic"]
    assert review["input"].iloc[3] == "The weather was nice"

    grown = result.tree
    assert tree_csv(hotel) == before  # the input tree is not changed in place
    frame = grown.frame
    new = frame.loc[[row_id("/Rooms", t) for t in ("Room smelled like smoke",
                                                   "The towels were dirty",
                                                   "Great view from the balcony")]]
    assert list(new["labeler"].unique()) == ["oracle:hotel-rule"]
    assert list(new["output"]) == ["neg", "neg", "pos"] and set(new["label"]) == {"pass"}
    provenance = json.loads(new["provenance"].iloc[0])
    assert provenance["round"] == 1 and provenance["generator"] == "openai:gpt-test"
    assert provenance["seed"] in (7, 8) and len(provenance["prompt_id"]) == 12
    assert float(new["vader score"].iloc[0]) == pytest.approx(1 - 0.0)  # P(neg) = 0
    # human rows untouched, provenance empty for them
    human = frame.loc[hotel.frame.index]
    assert (human["labeler"] == hotel.frame["labeler"]).all()
    assert (human["provenance"] == "").all()
    # written by tree.py, and the grown tree reads back as 190 + 3 cases
    assert read_tree(out).frame.equals(frame)
    cases = tree_to_cases(read_tree(out), ("neg", "pos"))
    assert len(cases) == 193


def test_failures_only_and_a_model_oracle(hotel):
    reference = VaderModel(neutral_band=(0.5, 0.5))
    reference.model_id = "vader-reference"
    with CompletionsServer(script=round_script) as server:
        generator = HTTPGenerator("gpt-test", server.url, settings=LLMSettings(retries=0))
        result = run_round(hotel, "/Rooms", generator, ModelOracle(reference),
                           [VaderModel()], seed=7, prompts=2, completions=3,
                           settings=PromptSettings(prompt_diversity=False), accept="failures")
    # VADER agrees with itself on every polar answer: no failure to accept
    assert result.counts["off_topic"] == 0 and result.counts["shown"] == 4
    assert result.counts["accepted"] == result.counts["failures"] == 0
    assert len(result.tree.frame) == len(hotel.frame)


def test_an_oracle_never_overwrites_a_human_label(hotel):
    human_id = "02076434c5fc4a389f127e542c479c64"  # "Sheets didn't seem clean", anonymous
    row = {"topic": "/Rooms", "input": "Sheets didn't seem clean", "output": "pos",
           "label": "pass", "labeler": "oracle:x"}
    grown, written = append_accepted(hotel, {human_id: row})
    assert written == [] and grown.frame.loc[human_id, "output"] == "neg"
    oracle_id = row_id("/Rooms", "Pillows were thin")
    grown, written = append_accepted(hotel, {oracle_id: {**row, "input": "Pillows were thin"}})
    again, rewritten = append_accepted(grown, {oracle_id: {**row, "input": "Pillows were thin",
                                                            "output": "neg"}})
    assert written == rewritten == [oracle_id]
    assert again.frame.loc[oracle_id, "output"] == "neg"  # an oracle row may be re-reviewed


def test_bad_round_settings(hotel):
    with pytest.raises(LingtestError, match="topic 'Rooms' does not start"):
        run_round(hotel, "Rooms", None, None, [VaderModel()])
    with pytest.raises(LingtestError, match="accept='some'"):
        run_round(hotel, "/Rooms", None, None, [VaderModel()], accept="some")


def test_prompt_scores_come_from_the_first_model(hotel):
    scores = dict(zip(hotel.frame.index, prompt_scores(hotel, VaderModel(), ("neg", "pos"))))
    # "One star service for a four star price": fail row, expects neg; VADER P(neg) = 0
    assert scores["0ba15c3386e34777bfb4906394f15b82"] == 1.0
    # "Expensive for what you get": tree's "model score" 0.0, VADER's differs
    assert scores["04189a46ab1642789a5f59fb5a758e29"] > 0.0
    assert scores["00f2dfd40977438f9942793768959e8a"] == 0.0  # the root marker


SUGGESTIONS = ["Pins", "very very very nice room", "The room was filthy and the staff were rude",
               "The room has a desk", "Great view from the balcony"]


def test_a_model_oracle_abstains_when_unsure_and_on_inputs_that_are_not_tests():
    """VADER's probability of the label it gives: 0.273 neg, 1.0 neutral, 0.506 pos here.
    One word and a word three times in a row are never labelled, however sure the model."""
    vader = VaderModel()
    assert ModelOracle(vader, 0.0).expect("/Rooms", SUGGESTIONS) == \
        [ABSTAIN, ABSTAIN, "neg", "neutral", "pos"]
    assert ModelOracle(vader, 0.5).expect("/Rooms", SUGGESTIONS) == \
        [ABSTAIN, ABSTAIN, ABSTAIN, "neutral", "pos"]
    assert ModelOracle(vader).expect("/Rooms", SUGGESTIONS) == \
        [ABSTAIN, ABSTAIN, ABSTAIN, "neutral", ABSTAIN]
    assert not_a_test("Sheets didn't seem clean") is None
    assert not_a_test("10/10 !!") == "fewer than two words"
    with pytest.raises(LingtestError, match="min_confidence=1.5"):
        ModelOracle(vader, 1.5)


def test_an_abstaining_oracle_drops_the_suggestion_from_the_tree(hotel):
    """The round lists abstentions in its review table and counts them apart from off topic."""
    with CompletionsServer(script=round_script) as server:
        generator = HTTPGenerator("gpt-test", server.url, settings=LLMSettings(retries=0))
        result = run_round(hotel, "/Rooms", generator, ModelOracle(VaderModel(), 0.9),
                           [VaderModel()], seed=7, prompts=2, completions=3,
                           settings=PromptSettings(prompt_diversity=False))
    review = result.suggestions.set_index("input")["review"]
    abstained = set(review[review.eq("abstained")].index)
    assert result.counts["abstained"] == len(abstained) > 0
    assert result.counts["accepted"] == int(review.eq("accepted").sum())
    assert not abstained & set(result.tree.frame["input"])


def test_topic_membership_on_the_hotel_tree(hotel):
    """Real MiniLM on the mirrored tree: a room complaint belongs to /Rooms, a pool one to
    /Facilities (and not to /Rooms), word salad to no topic; a model oracle given the
    membership calls the outsiders off topic (None)."""
    from lingtest.tasks.adaptive.membership import TopicMembership
    from lingtest.tasks.adaptive.prompts import minilm_embed

    membership = TopicMembership(hotel, minilm_embed())
    texts = ["Room was small but intimate", "The pool water was freezing",
             "Forked shape", "Cutie know what it means to be consumed by gold"]
    assert membership.on_topic("/Rooms", texts).tolist() == [True, False, False, False]
    assert membership.on_topic("/Facilities", texts).tolist() == [False, True, False, False]
    assert membership.on_topic("/Nowhere", texts).all()  # no tests there: cannot judge
    oracle = ModelOracle(VaderModel(), 0.0, membership)
    assert oracle.expect("/Rooms", texts)[1:] == [None, None, None]


def test_round_two_prompts_read_the_models_scores_of_every_test(hotel):
    """After a round only the new rows carry a ``vader score``; the prompt builder must still
    read VADER's own failure score of every original test, not its pass/fail label (judged
    against another model): on /Rooms 33 of 47 tests differed by more than 0.2 before."""
    from lingtest.tasks.adaptive.scoring import score_cases

    with CompletionsServer(script=round_script) as server:
        generator = HTTPGenerator("gpt-test", server.url, settings=LLMSettings(retries=0))
        grown = run_round(hotel, "/Rooms", generator, RuleOracle("hotel-rule", hotel_rule),
                          [VaderModel()], seed=7, prompts=2, completions=3,
                          settings=PromptSettings(prompt_diversity=False),
                          binary_labels=("neg", "pos")).tree
    assert (grown.frame["vader score"] != "").sum() == 3  # the round's rows only
    cases = tree_to_cases(hotel, ("neg", "pos"))
    actual = dict(zip(cases["tree_id"], score_cases(cases, VaderModel())["score"]))
    prompt = dict(zip(grown.frame.index, prompt_scores(grown, VaderModel(), ("neg", "pos"))))
    rooms = [i for i in hotel.tests.index if hotel.frame.at[i, "topic"] == "/Rooms"]
    assert len(rooms) == 47
    assert [i for i in rooms if abs(prompt[i] - actual[i]) > 1e-9] == []
    sheets = "02076434c5fc4a389f127e542c479c64"  # "Sheets didn't seem clean", a pass row
    assert prompt[sheets] == pytest.approx(actual[sheets]) and prompt[sheets] > 0.5


def test_prompt_scores_take_a_test_that_two_topics_hold(hotel):
    """A reviewer may file an input that another topic holds with the same label; the next
    round's prompts still score every row (the cases' one-case-per-test rule is the stages')."""
    sheets = "02076434c5fc4a389f127e542c479c64"  # /Rooms: "Sheets didn't seem clean", neg
    twice, _ = append_accepted(hotel, {"copy": {**hotel.frame.loc[sheets].to_dict(),
                                                "topic": "/Service", "labeler": "oracle:x"}})
    with pytest.raises(LingtestError, match="are the same test"):
        tree_to_cases(twice, ("neg", "pos"))
    scores = dict(zip(twice.frame.index, prompt_scores(twice, VaderModel(), ("neg", "pos"))))
    assert scores["copy"] == scores[sheets] > 0.5
