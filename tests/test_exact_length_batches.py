"""Exact-length passes: a text's vector or probabilities are the same bytes alone, among short
and long companions, in shuffled order and at 1 or 2 threads (real packaged MiniLM)."""
from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest
import torch

from lingtest.tasks.capabilities.checklist_run import run_checklist
from lingtest.tasks.contrastive.embedding import EmbeddingStore, embed_texts
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.encoders import exact_length_passes, load_encoder, pass_rows
from lingtest.tasks.models.sentiment import LABELS2, TorchClassifier, build_classifier

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TARGETS = ["good", "ok .", "it 's a bad film .",
           "a gorgeous , witty , seductive movie .",
           "the acting , costumes , music , cinematography and sound are all astounding given "
           "the production 's austere locales ."]


@pytest.fixture(scope="module")
def encoder():
    return load_encoder(MINILM, offline=True, device="cpu")


@pytest.fixture(scope="module")
def companions(table, encoder) -> list[str]:
    """SST sentences of every length, including some with each target's token count."""
    texts = table("sst")["text"].drop_duplicates().sample(800, random_state=0).tolist()
    lengths = set(encoder.token_counts(TARGETS))
    counts = encoder.token_counts(texts)
    same = [t for t, n in zip(texts, counts) if n in lengths][:15]
    assert len(same) >= 10  # the targets share passes with real texts, not only copies
    return same + [t for t, n in zip(texts, counts) if n not in lengths][:65]


@pytest.fixture(autouse=True)
def threads():
    """One intra-op thread (the project's default) unless a test asks for more; restored
    after the test."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _rows(vectors: np.ndarray, texts: list[str], wanted: list[str]) -> np.ndarray:
    return np.stack([vectors[texts.index(t)] for t in wanted])


def test_passes_have_no_padding_and_one_shape_per_length(encoder):
    texts = TARGETS * 9 + ["good"] * 40
    seen: dict[int, tuple[int, ...]] = {}
    covered: list[int] = []
    for positions, inputs in exact_length_passes(encoder.tokenizer, texts, encoder.max_length,
                                                 pass_tokens=32):
        shape = tuple(inputs["input_ids"].shape)
        assert bool(inputs["attention_mask"].all())  # no padding anywhere
        assert seen.setdefault(shape[1], shape) == shape  # every pass of a length alike
        assert shape[0] == pass_rows(shape[1], 32) >= len(positions)
        covered += positions
    assert sorted(covered) == list(range(len(texts)))
    assert pass_rows(3) == 86 and pass_rows(255) == 2 and pass_rows(600) == 1  # 256 tokens
    with pytest.raises(LingtestError, match="pass_tokens must be >= 1.*runtime.pass_tokens"):
        list(exact_length_passes(encoder.tokenizer, [], encoder.max_length, pass_tokens=0))


def test_minilm_vector_is_the_same_bytes_in_any_company(encoder, companions):
    alone = np.concatenate([encoder.encode([t]) for t in TARGETS])
    crowd = TARGETS + companions
    shuffled = crowd[:]
    random.Random(7).shuffle(shuffled)
    short = [t for t in companions if len(t) < 40][:30] + TARGETS
    for texts in (crowd, shuffled, short, TARGETS[::-1]):
        assert np.array_equal(_rows(encoder.encode(texts), texts, TARGETS), alone)


def test_vectors_do_not_depend_on_the_thread_count(encoder, companions, threads):
    """Measured with MKL on this CPU: passes of >= 256 tokens round alike at 1 and 2 threads
    (shorter ones split a sum between the threads for some row counts)."""
    texts = TARGETS + companions[:20] + encoder.vocabulary()[2000:2040]  # short ones too
    one = encoder.encode(texts)
    threads(2)
    assert np.array_equal(encoder.encode(texts), one)


def test_store_vectors_do_not_depend_on_what_was_embedded_before(tmp_path, encoder,
                                                                 companions):
    first = EmbeddingStore.for_encoder(tmp_path / "a", encoder)
    embed_texts(encoder, companions[:40] + TARGETS[:2], first)  # two targets with others
    late = embed_texts(encoder, TARGETS, first)  # those two come from the store
    fresh = embed_texts(encoder, TARGETS[::-1],
                        EmbeddingStore.for_encoder(tmp_path / "b", encoder))[::-1]
    assert np.array_equal(late, fresh)


def test_a_max_length_override_files_its_vectors_under_its_own_key(tmp_path):
    short = load_encoder(MINILM, offline=True, device="cpu", max_length=16)
    store = EmbeddingStore.for_encoder(tmp_path, short)
    assert store.pooling == short.cache_key == "mean+norm|max_length=16"
    assert embed_texts(short, TARGETS, store).shape == (len(TARGETS), 384)


def test_another_floor_of_tokens_per_pass_files_its_vectors_under_its_own_key(tmp_path,
                                                                               companions):
    """A lower floor is company-proof too, but its passes have other shapes, so other bits:
    its vectors never mix with the default floor's in one store."""
    low = load_encoder(MINILM, offline=True, device="cpu", pass_tokens=64)
    assert low.cache_key == "mean+norm|pass_tokens=64"
    store = EmbeddingStore.for_encoder(tmp_path, low)
    assert store.path != EmbeddingStore.for_encoder(tmp_path, load_encoder(
        MINILM, offline=True, device="cpu")).path
    alone = np.concatenate([low.encode([t]) for t in TARGETS])
    texts = TARGETS + companions[:30]
    assert np.array_equal(embed_texts(low, texts, store)[:len(TARGETS)], alone)
    with pytest.raises(LingtestError, match="runtime.pass_tokens"):
        load_encoder(MINILM, offline=True, device="cpu", pass_tokens=0)


