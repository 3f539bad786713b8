"""Reference CFG and Algorithm 1 (mask identification) on hand-made and real seeds."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from lingtest.tasks.capabilities.masks import (MASK, PTB_TAGS, embeddings, is_subsequence, mask_candidates,
                                      masked_sentences, reference_cfg, seed_productions)
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.data.treebank import parse_one

OR_BOTH = "(FRAG (CC Or) (NP (DT both)) (. .))"
MOVIE = "(S (NP (DT The) (NN movie)) (VP (VBZ works)) (. .))"


@pytest.fixture(scope="module")
def ptb_cfg(table):
    return reference_cfg(table("ptb_trees")["tree"])


def _cfg(lhs: str, *rhss: tuple[str, ...]) -> dict[str, Counter]:
    return {lhs: Counter({rhs: 10 - i for i, rhs in enumerate(rhss)})}


def test_running_example_of_the_paper():
    [masked] = mask_candidates(OR_BOTH, _cfg("NP", ("DT", "NNS")))
    assert masked.text == "Or both {MASK} ."
    assert masked.tokens == ("Or", "both", MASK, ".")
    assert masked.mask_positions == (2,) and masked.mask_symbols == ("NNS",)
    assert masked.production == ("NP", ("DT",), ("DT", "NNS"))
    assert masked.fill(["sides"]) == ["Or", "both", "sides", "."]


def test_running_example_with_the_treebank_cfg(ptb_cfg):
    found = {(m.text, m.mask_symbols) for m in mask_candidates(OR_BOTH, ptb_cfg)}
    assert ("Or both {MASK} .", ("NNS",)) in found


def test_reference_cfg_counts_phrasal_productions_only():
    cfg = reference_cfg([MOVIE, MOVIE, OR_BOTH])
    assert cfg["NP"] == Counter({("DT", "NN"): 2, ("DT",): 1})
    assert cfg["S"] == Counter({("NP", "VP", "."): 2})
    assert "DT" not in cfg  # tag → word is lexical, not a CFG production


def test_seed_productions_carry_child_spans():
    prods = seed_productions(parse_one(MOVIE, "<test>", 1))
    assert prods == [("S", ("NP", "VP", "."), [(0, 2), (2, 3), (3, 4)]),
                     ("NP", ("DT", "NN"), [(0, 1), (1, 2)]),
                     ("VP", ("VBZ",), [(2, 3)])]


def test_two_contiguous_insertions():
    [masked] = mask_candidates(MOVIE, _cfg("NP", ("DT", "JJ", "JJ", "NN")))
    assert masked.text == "The {MASK} {MASK} movie works ."
    assert masked.mask_positions == (1, 2) and masked.mask_symbols == ("JJ", "JJ")


def test_non_contiguous_insertions():
    [masked] = mask_candidates(MOVIE, _cfg("NP", ("DT", "JJ", "NN", "NNS")))
    assert masked.text == "The {MASK} movie {MASK} works ."
    assert masked.mask_positions == (1, 3) and masked.mask_symbols == ("JJ", "NNS")


def test_insertions_before_a_constituent_and_in_a_later_one():
    [first] = mask_candidates(MOVIE, _cfg("NP", ("PDT", "DT", "NN")))
    assert first.text == "{MASK} The movie works ." and first.span == (0, 2)
    [later] = mask_candidates(MOVIE, _cfg("VP", ("VBZ", "RB")))
    assert later.text == "The movie works {MASK} ." and later.mask_positions == (3,)


def test_every_embedding_is_a_candidate():
    texts = {m.text for m in mask_candidates(MOVIE, _cfg("NP", ("DT", "NN", "NN")))}
    assert texts == {"The {MASK} movie works .", "The movie {MASK} works ."}
    assert embeddings(("DT", "NN"), ("DT", "NN", "NN")) == [(0, 1), (0, 2)]


def test_subsequence_respects_order():
    assert not is_subsequence(("DT", "NN"), ("NN", "DT"))
    assert is_subsequence(("DT", "NN"), ("DT", "JJ", "NN"))
    assert mask_candidates(MOVIE, _cfg("NP", ("NN", "DT"), ("NN", "DT", "JJ"))) == []


def test_only_longer_rules_and_the_insertion_bound():
    assert mask_candidates(MOVIE, _cfg("NP", ("DT", "NN"))) == []  # same rule: nothing to insert
    long_rule = _cfg("NP", ("DT", "JJ", "JJ", "JJ", "NN"))
    assert mask_candidates(MOVIE, long_rule) == []  # 3 insertions > default bound 2
    [masked] = mask_candidates(MOVIE, long_rule, max_insertions=None)
    assert masked.mask_symbols == ("JJ", "JJ", "JJ")


def test_phrasal_and_punctuation_insertions():
    cfg = _cfg("NP", ("DT", "NN", "PP"), ("DT", "NN", ","))
    assert mask_candidates(MOVIE, cfg) == []  # PP is phrasal, ',' is punctuation
    [masked] = mask_candidates(MOVIE, cfg, phrasal=True)
    assert masked.text == "The movie {MASK} works ." and masked.mask_symbols == ("PP",)


def test_sampling_is_deterministic_and_bounded(ptb_cfg):
    every = mask_candidates(MOVIE, ptb_cfg)
    assert len(every) > 10
    first = masked_sentences(MOVIE, ptb_cfg, 5, np.random.default_rng(7))
    again = masked_sentences(MOVIE, ptb_cfg, 5, np.random.default_rng(7))
    other = masked_sentences(MOVIE, ptb_cfg, 5, np.random.default_rng(8))
    assert first == again and len(first) == 5 and len(set(first)) == 5
    assert first != other
    assert masked_sentences(OR_BOTH, _cfg("NP", ("DT", "NNS")), 5, np.random.default_rng(0)) \
        == mask_candidates(OR_BOTH, _cfg("NP", ("DT", "NNS")))
    with pytest.raises(LingtestError):
        masked_sentences(MOVIE, ptb_cfg, 0, np.random.default_rng(0))


def test_sampling_prefers_frequent_reference_rules():
    cfg = {"NP": Counter({("DT", "JJ", "NN"): 1000, ("DT", "NN", "NNS"): 1})}
    picks = Counter(masked_sentences(MOVIE, cfg, 1, np.random.default_rng(s),
                                     sampling="count")[0].mask_symbols for s in range(50))
    assert picks[("JJ",)] > 45


def test_parsed_seed_end_to_end(ptb_cfg, table):
    from lingtest.tasks.capabilities.grammar import induce_pcfg
    from lingtest.tasks.models.nlp import load_spacy

    doc = load_spacy("en_core_web_sm")("The acting is wonderful.")
    grammar = induce_pcfg(table("ptb_trees")["tree"].iloc[:-200])
    seed = grammar.parse_doc(doc).tree
    found = masked_sentences(seed, ptb_cfg, 10, np.random.default_rng(42))
    words = [t.text for t in doc]
    assert 0 < len(found) <= 10
    for masked in found:
        assert [t for t in masked.tokens if t != MASK] == words
        assert all(masked.tokens[p] == MASK for p in masked.mask_positions)
        assert set(masked.mask_symbols) <= PTB_TAGS
