"""Table 3 and the CheckList comparison on hand-made results (S²LCT reports)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.capabilities import report
from lingtest.tasks.capabilities.fill import tag_lexicon


def results_frame() -> pd.DataFrame:
    """LC2: seeds s1 (pass) with expansions e1 (fail), e2 (pass), e4 (fail); s2 (fail) with
    e3 (fail); s3 (pass) without expansions. LC9: one failing seed."""
    rows = [("s1", "LC2", "seed", "", "pass"), ("e1", "LC2", "expansion", "s1", "fail"),
            ("e2", "LC2", "expansion", "s1", "pass"), ("e4", "LC2", "expansion", "s1", "fail"),
            ("s2", "LC2", "seed", "", "fail"),
            ("e3", "LC2", "expansion", "s2", "fail"), ("s3", "LC2", "seed", "", "pass"),
            ("s4", "LC9", "seed", "", "fail")]
    return pd.DataFrame(rows, columns=["case_id", "capability", "kind", "parent_case_id",
                                       "verdict"])


def test_table3_counts_rates_and_pass_to_fail() -> None:
    table = report.table3(results_frame(), ["LC2", "LC9", "LC5"], n_boot=200, seed=1)
    lc2, lc9, lc5 = (table.iloc[i] for i in range(3))
    assert (lc2["seeds"], lc2["expansions"]) == (3, 4)
    assert lc2["seed_fail_%"] == pytest.approx(100 / 3, abs=0.01)
    assert lc2["exp_fail_%"] == 75.0
    # the paper's unit: failing expansions of passed seeds (e1, e4; s2 failed already) …
    assert lc2["pass_to_fail"] == 2
    assert lc2["pass_to_fail_seeds"] == 1  # … and the seeds they come from (s1)
    assert lc2["seed_fail_lo"] <= lc2["seed_fail_%"] <= lc2["seed_fail_hi"]
    assert lc2["paper_seed_fail_% RoBERTa"] == 4.0
    # one case: a rate but no interval; no case at all: nothing
    assert lc9["seed_fail_%"] == 100.0 and np.isnan(lc9["seed_fail_lo"])
    assert lc5["seeds"] == 0 and np.isnan(lc5["seed_fail_%"])
    assert lc5["paper_seed_fail_% DistilBERT"] == 92.31


def test_table3_intervals_are_the_shared_seeded_bootstrap() -> None:
    """Table 3's intervals come from ``lingtest.tasks.core.stats.rate_interval``, seed cells first,
    from one generator per table: the same seed gives the same numbers."""
    from lingtest.tasks.core.stats import rate_interval

    table = report.table3(results_frame(), ["LC2"], n_boot=200, seed=1).iloc[0]
    rng = np.random.default_rng(1)
    seed_ci = rate_interval(np.array([0, 1, 0]), 200, rng)
    exp_ci = rate_interval(np.array([1, 0, 1, 1]), 200, rng)
    assert (table["seed_fail_lo"], table["seed_fail_hi"]) == tuple(
        round(v, 2) for v in seed_ci[1:])
    assert (table["exp_fail_lo"], table["exp_fail_hi"]) == tuple(round(v, 2) for v in exp_ci[1:])
    assert rate_interval(np.ones(5), 500, np.random.default_rng(3)) == (100.0, 100.0, 100.0)


def test_table3_alict_count_counts_duplicates_as_result_py() -> None:
    """ALiCT's Result.py counts each (listed, failing) pair of a duplicated expansion: an
    expansion proposed twice counts 4; the default counts distinct cases (2 here)."""
    suite = pd.DataFrame({"case_id": ["e1", "e4"], "kind": "expansion",
                          "provenance": ['{"proposals": 2}', '{"proposals": 1}']})
    multiplicity = report.alict_multiplicity(suite)
    alict = report.table3(results_frame(), ["LC2"], 200, 1, "alict", multiplicity).iloc[0]
    distinct = report.table3(results_frame(), ["LC2"], 200, 1, "distinct", multiplicity).iloc[0]
    assert (distinct["pass_to_fail"], alict["pass_to_fail"]) == (2, 5)
    assert alict["pass_to_fail_seeds"] == distinct["pass_to_fail_seeds"] == 1
    with pytest.raises(ValueError, match="pass_to_fail_count"):
        report.table3(results_frame(), ["LC2"], 200, 1, "paper")


def test_ase22_layout_is_the_median_over_trials_of_one_failure_rate() -> None:
    """Trial 0 holds s1, s2 (and their expansions), trial 1 s1, s3: test cases, one failure
    rate over seeds and expansions, and #pass→fail per trial; the median of the two."""
    results = results_frame()
    trials = {"s1": [0, 1], "s2": [0], "s3": [1], "s4": [0, 1]}
    suite = results.assign(provenance=[
        '{"trials": %s}' % trials[c] if k == "seed" else "{}"
        for c, k in zip(results["case_id"], results["kind"])])
    membership = report.trial_membership(suite)
    assert membership["e3"] == (0,) and membership["e1"] == (0, 1)
    assert set(report.in_trial(results, membership, 1)["case_id"]) == {
        "s1", "e1", "e2", "e4", "s3", "s4"}
    lc2 = report.ase22_table(results, ["LC2"], membership, trials=2).iloc[0]
    # trial 0: s1 e1 e2 e4 s2 e3 → 6 cases, 4 fail; trial 1: s1 e1 e2 e4 s3 → 5 cases, 2 fail
    assert lc2["test_cases (median)"] == 5.5
    assert lc2["fail_% (median)"] == round((400 / 6 + 40) / 2, 2)
    assert (lc2["fail_% min"], lc2["fail_% max"]) == (40.0, round(400 / 6, 2))
    assert lc2["pass_to_fail (median)"] == 2  # e1 and e4 in both trials
    # without trials in the provenance every case is trial 0's
    plain = report.trial_membership(results.assign(provenance="{}"))
    assert set(plain.values()) == {(0,)}


