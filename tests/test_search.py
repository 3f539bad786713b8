"""Seed search and transformations on hand-made sentences tagged by the real spaCy pipeline."""
from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.capabilities import search as S
from lingtest.tasks.capabilities.specs import CapabilitySpec, load_specs
from lingtest.tasks.core.cases import case_id
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT
from lingtest.tasks.data.sst import detokenize

SPECS = {s.id: s for s in load_specs(PACKAGE_ROOT / "tasks" / "capabilities" / "specs")}
POLARITY = {"good": "pos", "great": "pos", "joy": "pos", "superb": "pos", "wonderful": "pos",
            "bad": "neg", "awful": "neg", "dull": "neg", "boring": "neg",
            "car": "neutral", "cars": "neutral", "red": "neutral", "old": "neutral",
            "film": "neutral", "films": "neutral", "plot": "neutral", "the": "neutral",
            "is": "neutral", "station": "neutral"}


@pytest.fixture(scope="module")
def nlp():
    from lingtest.tasks.models.nlp import load_spacy

    return load_spacy("en_core_web_sm", exclude=("parser", "ner"))


@pytest.fixture(scope="module")
def polarity() -> S.LexiconPolarity:
    words = pd.DataFrame({"word": list(POLARITY), "polarity": list(POLARITY.values())})
    return S.LexiconPolarity(words)


@pytest.fixture(scope="module")
def tag(nlp):
    def tag_rows(*rows: tuple[str, str]) -> pd.DataFrame:
        """(label, tokenised sentence) pairs → the tagged table search_seeds reads."""
        sst = pd.DataFrame({"sentence_id": [f"test-{i:05d}" for i in range(len(rows))],
                            "split": "test", "tokens": [s.split() for _, s in rows],
                            "text": [detokenize(s.split()) for _, s in rows],
                            "label3": [label for label, _ in rows]})
        return S.tag_sst(sst, nlp)
    return tag_rows


def _spec(**search) -> CapabilitySpec:
    return CapabilitySpec.model_validate(
        {"id": "T", "capability": "c", "description": "d", "search": search})


def _found(spec: CapabilitySpec, tagged: pd.DataFrame, polarity) -> list[str]:
    matches = S.search_seeds(spec, tagged, polarity)
    return [tagged.set_index("sentence_id").loc[i, "text"] for i in matches["sentence_id"]]


# --------------------------------------------------------------------------- search rules

def test_tagging_keeps_one_tag_per_sst_token(tag) -> None:
    tagged = tag(("neg", "-LRB- The plot is n't good -RRB- ."))
    assert len(tagged.loc[0, "pos"]) == len(tagged.loc[0, "tokens"]) == 8
    assert tagged.loc[0, "pos"][:3] == ["PUNCT", "DET", "NOUN"] and tagged.loc[0, "tag"][-1] == "."


def test_length_bound_is_strict_and_ignores_the_final_stop(tag, polarity) -> None:
    tagged = tag(("neutral", "The car is red ."), ("neutral", "The old car is red ."),
                 ("neutral", "The old car is very red ."))
    assert _found(_spec(label="neutral", max_length=5), tagged, polarity) == ["The car is red."]
    assert len(_found(_spec(label="neutral", max_length=6), tagged, polarity)) == 2


def test_label_must_match(tag, polarity) -> None:
    tagged = tag(("pos", "The car is red ."), ("neutral", "The car is red ."))
    matches = S.search_seeds(_spec(label=["neutral", "neg"]), tagged, polarity)
    assert list(matches["sentence_id"]) == ["test-00001"]


def test_required_words_need_polarity_and_pos_together(tag, polarity) -> None:
    tagged = tag(("pos", "The good car ."), ("pos", "The car is good ."),
                 ("pos", "The joy of cars ."), ("pos", "The red car stopped at the station ."))
    rule = {"label": "pos", "require_words": [{"polarity": "pos", "pos": "ADJ"}]}
    assert _found(_spec(**rule), tagged, polarity) == ["The good car.", "The car is good."]
    nouns = {"label": "pos", "require_words": [{"polarity": "pos", "pos": ["NOUN"]}]}
    assert _found(_spec(**nouns), tagged, polarity) == ["The joy of cars."]
    both = {"label": "pos", "require_words": [{"polarity": "neutral", "pos": "ADJ"},
                                              {"words": ["station"]}]}
    assert _found(_spec(**both), tagged, polarity) == ["The red car stopped at the station."]


