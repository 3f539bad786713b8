"""AdaTest's prompt builder: topic weights, the greedy pick worked by hand, seeding, format."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from lingtest.tasks.adaptive.prompts import (PromptItem, PromptSettings, build_prompts, prompt_texts,
                                    score_max, suggestion_plan, topic_weights)
from lingtest.tasks.adaptive.tree import new_tree, read_tree
from lingtest.tasks.core.errors import LingtestError

# id, topic, input, label, score; a3's input embeds close to a1's (cosine 0.8)
ROWS = [("mA", "/A", "", "topic_marker", ""), ("a1", "/A", "a one", "fail", "0.9"),
        ("a2", "/A", "a two", "fail", "0.5"), ("a3", "/A", "a three", "fail", "0.8"),
        ("b1", "/A/B", "b one", "fail", "1.0"), ("b2", "/A/B", "b two", "fail", "0.8"),
        ("c1", "/A/C", "c one", "fail", "0.6"), ("d1", "/D", "d one", "fail", "1.0"),
        ("d2", "/D", "d two", "fail", "0.9"), ("e1", "/E", "e one", "fail", "0.3")]
EXACT = PromptSettings(slot_randomization=0.0, score_randomization=0.0, skip_randomization=0.0)


@pytest.fixture(scope="module")
def small_tree():
    rows = [{"topic": t, "input": i, "output": "" if label == "topic_marker" else "pos",
             "label": label, "labeler": "me", "description": "", "model score": s}
            for _, t, i, label, s in ROWS]
    return new_tree(rows, [r[0] for r in ROWS])


def one_hot_embed(texts):
    """Each distinct text its own axis, but 'a three' = 0.8 'a one' + 0.6 its own axis; all
    outputs are 'pos', so two tests' similarity is (cos of inputs + 1) / 2: 0.5, or 0.9 for
    a1 and a3."""
    axes = {"a one": 0, "pos": 1, "": 2}
    out = np.zeros((len(texts), 16))
    for row, text in enumerate(texts):
        if text == "a three":
            out[row, [0, 15]] = (0.8, 0.6)
        else:
            out[row, axes.setdefault(text, len(axes))] = 1.0
    return out


def hashed_embed(texts):
    return np.array([np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8)
                     for t in texts], dtype=float) - 127.5


class ScriptedRng:
    """A stand-in Generator: zero noise, no random slots, the given skip draws."""

    def __init__(self, skip_draws):
        self.skip_draws = list(skip_draws)

    def random(self, size=None):
        return np.zeros(size) if size is not None else self.skip_draws.pop(0)

    def binomial(self, n, p):
        return 0


def test_topic_weights_worked_by_hand():
    topics = ["", "/A", "/A", "/A/B", "/A/C", "/AB", "/D", "/A/__suggestions__"]
    labels = ["pass", "fail", "topic_marker", "fail", "pass", "fail", "fail", ""]
    # focus /A: /A* x100 (a plain prefix, so /AB too), /A itself x100 more; 1e4 is the max
    assert topic_weights(topics, labels, "/A") == pytest.approx(
        [1e-4, 1, 0, 1e-2, 1e-2, 1e-2, 1e-4, 0])
    # focus /A/B: /A* x100, /A/B* x100, /A/B x100 -> 1e6 max
    assert topic_weights(topics, labels, "/A/B") == pytest.approx(
        [1e-6, 1e-4, 0, 1, 1e-4, 1e-4, 1e-6, 0])
    # the root: only its own tests x100
    assert topic_weights(topics, labels, "") == pytest.approx([1, .01, 0, .01, .01, .01, .01, 0])


def test_greedy_pick_worked_by_hand(small_tree):
    # rank = score x topic weight x diversity. a1 .9 first; then everything has diversity .5
    # but a3 (.1): a2 .25, a3 .08, b1 .005 (then /A/B x0.001, so b2 drops to 4e-6), c1 .003
    # (b2 would have had .004); outside: d1 5e-5 (then /D x0.1: d2 4.5e-6), e1 1.5e-5.
    # Seven picks, strongest last.
    (prompt,) = build_prompts(small_tree, "/A", np.random.default_rng(0), EXACT, repetitions=1,
                              embed=one_hot_embed)
    assert [item.row_id for item in prompt] == ["e1", "d1", "c1", "b1", "a3", "a2", "a1"]
    assert prompt[-1] == PromptItem("a1", "/A", "a one")


def test_working_set_limits_the_candidates(small_tree):
    # the 3 best ranked (score x weight): a1 .9, a3 .8, a2 .5 -- nothing else can be picked
    settings = PromptSettings(slot_randomization=0.0, score_randomization=0.0,
                              skip_randomization=0.0, working_set_size=3)
    (prompt,) = build_prompts(small_tree, "/A", np.random.default_rng(0), settings,
                              repetitions=1, embed=one_hot_embed)
    assert [item.row_id for item in prompt] == ["a3", "a2", "a1"]


def test_skipped_pick_keeps_a_tenth_of_its_weight(small_tree):
    # a1 skipped (draw 0.1 < 0.25): avoidance .9, so a1 ranks .9 x (1-.9) x (1-.9) = .009,
    # a3 .8 x (1 - .9 x .9) = .152, a2 .5 x (1 - .5 x .9) = .275 -> a2, a3, then a1 (.009)
    # still above b1 (.005)
    settings = PromptSettings(score_randomization=0.0)
    (prompt,) = build_prompts(small_tree, "/A", ScriptedRng([0.1] + [0.9] * 20), settings,
                              repetitions=1, embed=one_hot_embed)
    assert [item.row_id for item in reversed(prompt)][:4] == ["a2", "a3", "a1", "b1"]


def test_seeded_prompts_are_deterministic(mirror):
    tree = read_tree(mirror / "adatest" / "imdb_hotel_conversion.csv")

    def run(seed):
        return build_prompts(tree, "/Facilities", np.random.default_rng(seed),
                             embed=hashed_embed)

    first = run(7)
    assert len(first) == 8 and all(len(p) == 7 for p in first)
    assert first == run(7)
    assert first != run(8)
    # the focus topic's subtopics are picked before any outside topic
    assert first[0][-1].topic.startswith("/Facilities/")


def test_minilm_diversity_with_the_packaged_encoder(mirror):
    from lingtest.tasks.adaptive.prompts import minilm_embed

    tree = read_tree(mirror / "adatest" / "imdb_hotel_conversion.csv")
    prompts = build_prompts(tree, "/Rooms", np.random.default_rng(0),
                            PromptSettings(working_set_size=20), repetitions=2,
                            embed=minilm_embed())
    assert [len(p) for p in prompts] == [7, 7]
    assert all(item.topic == "/Rooms" for p in prompts for item in p)
    assert len({item.row_id for item in prompts[0]}) == 7


def test_prompt_text_format_matches_the_code():
    same = [[PromptItem("1", "/A", "x"), PromptItem("2", "/A", "y")]]
    assert prompt_texts(same, "/A") == ['"x"\n"y"\n"']
    mixed = [[PromptItem("1", "/A", "x"), PromptItem("2", "/D", "y")],
             [PromptItem("3", "/A", "z")]]
    assert prompt_texts(mixed, "/A") == ['\n/A:\n"x"\n\n/D:\n"y"\n\n/A:\n"',
                                         '\n/A:\n"z"\n\n/A:\n"']


def test_an_empty_topic_gets_a_zero_shot_prompt(small_tree):
    prompts = build_prompts(small_tree, "/New", np.random.default_rng(0), repetitions=1,
                            embed=one_hot_embed)
    text = prompt_texts(prompts, "/New")[0]
    assert text.endswith('\n/New:\n"') and text.startswith("\n/")
    assert len(prompts[0]) == 7


def test_plan_scores_and_settings():
    assert suggestion_plan() == (8, 12)
    assert suggestion_plan(PromptSettings(max_suggestions=20)) == (2, 10)
    assert score_max("", "fail") == 1.0 and score_max("", "pass") == 0.0
    assert score_max("0.2|0.7", "pass") == 0.7 and score_max(float("nan"), "fail") == 1.0
    with pytest.raises(LingtestError, match="skip_randomization"):
        PromptSettings(skip_randomization=0.99)
    with pytest.raises(LingtestError, match=r"unknown key\(s\) \['prompt_sise'\]"):
        PromptSettings.from_dict({"prompt_sise": 7})
