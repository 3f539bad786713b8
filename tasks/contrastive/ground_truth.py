"""COSTELLO's ground truth: is a triple (s, s⁺, s⁻) buggy for the downstream classifiers?

For each triple and each of the n downstream classifiers (``classifiers.py``),
F = |DC(e) − DC(e⁺)| and G = |DC(e) − DC(e⁻)|, DC = P(positive class). A triple violates the
contrastive relation in the eyes of the tasks when the "close" sentence moves the classifiers
more than the "far" one. One-sided paired Wilcoxon signed-rank tests on F − G over the n
classifiers decide (COSTELLO §4, step 6):

- GT_A, clearly buggy:      F > G significantly     (alternative "greater", p < α);
- GT_B, potentially buggy:  F < G is not significant (alternative "less",   p ≥ α).

Test settings follow the reference evaluation: ``zero_method="wilcox"`` (classifiers with
F = G carry no evidence either way and are dropped), no continuity correction, scipy's
``method="auto"`` (exact distribution for small n without ties or zeros, else the normal
approximation). When *every* difference is zero (e.g. all classifiers saturate at the same
probability for the three sentences) scipy returns NaN; we set p = 1 in both directions:
no evidence of a bug (GT_A False) and no evidence of correct behaviour (GT_B True).
Rows are tested vectorised in groups of the same kind (zeros or not, ties or not), so a
triple's p-value depends only on its own classifiers (``wilcoxon_p``).
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy.stats import wilcoxon

from lingtest.tasks.contrastive.classifiers import ClassifierBank
from lingtest.tasks.core.errors import LingtestError

GT_COLUMNS = ["p_greater", "p_less", "gt_a", "gt_b", "mean_F", "mean_G"]


def _zeros_and_ties(diff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: does it hold a zero, and two equal non-zero |differences|? (scipy's
    ``method="auto"`` picks the exact distribution or the normal approximation by these)."""
    magnitudes = np.sort(np.abs(diff), axis=1)
    zeros = (magnitudes == 0).any(axis=1)
    equal = (np.diff(magnitudes, axis=1) == 0) & (magnitudes[:, 1:] > 0)
    return zeros, equal.any(axis=1)


def _wilcoxon(diff: np.ndarray, alternative: str) -> np.ndarray:
    with warnings.catch_warnings():  # scipy warns about small samples after dropping zeros
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)
        result = wilcoxon(diff, axis=-1, zero_method="wilcox", correction=False,
                          alternative=alternative, method="auto")
    # NaN cannot arise from a row with a non-zero difference; mapped to 1 all the same
    return np.nan_to_num(np.asarray(result.pvalue, dtype=np.float64), nan=1.0)


def wilcoxon_p(diff: np.ndarray, alternative: str) -> np.ndarray:
    """One-sided signed-rank p-value per row of ``diff`` (triples × classifiers); 1 when a
    row is all zeros.

    Each row's p-value depends on that row alone. One vectorised scipy call over all rows
    would not do: with ``method="auto"`` a single row with a zero or a tie switches *every*
    row to the normal approximation. So rows are tested in groups of the same kind (with or
    without zeros, with or without ties), where scipy's choice is the one it makes for each
    row alone.
    """
    diff = np.asarray(diff, dtype=np.float64)
    if diff.ndim != 2:
        raise LingtestError(f"differences of shape {diff.shape}: expected (triples, classifiers)")
    p = np.ones(diff.shape[0], dtype=np.float64)
    informative = (diff != 0).any(axis=1)
    zeros, ties = _zeros_and_ties(diff)
    for has_zero in (False, True):
        for has_tie in (False, True):
            group = informative & (zeros == has_zero) & (ties == has_tie)
            if group.any():
                p[group] = _wilcoxon(diff[group], alternative)
    return p


def ground_truth(dc_seed: np.ndarray, dc_pos: np.ndarray, dc_neg: np.ndarray,
                 alpha: float = 0.05) -> pd.DataFrame:
    """GT_A / GT_B per triple from classifier outputs of shape (n_classifiers, n_triples).

    Columns: p_greater, p_less (Wilcoxon p-values of F > G and F < G), gt_a, gt_b (bool),
    mean_F, mean_G (mean over classifiers, to show how large the effects are).
    """
    dc_seed, dc_pos, dc_neg = (np.asarray(a, dtype=np.float64) for a in (dc_seed, dc_pos, dc_neg))
    if not (dc_seed.shape == dc_pos.shape == dc_neg.shape) or dc_seed.ndim != 2:
        raise LingtestError(f"classifier outputs of shapes {dc_seed.shape}, {dc_pos.shape}, "
                            f"{dc_neg.shape}: expected three equal (classifiers, triples)")
    if not 0 < alpha < 1:
        raise LingtestError(f"alpha {alpha}: expected a level between 0 and 1")
    F = np.abs(dc_seed - dc_pos).T  # (triples, classifiers)
    G = np.abs(dc_seed - dc_neg).T
    p_greater = wilcoxon_p(F - G, "greater")
    p_less = wilcoxon_p(F - G, "less")
    return pd.DataFrame({
        "p_greater": p_greater, "p_less": p_less,
        "gt_a": p_greater < alpha, "gt_b": p_less >= alpha,
        "mean_F": F.mean(axis=1), "mean_G": G.mean(axis=1),
    }, columns=GT_COLUMNS)


def bank_ground_truth(bank: ClassifierBank, X_seed: np.ndarray, X_pos: np.ndarray,
                      X_neg: np.ndarray, alpha: float = 0.05) -> pd.DataFrame:
    """``ground_truth`` on the bank's outputs for triple features (rows aligned: triple i is
    row i of each matrix; pair features for CR4)."""
    return ground_truth(bank.predict_proba(X_seed), bank.predict_proba(X_pos),
                        bank.predict_proba(X_neg), alpha)


def precision(violated: np.ndarray, gt: np.ndarray) -> float:
    """Share of reported violations that the ground truth calls buggy (P_A with GT_A, P_B
    with GT_B). NaN when nothing was reported: precision is undefined there, and 0 would
    read as "every report was wrong"."""
    violated = np.asarray(violated, dtype=bool)
    gt = np.asarray(gt, dtype=bool)
    if violated.shape != gt.shape:
        raise LingtestError(f"violations {violated.shape} and ground truth {gt.shape} differ "
                            f"in shape")
    reported = int(violated.sum())
    return float("nan") if reported == 0 else float((violated & gt).sum() / reported)


__all__ = ["GT_COLUMNS", "wilcoxon_p", "ground_truth", "bank_ground_truth", "precision"]
