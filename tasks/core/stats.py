"""Intervals and multiple-testing control shared by every method's report.

``rate_interval`` is scipy's percentile bootstrap of a failure rate. ``cluster_weights`` /
``percentile_bounds`` are the cluster bootstrap used where rows are not independent (the
derived rows of one question): one shared set of resampled clusters for all metrics, which
``scipy.stats.bootstrap`` cannot give (it resamples once per statistic). ``fdr`` is
Benjamini–Hochberg (or Benjamini–Yekutieli) through ``scipy.stats.false_discovery_control``.
"""
from __future__ import annotations

import numpy as np
from scipy import stats


def rate_interval(flags, n_boot: int, rng: np.random.Generator,
                  confidence: float = 0.95) -> tuple[float, float, float]:
    """(rate %, low %, high %) of a 0/1 array with a percentile bootstrap interval; NaN
    bounds for fewer than two values, the point itself when every value is equal."""
    flags = np.asarray(flags, dtype=float)
    if len(flags) == 0:
        return (np.nan, np.nan, np.nan)
    rate = 100.0 * flags.mean()
    if len(flags) < 2:
        return (rate, np.nan, np.nan)
    if flags.min() == flags.max():  # every resample is identical: the interval is the point
        return (rate, rate, rate)
    ci = stats.bootstrap((flags,), np.mean, n_resamples=n_boot, confidence_level=confidence,
                         method="percentile", random_state=rng).confidence_interval
    return (rate, 100.0 * ci.low, 100.0 * ci.high)


def cluster_weights(n_clusters: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """(n_boot, n_clusters) draw counts: drawing n_clusters clusters with replacement is a
    multinomial with equal probabilities, so a resample's sums are ``weights @ sums``."""
    return rng.multinomial(n_clusters, np.full(n_clusters, 1 / n_clusters), size=n_boot)


def percentile_bounds(samples: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap samples, dropping the undefined (NaN) ones."""
    values = np.asarray(samples, dtype=float)
    values = values[~np.isnan(values)]
    if not len(values):
        return (float("nan"), float("nan"))
    tail = round(50 * (1 - confidence), 10)  # 2.5 exactly for 95 %, not 2.5000000000000022
    low, high = np.percentile(values, [tail, 100 - tail])
    return (float(low), float(high))


def fdr(pvalues, method: str = "bh") -> np.ndarray:
    """Adjusted p-values (``bh``: Benjamini–Hochberg, ``by``: Benjamini–Yekutieli); NaN
    p-values stay NaN and do not count towards the number of tests."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    known = ~np.isnan(p)
    if known.any():
        out[known] = stats.false_discovery_control(p[known], method=method)
    return out


def significant(pvalues, alpha: float = 0.05, method: str = "bh") -> np.ndarray:
    """Which hypotheses are rejected at false discovery rate ``alpha``."""
    adjusted = fdr(pvalues, method)
    return np.where(np.isnan(adjusted), False, adjusted <= alpha)
