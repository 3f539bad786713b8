"""Kinds of models the other tests do not use, told apart from their files and attributes in
well under a second (a scoring function that declares its labels, base-model folders of three
architectures), and what a stage would refuse, refused before Prefect starts (a 5-star
classifier without a label map, an encoder class without a vocabulary)."""
from __future__ import annotations

from pathlib import Path

import pytest

from bad_input_harness import assert_one_clear_error, lingtest, project  # noqa: F401
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.checks import infer_kind
from lingtest.tasks.models.model_spec import parse_model

SCORERS = '''"""Sentiment scorers written as plain functions, as a TextBlob user would."""
import numpy as np

GOOD, BAD = {"good", "great", "love"}, {"bad", "awful", "boring"}


def polarity(texts):
    rows = []
    for text in texts:
        words = text.lower().split()
        score = (sum(w in GOOD for w in words) - sum(w in BAD for w in words)) / (len(words) or 1)
        rows.append([(1 - score) / 2, (1 + score) / 2])
    return np.array(rows)


def textblob_sentiment(texts):
    return polarity(texts)


textblob_sentiment.labels = ["negative", "positive"]


class Rated:
    classes_ = ["neg", "pos"]

    def __call__(self, texts):
        return polarity(texts)
'''
MODULE_LABELS = "labels = ['neg', 'pos']\n\n\ndef judge(texts):\n    return [[0.5, 0.5]] * len(texts)\n"
ENCODERS = '''from sklearn.feature_extraction.text import HashingVectorizer


class HashingEncoder:
    """No vocabulary() and no tokenizer: contrastive's `vocab` dictionary cannot be built."""

    def __init__(self):
        self.vectorizer = HashingVectorizer(n_features=64, alternate_sign=False, norm="l2")

    def encode(self, texts):
        return self.vectorizer.transform(texts).toarray()


class TokenizedEncoder(HashingEncoder):
    """Sets a tokenizer in __init__: only the loaded object can say whether it has a vocabulary."""

    def __init__(self):
        super().__init__()
        self.tokenizer = None
'''
STARS = [f"{i} star" if i == 1 else f"{i} stars" for i in range(1, 6)]


def _tiny(kind: str):
    """A random-weight model of a base architecture (no head), 2 layers of width 32."""
    import transformers as t

    size = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, vocab_size=120, max_position_embeddings=64)
    if kind == "roberta":
        return t.RobertaModel(t.RobertaConfig(**size, pad_token_id=1))
    if kind == "albert":
        return t.AlbertModel(t.AlbertConfig(**size, embedding_size=16))
    return t.DistilBertModel(t.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                                vocab_size=120))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    import transformers as t

    root = tmp_path_factory.mktemp("foreign")
    (root / "scorers.py").write_text(SCORERS)
    (root / "judged.py").write_text(MODULE_LABELS)
    (root / "encoders.py").write_text(ENCODERS)
    for kind in ("roberta", "albert", "distilbert"):
        _tiny(kind).save_pretrained(root / f"{kind}-base")
    config = t.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=64, vocab_size=120, num_labels=5,
                          id2label=dict(enumerate(STARS)),
                          label2id={label: i for i, label in enumerate(STARS)})
    t.BertForSequenceClassification(config).save_pretrained(root / "bert-5star")
    return root


@pytest.mark.parametrize("spec, kind, evidence", [
    ("python:scorers.py:textblob_sentiment", "classifier", "a callable with a `labels` attribute"),
    ("python:scorers.py:Rated", "classifier", "a callable with a `classes_` attribute"),
    ("python:judged.py:judge", "classifier", "a function whose module defines `labels`"),
    ("roberta-base", "encoder", "config.json architecture RobertaModel"),
    ("albert-base", "encoder", "config.json architecture AlbertModel"),
    ("distilbert-base", "encoder", "config.json architecture DistilBertModel"),
    ("bert-5star", "classifier", "config.json architecture BertForSequenceClassification"),
])
def test_the_kind_is_told_from_files_and_attributes_without_loading_weights(
        models, spec, kind, evidence, loads_no_weights):
    ref = parse_model(spec if spec.startswith("python:") else str(models / spec), root=models)
    assert infer_kind(ref, models) == (kind, evidence)


def test_a_plain_function_without_labels_is_still_not_guessed(models):
    with pytest.raises(LingtestError, match=r"cannot tell whether it is a classifier "
                                            r"\(predict_proba, or a callable with a `labels`"):
        infer_kind(parse_model("python:scorers.py:polarity", root=models), models)


def test_lingtest_test_says_which_kind_it_inferred(models, project, monkeypatch, capsys):
    """A folder of a base architecture goes to contrastive, and the CLI says why (the run then
    stops at a missing dictionary file, so no stage runs)."""
    output = assert_one_clear_error(
        ["test", str(models / "roberta-base"), "--set", "contrastive.dictionary_file=no.txt"],
        {}, "contrastive.dictionary_file", project, monkeypatch, capsys)
    assert output.startswith("lingtest test: roberta-base is an encoder (from config.json "
                             "architecture RobertaModel)\nlingtest test: roberta-base through "
                             "contrastive"), output


def test_a_5_star_classifier_without_a_label_map_is_refused_before_the_run(
        models, project, monkeypatch, capsys):
    folder = models / "bert-5star"
    output = assert_one_clear_error(
        ["test", str(folder), "--methods", "capabilities"], {},
        "models.label_map={bert-5star: {1 star: neg, 2 stars: neg, 3 stars: neutral, "
        "4 stars: pos, 5 stars: pos}}", project, monkeypatch, capsys)
    assert "capabilities.models: model `bert-5star`: labels ['1 star'" in output
    # the map the error suggests is accepted as written
    status, output, started = lingtest(
        ["validate", "capabilities", "--set", f"capabilities.models=[{folder}]",
         "--set", "models.label_map={bert-5star: {1 star: neg, 2 stars: neg, 3 stars: "
                  "neutral, 4 stars: pos, 5 stars: pos}}"], monkeypatch, capsys)
    assert status == 0, output


def test_an_encoder_class_without_a_vocabulary_is_refused_before_the_run(
        models, project, monkeypatch, capsys):
    spec = f"python:{models / 'encoders.py'}:HashingEncoder"
    assert_one_clear_error(["test", spec], {}, "has no vocabulary for the `vocab` dictionary",
                           project, monkeypatch, capsys)
    from lingtest.tasks.models.any_encoder import check_contrastive_encoder

    tokenized = parse_model(f"python:{models / 'encoders.py'}:TokenizedEncoder")
    assert check_contrastive_encoder(tokenized, True, models)["pooling"] == "own encode"
    words = models / "words.txt"
    words.write_text("good\nbad\nfilm\n")
    assert check_contrastive_encoder(parse_model(spec), True, models, str(words))
