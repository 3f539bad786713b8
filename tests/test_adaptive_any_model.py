"""AdaTest beyond sentiment: a classifier over its own labels (an aspect classifier trained
here on the hotel tree's topics), a raw-score model (AdaTest's RawScorer), a generation model
with a scoring function (the packaged SmolLM2 judged by VADER), and ``{a|b}`` templates
expanded when filed — scored, ranked, filed in a review session and read back as cases."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.adaptive.cases import SCORE_BELOW, parse_expectation, tree_to_cases
from lingtest.tasks.adaptive.label_model import rank_suggestions
from lingtest.tasks.adaptive.prompts import PromptSettings
from lingtest.tasks.adaptive.review_app.session import ReviewSession, ReviewSettings
from lingtest.tasks.adaptive.scoring import score_cases
from lingtest.tasks.adaptive.templates import expand_template, is_template
from lingtest.tasks.adaptive.tested_models import load_tested_model
from lingtest.tasks.adaptive.tree import new_tree, read_tree, tree_csv, write_tree
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.sentiment import VaderModel, load_sentiment_model

ASPECTS = '''"""Which aspect of a hotel a review sentence is about: TF-IDF + logistic regression
fitted on the hotel tree's Rooms / Service / Price / Location tests."""
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

TOPICS = {"/Rooms": "rooms", "/Service": "service", "/Price": "price", "/Location": "location"}


class Aspect:
    def __init__(self):
        tree = pd.read_csv(TREE, dtype=str, keep_default_na=False)
        rows = tree[tree["topic"].isin(TOPICS)]
        self.pipe = make_pipeline(TfidfVectorizer(ngram_range=(1, 2)),
                                  LogisticRegression(max_iter=1000, C=10.0))
        self.pipe.fit(rows["input"], rows["topic"].map(TOPICS))
        self.labels = list(self.pipe.classes_)

    def predict_proba(self, texts):
        return self.pipe.predict_proba(texts)
'''

NEGATIVITY = '''"""A raw-score model: VADER's share of negative words is the failure score."""
from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

_vader = SentimentIntensityAnalyzer()


class Negativity:
    def score(self, texts):
        return [_vader.polarity_scores(t)["neg"] for t in texts]
