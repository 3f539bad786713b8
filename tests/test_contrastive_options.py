"""COSTELLO's paper-compatible options and the corrected defaults: thresholds, cosine,
dictionaries (normal forms, user files), pooling / max_length overrides, CR4 vectors,
downstream tasks needed, seeds seen in training."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.contrastive import classifier_tasks, embedding_tasks, validation
from lingtest.tasks.contrastive.report import table2
from lingtest.tasks.contrastive.thresholds import (distinct_forms, read_dictionary, rule_distances,
                                          threshold)
from lingtest.tasks.contrastive.params import ContrastiveParams
from lingtest.tasks.core.errors import InputFormatError, LingtestError

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture(scope="module")
def encoder():
    from lingtest.tasks.models.encoders import load_encoder
    return load_encoder(MINILM, offline=True, device="cpu")


def test_paper_threshold_rule_uses_sqrt_sigma_and_squared_l2():
    nn = np.array([0.2, 0.4, 0.6, 0.8])
    mu, sigma = nn.mean(), nn.std()
    assert threshold(nn, "mu-sigma") == pytest.approx(mu - sigma)
    assert threshold(nn, "mu-2sigma", "paper") == pytest.approx(max(0.0, mu - 2 * np.sqrt(sigma)))
    assert threshold(nn, "mu-sigma", "paper") == pytest.approx(max(0.0, mu - np.sqrt(sigma)))
    assert np.allclose(rule_distances(nn, "l2", "paper"), nn ** 2)
    assert np.allclose(rule_distances(nn, "l2", "corrected"), nn)
    assert np.allclose(rule_distances(nn, "cos", "paper"), nn)
    with pytest.raises(LingtestError, match="rule `squared`"):
        threshold(nn, "min", "squared")


def test_words_the_model_cannot_tell_apart_count_once(encoder):
    words = ["cliché", "cliche", "Cliche", "film", "movie"]
    forms = encoder.normal_forms(words)
    assert forms[:3] == ["cliche"] * 3  # MiniLM lower-cases and strips accents
    kept = distinct_forms(words, forms)
    assert kept == ["cliché", "film", "movie"]
    vectors = encoder.encode(words)
    assert np.allclose(vectors[0], vectors[1])  # why: the same vector, so θ_min would be 0


def test_user_dictionary_files(tmp_path):
    listed = tmp_path / "words.json"
    listed.write_text(json.dumps(["good", "bad", "good"]))
    assert read_dictionary(listed) == ["good", "bad"]
    keyed = tmp_path / "vocab.json"
    keyed.write_text(json.dumps({"good": 0, "fine": 1}))
    assert read_dictionary(keyed) == ["good", "fine"]
    lines = tmp_path / "words.txt"
    lines.write_text("# my words\ngood\n\nfine  # a comment\n")
    assert read_dictionary(lines) == ["good", "fine"]
    lines.write_text("good\nvery good\n")
    with pytest.raises(InputFormatError, match=r"words\.txt:2: 'very good' is more than one"):
        read_dictionary(lines)
    listed.write_text(json.dumps(["good", 3]))
    with pytest.raises(InputFormatError, match=r"entry 1 \(3\)"):
        read_dictionary(listed)
    lines.write_text("alone\n")
    with pytest.raises(InputFormatError, match="at least two"):
        read_dictionary(lines)


def test_max_length_and_pooling_overrides_key_the_cache(encoder):
    from lingtest.tasks.models.encoders import load_encoder
    short = load_encoder(MINILM, offline=True, device="cpu", pooling="cls", max_length=16)
    assert short.max_length == 16 and short.pooling == "cls"
    assert short.cache_key == "cls|max_length=16" and encoder.cache_key == encoder.pooling
    truncated = load_encoder(MINILM, offline=True, device="cpu", max_length=16)
    assert truncated.pooling == encoder.pooling and truncated.cache_key != encoder.cache_key
    long_text = " ".join(["the film is good and the plot is fine"] * 10)
    assert not np.allclose(truncated.encode([long_text]), encoder.encode([long_text]))
    assert np.allclose(truncated.encode(["good film"]), encoder.encode(["good film"]), atol=1e-6)
    with pytest.raises(LingtestError, match="max_length 4096 exceeds"):
        load_encoder(MINILM, offline=True, device="cpu", max_length=4096)
    with pytest.raises(LingtestError, match="pooling `avg`"):
        load_encoder(MINILM, offline=True, device="cpu", pooling="avg")


SUITE = pd.DataFrame({
    "case_id": ["a", "b"], "relation": ["CR1", "CR4"],
    "seed": ["good film", "x one [SEP] y one"], "positive": ["fine film", "x two [SEP] y two"],
    "negative": ["bad film", "x three [SEP] y three"]})


def _lookup(texts):
    """A deterministic toy embedding: 4 numbers from the text's characters."""
    return np.array([[len(t), t.count("o"), t.count("e"), sum(map(ord, t)) % 7] for t in texts],
                    dtype=np.float64)


