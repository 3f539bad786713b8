"""Distances and the violation rule: cosine *distance*, L1/L2 against numpy, margin sign."""
from __future__ import annotations

import numpy as np
import pytest

from lingtest.tasks.contrastive.distances import pair_distances, violations
from lingtest.tasks.core.errors import LingtestError


def test_cosine_distance_of_known_angles():
    x = np.array([[1.0, 2.0, 3.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    y = np.array([[1.0, 2.0, 3.0], [0.0, 5.0, 0.0], [-3.0, 0.0, 0.0]])
    np.testing.assert_allclose(pair_distances(x, y, "cos"), [0.0, 1.0, 2.0], atol=1e-12)
    # scale does not matter; the reference code's similarity (1 - distance) would give 1 here
    assert pair_distances([2.0, 4.0, 6.0], [1.0, 2.0, 3.0], "cos")[0] == pytest.approx(0.0)


def test_zero_vector_has_cosine_distance_one_not_nan():
    zero, v = np.zeros((1, 4)), np.array([[0.5, -1.0, 2.0, 0.0]])
    assert pair_distances(zero, v, "cos").tolist() == [1.0]
    assert pair_distances(zero, zero, "cos").tolist() == [1.0]
    assert np.isfinite(pair_distances(np.zeros((3, 4)), np.ones((3, 4)), "cos")).all()


def test_l1_and_l2_match_numpy_on_random_rows():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(50, 384)).astype(np.float32)
    b = rng.normal(size=(50, 384)).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(pair_distances(a, b, "l1"),
                               np.linalg.norm(a64 - b64, ord=1, axis=1), rtol=1e-12)
    np.testing.assert_allclose(pair_distances(a, b, "l2"),
                               np.linalg.norm(a64 - b64, axis=1), rtol=1e-12)
    cos = 1 - (a64 * b64).sum(1) / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))
    np.testing.assert_allclose(pair_distances(a, b, "cos"), cos, rtol=1e-10)


@pytest.mark.parametrize("metric", ["l1", "l2", "cos"])
def test_violation_margin_sign_on_a_hand_made_triple(metric):
    seed = np.array([[1.0, 0.0]])
    near = np.array([[0.9, 0.2]])   # small change: should stay close
    far = np.array([[-1.0, 0.1]])   # large change: should be far
    margin, violated = violations(seed, near, far, metric, threshold=0.0)
    assert margin[0] < 0 and not violated[0]
    margin, violated = violations(seed, far, near, metric, threshold=0.0)  # roles swapped
    assert margin[0] > 0 and violated[0]
    # a threshold at least as large as the margin tolerates it (the rule is strict >)
    assert not violations(seed, far, near, metric, threshold=float(margin[0]))[1][0]


def test_l2_margin_value():
    margin, _ = violations(np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]]),
                           np.array([[1.0, 0.0]]), "l2", 0.0)
    assert margin[0] == pytest.approx(5.0 - 1.0)


def test_bad_metric_and_shapes_are_errors():
    with pytest.raises(LingtestError, match="expected one of l1, l2, cos"):
        pair_distances(np.ones((2, 3)), np.ones((2, 3)), "linf")
    with pytest.raises(LingtestError, match="differ"):
        pair_distances(np.ones((2, 3)), np.ones((3, 3)), "l2")
    with pytest.raises(LingtestError, match="finite"):
        violations(np.ones((1, 2)), np.ones((1, 2)), np.ones((1, 2)), "l2", float("nan"))