def test_excluded_words_remove_the_sentence(tag, polarity) -> None:
    tagged = tag(("neutral", "The good car is awful ."), ("neutral", "The good car ."),
                 ("neutral", "The car is red ."))
    rule = {"label": "neutral", "exclude_words": [{"polarity": "neg", "pos": ["ADJ", "NOUN"]}]}
    assert _found(_spec(**rule), tagged, polarity) == ["The good car.", "The car is red."]
    lc1_like = {"label": "neutral", "require_words": [{"polarity": "neutral", "pos": "ADJ"}],
                "exclude_words": [{"polarity": ["pos", "neg"], "pos": ["ADJ", "NOUN"]}]}
    assert _found(_spec(**lc1_like), tagged, polarity) == ["The car is red."]


def test_starts_with_demonstrative_and_copula(tag, polarity) -> None:
    tagged = tag(("neg", "This is bad ."), ("neg", "These are bad films ."),
                 ("neg", "It is bad ."), ("neg", "This film is bad ."),
                 ("neg", "This is not bad ."), ("neg", "this is bad ."), ("neg", "This is"))
    found = _found(SPECS["LC4"], tagged, polarity)
    assert found == ["This is bad.", "These are bad films.", "this is bad.", "This is"]


def test_fillers_are_matches_but_not_seeds(tag, polarity) -> None:
    tagged = tag(("pos", "The film is great ."), ("neutral", "The film is set in Paris ."),
                 ("neg", "The plot is dull ."))
    matches = S.search_seeds(SPECS["LC7"], tagged, polarity)
    assert list(zip(matches["label"], matches["is_seed"], matches["rule"])) == [
        ("pos", True, 0), ("neutral", False, 1)]
    assert list(S.sample_seeds(matches, 5, np.random.default_rng(0))["label"]) == ["pos"]


def test_real_lexicon_finds_lc2_sentences(tag, table) -> None:
    real = S.load_word_polarity("lexicon", table("word_polarity"))
    tagged = tag(("pos", "A wonderful film ."), ("neg", "A dreadful film ."),
                 ("pos", "A wonderful film with a dreadful plot ."), ("neutral", "A red car ."))
    matches = S.search_seeds(SPECS["LC2"], tagged, real)
    assert list(zip(matches["text"], matches["rule"])) == [("A wonderful film.", 0),
                                                           ("A dreadful film.", 1)]


# --------------------------------------------------------------------------- transformations

def _cases(spec_id: str, tagged: pd.DataFrame, polarity, seed: int = 0) -> pd.DataFrame:
    spec = SPECS[spec_id]
    matches = S.search_seeds(spec, tagged, polarity)
    seeds = matches[matches["is_seed"]].reset_index(drop=True)
    return S.apply_transform(spec, seeds, np.random.default_rng(seed), pool=matches)


def _choices(case: pd.Series) -> dict[str, str]:
    return json.loads(case["provenance"])["choices"]


def test_embedding_drops_final_punctuation_and_lowercases(tag) -> None:
    tagged = tag(("pos", "The Rock is great ."), ("pos", "Paris is lovely ."),
                 ("pos", "I love it !"), ("pos", "US films rock"))
    assert [S.embed(t, p) for t, p in zip(tagged["tokens"], tagged["pos"])] == [
        "the Rock is great", "Paris is lovely", "I love it", "US films rock"]


def test_lc3_present_opinion_prevails(tag, polarity) -> None:
    tagged = tag(("pos", "The film is great ."), ("neg", "The plot is dull ."))
    cases = _cases("LC3", tagged, polarity)
    pos, neg = cases.iloc[0], cases.iloc[1]
    c = _choices(pos)
    assert pos["text"] == f"{c['past']} the film is great, {c['but']} {c['now']}"
    assert c["now"] in ("now I don't like it.", "now I hate it.") and pos["expectation"] == "neg"
    c = _choices(neg)
    assert neg["text"] == f"{c['past']} the plot is dull, {c['but']} now I like it."
    assert neg["expectation"] == "pos" and neg["label_source"] == "spec"


def test_lc4_negates_the_copula(tag, polarity) -> None:
    tagged = tag(("neg", "This is bad ."), ("neg", "These are bad films ."))
    seen = set()
    for seed in range(12):
        cases = _cases("LC4", tagged, polarity, seed)
        assert cases.iloc[0]["text"] in ("This is not bad.", "This isn't bad.")
        assert cases.iloc[1]["text"] in ("These are not bad films.", "These aren't bad films.")
        assert set(cases["expectation"]) == {"neutral|pos"}
        seen.update(cases["text"])
    assert len(seen) == 4  # both negated forms of both copulas occur


