"""Expansion quality (issue items 3–4): template protection, exact surface text, ALiCT's
mask sampling, whole words, negators, agreement and the confidence floor."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from lingtest.tasks.capabilities.expansion import open_spans
from lingtest.tasks.capabilities.fill import Candidate
from lingtest.tasks.capabilities.validation import Tagged, check
from lingtest.tasks.capabilities.masks import (Masked, Surface, mask_candidates, masked_sentences,
                                      top_per_production)
from lingtest.tasks.capabilities.wellformed import agreement_error, below_floor, is_whole_word
from lingtest.tasks.core.errors import LingtestError

LC9_TEXT = "Do I think that the movie works? yes"
LC9_TREE = ("(SQ (VBP Do) (NP (PRP I)) (VP (VB think) (SBAR (IN that) (S (NP (DT the) (NN movie))"
            " (VP (VBZ works))))) (. ?) (INTJ (UH yes)))")
LC9_PROV = {"template": "{intro} {s}? yes", "choices": {"intro": "Do I think that"}}
CFG = {"VP": Counter({("RB", "VB", "SBAR"): 5, ("RB", "VBZ"): 4}),
       "NP": Counter({("DT", "JJ", "NN"): 9, ("PRP", "RB"): 1})}


def test_open_spans_cover_only_seed_and_filler_slots():
    spans = open_spans(LC9_TEXT, LC9_PROV)
    assert [LC9_TEXT[a:b] for a, b in spans] == ["the movie works"]
    assert open_spans("A film.", {"template": None}) == [(0, 7)]
    text = "The film isn't good."
    spans = open_spans(text, {"template": "negation", "choices": {"is": "isn't"}})
    assert [text[a:b] for a, b in spans] == ["The film ", " good."]
    assert open_spans("something else", LC9_PROV) == []  # not the template's text: all fixed


def test_masks_never_fall_inside_template_words():
    unprotected = mask_candidates(LC9_TREE, CFG)
    assert any(m.text.startswith("Do I {MASK} think") for m in unprotected)  # the old defect
    surface = Surface.of(LC9_TEXT, LC9_TREE, open_spans(LC9_TEXT, LC9_PROV))
    assert surface.fixed == (True,) * 4 + (False,) * 3 + (True,) * 2
    found = mask_candidates(LC9_TREE, CFG, surface=surface)
    assert found and all(m.text.startswith("Do I think that") for m in found)
    assert {m.text for m in found} >= {"Do I think that the {MASK} movie works ? yes",
                                       "Do I think that the movie {MASK} works ? yes"}


def test_expansion_keeps_the_seed_text_exactly():
    tree = "(S (NP (DT The) (NN movie)) (VP (VBZ is) (ADJP (JJ well) (HYPH -) (JJ made))) (. .))"
    surface = Surface.of("The movie is well-made.", tree)
    assert surface.open_gap(3) and not surface.open_gap(4) and not surface.open_gap(5)
    assert surface.open_gap(6)  # before the final period
    assert surface.insert([3], ["really"]) == "The movie is really well-made."
    assert surface.insert([6], ["indeed"]) == "The movie is well-made indeed."
    assert surface.insert([0], ["all"]) == "All the movie is well-made."
    masked = Masked(("The", "movie", "is", "{MASK}", "well", "-", "made", "."), (3,), ("RB",),
                    ("ADJP", ("JJ",), ("RB", "JJ")), 1, (3, 6), surface)
    assert Candidate(masked, ("really",), 0.0).text == "The movie is really well-made."
    clitic = Surface.of("I did n't like it", "(S (NP (PRP I)) (VP (VBD did) (RB n't) (VP (VB like)"
                        " (NP (PRP it)))))")
    assert clitic is not None and clitic.open_gap(2)  # spaced in this text
    glued = Surface.of("I didn't like it", "(S (NP (PRP I)) (VP (VBD did) (RB n't) (VP (VB like)"
                       " (NP (PRP it)))))")
    assert not glued.open_gap(2)
    proper = Surface.of("Pray works.", "(S (NP (NNP Pray)) (VP (VBZ works)) (. .))")
    assert proper.insert([0], ["the"]) == "The Pray works."


def test_alict_sampling_keeps_top_productions_then_draws_uniformly():
    cfg = {"NP": Counter({("DT", "JJ", "NN"): 1000, ("DT", "NN", "NNS"): 1})}
    movie = "(S (NP (DT The) (NN movie)) (VP (VBZ works)) (. .))"
    picks = Counter(masked_sentences(movie, cfg, 1, np.random.default_rng(s))[0].mask_symbols
                    for s in range(60))
    assert 15 < picks[("JJ",)] < 45  # uniform over the candidates, not ∝ 1000 : 1
    found = mask_candidates(movie, cfg)
    assert top_per_production(found, 1) == [m for m in found if m.mask_symbols == ("JJ",)]
    with pytest.raises(LingtestError, match="mask_sampling"):
        masked_sentences(movie, cfg, 1, np.random.default_rng(0), sampling="often")


def test_whole_words_only():
    assert not is_whole_word("o") and is_whole_word("a") and is_whole_word("I")
    assert is_whole_word("made", {"made": frozenset({"VBN"})})
    assert not is_whole_word("constr", {"made": frozenset({"VBN"})})


def _tagged(words: str, tags: str) -> Tagged:
    return Tagged(words.split(), ["X"] * len(words.split()), tags.split())


@pytest.mark.parametrize("words, tags, inserted, broken", [
    ("An Same guy", "DT JJ NN", [0], True),
    ("one performances", "CD NNS", [0], True),
    ("A Chomp chomp !", "DT NN NN .", [0], False),
    ("a movie", "DT NN", [0], False),
    ("an hour", "DT NN", [0], False),
    ("a honest film", "DT JJ NN", [1], True),
    ("these film works", "DT NN VBZ", [0], True),
    ("these films work", "DT NNS VBP", [0], False),
    ("the old films", "DT JJ NNS", [1], False),
    ("an apple", "DT NN", [], False),  # nothing inserted there: not ours to judge
    ("Khouri manages the , with", "NNP VBZ DT , IN", [2], True),
    ("performances of allow us", "NNS IN VBP PRP", [1], True),
    ("performances of the film", "NNS IN DT NN", [1], False),
    ("feature films is good", "NN NNS VBZ JJ", [1], True),
    ("the feature film is good", "DT NN NN VBZ JJ", [1], False),
])
def test_agreement(words, tags, inserted, broken):
    assert agreement_error(_tagged(words, tags), inserted) is broken


def test_negators_and_focus_words_are_never_neutral():
    masked = Masked(("It", "{MASK}", "works", "."), (1,), ("RB",),
                    ("VP", ("VBZ",), ("RB", "VBZ")), 1, (1, 2))
    tagged = _tagged("It X works .", "PRP RB VBZ .")
    for word in ("not", "never", "hardly", "only", "merely", "too"):
        assert check(Candidate(masked, (word,), 0.0), tagged, lambda w, p: None) == "polarity"
    also = _tagged("It also works .", "PRP RB VBZ .")
    assert check(Candidate(masked, ("also",), 0.0), also, lambda w, p: None) is masked
    assert check(Candidate(masked, ("only",), 0.0), tagged, lambda w, p: None,
                 strict=False) is masked  # the earlier behaviour, kept for the benchmark


def test_floor_is_per_inserted_word_relative_to_the_seed():
    masked = Masked(("a", "{MASK}", "{MASK}"), (1, 2), ("JJ", "NN"), ("NP", (), ()), 1, (0, 1))
    two = Candidate(masked, ("x", "y"), -30.0)
    assert below_floor([two], -20.0, -4.0) == [True]  # 5 nats per word lost
    assert below_floor([two], -20.0, -6.0) == [False]
    assert below_floor([two], -20.0, None) == [False]
