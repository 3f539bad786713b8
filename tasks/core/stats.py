"""Intervals and multiple-testing control shared by every method's report.

``rate_interval`` is scipy's percentile bootstrap of a failure rate. ``cluster_weights`` /
``percentile_bounds`` are the cluster bootstrap used where rows are not independent (the
derived rows of one question): one shared set of resampled clusters for all metrics, which
``scipy.stats.bootstrap`` cannot give (it resamples once per statistic). ``fdr`` is
Benjamini–Hochberg (or Benjamini–Yekutieli) through ``scipy.stats.false_discovery_control``.
``paired_change`` is the paired bootstrap of a change in mean (before/after on the same
items) with its two-sided bootstrap p-value, from scipy's bootstrap distribution.
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


def paired_change(before, after, n_boot: int, rng: np.random.Generator,
                  confidence: float = 0.95) -> tuple[float, float, float, float]:
    """(mean(after) − mean(before), low, high, p) over paired items, resampling items.

    p is two-sided: twice the share of resampled changes on the far side of 0, counted as
    (k + 1) / (n_boot + 1) so that it is never 0 from finitely many resamples (at most 1);
    a change no resample can move (every pair differs by the same amount) has p = 1 when it
    is 0, else 1 / (n_boot + 1); under two items the bounds and p are NaN."""
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if before.shape != after.shape:
        raise ValueError(f"paired_change: {before.shape} before vs {after.shape} after")
    if len(before) == 0:
        return (np.nan, np.nan, np.nan, np.nan)
    change = float(after.mean() - before.mean())
    if len(before) < 2:
        return (change, np.nan, np.nan, np.nan)
    if np.all(after - before == (after - before)[0]):  # no resample can differ
        return (change, change, change, 1.0 if change == 0 else 1 / (n_boot + 1))
    result = stats.bootstrap((before, after), lambda b, a: np.mean(a) - np.mean(b),
                             paired=True, vectorized=False, n_resamples=n_boot,
                             confidence_level=confidence, method="percentile",
                             random_state=rng)
    dist = result.bootstrap_distribution
    far = min(np.sum(dist <= 0), np.sum(dist >= 0))
    p = min(1.0, 2 * (far + 1) / (n_boot + 1))
    return (change, float(result.confidence_interval.low),
            float(result.confidence_interval.high), float(p))


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
