"""Which triples a repair trains on, picks its epoch with, and is judged on.

The contrastive stage's verdicts at one setting (distance, dictionary, θ kind: the paper's
L2, vocabulary, μ−2σ) mark each triple violated ("buggy") or benign. Triples are split by
seed sentence — a seed's triples all land in one split — into ``train`` (the paper's: all
buggy and benign triples are trained on), ``validation`` (picks the kept epoch) and
``heldout`` (never trained on, never used to pick): the honest fix rate.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from lingtest.tasks.repair.params import RepairParams
from lingtest.tasks.core.errors import LingtestError

SPLITS = ("train", "validation", "heldout")
TEXTS = ["seed", "positive", "negative"]


def setting_rows(results: pd.DataFrame, model_id: str, p: RepairParams) -> pd.DataFrame:
    """The model's result rows at the repair's setting, one per triple."""
    rows = results[(results["model_id"] == model_id) & (results["distance"] == p.distance)
                   & (results["dictionary"] == p.dictionary)
                   & (results["threshold_kind"] == p.threshold)]
    if rows.empty:
        have = results.loc[results["model_id"] == model_id,
                           ["distance", "dictionary", "threshold_kind"]].drop_duplicates()
        settings = ", ".join("/".join(r) for r in have.itertuples(index=False)) or "none"
        raise LingtestError(
            f"repair: the contrastive results hold no rows of `{model_id}` at repair.distance="
            f"{p.distance}, repair.dictionary={p.dictionary}, repair.threshold={p.threshold} "
            f"(settings there: {settings}); fix: pick one of those, or add it to "
            f"contrastive.distances / contrastive.thresholds and rerun the contrastive stage")
    if rows["case_id"].duplicated().any():
        raise LingtestError("repair: several contrastive rows per triple at one setting "
                            f"({p.distance}/{p.dictionary}/{p.threshold}); rerun the stage")
    return rows.reset_index(drop=True)


def seed_split(seeds: pd.Series, heldout: float, validation: float, seed: int) -> pd.Series:
    """Each row's split from a hash of its seed sentence and the run's seed: rows sharing a
    seed sentence always share a split; shares are ``heldout``, ``validation``, the rest."""
    def unit(text: str) -> float:
        digest = hashlib.sha256(f"{seed}\0{text}".encode("utf-8")).digest()
        return int.from_bytes(digest[:8], "big") / 2 ** 64

    u = seeds.map(unit).to_numpy()
    out = np.where(u < heldout, "heldout", np.where(u < heldout + validation, "validation",
                                                    "train"))
    return pd.Series(out, index=seeds.index, name="split")


def label_triples(suite: pd.DataFrame, rows: pd.DataFrame, p: RepairParams,
                  seed: int) -> pd.DataFrame:
    """The suite's triples with their verdict, θ, margin and split (one row per case)."""
    cols = ["case_id", "verdict", "threshold", "margin", "gt_a", "gt_b"]
    merged = suite[["case_id", "relation", *TEXTS]].merge(rows[cols], on="case_id",
                                                          how="inner", validate="1:1")
    if len(merged) != len(suite):
        raise LingtestError(f"repair: {len(suite) - len(merged)} triples of the suite have no "
                            "contrastive result; rerun the contrastive stage")
    merged["split"] = seed_split(merged["seed"], p.heldout, p.validation, seed).to_numpy()
    return merged


def triples_of(frame: pd.DataFrame) -> list[tuple[str, str, str]]:
    return list(frame[TEXTS].itertuples(index=False, name=None))


def still_violated(margin: np.ndarray, theta: float, rule: str) -> np.ndarray:
    """The count used to pick the epoch: the test's rule (margin > θ) or ``Fixing.py``'s
    (triplet loss with margin θ above 0, i.e. margin > −θ)."""
    return margin > (theta if rule == "test" else -theta)


def selection_frame(labelled: pd.DataFrame, p: RepairParams, seed: int) -> pd.DataFrame:
    """The triples counted after each epoch: the validation split (or, as the paper, the
    training split), capped by a seeded sample when ``selection_max_triples`` is set."""
    split = "validation" if p.selection == "validation" else "train"
    frame = labelled[labelled["split"] == split]
    if p.selection == "train":
        frame = frame[frame["verdict"] == "fail"]  # Fixing.py tests its buggy triples
    cap = p.selection_max_triples
    if cap is not None and len(frame) > cap:
        frame = frame.sample(cap, random_state=seed).sort_index()
    if frame.empty and p.selection == "train":
        raise LingtestError("repair: no violated training triple to pick the epoch with (or to "
                            "train on); fix: pick a setting with violations (repair.threshold, "
                            "repair.distance) or lower repair.heldout")
    if frame.empty:
        raise LingtestError(f"repair: no {split} triples to pick the epoch with; fix: raise "
                            "repair.validation or set repair.selection: train")
    return frame
