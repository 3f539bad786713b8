"""The offline PCFG parser: induction, exact Viterbi trees, fallbacks, bracket F1, caching."""
from __future__ import annotations

import math

import pytest

from lingtest.tasks.capabilities.grammar import (Grammar, bracket_f1, gold_tags_words, induce_pcfg,
                                        parse_benepar, split_heldout)
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.data.treebank import leaves, parse_one, to_string

SENTENCE_LABELS = {"S", "SINV", "SQ", "SBARQ"}

# A toy treebank with a PP-attachment ambiguity (noun attachment twice, verb once).
TOY = [
    "(S (NP (PRP I)) (VP (VBD saw) (NP (NP (DT the) (NN man)) (PP (IN with) (NP (DT a) (NN hat))))) (. .))",
    "(S (NP (PRP We)) (VP (VBD met) (NP (NP (DT the) (NN girl)) (PP (IN from) (NP (DT the) (NN city))))) (. .))",
    "(S (NP (PRP He)) (VP (VBD hit) (NP (DT the) (NN ball)) (PP (IN with) (NP (DT a) (NN bat)))) (. .))",
    "(S (NP (DT The) (JJ old) (JJ grey) (NN dog)) (VP (VBZ sleeps)) (. .))",
    "(FRAG (CC Or) (NP (DT both)) (. .))",
]


@pytest.fixture(scope="module")
def ptb(table) -> list[str]:
    return list(table("ptb_trees")["tree"])


@pytest.fixture(scope="module")
def grammar(ptb) -> Grammar:
    train, _ = split_heldout(ptb, 200)
    return induce_pcfg(train)


@pytest.fixture(scope="module")
def toy() -> Grammar:
    return induce_pcfg(TOY)


def _nltk_best(g: Grammar, tags: list[str]):
    from nltk import ViterbiParser
    from nltk.grammar import PCFG, Nonterminal, ProbabilisticProduction

    prods = [ProbabilisticProduction(Nonterminal(a), [Nonterminal(x) for x in rhs], prob=p)
             for a, rhs, p in g.productions()]
    prods += [ProbabilisticProduction(Nonterminal(t), [t], prob=1.0) for t in g.tags]
    return next(ViterbiParser(PCFG(Nonterminal("ROOT"), prods), max_time=None).parse(tags))


def test_toy_parse_is_the_viterbi_tree_with_words_back(toy):
    words = ["They", "ate", "the", "cake", "with", "a", "fork", "."]
    tags = ["PRP", "VBD", "DT", "NN", "IN", "DT", "NN", "."]
    result = toy.parse(tags, words)
    assert not result.fallback
    # noun attachment is seen twice, verb attachment once: the PCFG prefers the NP reading
    assert to_string(result.tree) == ("(S (NP (PRP They)) (VP (VBD ate) (NP (NP (DT the) (NN cake)) "
                                      "(PP (IN with) (NP (DT a) (NN fork))))) (. .))")
    best = _nltk_best(toy, tags)
    assert result.log_prob == pytest.approx(math.log(best.prob()), abs=1e-9)


def test_markovised_nodes_are_spliced_back(toy):
    assert ("NP^S", ("DT", "NP|<JJ-JJ>")) in toy.counts
    result = toy.parse(["DT", "JJ", "JJ", "NN", "VBZ", "."], ["A", "big", "red", "dog", "barks", "."])
    assert to_string(result.tree) == ("(S (NP (DT A) (JJ big) (JJ red) (NN dog)) (VP (VBZ barks)) "
                                      "(. .))")


def test_same_probability_as_nltk_viterbi_on_the_treebank_grammar(grammar):
    tags = ["DT", "NN", "VBZ", "JJ", "."]
    best = _nltk_best(grammar, tags)
    result = grammar.parse(tags, ["The", "film", "is", "good", "."])
    assert result.log_prob == pytest.approx(math.log(best.prob()), abs=1e-9)


def test_spacy_tagged_sentences_parse_into_sentence_trees(grammar):
    from lingtest.tasks.models.nlp import load_spacy

    nlp = load_spacy("en_core_web_sm")
    texts = ["The film is a charming and often affecting journey.",
             "I did not like this movie at all.",
             "It's a well-made, funny and thoughtful picture."]
    for doc in nlp.pipe(texts):
        result = grammar.parse_doc(doc)
        assert not result.fallback, result.reason
        assert leaves(result.tree) == [t.text for t in doc]
        assert gold_tags_words(result.tree)[0] == [t.tag_ for t in doc]
        assert result.tree.label in SENTENCE_LABELS
        assert result.log_prob < 0


