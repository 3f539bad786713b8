"""Table 3 and the CheckList comparison on hand-made results (S²LCT reports)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tasks.capabilities import report
from tasks.capabilities.fill import tag_lexicon


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


def test_fail_rate_interval_is_seeded_and_degenerate_when_constant() -> None:
    failed = np.array([1, 0, 0, 1, 1, 0, 0, 0, 1, 0])
    first = report.fail_rate(failed, 500, np.random.default_rng(3))
    again = report.fail_rate(failed, 500, np.random.default_rng(3))
    assert first == again and first[0] == 40.0
    assert first[1] < 40.0 < first[2]
    assert report.fail_rate(np.ones(5), 500, np.random.default_rng(3)) == (100.0, 100.0, 100.0)


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
