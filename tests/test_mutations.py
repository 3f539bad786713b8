"""Mutation operators on hand-made sentences, with the real spaCy pipeline, WordNet and tables."""
from __future__ import annotations


import pandas as pd
import pytest

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.text import lexicon_lookup as lex
from lingtest.tasks.text.mutations import (antonyms, gender_swap, invert, match_case, replace_lemma,
                                  slots, synonyms)


@pytest.fixture(scope="module")
def polarity(table) -> dict[str, str]:
    return lex.polarity_lookup(table("word_polarity"))


@pytest.fixture(scope="module")
def pairs(table) -> dict[str, str]:
    return lex.pair_swaps(table("gender_pairs"))


@pytest.fixture(scope="module")
def names_table(table) -> pd.DataFrame:
    return table("names")


@pytest.fixture(scope="module")
def names(names_table) -> dict[str, str]:
    return lex.name_swaps(names_table)


# --------------------------------------------------------------------------- synonyms

def test_synonym_keeps_pos_and_polarity(nlp, wn, polarity):
    doc = nlp("The movie was wonderful .")
    mutants = synonyms(doc, wn, polarity)
    assert mutants, "wonderful has positive WordNet synonyms"
    assert {m.position for m in mutants} == {3}
    for m in mutants:
        assert m.original == "wonderful" and m.replacement != "wonderful"
        assert polarity[m.replacement] == "pos"
        assert m.replacement in lex.synonym_lemmas(wn, "wonderful", "a")
        assert m.text == f"The movie was {m.replacement} ."
    assert nlp(mutants[0].text)[3].pos_ == "ADJ"


def test_polarity_guidance_filters(nlp, wn, polarity):
    doc = nlp("The movie was wonderful .")
    guided = {m.replacement for m in synonyms(doc, wn, polarity)}
    free = {m.replacement for m in synonyms(doc, wn)}
    assert guided < free
    assert any(polarity.get(word) != "pos" for word in free - guided)


def test_verbs_are_reinflected(nlp, wn, polarity):
    doc = nlp("I loved it !")
    assert "I enjoyed it !" in {m.text for m in synonyms(doc, wn, polarity)}
    assert "I hated it !" in {m.text for m in antonyms(doc, wn, polarity)}
    loses = nlp("The story loses its bite .")
    for m in synonyms(loses, wn):
        assert m.replacement.endswith("s"), m.replacement  # VBZ stays VBZ


def test_auxiliaries_and_light_verbs_are_not_slots(nlp, wn):
    doc = nlp("He has been good and did well .")
    found = {s.position: s for s in slots(doc, wn)}
    assert set(found) == {3}
    assert found[3].lemma == "good" and found[3].pos == "a"


@pytest.mark.parametrize("lemma,tag,form", [
    ("take", "VBD", "took"), ("take", "VBN", "taken"), ("run", "VBN", "run"),
    ("run", "VBD", "ran"), ("hit", "VBD", "hit"), ("stop", "VBG", "stopping"),
    ("stop", "VBD", "stopped"), ("cry", "VBZ", "cries"), ("love", "VBG", "loving"),
    ("watch", "VBZ", "watches"), ("prove", "VBD", "proved"), ("prove", "VBN", "proven"),
    ("sing", "VBD", None), ("begin", "VBN", None), ("be", "VBZ", None),
])
def test_inflect_verb(wn, lemma, tag, form):
    assert lex.inflect_verb(wn, lemma, tag) == form


def test_verb_lemma_prefers_frequent_reading(wn):
    assert lex.verb_lemma(wn, "hated", "hat", "VBD") == "hate"
    assert lex.verb_lemma(wn, "found", "find", "VBD") == "find"
    assert lex.verb_lemma(wn, "found", "found", "VB") == "found"
    assert lex.verb_lemma(wn, "hated", "run", "VBD") is None


# --------------------------------------------------------------------------- antonyms

def test_antonym_flips_polarity(nlp, wn, polarity):
    doc = nlp("This is a good film .")
    mutants = antonyms(doc, wn, polarity)
    assert "This is a bad film ." in {m.text for m in mutants}
    for m in mutants:
        assert m.position == 3 and polarity[m.replacement] == "neg"


def test_antonym_fixes_the_article(nlp, wn):
    doc = nlp("This is a good film .")
    evil = [m for m in antonyms(doc, wn) if m.replacement == "evil"]
    assert evil and evil[0].text == "This is an evil film ."
    assert [(e.position, e.original, e.replacement) for e in evil[0].edits] == [
        (3, "good", "evil"), (2, "a", "an")]
    assert all(" a evil" not in m.text for m in antonyms(doc, wn))


def test_replace_lemma_changes_every_occurrence(nlp, wn):
    doc = nlp("They approved the plan and the board approves it .")
    mutant = replace_lemma(doc, wn, "approve", "v", "disapprove", "antonym")
    assert mutant is not None
    assert mutant.text == "They disapproved the plan and the board disapproves it ."
    assert [e.position for e in mutant.edits] == [1, 7]
    assert replace_lemma(doc, wn, "sing", "v", "chant", "synonym") is None


# --------------------------------------------------------------------------- gender