def test_negate_keeps_case_and_skips_sentences_without_the_word() -> None:
    rng = np.random.default_rng(1)
    assert S.negate(["Is", "it", "bad", "?"], {"is": ["is not"]}, rng)[0] == "Is not it bad?"
    assert S.negate(["It", "was", "bad"], {"is": ["is not"]}, rng) is None


def test_lc6_negates_at_the_end(tag, polarity) -> None:
    case = _cases("LC6", tag(("neg", "The plot is dull .")), polarity).iloc[0]
    c = _choices(case)
    assert case["text"] == f"{c['intro']} the plot is dull, {c['ending']}."
    assert case["expectation"] == "neutral|pos"


def test_lc7_puts_a_neutral_sentence_in_the_middle(tag, polarity) -> None:
    tagged = tag(("pos", "The film is great ."), ("neutral", "The film is set in Paris ."))
    case = _cases("LC7", tagged, polarity).iloc[0]
    c = _choices(case)
    assert case["text"] == f"{c['intro']} the film is set in Paris; the film is great."
    assert case["expectation"] == "neg" and case["seed_id"] == "test-00000+test-00001"


def test_lc8_pairs_opposite_labels_and_expects_the_authors(tag, polarity) -> None:
    tagged = tag(("pos", "The film is great ."), ("neg", "The plot is dull ."),
                 ("neutral", "The film is set in Paris ."))
    cases = _cases("LC8", tagged, polarity)
    pos, neg = cases.iloc[0], cases.iloc[1]
    assert pos["text"] == f"{_choices(pos)['intro']} the plot is dull, but I think that " \
                          "the film is great."
    assert pos["expectation"] == "pos" and pos["seed_id"] == "test-00000+test-00001"
    assert neg["text"].endswith("the film is great, but I think that the plot is dull.")
    assert neg["expectation"] == "neg"
    alone = tag(("pos", "The film is great ."), ("pos", "The car is good ."))
    assert _cases("LC8", alone, polarity).empty  # no sentence of the opposite label


def test_a_filler_is_never_the_seed_itself(tag, polarity) -> None:
    spec = CapabilitySpec.model_validate({
        "id": "Pairs", "capability": "c", "description": "d", "search": {"label": "pos"},
        "transform": {"templates": [{"template": "{s} and {s1}.", "fillers": {"s1": "pos"},
                                     "expected": "pos"}]}})
    tagged = tag(("pos", "The film is great ."), ("pos", "The car is good ."))
    matches = S.search_seeds(spec, tagged, polarity)
    for seed in range(5):
        cases = S.apply_transform(spec, matches, np.random.default_rng(seed))
        assert list(cases["text"]) == ["the film is great and the car is good.",
                                       "the car is good and the film is great."]
    assert S.apply_transform(spec, matches.iloc[:1], np.random.default_rng(0)).empty


@pytest.mark.parametrize("spec_id, label, answer, expected", [
    ("LC9", "pos", "yes", "pos"), ("LC9", "neg", "yes", "neg"),
    ("LC10", "pos", "no", "neg"), ("LC11", "neg", "no", "neutral|pos")])
def test_questions(tag, polarity, spec_id: str, label: str, answer: str, expected: str) -> None:
    case = _cases(spec_id, tag((label, "The film is great .")), polarity).iloc[0]
    assert case["text"] == f"{_choices(case)['intro']} the film is great? {answer}"
    assert _choices(case)["intro"] in ("Do I think that", "Do I agree that")
    assert case["expectation"] == expected


def test_untransformed_seed_case_follows_the_contract(tag, polarity) -> None:
    cases = _cases("LC2", tag(("pos", "The good car .")), polarity)
    assert list(cases.columns) == S.CASE_COLUMNS and len(cases) == 1
    case = cases.iloc[0]
    assert case["case_id"] == case_id("capabilities", ["The good car."], "pos")
    assert (case["method"], case["capability"], case["kind"]) == ("capabilities", "LC2", "seed")
    assert (case["expectation"], case["label_source"], case["seed_id"]) == ("pos", "sst",
                                                                         "test-00000")
    provenance = json.loads(case["provenance"])
    assert provenance["rule"] == 0 and provenance["sources"] == {"s": "test-00000"}
    assert provenance["spec_file"].endswith("LC2.yaml")


# --------------------------------------------------------------------------- determinism

