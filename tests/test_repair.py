"""COSTELLO §5.4 repair: a handful of triples on the real packaged MiniLM — the training
triples' violations fall, the held-out numbers come from triples never trained on — plus the
parameter errors and the report's arithmetic."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tasks.core.config import Params, RepairParams, load_params
from tasks.core.errors import LingtestError
from tasks.core.paths import PACKAGE_ROOT, Workspace
from tasks.repair import report, stage
from tasks.repair import triples as tr

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
# (s, s⁺ synonym, s⁻ antonym); MiniLM puts the last five's antonym closer (margin > 0)
TRIPLES = [
    ("The film was good.", "The film was decent.", "The film was bad."),
    ("A wonderful story.", "A marvelous story.", "A terrible story."),
    ("The acting is strong.", "The acting is powerful.", "The acting is weak."),
    ("I loved this movie.", "I adored this movie.", "I hated this movie."),
    ("The plot is simple.", "The plot is plain.", "The plot is complex."),
    ("The music was beautiful.", "The music was lovely.", "The music was ugly."),
    ("The script is clever.", "The script is smart.", "The script is stupid."),
    ("An entertaining comedy.", "An amusing comedy.", "A boring comedy."),
    ("The visuals are impressive.", "The visuals are striking.", "The visuals are unimpressive."),
    ("She was kind to everyone.", "She was gentle to everyone.", "She was cruel to everyone."),
    ("A happy ending.", "A glad ending.", "A sad ending."),
    ("The pacing feels slow.", "The pacing feels sluggish.", "The pacing feels fast."),
    ("A funny and warm film.", "A comic and warm film.", "A serious and warm film."),
    ("The dialogue is natural.", "The dialogue is innate.", "The dialogue is unnatural."),
    ("The ending was predictable.", "The ending was foreseeable.",
     "The ending was unpredictable."),
]


def _labelled(encoder, p: RepairParams, seed: int) -> pd.DataFrame:
    """The triples with the original model's verdicts at θ = 0 and their seed split."""
    frame = pd.DataFrame(TRIPLES, columns=tr.TEXTS)
    frame.insert(0, "case_id", [f"t{i:02d}" for i in range(len(frame))])
    frame.insert(1, "relation", "CR1")
    margin = stage.margins(encoder.encode, frame, "l2")
    frame["verdict"] = np.where(margin > 0.0, "fail", "pass")
    frame["threshold"], frame["margin"] = 0.0, margin
    frame["gt_a"] = frame["gt_b"] = False
    frame["split"] = tr.seed_split(frame["seed"], p.heldout, p.validation, seed).to_numpy()
    return frame


def test_repair_lowers_training_violations_and_holds_out_unseen_seeds(tmp_path: Path):
    params = Params(repair=RepairParams(heldout=0.3, validation=0.0, selection="train",
                                        lr=0.05, epochs=2, lr_step=2, accumulation=1,
                                        batch_triples=2, max_steps_per_epoch=4,
                                        selection_max_triples=None, bootstrap=200))
    encoder = stage.load_tested_encoder(params, MINILM)
    labelled = _labelled(encoder, params.repair, params.seed)
    train_part = labelled[labelled["split"] == "train"]
    held = labelled[labelled["split"] == "heldout"]
    assert train_part["verdict"].eq("fail").sum() >= 2 and len(held) >= 2
    assert not set(held["seed"]) & set(train_part["seed"])  # split by seed sentence

    out_dir = tmp_path / "data" / "models" / "repair" / "minilm"
    facts = stage.train(params, Workspace(tmp_path), MINILM, labelled, out_dir)
    # only training-split triples were trained on
    assert facts["train_buggy"] + facts["train_benign"] == len(train_part)
    assert facts["repaired_revision"].startswith("local@sha256:")
    assert facts["repaired_revision"] != encoder.revision

    from tasks.models.encoders import load_encoder
    repaired = load_encoder(str(out_dir), device="cpu")
    assert repaired.pooling == encoder.pooling == "mean+norm"
    margin = stage.margins(repaired.encode, labelled, "l2")
    after = labelled[["case_id"]].assign(verdict=np.where(margin > 0.0, "fail", "pass"),
                                         threshold=0.0, margin=margin, gt_a=False, gt_b=False)
    both = report.joined(labelled, after)
    rates = report.fix_rates(both, 200, 0).set_index("split")
    before_train = int(train_part["verdict"].eq("fail").sum())
    assert rates.loc["train", "violated before"] == before_train
    assert rates.loc["train", "violated after"] < before_train  # the repair worked
    # the held-out row counts exactly the held-out triples, none of them trained on
    assert rates.loc["heldout", "triples"] == len(held)
    assert rates.loc["heldout", "violated before"] == int(held["verdict"].eq("fail").sum())
    t3 = report.table3(both, 200, 0)
    assert list(t3["rows"]) == ["paper (10 models, training triples)",
                                "lingtest, training triples", "lingtest, held-out triples"]


def test_bad_repair_parameters_name_the_key():
    with pytest.raises(LingtestError, match=r"repair.*heldout \+ validation"):
        load_params(PACKAGE_ROOT, ["repair.heldout=0.6", "repair.validation=0.5"])
    with pytest.raises(LingtestError, match=r"repair\.lr"):
        load_params(PACKAGE_ROOT, ["repair.lr=-1"])
    results = pd.DataFrame({"model_id": [MINILM], "distance": ["l2"], "dictionary": ["vocab"],
                            "threshold_kind": ["mu-sigma"], "case_id": ["a"]})
    with pytest.raises(LingtestError, match=r"repair\.threshold=mu-2sigma.*l2/vocab/mu-sigma"):
        tr.setting_rows(results, MINILM, RepairParams())


def test_fix_rate_and_decline_count_only_their_split():
    both = pd.DataFrame({
        "case_id": list("abcdef"), "relation": ["CR1"] * 3 + ["CR2"] * 3,
        "split": ["train", "train", "train", "heldout", "heldout", "heldout"],
        "violated": [True, True, False, True, True, False],
        "violated_after": [False, True, True, False, False, False],
        "violated_after_at_theta0": [False, False, True, True, False, False],
        "gt_a": [True, False, False, True, True, False],
        "gt_a_after": [False, True, False, False, False, False],
        "gt_b": [True] * 6, "gt_b_after": [True] * 6})
    rates = report.fix_rates(both, 200, 0).set_index("split")
    assert rates.loc["train", "fix rate %"] == 50.0 and rates.loc["train", "broken"] == 1
    assert rates.loc["train", "N_V decline %"] == 0.0  # one fixed, one broken
    assert rates.loc["train", "fix rate at original θ %"] == 100.0
    assert rates.loc["heldout", "fix rate %"] == 100.0
    t3 = report.table3(both, 200, 0).set_index("rows")
    assert t3.loc["lingtest, held-out triples", "CR2 N_V decline %"] == 100.0
    assert np.isnan(t3.loc["lingtest, held-out triples", "CR1 N_V decline %"])
