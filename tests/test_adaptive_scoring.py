"""Failure scores and verdicts of adaptive cases on sentiment models."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.adaptive.cases import CONTRACT, INVARIANCE, tree_to_cases
from lingtest.tasks.adaptive.scoring import (equality_margin, failure_mass, score_cases, scores_to_tree,
                                    verdict)
from lingtest.tasks.adaptive.tree import read_tree, tree_csv
from lingtest.tasks.core.schema import check_results
from lingtest.tasks.models.sentiment import LABELS2, SentimentModel


class FixedModel(SentimentModel):
    """A binary model whose P(pos) per text is given; ``predict`` via the 0.5 band."""

    def __init__(self, p_pos: dict[str, float]):
        super().__init__("fixed", "r1", LABELS2, neutral_band=(0.5, 0.5))
        self.p_pos = p_pos

    def predict_proba(self, texts):
        p = np.array([self.p_pos[t] for t in texts])
        return np.column_stack([1 - p, p])


def _case(cid, text, expectation, text_b=""):
    return {"case_id": cid * 16, "method": "adaptive", "topic": "/T", "input": text,
            "input_b": text_b, "expectation": expectation, "provenance": "{}"}


def test_failure_mass_is_probability_on_failing_outputs():
    probs = np.array([0.2, 0.1, 0.7])  # neg, neutral, pos
    assert failure_mass(probs, "pos", negated=False) == pytest.approx(0.3)
    assert failure_mass(probs, "pos", negated=True) == pytest.approx(0.7)
    assert failure_mass(probs, "neg", negated=False) == pytest.approx(0.8)


def test_equality_margin_worked_by_hand():
    # tops differ (pos vs neg): shift to agree on pos = (0 + 0.8-0.2)=0.6, on neg = 0.7-0.2+0=0.5,
    # on neutral = (0.7-0.1)+(0.8-0) = 1.4 -> 0.5
    assert equality_margin(np.array([0.2, 0.1, 0.7]), np.array([0.8, 0.0, 0.2])) == \
        pytest.approx(0.5)
    # tops agree (pos): gaps 0.7-0.2=0.5 and 0.6-0.3=0.3 -> -0.3
    assert equality_margin(np.array([0.2, 0.1, 0.7]), np.array([0.1, 0.3, 0.6])) == \
        pytest.approx(-0.3)


def test_verdicts():
    assert verdict("pos", "output", "pos") == "pass"
    assert verdict("neg", "output", "pos") == "fail"
    assert verdict("pos", "not_output", "pos") == "fail"
    assert verdict("neutral", "not_output", "pos") == "pass"
    assert verdict("pos", "invariance", "", "neg") == "fail"


def test_score_cases_on_a_fixed_model():
    model = FixedModel({"good": 0.9, "bad": 0.2, "fine": 0.6, "meh": 0.45})
    cases = pd.DataFrame([_case("a", "good", "should output pos"),
                          _case("b", "bad", "should output pos"),
                          _case("c", "bad", "should not output pos"),
                          _case("d", "good", "should output happy"),
                          _case("e", "good", INVARIANCE, "fine"),
                          _case("f", "good", INVARIANCE, "meh")])
    results = score_cases(cases, model)
    check_results(results, CONTRACT)
    assert list(results["verdict"]) == ["pass", "fail", "pass", "undefined", "pass", "fail"]
    assert results["score"].iloc[:3].tolist() == pytest.approx([0.1, 0.8, 0.2])
    assert np.isnan(results["score"].iloc[3])
    # invariance good (0.1, 0, 0.9) vs fine (0.4, 0, 0.6): agree, gaps 0.8 and 0.2 -> m = -0.2
    assert results["margin"].iloc[4] == pytest.approx(-0.2)
    assert results["score"].iloc[4] == pytest.approx(0.4)
    # good vs meh (0.55, 0, 0.45): differ, shift to agree on pos 0 + 0.1 -> m = 0.1
    assert results["margin"].iloc[5] == pytest.approx(0.1)
    assert results["score"].iloc[5] == pytest.approx(0.55)
    assert results["output"].iloc[5] == "pos|neg"
    assert json.loads(results["probabilities"].iloc[0]) == {"neg": 0.1, "neutral": 0.0,
                                                            "pos": 0.9}


def test_hotel_tree_on_vader_and_scores_back_into_the_tree(mirror):
    from lingtest.tasks.models.sentiment import load_sentiment_model

    tree = read_tree(mirror / "adatest" / "imdb_hotel_conversion.csv")
    cases = tree_to_cases(tree, ("neg", "pos"))
    results = score_cases(cases, load_sentiment_model("vader"))
    check_results(results, CONTRACT)
    assert len(results) == 190 and results["score"].between(0, 1).all()
    by_row = results.set_index(cases["tree_id"])
    row = by_row.loc["0ba15c3386e34777bfb4906394f15b82"]  # "One star service for a four star price"
    assert (row["output"], row["verdict"]) == ("neutral", "fail")  # VADER: no polar words
    assert row["score"] == pytest.approx(1.0)
    scored = scores_to_tree(tree, cases, results)
    assert scored.frame.columns[-1] == "vader score"
    assert float(scored.frame.loc["0ba15c3386e34777bfb4906394f15b82", "vader score"]) == 1.0
    assert scored.frame.loc["00f2dfd40977438f9942793768959e8a", "vader score"] == ""  # marker
    assert tree_csv(scored).startswith(",topic,input,output,label,labeler,description,author,"
                                       "model score,vader score")