def test_gender_swap_round_trips(nlp, pairs, names):
    for text in ("He thanked his brother", "I saw her and gave her his book ."):
        swapped = gender_swap(nlp(text), pairs, names)
        assert swapped is not None and swapped.text != text
        back = gender_swap(nlp(swapped.text), pairs, names)
        assert back is not None and back.text == text
    assert gender_swap(nlp("He thanked his brother"), pairs, names).text == \
        "She thanked her sister"
    assert gender_swap(nlp("I saw her ."), pairs, names).text == "I saw him ."


def test_gender_swap_plain_text_and_case(pairs, names):
    assert gender_swap("He thanked his brother", pairs, names).text == "She thanked her sister"
    # without tags "her" is ambiguous; the pair table maps it to "his"
    assert gender_swap("I saw her", pairs, names).text == "I saw his"
    mutant = gender_swap("THE KING met Mr. Brown.", pairs, names)
    assert mutant.text == "THE QUEEN met Mrs. Brown."
    assert [(e.position, e.original, e.replacement) for e in mutant.edits] == [
        (1, "KING", "QUEEN"), (3, "Mr", "Mrs")]
    assert gender_swap("The film is long .", pairs, names) is None


def test_names_swap_gender_and_keep_case(table, nlp, pairs, names, names_table):
    gender = names_table.groupby(names_table["name"].str.lower())["gender"].agg(set)
    mutant = gender_swap("Michael met SARAH today .", pairs, names)
    first, second = mutant.edits
    assert first.original == "Michael" and gender[first.replacement.lower()] == {"female"}
    assert second.original == "SARAH" and second.replacement.isupper()
    assert gender[second.replacement.lower()] == {"male"}
    assert gender_swap("Michael met SARAH today .", pairs, names) == mutant  # deterministic
    assert gender_swap("Michael met SARAH today .", table("gender_pairs"), names_table) == mutant
    # only the first word of a name: the surname Grant is also a first name, and stays
    for source in ("Michael Grant thanked the crew .", nlp("Michael Grant thanked the crew .")):
        edits = gender_swap(source, pairs, names).edits
        assert [e.original for e in edits] == ["Michael"]


def test_gendered_word_used_as_verb_is_kept(nlp, pairs, names):
    assert gender_swap(nlp("They miss her ."), pairs, names).text == "They miss him ."


def test_name_swaps_are_opposite_gender(names_table, names):
    gender = names_table.groupby(names_table["name"].str.lower())["gender"].agg(set)
    assert all(len(gender[name]) == 1 for name in names)  # ambiguous names left out
    for name, swap in list(names.items())[:500]:
        assert gender[swap.lower()] != gender[name]
    assert lex.name_swaps(names_table) == names


def test_match_case():
    assert [match_case(t, "queen") for t in ("KING", "King", "king")] == [
        "QUEEN", "Queen", "queen"]


# --------------------------------------------------------------------------- inversion

def test_invert_looks_up_the_contrast(table):
    table = table("contrast_pairs")
    lookup = lex.contrast_lookup(table)
    row = table.iloc[5]
    mutant = invert(row["original"], lookup)
    assert mutant.text == row["contrast"] and mutant.operator == "invert"
    assert mutant.original == row["original"] and mutant.position is None
    assert invert("  " + row["original"].replace(" ", "  "), lookup).text == row["contrast"]
    assert invert(row["original"], table).text == row["contrast"]  # the table itself works too
    with pytest.raises(LingtestError, match="not an original review"):
        invert("A review nobody wrote.", lookup)


def test_polarity_lookup_keeps_clear_words_only():
    table = pd.DataFrame({"word": ["good", "bad", "table", "meh"],
                          "polarity": ["pos", "neg", "neutral", "pos"],
                          "strength": [0.75, -1.0, 0.0, 0.1]})
    assert lex.polarity_lookup(table) == {"good": "pos", "bad": "neg"}


def test_synonym_rewrite_replaces_words_with_the_given_probability(nlp, wn, polarity):
    import numpy as np

    from lingtest.tasks.text.rewrite import rewrite_slots, synonym_rewrite
    doc = nlp("The movie was a wonderful and moving story ; the actors play their parts "
              "beautifully and the director shows a rare talent for quiet scenes .")
    every = synonym_rewrite(doc, wn, np.random.default_rng(0), 1.0)
    replaceable = {s.position for s in rewrite_slots(doc, wn)}
    assert len(every.edits) >= 6 and {e.position for e in every.edits} <= replaceable | {
        p - 1 for p in replaceable}  # a/an fixes sit before a replaced word
    assert not any(doc[e.position].is_stop for e in every.edits if e.position + 1 not in
                   replaceable or doc[e.position].lower_ not in ("a", "an"))
    half = [len(synonym_rewrite(doc, wn, np.random.default_rng(s), 0.5).edits) for s in range(8)]
    assert 0 < np.mean(half) < len(every.edits)
    again = synonym_rewrite(doc, wn, np.random.default_rng(3), 0.5)
    assert again == synonym_rewrite(doc, wn, np.random.default_rng(3), 0.5)
    guided = synonym_rewrite(doc, wn, np.random.default_rng(0), 1.0, polarity)
    assert guided is not None and len(guided.edits) < len(every.edits)
    assert all(polarity.get(e.original.lower()) in ("pos", "neg") for e in guided.edits
               if e.original.lower() not in ("a", "an"))
