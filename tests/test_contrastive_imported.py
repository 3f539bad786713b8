"""An imported COSTELLO suite under ``contrastive.relations`` and ``max_seeds``, and what
its Table 1 and provenance say about it."""
from __future__ import annotations

import hashlib
import json

import pytest

from lingtest.tasks.contrastive.costello_json import read_costello_suite, select_imported
from lingtest.tasks.contrastive.method import relations_note
from lingtest.tasks.contrastive.suite import table1
from lingtest.tasks.core.errors import LingtestError

ALL = ["CR1", "CR2", "CR3", "CR4"]


@pytest.fixture
def ctset(tmp_path):
    """A suite in COSTELLO's layout: CR1 with 6 seeds (one seed twice, two words), CR3
    with 4 seeds, and a relation of the user's own."""
    cr1 = [[f"seed {i} is good .", f"seed {i} is fine .", f"seed {i} is bad ."]
           for i in range(6)]
    cr1.insert(2, ["seed 1 is good .", "seed 1 is good and fine .", "seed 1 is good and bad ."])
    path = tmp_path / "ctset1.json"
    path.write_text(json.dumps({
        "SenWordFuzz": cr1,
        "synon_contr": [[f"review {i} .", f"critique {i} .", f"no review {i} ."]
                        for i in range(4)],
        "mine": [["a b", "a c", "a d"]]}))
    return path


def test_defaults_keep_every_triple_in_order(ctset):
    suite = read_costello_suite(ctset)
    kept = select_imported(suite, ALL, None, 42, ctset)
    assert kept["case_id"].tolist() == suite["case_id"].tolist()


def test_relations_filter_and_seeded_seed_cap(ctset):
    suite = read_costello_suite(ctset)
    only = select_imported(suite, ["CR3"], None, 42, ctset)
    assert list(dict.fromkeys(only["relation"])) == ["CR3", "mine"]  # `mine`: not nameable
    capped = select_imported(suite, ALL, 2, 42, ctset)
    per = capped.groupby("relation")["seed"].nunique().to_dict()
    assert per == {"CR1": 2, "CR3": 2, "mine": 1}
    for seed in capped.loc[capped["relation"] == "CR1", "seed"]:  # a drawn seed: all triples
        assert (capped["seed"] == seed).sum() == (suite["seed"] == seed).sum()
    again = select_imported(suite, ALL, 2, 42, ctset)
    assert again["case_id"].tolist() == capped["case_id"].tolist()
    draws = {tuple(select_imported(suite, ALL, 2, s, ctset)["case_id"]) for s in range(6)}
    assert len(draws) > 1  # the run's seed draws the seeds
    order = suite.index[suite["case_id"].isin(capped["case_id"])]
    assert suite.loc[order, "case_id"].tolist() == capped["case_id"].tolist()  # file order


def test_no_relation_left_names_the_key(tmp_path):
    path = tmp_path / "cr1.json"
    path.write_text(json.dumps({"SenWordFuzz": [["a", "b", "c"]]}))
    with pytest.raises(LingtestError, match=r"contrastive.relations \['CR2'\]: cr1.json "
                                            r"holds none of them \(it holds CR1\)"):
        select_imported(read_costello_suite(path), ["CR2"], None, 0, path)


def test_table1_and_provenance_name_the_file_and_the_relations_run(ctset):
    suite = select_imported(read_costello_suite(ctset), ["CR1", "CR3"], None, 0, ctset)
    digest = hashlib.sha256(ctset.read_bytes()).hexdigest()[:12]
    table = table1(suite).set_index("relation")
    assert set(table["source"]) == {f"ctset1.json (sha256 {digest})"}
    assert table.loc["CR1", "triples"] == 7 and table.loc["CR1", "paper_triples"] == 1417
    assert relations_note(suite) == "CR1 (SenWordFuzz): 7; CR3 (synon_contr): 4; mine: 1"
