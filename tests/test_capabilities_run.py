"""Running the S²LCT suite: labels from each model's own rule (neutral band for binary
models, VADER's compound score), and Table 3 checked by hand on the resulting verdicts."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.capabilities import report
from lingtest.tasks.capabilities.model_tasks import RESULT_COLUMNS, run_suite
from lingtest.tasks.models.sentiment import LABELS2, LABELS3, SentimentModel


class LookupModel(SentimentModel):
    """Fixed probabilities per text, over LABELS2 (P(neg), P(pos)) or LABELS3."""

    def __init__(self, labels: tuple[str, ...], table: dict[str, tuple[float, ...]]):
        super().__init__(f"lookup-{len(labels)}", "r1", labels)
        self.table = table

    def predict_proba(self, texts: list[str]) -> np.ndarray:
        return np.array([self.table[t] for t in texts], dtype=np.float64).reshape(
            -1, len(self.labels))


# LC1 expects neutral; LC4 expects pos or neutral. s1 / s2 seeds, e* expansions.
SUITE = pd.DataFrame(
    [("s1", "LC1", "seed", "", "a plain table", "neutral"),
     ("e1", "LC1", "expansion", "s1", "a plain wooden table", "neutral"),
     ("e2", "LC1", "expansion", "s1", "a plain old table", "neutral"),
     ("e3", "LC1", "expansion", "s1", "a plain round table", "neutral"),
     ("s2", "LC4", "seed", "", "not bad", "pos|neutral"),
     ("e4", "LC4", "expansion", "s2", "not that bad", "pos|neutral")],
    columns=["case_id", "capability", "kind", "parent_case_id", "text", "expectation"])

# binary P(neg), P(pos): 0.5 and 0.4 lie in the band [1/3, 2/3] → neutral
BINARY = {"a plain table": (0.5, 0.5), "a plain wooden table": (0.9, 0.1),
          "a plain old table": (0.6, 0.4), "a plain round table": (0.95, 0.05),
          "not bad": (0.8, 0.2), "not that bad": (0.3, 0.7)}
THREE_WAY = {"a plain table": (0.2, 0.5, 0.3), "a plain wooden table": (0.1, 0.3, 0.6),
             "a plain old table": (0.1, 0.8, 0.1), "a plain round table": (0.7, 0.2, 0.1),
             "not bad": (0.5, 0.1, 0.4), "not that bad": (0.1, 0.2, 0.7)}


def test_binary_model_is_neutral_inside_the_band() -> None:
    out = run_suite.fn(LookupModel(LABELS2, BINARY), SUITE)
    assert list(out.columns) == RESULT_COLUMNS
    assert out["output"].tolist() == ["neutral", "neg", "neutral", "neg", "neg", "pos"]
    assert out["verdict"].tolist() == ["pass", "fail", "pass", "fail", "fail", "pass"]
    # the padded probabilities are still reported for the record
    assert out.loc[0, ["p_neg", "p_neutral", "p_pos"]].tolist() == [0.5, 0.0, 0.5]
    # score: P(the expected label(s)); a binary model's padded P(neutral) is 0
    assert out["score"].tolist() == [0.0, 0.0, 0.0, 0.0, 0.2, 0.7]
    assert (out["method"] == "capabilities").all()


def test_three_way_model_takes_the_argmax() -> None:
    out = run_suite.fn(LookupModel(LABELS3, THREE_WAY), SUITE)
    assert out["output"].tolist() == ["neutral", "pos", "neutral", "neg", "neg", "pos"]
    # LC4 accepts pos or neutral: the score sums both probabilities
    assert out["score"].tolist() == [0.5, 0.3, 0.8, 0.2, 0.5, 0.9]


def test_vader_labels_by_compound_score_not_proportions() -> None:
    pytest.importorskip("vaderSentiment")
    from lingtest.tasks.models.sentiment import VaderModel

    vader = VaderModel()
    suite = pd.DataFrame({"case_id": ["a", "b", "c"], "capability": "LC2", "kind": "seed",
                          "parent_case_id": "",
                          "text": ["The acting in this long film is good.",
                                   "The plot of this long film is bad.",
                                   "The film is two hours long."],
                          "expectation": ["pos", "neg", "neutral"]})
    out = run_suite.fn(vader, suite)
    # VADER's neutral proportion dominates all three; the compound score does not
    assert (out["p_neutral"] > out[["p_neg", "p_pos"]].max(axis=1)).all()
    assert out["output"].tolist() == ["pos", "neg", "neutral"]
    assert (out["verdict"] == "pass").all()


def test_table3_by_hand_from_the_binary_model_run() -> None:
    """Paper's definitions on the binary run above. LC1: seed s1 passes (1 seed, 0 % fail);
    expansions e1, e3 fail, e2 passes → 2/3 = 66.67 %; #pass→fail = failing expansions of
    passed seeds = 2 (e1, e3), coming from 1 seed. LC4: s2 fails (100 %), e4 passes (0 %),
    no pass→fail since the seed failed."""
    results = run_suite.fn(LookupModel(LABELS2, BINARY), SUITE)
    table = report.table3(results, ["LC1", "LC4"], n_boot=100, seed=0).set_index("capability")
    lc1, lc4 = table.loc["LC1"], table.loc["LC4"]
    assert (lc1["seeds"], lc1["expansions"]) == (1, 3)
    assert lc1["seed_fail_%"] == 0.0 and lc1["exp_fail_%"] == pytest.approx(66.67)
    assert (lc1["pass_to_fail"], lc1["pass_to_fail_seeds"]) == (2, 1)
    assert lc4["seed_fail_%"] == 100.0 and lc4["exp_fail_%"] == 0.0
    assert (lc4["pass_to_fail"], lc4["pass_to_fail_seeds"]) == (0, 0)
