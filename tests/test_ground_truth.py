"""COSTELLO ground truth: Wilcoxon verdicts on made-up classifier outputs, precision, and the
14 downstream classifiers on a small synthetic learning problem (two Gaussian blobs)."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import wilcoxon

from lingtest.tasks.contrastive.classifiers import (
    SPECS, ClassifierBank, classifier_seed, mrpc_rows, pair_features, split_pairs, spec_table,
    sst2_rows, train_classifiers,
)
from lingtest.tasks.contrastive.ground_truth import (
    GT_COLUMNS, bank_ground_truth, ground_truth, precision, wilcoxon_p,
)
from lingtest.tasks.core.errors import LingtestError

N = 14


def _outputs(F: np.ndarray, G: np.ndarray, base: float = 0.5):
    """Classifier outputs (classifiers, triples) whose |seed − pos| = F and |seed − neg| = G."""
    seed = np.full_like(F, base)
    return seed, seed + F, seed - G


# --------------------------------------------------------------------------- Wilcoxon verdicts

def test_f_clearly_larger_is_clearly_buggy():
    rng = np.random.default_rng(0)
    F = 0.3 + rng.uniform(0, 0.05, size=(N, 3))
    G = rng.uniform(0, 0.05, size=(N, 3))
    gt = ground_truth(*_outputs(F, G), alpha=0.05)
    assert list(gt.columns) == GT_COLUMNS and len(gt) == 3
    assert gt["gt_a"].all() and gt["gt_b"].all()
    # every one of 14 distinct differences positive: exact one-sided p = 2^-14
    assert np.allclose(gt["p_greater"], 2.0 ** -14)
    assert np.allclose(gt["p_less"], 1.0)
    assert np.allclose(gt["mean_F"], F.mean(axis=0)) and np.allclose(gt["mean_G"], G.mean(axis=0))


def test_f_clearly_smaller_is_not_buggy():
    rng = np.random.default_rng(1)
    F = rng.uniform(0, 0.05, size=(N, 3))
    G = 0.3 + rng.uniform(0, 0.05, size=(N, 3))
    gt = ground_truth(*_outputs(F, G))
    assert not gt["gt_a"].any() and not gt["gt_b"].any()
    assert np.allclose(gt["p_less"], 2.0 ** -14)


def test_noise_is_potentially_but_not_clearly_buggy():
    rng = np.random.default_rng(2)
    F = rng.uniform(0, 0.2, size=(N, 400))
    G = rng.uniform(0, 0.2, size=(N, 400))
    gt = ground_truth(*_outputs(F, G, base=0.3), alpha=0.05)
    # under the null each one-sided test rejects about α of the time
    assert gt["gt_a"].mean() < 0.1
    assert gt["gt_b"].mean() > 0.9
    assert (gt["p_greater"].between(0, 1) & gt["p_less"].between(0, 1)).all()


def test_all_equal_outputs_give_p_one_without_warnings():
    dc = np.full((N, 4), 0.9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gt = ground_truth(dc, dc.copy(), dc.copy())
    assert (gt["p_greater"] == 1).all() and (gt["p_less"] == 1).all()
    assert not gt["gt_a"].any() and gt["gt_b"].all()
    assert (gt["mean_F"] == 0).all() and (gt["mean_G"] == 0).all()


def test_vectorised_p_values_match_scipy_per_triple():
    rng = np.random.default_rng(3)
    diff = np.round(rng.normal(size=(60, N)), 1)  # ties
    diff[rng.random(diff.shape) < 0.3] = 0.0       # zeros dropped ("wilcox")
    diff[0] = 0.0                                  # all-zero row
    for alternative in ("greater", "less"):
        got = wilcoxon_p(diff, alternative)
        assert got[0] == 1.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = [wilcoxon(row, zero_method="wilcox", correction=False,
                             alternative=alternative).pvalue for row in diff[1:]]
        assert np.allclose(got[1:], want)


def test_bad_shapes_and_alpha_are_errors():
    dc = np.zeros((N, 3))
    with pytest.raises(LingtestError, match="shapes"):
        ground_truth(dc, dc, np.zeros((N, 2)))
    with pytest.raises(LingtestError, match="alpha"):
        ground_truth(dc, dc, dc, alpha=1.5)


# --------------------------------------------------------------------------- precision

def test_precision_is_share_of_reported_violations_that_are_buggy():
    violated = np.array([True, True, False, True, False])
    gt = np.array([True, False, True, True, True])
    assert precision(violated, gt) == pytest.approx(2 / 3)
    assert precision(violated, np.ones(5, bool)) == 1.0
    assert precision(violated, np.zeros(5, bool)) == 0.0
    assert np.isnan(precision(np.zeros(5, bool), gt))
    with pytest.raises(LingtestError, match="shape"):
        precision(violated, gt[:3])


# --------------------------------------------------------------------------- classifiers

def _blobs(n: int, seed: int, dim: int = 32):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=n)
    centre = np.zeros(dim)
    centre[:4] = 1.0  # the classes differ along 4 of 32 directions
    X = rng.normal(size=(n, dim)) + np.where(y[:, None] == 1, centre, -centre)
    return X.astype(np.float32), y


@pytest.fixture(scope="module")
def blobs():
    return _blobs(400, seed=10), _blobs(300, seed=11)


@pytest.fixture(scope="module")
def bank(blobs):
    (Xtr, ytr), (Xte, yte) = blobs
    return train_classifiers(Xtr, ytr, Xte, yte, n=N, epochs=8, seed=7)


def test_classifiers_learn_the_blobs(bank, blobs):
    (_, _), (Xte, yte) = blobs
    assert bank.n_classifiers == N and bank.in_dim == 32
    assert bank.accuracies.shape == (N,)
    # Bayes accuracy is Φ(2) ≈ 0.977; every architecture should come close
    assert bank.accuracies.min() > 0.9, bank.accuracies
    proba = bank.predict_proba(Xte)
    assert proba.shape == (N, len(yte)) and proba.dtype == np.float64
    assert ((proba >= 0) & (proba <= 1)).all()
    assert np.allclose(((proba >= 0.5) == yte).mean(axis=1), bank.accuracies)


def test_the_14_configurations_differ(bank, blobs):
    specs = bank.specs
    assert specs == list(SPECS) and len(set(specs)) == N
    assert {s.activation for s in specs} == {"identity", "relu", "tanh"}
    assert {len(s.hidden) for s in specs} == {1, 2}
    proba = bank.predict_proba(blobs[1][0])
    for i in range(N):
        for j in range(i + 1, N):
            assert np.abs(proba[i] - proba[j]).max() > 1e-3, (i, j)
    assert len(set(bank.seeds)) == N and bank.seeds[3] == classifier_seed(7, 3)
    table = spec_table(bank)
    assert list(table["architecture"])[:2] == ["identity-256", "identity-512"]
    assert table["best_epoch"].between(1, 8).all()


def test_training_is_deterministic_and_leaves_global_rng_alone(bank, blobs):
    (Xtr, ytr), (Xte, yte) = blobs
    state, threads = torch.get_rng_state(), torch.get_num_threads()
    again = train_classifiers(Xtr, ytr, Xte, yte, n=N, epochs=8, seed=7)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.get_num_threads() == threads
    assert np.array_equal(again.predict_proba(Xte), bank.predict_proba(Xte))
    other = train_classifiers(Xtr, ytr, Xte, yte, n=2, epochs=8, seed=8)
    assert not np.array_equal(other.predict_proba(Xte), bank.predict_proba(Xte)[:2])


def test_validation_picks_an_early_epoch_when_training_overfits():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 64)).astype(np.float32)
    y = rng.integers(0, 2, size=300)  # labels unrelated to X: every epoch after the first overfits
    bank = train_classifiers(X, y, X[:50], y[:50], n=3, epochs=20, seed=1)
    assert bank.settings["n_val"] == 30 and bank.settings["n_train"] == 270
    assert max(bank.settings["best_epochs"]) < 20, bank.settings["best_epochs"]
    last = train_classifiers(X, y, X[:50], y[:50], n=3, epochs=20, seed=1, val_fraction=0)
    assert last.settings["best_epochs"] == [20, 20, 20] and last.settings["n_val"] == 0


def test_bank_round_trips_through_one_file(bank, blobs, tmp_path):
    Xte = blobs[1][0]
    path = bank.save(tmp_path / "dcs" / "sst2.pt")
    loaded = ClassifierBank.load(path)
    assert loaded.specs == bank.specs and loaded.seeds == bank.seeds
    assert np.array_equal(loaded.accuracies, bank.accuracies)
    assert loaded.settings == bank.settings and loaded.settings["epochs"] == 8
    assert np.array_equal(loaded.predict_proba(Xte), bank.predict_proba(Xte))
    torch.save({"something": "else"}, tmp_path / "other.pt")
    with pytest.raises(LingtestError, match="not a classifier bank"):
        ClassifierBank.load(tmp_path / "other.pt")
    with pytest.raises(LingtestError, match="cannot read"):
        ClassifierBank.load(tmp_path / "missing.pt")


def test_bank_ground_truth_on_blob_triples(bank):
    """s⁺ beside s, s⁻ in the other class: not buggy; swap s⁺ and s⁻: clearly buggy."""
    rng = np.random.default_rng(5)
    X0, _ = _blobs(50, seed=12)
    centre = np.zeros(32)
    centre[:4] = 1.0
    seed = -2 * centre + rng.normal(scale=0.3, size=(50, 32))  # deep in class 0
    near = seed + rng.normal(scale=0.05, size=seed.shape)
    far = seed + 4 * centre                                     # moved into class 1
    good = bank_ground_truth(bank, seed, near, far)
    bad = bank_ground_truth(bank, seed, far, near)
    assert (good["mean_F"] < good["mean_G"]).all()
    assert not good["gt_a"].any() and good["gt_b"].mean() < 0.1
    assert bad["gt_a"].mean() > 0.9 and bad["gt_b"].all()


def test_bad_training_inputs_are_errors(blobs):
    (Xtr, ytr), (Xte, yte) = blobs
    with pytest.raises(LingtestError, match="labels must be 0/1"):
        train_classifiers(Xtr, ytr + 1, Xte, yte, n=2, epochs=1)
    with pytest.raises(LingtestError, match="columns"):
        train_classifiers(Xtr, ytr, Xte[:, :8], yte, n=2, epochs=1)
    with pytest.raises(LingtestError, match="n_classifiers"):
        train_classifiers(Xtr, ytr, Xte, yte, n=15, epochs=1)
    with pytest.raises(LingtestError, match="val_fraction"):
        train_classifiers(Xtr, ytr, Xte, yte, n=2, epochs=1, val_fraction=1.0)
    with pytest.raises(LingtestError, match="no validation"):
        train_classifiers(Xtr[:3], ytr[:3], Xte, yte, n=2, epochs=1, val_fraction=0.1)


# --------------------------------------------------------------------------- features and data

def test_pair_features_and_split_pairs():
    u = np.array([[1.0, -2.0]], dtype=np.float32)
    v = np.array([[3.0, 1.0]], dtype=np.float32)
    assert pair_features(u, v).tolist() == [[1, -2, 3, 1, 2, 3, 3, -2]]
    with pytest.raises(LingtestError, match="same shape"):
        pair_features(u, v[:, :1])
    assert split_pairs(["a b [SEP] c d", "x [SEP] y"]) == (["a b", "x"], ["c d", "y"])
    with pytest.raises(LingtestError, match="pair text 1"):
        split_pairs(["a [SEP] b", "no separator"])


def test_training_rows_from_the_tables():
    sst = pd.DataFrame({"split": ["train", "train", "train", "test"],
                        "text": ["good", "meh", "bad", "fine"],
                        "label2": ["pos", None, "neg", "pos"]})
    texts, y = sst2_rows(sst, "train")
    assert texts == ["good", "bad"] and y.tolist() == [1, 0]
    mrpc = pd.DataFrame({"split": ["train", "test"], "sentence1": ["a", "b"],
                         "sentence2": ["c", "d"], "label": [1, 0]})
    s1, s2, y = mrpc_rows(mrpc, "test")
    assert (s1, s2, y.tolist()) == (["b"], ["d"], [0])
    with pytest.raises(LingtestError, match="dev"):
        sst2_rows(sst, "dev")


def test_each_triples_p_value_depends_only_on_its_own_row():
    """One row with a zero must not switch the tie-free rows to the normal approximation."""
    rng = np.random.default_rng(5)
    clean = rng.normal(0.1, 1.0, size=(5, N))           # no zeros, no ties: exact
    zero_row = clean[:1].copy()
    zero_row[0, 1] = 0.0
    tied_row = clean[1:2].copy()
    tied_row[0, 2] = -tied_row[0, 3]
    batch = np.vstack([clean, zero_row, tied_row])
    for alternative in ("greater", "less"):
        got = wilcoxon_p(batch, alternative)
        alone = [wilcoxon(row, zero_method="wilcox", correction=False, method="auto",
                          alternative=alternative).pvalue for row in batch]
        assert np.allclose(got, alone, rtol=0, atol=1e-12)
        assert np.allclose(wilcoxon_p(clean, alternative), got[:5], rtol=0, atol=1e-12)
