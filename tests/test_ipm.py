"""Input parameter models for KomMKonLLM: values, derivation, export, and real questions."""
from __future__ import annotations

import json
import statistics

import pandas as pd
import pytest

from lingtest.tasks.consistency.ipm import IPM, build_ipm, build_ipms, derive_prompt
from lingtest.tasks.core.errors import LingtestError


def _values(ipm: IPM) -> dict[str, tuple[str, ...]]:
    """Token → values (for questions whose tokens are distinct)."""
    return {p.token: p.values for p in ipm.parameters}


def test_function_words_numbers_and_names_keep_one_value(nlp, wn):
    ipm = build_ipm("q", "Is Vienna a city with 2 million people and 12 parks?", nlp, wn)
    values = _values(ipm)
    for token in ("Is", "Vienna", "a", "with", "2", "million", "and", "12", "?"):
        assert values[token] == (token,), token
    assert ipm.parameters[1].pos == "PROPN"
    assert values["city"][0] == "city" and len(values["city"]) > 1


def test_nouns_and_adjectives_get_same_pos_synonyms_in_wordnet_order(nlp, wn):
    ipm = build_ipm("q", "Is the car red?", nlp, wn)
    car = _values(ipm)["car"]
    assert car == ("car", "auto", "automobile")
    assert all(wn.synsets(value, pos="n") for value in car)
    blue = _values(build_ipm("q", "is the sky blue", nlp, wn))["blue"]
    assert blue == ("blue", "bluish", "blueish")


def test_inflection_and_case_follow_the_token(nlp, wn):
    cars = _values(build_ipm("q", "Cars are usually red.", nlp, wn))["Cars"]
    assert cars == ("Cars", "Autos", "Automobiles")
    bought = _values(build_ipm("q", "Has he bought the car?", nlp, wn))["bought"]
    assert bought[1] == "purchased"
    shouting = _values(build_ipm("q", "Is the CAR red?", nlp, wn))["CAR"]
    assert shouting == ("CAR", "AUTO", "AUTOMOBILE")


@pytest.mark.parametrize("max_values", [1, 2, 5])
def test_max_values_is_respected(nlp, wn, max_values):
    ipm = build_ipm("q", "Do children eat apples quickly in the house?", nlp, wn, max_values)
    assert max(ipm.levels()) == max_values
    assert len(_values(ipm)["children"]) == max_values


def test_max_values_below_one_is_an_error(nlp, wn):
    with pytest.raises(LingtestError, match="consistency.max_values"):
        build_ipm("q", "Is the car red?", nlp, wn, max_values=0)
    table = pd.DataFrame({"question_id": ["q"], "question": ["Is the car red?"]})
    with pytest.raises(LingtestError, match="consistency.max_values"):
        build_ipms(table, nlp, wn, max_values=0)


@pytest.mark.parametrize("question", ["is the car red", "Is the car,  or the house, red?",
                                      "  Was it built in 1897 by Emperor Franz Joseph I? "])
def test_zero_row_gives_the_question_back(nlp, wn, question):
    ipm = build_ipm("q", question, nlp, wn)
    assert ipm.derive([0] * len(ipm.parameters)) == question


def test_derive_replaces_exactly_the_chosen_tokens(nlp, wn):
    ipm = build_ipm("q", "Is the car,  or the house, red?", nlp, wn)
    tokens = [p.token for p in ipm.parameters]
    row = [0] * len(tokens)
    row[tokens.index("car")] = 2
    row[tokens.index("red")] = 1
    assert ipm.derive(row) == "Is the automobile,  or the house, reddish?"
    with pytest.raises(LingtestError, match="value index 3"):
        ipm.derive([3] * len(tokens))
    with pytest.raises(LingtestError, match="needs"):
        ipm.derive([0])