'''


def sentiment(spec: str):
    return load_sentiment_model(spec, (0.5, 0.5))


@pytest.fixture()
def project(mirror, tmp_path):
    tree = shutil.copy(mirror / "adatest" / "imdb_hotel_conversion.csv", tmp_path / "hotel.csv")
    (tmp_path / "aspects.py").write_text(ASPECTS.replace("TREE", repr(str(tree))))
    (tmp_path / "negativity.py").write_text(NEGATIVITY)
    return tmp_path


def aspect_tree(folder: Path) -> Path:
    rows = [("/Rooms", "The bed was soft and the pillows fluffy", "rooms", "pass"),
            ("/Rooms", "Our suite had a view of the sea", "rooms", "pass"),
            ("/Rooms", "The minibar was empty", "price", "fail"),
            ("/Staff", "The receptionist smiled at us", "service", "pass")]
    tree = new_tree([{"topic": t, "input": i, "output": o, "label": lab, "labeler": "ada",
                      "description": ""} for t, i, o, lab in rows],
                    [f"{k:032x}" for k in range(1, len(rows) + 1)])
    path = folder / "aspects.csv"
    write_tree(tree, path)
    return path


def test_a_classifier_over_its_own_labels_is_scored_ranked_and_reviewed(project):
    model = load_tested_model("python:aspects.py:Aspect", sentiment, root=project)
    assert model.kind == "classifier"
    assert model.labels == ("location", "price", "rooms", "service")
    path = aspect_tree(project)
    cases = tree_to_cases(read_tree(path))
    assert list(cases["expectation"][:3]) == ["should output rooms", "should output rooms",
                                              "should not output price"]
    results = score_cases(cases, model)
    assert set(results["verdict"]) <= {"pass", "fail"}  # every label is the model's own
    probs = json.loads(results["probabilities"][0])
    assert set(probs) == set(model.labels) and abs(sum(probs.values()) - 1) < 1e-5
    answer = model.predict_with_probabilities(["The bed was soft and the pillows fluffy"])[0]
    assert results["verdict"][0] == ("pass" if answer == ["rooms"] else "fail")

    # suggestions rank by P(output the topic's tests do not ask for)
    texts = ["The carpet in our room was stained", "The price was far too high"]
    ranked = rank_suggestions(pd.DataFrame({"input": texts}), read_tree(path), "/Rooms",
                              [model])
    assert ranked["input"].iloc[0] == "The price was far too high"
    assert ranked[f"{model.model_id} output"].iloc[0] == "price"

    session = ReviewSession(path, [model], lambda: None, ReviewSettings(
        reviewer="ada", prompt_settings=PromptSettings(prompt_diversity=False)))
    assert session.view("/Rooms")["labels"] == list(model.labels)
    rid = session.add_test("/Rooms", "The shower had no hot water", "fail")
    session.set_expected(rid, "rooms")
    row = read_tree(path).frame.loc[rid]
    assert (row["output"], row["label"]) == ("rooms", "pass")
    with pytest.raises(LingtestError, match="use one of"):
        session.set_expected(rid, "pos")  # a sentiment label is not this model's


def test_a_raw_score_model_files_tests_that_expect_a_low_score(project):
    model = load_tested_model("python:negativity.py:Negativity", sentiment, root=project)
    assert model.kind == "raw"
    path = aspect_tree(project)
    session = ReviewSession(path, [model], lambda: None, ReviewSettings(reviewer="ada"))
    rid = session.add_test("/Rooms", "The room was dirty and awful", "fail")
    frame = read_tree(path).frame
    row = frame.loc[rid]
    expected_score = VaderModel().analyzer.polarity_scores("The room was dirty and awful")["neg"]
    assert row["output"] == str(round(expected_score, 6))
    assert row["expectation"] == SCORE_BELOW.format(threshold=0.5)
    assert frame.loc[frame.index != rid, "expectation"].eq("").all()
    cases = tree_to_cases(read_tree(path))
    mine = cases[cases["tree_id"] == rid].iloc[0]
    assert parse_expectation(mine["expectation"]).kind == "score_below"
    results = score_cases(cases, model).set_index("case_id")
    scored = results.loc[mine["case_id"]]
    assert scored["score"] == pytest.approx(expected_score)
    assert scored["verdict"] == ("fail" if expected_score >= 0.5 else "pass")
    # a classifier cannot answer a raw test, nor a raw model a label test
    assert results.drop(mine["case_id"])["verdict"].eq("undefined").all()
    assert score_cases(cases[cases["tree_id"] == rid], VaderModel())["verdict"].tolist() == \
        ["undefined"]
    assert tree_csv(read_tree(path)) == path.read_text()  # the new column round-trips


def test_a_generation_model_judged_by_a_scorer(project):
    spec = "HuggingFaceTB/SmolLM2-135M-Instruct#scorer=vader&fail_label=neg&name=smol"
    model = load_tested_model(spec, sentiment, root=project)
    assert (model.kind, model.model_id) == ("raw", "smol")
    prompts = ["Write one sentence about a hotel room.", "Describe a clean hotel lobby."]
    outputs, scores = model.outputs_and_scores(prompts)
    assert all(o.strip() for o in outputs)
    vader = VaderModel()
    np.testing.assert_allclose(scores, vader.predict_with_probabilities3(outputs)[1][:, 0])
    again = model.outputs_and_scores(prompts)  # greedy: the same outputs
    assert again[0] == outputs
    with pytest.raises(LingtestError, match="fail_label"):
        load_tested_model("HuggingFaceTB/SmolLM2-135M-Instruct#scorer=vader&fail_label=bad",
                          sentiment, root=project)


def test_templates_expand_on_filing_and_preview_scores_the_worst(project):
    assert expand_template("The {room|suite} was {dirty|filthy}") == [
        "The room was dirty", "The room was filthy", "The suite was dirty",
        "The suite was filthy"]
    assert expand_template("A {x|x|y} day") == ["A x day", "A y day"]
    assert not is_template("a {plain} brace") and expand_template("a {plain} brace") == \
        ["a {plain} brace"]
    with pytest.raises(LingtestError, match="expands to 81 tests"):
        expand_template("{a|b|c} {a|b|c} {a|b|c} {a|b|c}", limit=64)
    path = aspect_tree(project)
    session = ReviewSession(path, [VaderModel()], lambda: None, ReviewSettings(reviewer="ada"))
    worst = session.preview("/Rooms", "The {room|bed} was {lovely|awful}")[0]
    scores = [session.preview("/Rooms", t)[0]["score"] for t in
              expand_template("The {room|bed} was {lovely|awful}")]
    assert worst["score"] == pytest.approx(max(scores))
    assert worst["output"].endswith("(worst of 4)")
    before = read_tree(path).tests
    session.add_test("/Rooms", "The {room|bed} was {lovely|awful}", "fail")
    added = read_tree(path).tests.iloc[len(before):]
    assert list(added["input"]) == expand_template("The {room|bed} was {lovely|awful}")
    assert set(added["label"]) == {"fail"} and set(added["topic"]) == {"/Rooms"}
    assert {json.loads(p)["template"] for p in added["provenance"]} == \
        {"The {room|bed} was {lovely|awful}"}
    assert session.undo().startswith("add 4 tests of")
    assert len(read_tree(path).tests) == len(before)


def test_checked_before_loading(project):
    from lingtest.flows.registry import load_params
    from lingtest.tasks.core.paths import Workspace
    from lingtest.flows.validation import check_model

    def check_tested_model(key, spec, params, workspace):
        check_model(key, spec, "tested model", params, workspace)

    workspace = Workspace.current()
    params = load_params(workspace.root)
    check_tested_model("--model", str(project / "aspects.py").join(["python:", ":Aspect"]),
                       params, workspace)
    check_tested_model("--model", "vader", params, workspace)
    with pytest.raises(LingtestError, match="nonexistent/scorer.*missing"):
        check_tested_model("--model", "HuggingFaceTB/SmolLM2-135M-Instruct"
                           "#scorer=nonexistent/scorer", params, workspace)
    with pytest.raises(LingtestError, match="unknown option 'scorers'"):
        check_tested_model("--model", "vader#scorers=vader", params, workspace)


PARAPHRASER = '''"""A scripted pair writer: completes a pair prompt with pairs (and one line that is not)."""
SEEN = []