def test_heldout_bracket_f1_is_reasonable(grammar, ptb):
    _, held = split_heldout(ptb, 200)
    short = [t for t in held if len(gold_tags_words(t)[0]) <= 20][:30]
    predicted = [grammar.parse(*gold_tags_words(t)).tree for t in short]
    scores = bracket_f1(short, predicted)
    assert scores["sentences"] == len(short)
    assert 0.6 < scores["f1"] < 1.0


def test_bracket_f1_gold_against_gold_and_by_hand(ptb):
    assert bracket_f1(ptb[:50], ptb[:50])["f1"] == 1.0
    gold = "(S (NP (DT The) (NN dog)) (VP (VBZ barks)) (. .))"
    pred = "(S (DT The) (NP (NN dog) (VBZ barks)) (. .))"
    scores = bracket_f1([gold], [pred])  # S(0,3) matches; NP(1,3) does not
    assert (scores["precision"], scores["recall"]) == (0.5, pytest.approx(1 / 3))
    assert scores["f1"] == pytest.approx(0.4)
    with pytest.raises(LingtestError):
        bracket_f1([gold], ["(S (DT The) (NN dog))"])


def test_unknown_tag_gives_a_flagged_flat_tree(grammar):
    result = grammar.parse(["DT", "BOGUS", "NN"], ["the", "???", "cat"])
    assert result.fallback and "BOGUS" in result.reason
    assert to_string(result.tree) == "(FRAG (DT the) (BOGUS ???) (NN cat))"
    assert math.isnan(result.log_prob)


def test_spacy_only_tags_are_mapped_not_rejected(grammar):
    result = grammar.parse(["DT", "JJ", "HYPH", "VBN", "NN", "."],
                           ["a", "well", "-", "made", "film", "."])
    assert "unknown" not in result.reason
    assert gold_tags_words(result.tree)[0][2] == "HYPH"  # the caller's tag stays in the tree


def test_no_complete_parse_gives_constituent_pieces(toy):
    words = ["the", "man", "the", "hat"]
    result = toy.parse(["DT", "NN", "DT", "NN"], words)
    assert result.fallback and result.reason.startswith("no complete parse")
    assert result.tree.label == "FRAG" and leaves(result.tree) == words
    assert [c.label for c in result.tree.children] == ["NP", "NP"]


def test_too_long_and_malformed_input(toy):
    result = toy.parse(["DT", "NN"] * 3, ["a", "b"] * 3, max_tags=4)
    assert result.fallback and "longer than 4" in result.reason
    with pytest.raises(LingtestError):
        toy.parse(["DT", "NN"], ["a"])
    with pytest.raises(LingtestError):
        toy.parse([], [])


def test_save_and_load_round_trip(grammar, tmp_path):
    path = tmp_path / "pcfg.json"
    grammar.save(path)
    again = Grammar.load(path)
    assert again.describe() == grammar.describe()
    tags, words = ["PRP", "VBD", "DT", "NN", "."], ["I", "liked", "the", "film", "."]
    first, second = grammar.parse(tags, words), again.parse(tags, words)
    assert to_string(first.tree) == to_string(second.tree) and first.log_prob == second.log_prob
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(LingtestError, match="not a lingtest PCFG"):
        Grammar.load(path)


def test_heldout_split_and_bad_settings(ptb):
    train, held = split_heldout(ptb, 200)
    assert len(held) == 200 and train + held == ptb
    with pytest.raises(LingtestError, match="pcfg_heldout"):
        split_heldout(ptb[:10], 10)
    with pytest.raises(LingtestError):
        induce_pcfg(TOY, horizontal=0)


def test_benepar_without_its_model_names_the_download(monkeypatch, tmp_path):
    """Where nltk finds no benepar_en3 (an nltk_data of its own: a stage run earlier in this
    process may have put a project's, with the stand-in model, on nltk's path)."""
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(LingtestError, match=r"import benepar; benepar\.download\('benepar_en3'\)"):
        parse_benepar([(["Or", "both", "."], ["CC", "DT", "."])])


def test_gold_tags_words_reads_preterminals():
    tree = parse_one(TOY[4], "<test>", 1)
    assert gold_tags_words(tree) == (["CC", "DT", "."], ["Or", "both", "."])
