"""COSTELLO §5.4 repair: a handful of triples on the real packaged MiniLM — the training
triples' violations fall, the held-out numbers come from triples never trained on — plus the
parameter errors, the report's arithmetic (several models averaged, not pooled) and the
stage end to end on two encoders."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lingtest.flows.registry import Params
from lingtest.tasks.repair.params import RepairParams
from lingtest.flows.registry import load_params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.repair import report, stage
from lingtest.tasks.repair import triples as tr

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

    from lingtest.tasks.models.encoders import load_encoder
    repaired = load_encoder(str(out_dir), device="cpu")
    assert repaired.pooling == encoder.pooling == "mean+norm"
    margin = stage.margins(repaired.encode, labelled, "l2")
    after = labelled[["case_id"]].assign(verdict=np.where(margin > 0.0, "fail", "pass"),
                                         threshold=0.0, margin=margin, gt_a=False, gt_b=False)
    both = report.joined(labelled, after).assign(model=MINILM)
    rates = report.fix_rates(both, 200, 0).set_index("split")
    before_train = int(train_part["verdict"].eq("fail").sum())
    assert rates.loc["train", "violated before"] == before_train
    assert rates.loc["train", "violated after"] < before_train  # the repair worked
    # the held-out row counts exactly the held-out triples, none of them trained on
    assert rates.loc["heldout", "triples"] == len(held)
    assert rates.loc["heldout", "violated before"] == int(held["verdict"].eq("fail").sum())
    t3 = report.table3(both, 200, 0)
    assert list(zip(t3["model"], t3["triples"])) == [
        (report.PAPER_ROW, "training"), (MINILM, "training"), (MINILM, "held-out")]


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
        "gt_b": [True] * 6, "gt_b_after": [True] * 6, "model": "m"})
    rates = report.fix_rates(both, 200, 0).set_index("split")
    assert rates.loc["train", "fix rate %"] == 50.0 and rates.loc["train", "broken"] == 1
    assert rates.loc["train", "N_V decline %"] == 0.0  # one fixed, one broken
    assert rates.loc["train", "fix rate at original θ %"] == 100.0
    assert rates.loc["heldout", "fix rate %"] == 100.0
    t3 = report.table3(both, 200, 0).set_index(["model", "triples"])
    assert t3.loc[("m", "held-out"), "CR2 N_V decline %"] == 100.0
    assert np.isnan(t3.loc[("m", "held-out"), "CR1 N_V decline %"])


def _repaired(model: str, violated: int, fixed: int, benign: int, split: str = "train"):
    """One model's joined triples: ``violated`` before, ``fixed`` of them pass after, and
    ``benign`` that pass before and after."""
    n = violated + benign
    before = np.arange(n) < violated
    after = before & (np.arange(n) >= fixed)
    return pd.DataFrame({
        "case_id": [f"{model}{i}" for i in range(n)], "relation": "CR1", "split": split,
        "violated": before, "violated_after": after, "violated_after_at_theta0": after,
        "gt_a": False, "gt_a_after": False, "gt_b": False, "gt_b_after": False,
        "model": model})


def _bank(model: str, accuracies: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"model": model, "task": "sentiment", "accuracy": accuracies,
                         "classifier": [f"c{i}" for i in range(len(accuracies))]})


def test_several_models_are_averaged_not_pooled():
    """Model A: 10 violated → 5, model B: 2 → 2 (each with 8 benign triples). By hand:
    declines 50 % and 0 %, mean 25 %; pooled counts (12 → 7) would give 41.7 %."""
    both = pd.concat([_repaired("A", 10, 5, 8), _repaired("B", 2, 0, 8)], ignore_index=True)
    t3 = report.table3(both, 500, 0).set_index(["model", "triples"])
    assert list(t3.index[:2]) == [(report.PAPER_ROW, "training"),
                                  ("mean over 2 models", "training")]
    assert t3.loc[("A", "training"), "all N_V decline %"] == 50.0
    assert t3.loc[("B", "training"), "all N_V decline %"] == 0.0
    mean = t3.loc[("mean over 2 models", "training")]
    assert mean["all N_V decline %"] == mean["CR1 N_V decline %"] == 25.0
    # B's decline is 0 in every resample, so the mean's interval is half of A's
    low, high = map(float, mean["all 95% CI"].strip("[]").split(","))
    assert 0 < low < 25.0 < high <= 50.0
    assert t3.loc[(report.PAPER_ROW, "training"), "all N_V decline %"] == 50.48

    rates = report.fix_rates(both, 500, 0).set_index(["model", "split"])
    assert rates.loc[("mean over 2 models", "train"), "fix rate %"] == 25.0
    assert rates.loc[("mean over 2 models", "train"), "N_V decline %"] == 25.0
    assert rates.loc[("A", "train"), "violated before"] == 10

    acc = report.accuracy(pd.concat([_bank("A", [0.80, 0.82, 0.84]),
                                     _bank("B", [0.70, 0.70, 0.73])]),
                          pd.concat([_bank("A", [0.83, 0.84, 0.85]),  # +2 pp
                                     _bank("B", [0.69, 0.69, 0.72])]),  # −1 pp
                          500, 0).set_index("model")
    assert acc.loc["A", "change pp"] == 2.0 and acc.loc["B", "change pp"] == -1.0
    assert acc.loc["mean over 2 models", "change pp"] == 0.5

    facts = [{"model_id": m, "setting": "l2 mu-2sigma vocab", "theta": 0.3, "best_epoch": 1}
             for m in ("A", "B")]
    metrics = report.metrics(facts, report.fix_rates(both, 100, 0), acc.reset_index())
    assert metrics["A"]["nv_decline_train"] == 50.0
    assert metrics["B"]["fix_rate_train"] == 0.0
    assert metrics["all"]["models"] == 2 and metrics["all"]["mean.nv_decline_train"] == 25.0
    assert metrics["all"]["mean.accuracy_change_pp.sentiment"] == 0.5
    assert metrics["setting"] == "l2 mu-2sigma vocab"


def test_one_model_has_no_mean_row():
    both = pd.concat([_repaired("A", 10, 5, 8), _repaired("A", 4, 1, 4, "heldout")],
                     ignore_index=True)
    t3 = report.table3(both, 200, 0)
    assert list(zip(t3["model"], t3["triples"])) == [
        (report.PAPER_ROW, "training"), ("A", "training"), ("A", "held-out")]
    assert set(report.fix_rates(both, 200, 0)["model"]) == {"A"}
    acc = report.accuracy(_bank("A", [0.8, 0.9]), _bank("A", [0.9, 0.9]), 200, 0)
    assert list(acc["model"]) == ["A"]
    facts = [{"model_id": "A", "setting": "s", "theta": 0.3, "best_epoch": 1}]
    assert set(report.metrics(facts, report.fix_rates(both, 200, 0), acc)) == {"setting", "A"}


def test_substitutes_name_what_was_repaired():
    """The default run keeps its sentence; the paper's own models are no substitutes, other
    models, a pooling other than the pooler and the classifier count are named as run."""
    assert report.substitutes([{"model_id": MINILM, "pooling": "mean+norm"}], 14) == \
        report.SUBSTITUTES
    papers = load_params(PACKAGE_ROOT, [], "paper").repair.models
    text = report.substitutes([{"model_id": m, "pooling": "pooler"} for m in papers], 5)
    assert text == ("Substitutes: the paper's downstream classifiers → the contrastive "
                    "stage's 5 MLPs, retrained on the repaired embeddings.")
    text = report.substitutes([{"model_id": "org/mine", "pooling": "cls"}], 14)
    assert "hub encoders → org/mine" in text and "(org/mine: cls)" in text


def test_models_to_repair_must_be_tested_by_the_contrastive_stage():
    tested = [MINILM, "local/minilm-copy"]
    assert stage.models_under_repair(Params(), tested) == [MINILM]  # null: the first
    every = Params(repair=RepairParams(models=["all"]))
    assert stage.models_under_repair(every, tested) == tested
    with pytest.raises(LingtestError, match=r"repair\.models: `bert-base-uncased` not among "
                       r".*all-MiniLM-L6-v2, local/minilm-copy.*fix: .*contrastive\.encoders"):
        stage.models_under_repair(
            Params(repair=RepairParams(models=[MINILM, "bert-base-uncased"])), tested)
    assert load_params(PACKAGE_ROOT, ["repair.models=all"]).repair.models == ["all"]
    with pytest.raises(LingtestError, match=r"repair\.models.*listed twice"):
        load_params(PACKAGE_ROOT, [f"repair.models=[{MINILM}, {MINILM}]"])


def test_repair_refuses_a_python_encoder_by_name_or_spec(tmp_path: Path):
    """A python: encoder the contrastive stage tested cannot be fine-tuned: one error naming
    repair.models and the reason, whether it is chosen by display name or by spec."""
    (tmp_path / "enc.py").write_text("def embed(texts):\n    return [[1.0, 2.0] for _ in texts]\n")
    spec = "python:enc.py:embed#name=toy"
    params = load_params(PACKAGE_ROOT, [f"contrastive.encoders=[{MINILM}, '{spec}']",
                                        "repair.models=[toy]"])
    tested = [MINILM, "toy"]
    assert stage.models_under_repair(params, tested) == ["toy"]
    with pytest.raises(LingtestError, match=r"repair\.models: `python:enc\.py:embed` \(toy\) "
                       r"is a python: encoder; .*cannot train user code; fix: remove it"):
        stage.check_models_repairable(params, ["toy"], tmp_path)
    stage.check_models_repairable(params, [MINILM], tmp_path)  # lingtest's own: repairable


@pytest.mark.slow
def test_repair_flow_repairs_two_models_and_averages_them(data_project, tmp_path_factory):
    """The stage end to end on the contrastive stage's output for two encoders: the packaged
    MiniLM and a copy of its folder (a second model id, same weights), a tiny budget."""
    import json
    import shutil

    from lingtest.flows.stage import run_stage
    from lingtest.tasks.core.publish import slug
    from lingtest.tasks.models.registry import resolve

    workspace, overrides = data_project
    copy = tmp_path_factory.mktemp("encoders") / "minilm-copy"
    shutil.copytree(resolve(MINILM, "encoder").path, copy)
    small = ["contrastive.max_seeds=2", "contrastive.dictionary_max_words=200",
             "contrastive.classifier_epochs=2", "contrastive.classifier_max_train=80",
             "contrastive.classifier_max_test=30", "contrastive.distances=[l2]",
             "contrastive.thresholds=[zero]", f"contrastive.encoders=[{MINILM}, {copy}]",
             "repair.models=[all]", "repair.threshold=zero", "repair.heldout=0.3",
             "repair.validation=0", "repair.selection=train", "repair.epochs=1",
             "repair.max_steps_per_epoch=1", "repair.lr=0.05", "repair.batch_triples=2",
             "repair.selection_max_triples=10", "repair.classifier_max_train=80",
             "repair.classifier_max_test=30", "repair.bootstrap=100"]
    params = load_params(workspace.root, overrides + small)
    run_stage("contrastive", params, workspace)
    out = run_stage("repair", params, workspace)

    models = [MINILM, "minilm-copy"]  # display names: the folder's own name, not its path
    assert out["models"] == models
    for model in models:
        assert (workspace.data / "models" / "repair" / slug(model) / "model.safetensors").is_file()
    suite = pd.read_parquet(workspace.interim / "contrastive" / "suite.parquet")
    triples = pd.read_parquet(workspace.interim / "repair" / "triples.parquet")
    assert triples.groupby("model").size().to_dict() == {m: len(suite) for m in models}
    reports = workspace.reports / "repair"
    t3 = pd.read_csv(reports / "repair-table3.csv").set_index(["model", "triples"])
    per_model = t3.loc[[(m, "training") for m in models], "all N_V decline %"].dropna()
    mean = t3.loc[("mean over 2 models", "training"), "all N_V decline %"]
    assert mean == pytest.approx(per_model.mean(), abs=0.01)
    for key in ("repair-fix-rates", "repair-changes", "repair-precision", "repair-accuracy",
                "repair-epochs"):
        assert set(models) <= set(pd.read_csv(reports / f"{key}.csv")["model"]), key
    provenance = json.loads((reports / "provenance.json").read_text())["models"]
    for model in models:
        assert f"{model} @ " in provenance
        assert f"repaired: data/models/repair/{slug(model)} @ local@sha256:" in provenance
    metrics = json.loads((reports / "metrics.json").read_text())
    assert set(metrics) == {*models, "all", "setting"} and metrics["all"]["models"] == 2
    # this machine's seconds stay out of the DVC outputs; the flow's result keeps them
    assert "seconds" not in (reports / "metrics.json").read_text()
    assert "seconds" not in pd.read_csv(reports / "repair-epochs.csv").columns
    assert all(one["train"] > 0 for one in out["seconds"].values())


def test_changes_table_reads_in_repair_split_and_relation_order():
    """Rows as a reader scans them: models as repaired, train → validation → held-out, CR1 →
    CR4 (whatever order the diff's rows came in)."""
    diff = pd.DataFrame({
        "model": ["b", "b", "a", "a", "a", "b"],
        "split": ["heldout", "train", "heldout", "train", "train", "train"],
        "relation": ["CR1", "CR4", "CR2", "CR4", "CR1", "CR1"],
        "change": ["fixed", "broken", "unchanged", "fixed", "fixed", "unchanged"]})
    table = report.changes(diff)
    assert list(zip(table["model"], table["split"], table["relation"])) == [
        ("b", "train", "CR1"), ("b", "train", "CR4"), ("b", "heldout", "CR1"),
        ("a", "train", "CR1"), ("a", "train", "CR4"), ("a", "heldout", "CR2")]
    assert table.loc[1, ["fixed", "broken", "unchanged"]].tolist() == [0, 1, 0]
