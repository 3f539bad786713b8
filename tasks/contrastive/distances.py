"""Row-wise semantic distances between embeddings and COSTELLO's violation rule.

A triple (s, s⁺, s⁻) says s⁺ must stay closer to s than s⁻ does. With SemD a distance, the
triple is a violation when SemD(e, e⁺) − SemD(e, e⁻) > θ (COSTELLO's test oracle).

Differences from the reference code (lenijwp/COSTELLO, ``Testing.py``), on purpose:

- ``cos`` is the cosine *distance* 1 − cos(x, y). The reference's ``Calculate_distance`` returns
  ``1 - scipy.spatial.distance.cosine(x, y)``, which is the cosine *similarity*, so its "cos"
  rows test the reverse ordering (s⁻ closer than s⁺) against a threshold computed from true
  distances (its ``CosineDistance`` matrix is 1 − similarity).
- ``l2`` is the plain Euclidean distance here and in the thresholds; the reference compares
  plain L2 margins with a threshold computed from *squared* distances.
- Distances are computed in float64 so margins near 0 are not float32 noise.

A zero vector has no direction: its cosine similarity with anything is taken as 0, so its
cosine distance is 1 (also to another zero vector), as scikit-learn does, never NaN.
"""
from __future__ import annotations

import numpy as np

from lingtest.tasks.core.errors import LingtestError

METRICS = ("l1", "l2", "cos")


def check_metric(metric: str) -> str:
    """The metric name, or one LingtestError listing the ones accepted."""
    if metric not in METRICS:
        raise LingtestError(f"distance `{metric}` unknown; expected one of {', '.join(METRICS)}")
    return metric


def _as_rows(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise LingtestError(f"{name}: expected a (rows, dim) matrix, got shape {x.shape}")
    return x


def normalize_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm; zero rows stay zero (so their similarities are 0)."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def pair_distances(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """Distance between row i of ``a`` and row i of ``b``, for every i (float64, shape (n,)).

    ``metric``: ``l1`` (Manhattan), ``l2`` (Euclidean) or ``cos`` (1 − cosine similarity,
    in [0, 2]). One-dimensional inputs are treated as one row.
    """
    check_metric(metric)
    a, b = _as_rows(a, "a"), _as_rows(b, "b")
    if a.shape != b.shape:
        raise LingtestError(f"pair_distances: shapes {a.shape} and {b.shape} differ")
    if metric == "l1":
        return np.abs(a - b).sum(axis=1)
    if metric == "l2":
        return np.linalg.norm(a - b, axis=1)
    sims = np.einsum("ij,ij->i", normalize_rows(a), normalize_rows(b))
    return np.clip(1.0 - sims, 0.0, 2.0)


def violations(seed: np.ndarray, pos: np.ndarray, neg: np.ndarray, metric: str,
               threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """COSTELLO's test: (margin, violated) per triple, rows aligned across the three inputs.

    margin = d(s, s⁺) − d(s, s⁻): positive when the sentence that should be closer is farther.
    violated = margin > threshold (strictly, as in the paper, so θ = 0 tolerates ties).
    """
    if not np.isfinite(threshold):
        raise LingtestError(f"threshold must be a finite number (got {threshold})")
    margin = pair_distances(seed, pos, metric) - pair_distances(seed, neg, metric)
    return margin, margin > threshold