def example_suite(n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One seed per capability LC1..LC3 with ``n`` expansions each (one text duplicated)."""
    rows = []
    for lc in ("LC1", "LC2", "LC3"):
        rows.append((f"s-{lc}", lc, "seed", "", f"seed of {lc}", "{}"))
        for i in range(n):
            text = f"{lc} expansion {min(i, n - 2)}"  # the last two share a text
            rows.append((f"e-{lc}-{i}", lc, "expansion", f"s-{lc}", text,
                         '{"words": ["w%d"]}' % i))
    suite = pd.DataFrame(rows, columns=["case_id", "capability", "kind", "parent_case_id",
                                        "text", "provenance"]).assign(expectation="pos")
    results = suite.assign(model_id="m1", output="pos", verdict="pass")
    return suite, results


def test_examples_are_a_seeded_random_sample_of_distinct_expansions_with_their_seeds() -> None:
    suite, results = example_suite(30)
    table = report.examples(suite, results, seed=7, n=40)
    assert len(table) == 40 and table["expansion"].is_unique
    assert set(table["capability"]) == {"LC1", "LC2", "LC3"}  # drawn over all LCs
    assert (table["seed"] == "seed of " + table["capability"]).all()
    assert list(table.columns) == ["capability", "seed", "expansion", "inserted", "expected",
                                   "seed prediction m1", "seed verdict m1", "prediction m1",
                                   "verdict m1"]
    again = report.examples(suite, results, seed=7, n=40)
    other = report.examples(suite, results, seed=8, n=40)
    assert again.equals(table) and not other["expansion"].equals(table["expansion"])
    small = report.examples(*example_suite(3), seed=7, n=40)
    assert len(small) == 6  # every distinct expansion when there are fewer than n


def test_neutral_share_counts_neutral_seed_predictions_per_lc() -> None:
    results = pd.DataFrame({
        "model_id": "m1", "capability": ["LC9"] * 4 + ["LC2"] * 2, "kind": "seed",
        "output": ["neutral", "neutral", "pos", "neg", "pos", "pos"],
        "verdict": ["fail", "fail", "pass", "fail", "pass", "pass"]})
    table = report.neutral_share(results, ["LC2", "LC9"]).set_index("capability")
    assert list(table.index) == ["LC2", "LC9"]
    assert table.loc["LC9", "neutral_%"] == 50.0 and table.loc["LC9", "failing_seeds"] == 3
    assert table.loc["LC9", "failing_neutral_%"] == pytest.approx(66.67)
    assert np.isnan(table.loc["LC2", "failing_neutral_%"])


def test_checklist_table_has_a_column_per_model() -> None:
    verdicts = pd.DataFrame({
        "case_id": list("abcdef"), "test": ["t1", "t1", "t2"] * 2, "type": ["MFT"] * 6,
        "capability": ["Vocabulary"] * 6, "example_id": [0, 1, 0] * 2,
        "verdict": ["fail", "pass", "filtered", "pass", "pass", "fail"],
        "predictions": [[]] * 6, "probabilities": [[]] * 6,
        "model_id": ["m1"] * 3 + ["m2"] * 3})
    table = report.checklist_table(verdicts).set_index("test")
    assert table.loc["t1", "fail % m1"] == 50.0 and table.loc["t1", "fail % m2"] == 0.0
    assert np.isnan(table.loc["t2", "fail % m1"]) and table.loc["t2", "fail % m2"] == 100.0


def test_tag_lexicon_collects_every_tag_of_a_word() -> None:
    tags = tag_lexicon([(["The", "run"], ["DT", "NN"]), (["We", "run"], ["PRP", "VBP"])])
    assert tags["run"] == frozenset({"NN", "VBP"}) and tags["the"] == frozenset({"DT"})