def test_cr4_vectors_are_the_joint_text_for_distance_and_truth():
    joint = classifier_tasks.features("paraphrase", SUITE["seed"][1:], _lookup, "joint")
    assert np.array_equal(joint, _lookup(["x one [SEP] y one"]))
    pair = classifier_tasks.features("paraphrase", SUITE["seed"][1:], _lookup, "pair")
    assert pair.shape == (1, 16)
    data = {"paraphrase": {"train": (["p"], ["q"]), "test": (["r"], ["s"])}}
    texts = validation.needed_texts(SUITE[1:], data, [], "joint")
    assert "p [SEP] q" in texts and "p" not in texts and "x one" not in texts
    needed = validation.needed_texts(SUITE[1:], data, [], "pair")
    assert {"p", "q", "x one", "y one"} <= set(needed)


def test_cosine_similarity_option_and_rule_column():
    truth = pd.DataFrame({"p_greater": [1.0, 1.0], "p_less": [1.0, 1.0],
                          "gt_a": [False, False], "gt_b": [True, True]})
    model = {"model_id": "m", "revision": "r", "pooling": "cls"}
    thetas = {("cos", "vocab"): {"zero": 0.0}, ("l2", "vocab"): {"zero": 0.0}}
    base = ContrastiveParams(distances=["cos", "l2"])
    corrected = validation.validate(SUITE, _lookup, model, base, thetas, truth)
    paper = validation.validate(SUITE, _lookup, model, base.model_copy(
        update={"cosine": "similarity", "threshold_rule": "paper"}), thetas, truth)
    cos_c, cos_p = (f[f["distance"] == "cos"] for f in (corrected, paper))
    assert np.allclose(cos_p["d_pos"].to_numpy(), 1 - cos_c["d_pos"].to_numpy())
    assert (corrected["rule"] == "corrected").all() and (paper["rule"] == "paper").all()
    # the paper's figures are printed beside paper-rule rows only
    results = paper.assign(verdict="fail")
    assert table2(results, "m").set_index("distance").loc["l2", "paper avg P_A"] == 51.22
    assert "paper avg P_A" not in table2(corrected.assign(verdict="fail"), "m")


def test_only_the_needed_classifier_banks_and_training_overlap():
    assert classifier_tasks.needed_kinds(SUITE) == ["sentiment", "paraphrase"]
    assert classifier_tasks.needed_kinds(SUITE[:1]) == ["sentiment"]
    data = {"sentiment": {"train": ["good film", "other"]},
            "paraphrase": {"train": (["x one"], ["z"])}}
    assert validation.training_overlap(SUITE, data) == {"CR1": 1, "CR4": 1}
    assert validation.training_overlap(SUITE, {"sentiment": {"train": ["nothing"]}}) == {}


def test_zero_threshold_alone_embeds_and_searches_no_dictionary(tmp_path, monkeypatch):
    """θ = 0 needs no nearest neighbours: with ``thresholds: [zero]`` only the triples (and
    classifier data) are embedded, into a fresh store, and θ is 0 per distance."""
    from lingtest.tasks.contrastive.method import ContrastiveMethod
    from lingtest.flows.registry import load_params
    from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
    from lingtest.tasks.models.model_spec import parse_model

    import logging

    # no flow: a plain logger
    monkeypatch.setattr(embedding_tasks, "get_run_logger", lambda: logging.getLogger("test"))
    ref = parse_model(MINILM)
    texts = ["a good film .", "a fine film .", "a bad film ."]
    dataset = {"dataset": ["good", "fine", "bad", "film"]}
    embedded_now = {}
    for kinds in (["zero"], ["zero", "min"]):
        params = ContrastiveParams(thresholds=kinds, dictionary_max_words=40)
        info, embedded = embedding_tasks.embed.fn(ref, texts, str(tmp_path / "-".join(kinds)),
                                                  True, "cpu", params, 0,
                                                  dataset if "min" in kinds else {})
        embedded_now[kinds[-1]] = info["embedded_now"]
    assert embedded_now == {"zero": 3, "min": 3 + 40 + 4}  # + the vocabulary sample, dataset
    method = ContrastiveMethod(load_params(PACKAGE_ROOT, ["contrastive.thresholds=[zero]",
                                                          "contrastive.distances=[l2,cos]"]),
                               Workspace(PACKAGE_ROOT))
    info = {"model_id": MINILM, "dictionaries": {}}
    assert method._thresholds(info, embedded) == ({("l2", "vocab"): {"zero": 0.0},
                                                  ("cos", "vocab"): {"zero": 0.0}}, [])