LINES = ['The towels were fresh" ~ "The towels were clean"',
         'The room was lovely" ~ "The room was awful"',
         'The lift was slow"',
         'The bed was comfy" ~ "The bed was comfortable"',
         'The room was lovely" ~ "The room was awful"']


def generate(prompts, n, seed):
    SEEN.extend(prompts)
    return [LINES[:n] for _ in prompts]
'''


def test_invariance_pairs_are_suggested_ranked_and_filed(project):
    from lingtest.tasks.adaptive.generators import make_generator
    from lingtest.tasks.adaptive.pairs import is_pair_topic, parse_pair

    (project / "paraphraser.py").write_text(PARAPHRASER)
    rows = [("/Same", "The staff were kind", "The staff were friendly"),
            ("/Same", "The view was great", "The view was wonderful"),
            ("/Same", "Check-in was quick", "Check-in was fast")]
    vader = VaderModel()
    tree = new_tree([{"topic": t, "input": a, "input_b": b, "label": "pass", "labeler": "ada",
                      "output": "|".join(vader.predict([a, b])), "description": ""}
                     for t, a, b in rows], [f"{k:032x}" for k in range(1, 4)])
    path = project / "pairs.csv"
    write_tree(tree, path)
    assert is_pair_topic(read_tree(path), "/Same") and not is_pair_topic(read_tree(path), "/X")
    assert parse_pair('a" ~ "b"') == ("a", "b") and parse_pair('a"') is None
    generator = make_generator("python:paraphraser.py:generate", root=project)
    session = ReviewSession(path, [vader], lambda: generator, ReviewSettings(
        reviewer="ada", prompts=1, completions=5,
        prompt_settings=PromptSettings(prompt_diversity=False)))
    assert session.suggest("/Same") == 3  # the line with one input and the repeat dropped
    module = generator.user.module
    assert '"The staff were kind" ~ "The staff were friendly"' in module.SEEN[0]
    shown = session.view("/Same")["suggestions"]
    assert shown[0]["input"] == "The room was lovely" and shown[0]["input_b"] == \
        "The room was awful"  # the two answers differ: the highest equality score
    assert shown[0]["models"][0]["score"] > 0.5 > shown[-1]["models"][0]["score"]
    rid = session.accept("/Same", shown[0]["sid"], "fail")
    row = read_tree(path).frame.loc[rid]
    assert (row["input"], row["input_b"], row["label"]) == \
        ("The room was lovely", "The room was awful", "fail")
    assert row["output"] == "|".join(vader.predict(["The room was lovely",
                                                    "The room was awful"]))
    cases = tree_to_cases(read_tree(path))
    assert set(cases["expectation"]) == {"should have the same output for both inputs"}
    edited = session.accept("/Same", shown[1]["sid"], "pass",
                            text="The towels were fresh ~ The towels were spotless")
    assert read_tree(path).frame.loc[edited, "input_b"] == "The towels were spotless"
    with pytest.raises(LingtestError, match="first ~ second"):
        session.accept("/Same", shown[2]["sid"], "pass", text="no separator here")


def test_a_hugging_face_classifier_over_its_own_labels(tmp_path):
    """A sequence classifier saved here from the packaged MiniLM with labels of its own
    (rooms / service / price), fitted on six sentences: loaded by id2label, not as sentiment."""
    import torch
    from tiny_models import minilm_tokenizer
    from transformers import BertForSequenceClassification

    from lingtest.tasks.adaptive.tested_models import HubLabelClassifier
    from lingtest.tasks.models.registry import resolve

    labels = ["price", "rooms", "service"]
    texts = ["The room was tiny", "Our bed was soft", "Staff were rude", "The waiter smiled",
             "Far too expensive", "Cheap for what you get"]
    targets = torch.tensor([1, 1, 2, 2, 0, 0])
    torch.manual_seed(0)
    base = resolve("sentence-transformers/all-MiniLM-L6-v2", "encoder").require().path
    model = BertForSequenceClassification.from_pretrained(
        base, num_labels=3, id2label=dict(enumerate(labels)),
        label2id={y: i for i, y in enumerate(labels)})
    tokenizer = minilm_tokenizer()
    inputs = {**tokenizer(texts, padding=True, return_tensors="pt"), "labels": targets}
    optimiser = torch.optim.Adam(model.parameters(), lr=5e-4)
    model.train()
    for _ in range(30):
        loss = model(**inputs).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    folder = tmp_path / "aspects"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    tested = load_tested_model(str(folder), sentiment)
    assert isinstance(tested, HubLabelClassifier) and tested.labels == tuple(labels)
    assert tested.model_id == "aspects" and tested.revision
    answers, probs = tested.predict_with_probabilities(texts)
    assert answers == [labels[i] for i in targets] and np.allclose(probs.sum(1), 1)
    tree = new_tree([{"topic": "/Rooms", "input": t, "output": "rooms", "label": "pass",
                      "labeler": "ada", "description": ""} for t in texts[:2]],
                    [f"{k:032x}" for k in (1, 2)])
    results = score_cases(tree_to_cases(tree), tested)
    assert results["verdict"].tolist() == ["pass", "pass"]