def test_json_round_trip_and_bad_json(nlp, wn):
    ipm = build_ipm("kommkonllm-00", "Do children eat apples quickly?", nlp, wn)
    exported = json.loads(json.dumps(ipm.to_json()))
    assert exported["question"] == "Do children eat apples quickly?"
    assert [p["name"] for p in exported["parameters"]][:2] == ["p0", "p1"]
    assert IPM.from_json(exported) == ipm
    exported["parameters"][1]["values"] = ["kids", "children"]
    with pytest.raises(LingtestError, match="first value"):
        IPM.from_json(exported)
    with pytest.raises(LingtestError, match="missing"):
        IPM.from_json({"question": "x"})


def test_builds_are_deterministic_and_batch_equals_single(nlp, wn):
    questions = ["is house tax and property tax are same", "Do children eat apples quickly?"]
    table = pd.DataFrame({"question_id": ["a", "b"], "question": questions})
    first = build_ipms(table, nlp, wn)
    assert build_ipms(table, nlp, wn) == first
    assert [build_ipm(q_id, q, nlp, wn) for q_id, q in zip("ab", questions)] == first


def test_real_questions(nlp, wn, table):
    questions = table("questions")
    sample = questions.groupby("source").head(10)
    assert sorted(sample["source"].unique()) == ["boolq", "kommkonllm"]
    ipms = build_ipms(sample, nlp, wn)
    assert [i.question_id for i in ipms] == sample["question_id"].tolist()
    for ipm in ipms:
        assert min(ipm.levels()) >= 1 and max(ipm.levels()) <= 3
        assert ipm.derive([0] * len(ipm.parameters)) == ipm.question
    varying = [sum(level > 1 for level in ipm.levels()) for ipm in ipms]
    mean = statistics.mean(varying)
    # Measured on the mirror: 7.65 (BoolQ ~2.6 per question, KomMKonLLM ~13).
    assert 5.0 <= mean <= 10.0, f"mean parameters with >1 value: {mean}"


def test_derive_prompt_joins_non_empty_parts():
    assert derive_prompt("Is it red?", "", "Return a JSON Boolean.") == \
        "Is it red? Return a JSON Boolean."
    assert derive_prompt("Is it red?", "Answer: ", " ") == "Answer: Is it red?"
    assert derive_prompt("is it red", "", "") == "is it red"


def test_guide_ipm_equals_the_guides_published_synonyms(nlp, wn):
    """``build_guide_ipms`` rebuilds the guide's ``generate_synonyms``: for its sentence 1
    the synonym lists are its published ``synonyms-1.txt`` line for line (proper nouns and
    multi-word synonyms included, lower-cased, 3 values), and row 0 is its published first
    prompt's question (all 27 published lists match; docs/methods/consistency.md, Fidelity)."""
    import ast

    from test_consistency_import import GUIDE_PROMPTS_1, SENTENCE_1, SYNONYMS_1

    from lingtest.tasks.consistency.ipm import build_guide_ipms

    [ipm] = build_guide_ipms(pd.DataFrame({"question_id": ["g1"], "question": [SENTENCE_1]}),
                             nlp, wn, max_values=3)
    published = [[value.replace("_", " ") for value in ast.literal_eval(line)]
                 for line in SYNONYMS_1.splitlines()]
    assert [list(p.values) for p in ipm.parameters] == published
    assert ipm.derive([0] * len(ipm.parameters)) == ipm.question
    assert derive_prompt(ipm.question, "", "? Return a JSON boolean.", "none") == \
        GUIDE_PROMPTS_1[0]
    assert sum(len(p.values) > 1 for p in ipm.parameters) == 20
    # "Vienna" is a proper noun: the guide varies it, lingtest's own IPM does not
    vienna = [p for p in ipm.parameters if p.token == "vienna"][0]
    assert vienna.pos == "PROPN" and vienna.values[1] == "austrian capital"
    two = build_guide_ipms(pd.DataFrame({"question_id": ["g"], "question": ["Is the car red?"]}),
                           nlp, wn, max_values=2)[0]
    # spaCy tags "red" here a verb (VBN) and WordNet has no verb "red": one value, as the
    # guide would have it
    assert [p.values for p in two.parameters] == [("is",), ("the",), ("car", "auto"),
                                                  ("red",), ("?",)]
