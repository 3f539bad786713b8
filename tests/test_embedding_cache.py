"""The embedding store on the real packaged MiniLM: each distinct text reaches the model once."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lingtest.tasks.contrastive.embedding import (
    EmbeddingStore, embed_shard, embed_texts, shard_of, split_by_shard, text_hash,
)
from lingtest.tasks.core.errors import LingtestError

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
SENTENCES = [
    "a gorgeous , witty , seductive movie .",
    "it 's a bad film .",
    "the acting , costumes , music , cinematography and sound are all astounding given the "
    "production 's austere locales .",
    "it 's a bad film .",  # duplicate
    "ok .",
    "a gorgeous , witty , seductive movie .",  # duplicate
    "the plot is nothing but boilerplate clichés from start to finish .",
]


class CountingEncoder:
    """The real encoder, recording every list of texts it is asked to embed."""

    def __init__(self, encoder):
        self._encoder = encoder
        self.calls: list[list[str]] = []

    def encode(self, sentences: list[str], batch_size: int = 32) -> np.ndarray:
        self.calls.append(list(sentences))
        return self._encoder.encode(sentences, batch_size=batch_size)

    @property
    def embedded(self) -> list[str]:
        return [text for call in self.calls for text in call]

    def __getattr__(self, name):
        return getattr(self._encoder, name)


@pytest.fixture(scope="module")
def encoder():
    from lingtest.tasks.models.encoders import load_encoder
    return load_encoder(MINILM, offline=True, device="cpu")


@pytest.fixture()
def counting(encoder) -> CountingEncoder:
    return CountingEncoder(encoder)


def _store(root, encoder, **kw) -> EmbeddingStore:
    return EmbeddingStore(root, encoder.model_id, encoder.revision, encoder.pooling, **kw)


def test_rerun_makes_no_model_calls(tmp_path, counting):
    first = embed_texts(counting, SENTENCES, _store(tmp_path, counting), batch_size=2)
    assert counting.calls
    counting.calls.clear()
    again = embed_texts(counting, SENTENCES, _store(tmp_path, counting), batch_size=2)  # fresh
    assert counting.calls == []  # object, so vectors came from disk
    np.testing.assert_array_equal(first, again)
    assert again.dtype == np.float32 and again.shape == (len(SENTENCES), counting.dim)


def test_duplicates_embedded_once_and_input_order_kept(tmp_path, counting, encoder):
    vectors = embed_texts(counting, SENTENCES, _store(tmp_path, counting), batch_size=2)
    assert sorted(counting.embedded) == sorted(set(SENTENCES))
    lengths = encoder.token_counts(counting.embedded)
    assert lengths == sorted(lengths, reverse=True)  # longest first, by tokens
    alone = np.concatenate([encoder.encode([s], batch_size=2) for s in SENTENCES])
    np.testing.assert_array_equal(vectors, alone)  # exact-length passes: the same bytes
    np.testing.assert_array_equal(vectors[1], vectors[3])


def test_only_missing_texts_are_embedded(tmp_path, counting):
    store = _store(tmp_path, counting)
    embed_texts(counting, SENTENCES[:3], store)
    counting.calls.clear()
    out = embed_texts(counting, ["a new sentence .", *SENTENCES], store, flush_every=1)
    assert counting.embedded == ["the plot is nothing but boilerplate clichés from start to "
                                 "finish .", "a new sentence .", "ok ."]
    assert out.shape == (len(SENTENCES) + 1, counting.dim)
    assert store.missing(SENTENCES + ["unseen ."]) == ["unseen ."]


def test_revision_and_pooling_key_the_cache(tmp_path, counting):
    store = _store(tmp_path, counting)
    embed_texts(counting, SENTENCES, store)
    other_rev = EmbeddingStore(tmp_path, counting.model_id, "another-revision", counting.pooling)
    other_pool = EmbeddingStore(tmp_path, counting.model_id, counting.revision, "cls")
    assert len({store.path, other_rev.path, other_pool.path}) == 3
    assert other_rev.missing(SENTENCES) == list(dict.fromkeys(SENTENCES))
    assert other_pool.missing(SENTENCES) == list(dict.fromkeys(SENTENCES))
    with pytest.raises(LingtestError, match="revision"):
        embed_texts(counting, SENTENCES, other_rev)  # never file vectors under another key
    meta = json.loads(store.meta_path.read_text())
    assert meta["revision"] == counting.revision and meta["pooling"] == "mean+norm"
    assert meta["dim"] == 384 and meta["model_id"] == MINILM


def test_shard_files_follow_the_text_hashes(tmp_path, counting):
    store = _store(tmp_path, counting, n_shards=256)
    embed_texts(counting, SENTENCES, store)
    expected = {f"shard-{text_hash(t)[:2]}.npz" for t in SENTENCES}
    assert {p.name for p in store.shard_files()} == expected
    assert len(store) == len(set(SENTENCES))
    with np.load(store.shard_files()[0]) as data:
        assert data["vectors"].dtype == np.float32 and data["hashes"].dtype == np.dtype("S64")


def test_per_shard_fan_out_fills_the_store(tmp_path, counting):
    store = _store(tmp_path, counting)
    groups = split_by_shard(SENTENCES, store.n_shards)
    assert sorted(t for g in groups.values() for t in g) == sorted(set(SENTENCES))
    shard = next(iter(groups))
    assert embed_shard(counting, SENTENCES, store, shard) == len(groups[shard])
    assert set(counting.embedded) == set(groups[shard])
    for other in groups:
        embed_shard(counting, SENTENCES, store, other)
    counting.calls.clear()
    embed_texts(counting, SENTENCES, _store(tmp_path, counting))
    assert counting.calls == []


def test_shard_of_reads_the_first_hex_characters():
    assert shard_of("ab" + "0" * 62, 16) == 10 and shard_of("ab" + "0" * 62, 256) == 0xAB
    with pytest.raises(LingtestError, match="power of 16"):
        shard_of("ab", 10)


def test_get_of_missing_text_is_an_error(tmp_path, counting):
    store = _store(tmp_path, counting)
    embed_texts(counting, SENTENCES[:2], store)
    with pytest.raises(LingtestError, match="1 of 2 texts are not embedded"):
        store.get([SENTENCES[0], "never embedded ."])