@pytest.fixture(scope="module")
def classifier(encoder) -> TorchClassifier:
    """MiniLM + mean pooling + a seeded random head: lingtest's own classifier shape."""
    torch.manual_seed(0)
    model = build_classifier(encoder.model, len(LABELS2))
    return TorchClassifier("test/minilm-head", "test", LABELS2, model, encoder.tokenizer,
                           [[0], [1]], max_length=128)


def test_classifier_probabilities_are_the_same_bytes_in_any_order(classifier, companions):
    texts = TARGETS + companions[:40]
    probs = classifier.predict_proba(texts)
    shuffled = texts[:]
    random.Random(3).shuffle(shuffled)
    assert np.array_equal(_rows(classifier.predict_proba(shuffled), shuffled, texts), probs)
    alone = np.concatenate([classifier.predict_proba([t]) for t in TARGETS])
    assert np.array_equal(alone, probs[:len(TARGETS)])


def test_checklist_probabilities_do_not_depend_on_the_row_order(table, classifier):
    full = table("checklist_suite")
    names = ["single positive words", "typos", "add negative phrases", "contractions"]
    part = pd.concat([full[full["test"] == n].head(12) for n in names])
    verdicts = run_checklist(part, classifier)
    again = run_checklist(part.sample(frac=1, random_state=1), classifier)
    by_case = again.set_index("case_id").loc[verdicts["case_id"]]
    assert by_case["probabilities"].tolist() == verdicts["probabilities"].tolist()
    assert by_case["verdict"].tolist() == verdicts["verdict"].tolist()


class CallRecorder:
    """A model that is not ``per_text``: records the batches it is asked for."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def probabilities3(self, texts):
        self.calls.append(list(texts))
        return np.tile([0.2, 0.3, 0.5], (len(texts), 1))

    def predict(self, texts):
        return ["pos"] * len(texts)


def test_other_models_get_the_same_batches_whatever_the_row_order(table):
    full = table("checklist_suite")
    part = full[full["test"] == "typos"].head(20)
    first, second = CallRecorder(), CallRecorder()
    run_checklist(part, first, batch_size=8)
    run_checklist(part.iloc[::-1], second, batch_size=8)
    assert first.calls == second.calls and max(len(c) for c in first.calls) == 8


class PaddingDetector(torch.nn.Module):
    """Logits that say whether a row was padded: class 0 for a padded row, else class 1."""

    def forward(self, input_ids, attention_mask, **_):
        padded = (attention_mask == 0).any(1).float()
        return torch.stack([padded, 1 - padded], dim=1)


def test_training_accuracy_runs_the_classifiers_unpadded_passes(encoder):
    from lingtest.tasks.training.sentiment import accuracy

    texts = TARGETS * 3  # five token counts: batched together they would be padded
    gold = np.ones(len(texts), dtype=np.int64)
    assert accuracy(PaddingDetector(), encoder.tokenizer, texts, gold) == 1.0
    reloaded = TorchClassifier("test/padding", "test", LABELS2, PaddingDetector(),
                               encoder.tokenizer, [[0], [1]], max_length=128)
    assert (reloaded.predict_proba(texts).argmax(1) == gold).all()


def test_the_stage_floor_reaches_the_packaged_classifier(tmp_path, table):
    """``lingtest/minilm-sst2`` (a small one trained here: a clean checkout has none)."""
    from lingtest.tasks.models.sentiment import MINILM_SST2_DIR, MINILM_SST2_ID, load_sentiment_model
    from lingtest.tasks.training.sentiment import train_minilm_sst2

    train_minilm_sst2(table("sst"), tmp_path / MINILM_SST2_DIR, seed=3, epochs=1,
                      max_train=16, max_test=8, threads=1)
    model = load_sentiment_model(MINILM_SST2_ID, root=tmp_path, pass_tokens=64)
    assert model.pass_tokens == 64
    assert load_sentiment_model(MINILM_SST2_ID, root=tmp_path).pass_tokens == 256
