"""Adaptive thresholds: NN distances on known points, blocked == naive, the four θ kinds."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from lingtest.tasks.contrastive.thresholds import (
    cap_words, dictionary_from_dataset, naive_nearest_neighbour_distances, nearest_neighbours,
    nearest_neighbour_distances, nearest_neighbour_summary, threshold, thresholds,
    vocabulary_dictionary,
)
from lingtest.tasks.core.errors import LingtestError

LINE = np.array([[0.0], [1.0], [3.0], [7.0]])  # NN distances 1, 1, 2, 4


@pytest.mark.parametrize("metric", ["l1", "l2"])
@pytest.mark.parametrize("block_size", [1, 3, 4, 1024])
def test_points_on_a_line(metric, block_size):
    index, dist = nearest_neighbours(LINE, metric, block_size)
    assert index.tolist() == [1, 0, 1, 2]
    np.testing.assert_allclose(dist, [1.0, 1.0, 2.0, 4.0])


def test_thresholds_of_known_distances():
    nn = nearest_neighbour_distances(LINE, "l2")
    mean, std = 2.0, np.sqrt(1.5)  # population std of 1, 1, 2, 4
    assert stats.norm.fit(nn)[1] == pytest.approx(std)  # scipy's scale is σ, not σ²
    got = thresholds(nn)
    assert got == pytest.approx({"zero": 0.0, "min": 1.0, "mu-sigma": mean - std,
                                 "mu-2sigma": 0.0})  # 2 − 2·1.22 < 0: clamped
    assert threshold(np.array([5.0, 5.2, 4.8, 5.0]), "mu-2sigma") == pytest.approx(
        5.0 - 2 * np.std([5.0, 5.2, 4.8, 5.0]))


def test_cosine_nn_on_known_angles():
    angles = np.deg2rad([0.0, 10.0, 40.0, 180.0])
    x = np.stack([np.cos(angles), np.sin(angles)], axis=1) * [[1.0], [3.0], [0.5], [2.0]]
    expected = 1 - np.cos(np.deg2rad([10.0, 10.0, 30.0, 140.0]))
    np.testing.assert_allclose(nearest_neighbour_distances(x, "cos", 2), expected, atol=1e-7)


@pytest.mark.parametrize("metric", ["l1", "l2", "cos"])
def test_blocked_equals_naive_for_block_sizes(metric):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(203, 24)).astype(np.float32)
    x[10] = 0.0  # a zero vector (cos: distance 1 to everything)
    naive = naive_nearest_neighbour_distances(x, metric)
    for block_size in (1, 16, 50, 64, 202, 203, 500):  # 50 and 64 do not divide 203
        np.testing.assert_allclose(nearest_neighbour_distances(x, metric, block_size), naive,
                                   rtol=1e-9, atol=1e-12, err_msg=f"block_size={block_size}")


def test_duplicate_vectors_are_neighbours_but_self_is_not():
    x = np.array([[0.0, 0.0], [2.0, 0.0], [2.0, 0.0], [5.0, 0.0]])
    for metric in ("l1", "l2"):
        index, dist = nearest_neighbours(x, metric, block_size=3)
        assert dist.tolist() == [2.0, 0.0, 0.0, 3.0]
        assert index.tolist() == [1, 2, 1, 1]  # self excluded by index; ties: lowest index
    assert threshold(nearest_neighbour_distances(x, "l2"), "min") == 0.0


def test_bad_inputs_are_errors():
    with pytest.raises(LingtestError, match="at least two"):
        nearest_neighbours(np.ones((1, 3)), "l2")
    with pytest.raises(LingtestError, match="unknown"):
        nearest_neighbours(LINE, "dot")
    with pytest.raises(LingtestError, match="expected one of zero, min"):
        threshold(np.ones(3), "mu-3sigma")
    with pytest.raises(LingtestError, match="finite"):
        threshold(np.array([1.0, np.nan]), "min")


def test_dictionary_from_dataset():
    texts = ["The film 's \"great\" , well-made ; it is n't", "GREAT fun in 1990s !"]
    assert dictionary_from_dataset(texts) == ["film", "fun", "great", "in", "is", "it", "the"]


def test_capped_dictionary_is_seeded_and_keeps_order():
    words = [f"w{i}" for i in range(100)]
    a, b = cap_words(words, 10, seed=7), cap_words(words, 10, seed=7)
    assert a == b and len(a) == 10 and len(set(a)) == 10
    assert a == sorted(a, key=words.index)
    assert cap_words(words, 10, seed=8) != a
    assert cap_words(words, None, seed=7) == words == cap_words(words, 500, seed=7)


class _Vocab:
    """Stands in for an encoder's tokenizer vocabulary (the real one is tested in test_models)."""

    def vocabulary(self) -> list[str]:
        return ["the", "a", "good", "bad", "film", "movie"]


def test_vocabulary_dictionary_caps_with_the_seed():
    assert vocabulary_dictionary(_Vocab()) == _Vocab().vocabulary()
    capped = vocabulary_dictionary(_Vocab(), max_words=3, seed=1)
    assert len(capped) == 3 and set(capped) <= set(_Vocab().vocabulary())


def test_nearest_neighbour_summary_is_the_thresholds_table_row():
    nn = nearest_neighbour_distances(LINE, "l2")  # 1, 1, 2, 4
    row = nearest_neighbour_summary(nn, thresholds(nn, ["min", "mu-sigma"]))
    assert list(row) == ["nn_mean", "nn_std", "nn_min", "θ min", "θ mu-sigma"]
    assert row["nn_mean"] == 2.0 and row["nn_min"] == 1.0
    assert row["nn_std"] == pytest.approx(np.sqrt(1.5))  # σ with ddof=0, as θ uses
    assert row["θ mu-sigma"] == pytest.approx(2.0 - np.sqrt(1.5))