def test_sampling_and_transforms_are_deterministic_per_seed(tag, polarity) -> None:
    rows = [("pos", f"The film number {i} is great .") for i in range(30)]
    tagged = tag(*rows, ("neg", "The plot is dull ."), ("neg", "The film is bad ."))
    specs = [SPECS["LC3"], SPECS["LC8"]]
    first, counts = S.seed_cases(specs, tagged, polarity, seeds_per_lc=5, seed=7)
    again, _ = S.seed_cases(specs, tagged, polarity, seeds_per_lc=5, seed=7)
    other, _ = S.seed_cases(specs, tagged, polarity, seeds_per_lc=5, seed=8)
    pd.testing.assert_frame_equal(first, again)
    assert list(first["seed_id"]) != list(other["seed_id"])
    assert list(counts["matches"]) == [32, 32] and list(counts["seeds"]) == [5, 5]
    matches = S.search_seeds(SPECS["LC3"], tagged, polarity)
    picked = S.sample_seeds(matches, 8, np.random.default_rng(3))
    assert list(picked["sentence_id"]) == sorted(picked["sentence_id"])  # in table order
    assert len(S.sample_seeds(matches, 40, np.random.default_rng(0))) == 32  # all of them


def test_trials_sample_anew_and_name_the_trials_of_each_case(tag, polarity) -> None:
    """Trial 0 is the one-trial run's sampling; trial t samples with seed + t; a case
    drawn by two trials is held once with both trials in its provenance."""
    from lingtest.tasks.capabilities.suite_tasks import seed_cases

    trial_seed_cases = seed_cases.fn

    rows = [("pos", f"The film number {i} is great .") for i in range(30)]
    tagged = tag(*rows, ("neg", "The plot is dull ."), ("neg", "The film is bad ."))
    specs = [SPECS["LC3"], SPECS["LC8"]]
    one, one_counts = trial_seed_cases(specs, tagged, polarity, 5, 7, trials=1)
    pd.testing.assert_frame_equal(one, S.seed_cases(specs, tagged, polarity, 5, 7)[0])
    three, counts = trial_seed_cases(specs, tagged, polarity, 5, 7, trials=3)
    assert three["case_id"].is_unique
    trials = {c: json.loads(p)["trials"] for c, p in zip(three["case_id"], three["provenance"])}
    for t in range(3):
        drawn = set(S.seed_cases(specs, tagged, polarity, 5, 7 + t)[0]["case_id"])
        assert drawn == {c for c, ts in trials.items() if t in ts}
    assert len(three) > len(one)  # the later trials drew other seeds
    assert list(counts["cases"]) == list(one_counts["cases"])  # trial 0's counts
    assert list(counts["cases_all_trials"]) == list(three["capability"].value_counts()[
        list(counts["capability"])])


# --------------------------------------------------------------------------- SentiWordNet

def test_sentiwordnet_missing_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LingtestError, match="nltk.downloader .* sentiwordnet"):
        S.load_word_polarity("sentiwordnet", nltk_data=tmp_path)
    with pytest.raises(LingtestError, match="unknown source"):
        S.load_word_polarity("vader")


def test_sentiwordnet_scores_words_by_pos(tmp_path: Path, mirror: Path) -> None:
    from lingtest.tasks.text.wordnet import wordnet

    corpora = tmp_path / "corpora"
    (corpora / "sentiwordnet").mkdir(parents=True)
    shutil.copy(mirror / "nltk_data" / "corpora" / "wordnet.zip", corpora)  # nltk skips links
    assert zipfile.is_zipfile(corpora / "wordnet.zip")
    wn = wordnet(tmp_path)
    rows = [("a", wn.synset("good.a.01"), 0.75, 0.0), ("a", wn.synset("bad.a.01"), 0.0, 0.625),
            ("n", wn.synset("film.n.01"), 0.0, 0.0)]
    lines = ["# POS\tID\tPosScore\tNegScore\tSynsetTerms\tGloss"]
    lines += [f"{p}\t{s.offset():08d}\t{ps}\t{ns}\t{s.name()}#1\tgloss" for p, s, ps, ns in rows]
    (corpora / "sentiwordnet" / "SentiWordNet_3.0.0.txt").write_text("\n".join(lines) + "\n")
    swn = S.load_word_polarity("sentiwordnet", nltk_data=tmp_path)
    assert (swn("Good", "ADJ"), swn("bad", "ADJ"), swn("film", "NOUN")) == ("pos", "neg",
                                                                            "neutral")
    assert swn("good", "DET") is None and swn("zzzz", "NOUN") is None and swn.name == "sentiwordnet"
