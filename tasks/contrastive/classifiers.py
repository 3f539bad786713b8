"""COSTELLO's downstream classifiers (DCs): 14 small MLPs trained on a model's embeddings.

The ground truth of contrastive testing (COSTELLO §4, step 6) asks whether the
embedding of s⁺ really stays closer to s than s⁻ does *for tasks built on the embeddings*:
several differently shaped classifiers trained on the same features vote through their
probabilities. This module trains and stores those classifiers; ``ground_truth.py`` runs the
Wilcoxon test on their outputs.

The 14 architectures mirror the reference implementation's ``CreateModel`` (ids 0–13): eight
have no activation between layers (linear probes with 1 or 2 hidden layers of 256–1024
units, which differ in their parameterisation and so in what Adam converges to), three ReLU
and three tanh networks with 2 hidden layers. Differences from the reference, on purpose:

- one output logit with binary cross-entropy (the reference's 2-way softmax is the same
  function family); ``predict_proba`` is P(positive class). For two classes
  |p_a(pos) − p_b(pos)| = |p_a(k) − p_b(k)| for either class k, so DC(e) differences equal
  the reference's differences on the seed's predicted class;
- inputs are standardised with the training mean and standard deviation (stored with the
  bank): pair features mix scales (u, |u−v|, u⊙v) and MiniLM's unit-norm embeddings have
  tiny coordinates, which slows Adam at a fixed epoch budget;
- each classifier keeps the epoch with the lowest log-loss on a held-out 10% of the
  training rows (better-calibrated probabilities than selecting on accuracy); the
  reference kept the epoch with the best accuracy on its validation loader, which
  defaulted to the training set itself.

A bank is one ``torch.save`` file (a dict of plain types and tensors, loadable with
``weights_only=True``): format tag, specs, state dicts, standardisation, accuracies, seeds
and training settings, so a later repair step reuses exactly the same classifiers.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from lingtest.tasks.core.errors import LingtestError

FORMAT = "lingtest-classifier-bank/1"
SEP = " [SEP] "
DEFAULT_LR = 1e-3
DEFAULT_BATCH_SIZE = 64
DEFAULT_VAL_FRACTION = 0.1
PREDICT_BATCH = 8192


@dataclass(frozen=True)
class ClassifierSpec:
    """One DC architecture: hidden widths and the activation between layers."""

    hidden: tuple[int, ...]
    activation: str  # "identity" | "relu" | "tanh"

    @property
    def name(self) -> str:
        return f"{self.activation}-" + "x".join(map(str, self.hidden))


SPECS: tuple[ClassifierSpec, ...] = (
    ClassifierSpec((256,), "identity"), ClassifierSpec((512,), "identity"),
    ClassifierSpec((256, 64), "identity"), ClassifierSpec((512, 64), "identity"),
    ClassifierSpec((256, 16), "relu"), ClassifierSpec((512, 64), "relu"),
    ClassifierSpec((256, 64), "relu"), ClassifierSpec((1024,), "identity"),
    ClassifierSpec((256, 32), "identity"), ClassifierSpec((512, 32), "identity"),
    ClassifierSpec((512, 256), "identity"), ClassifierSpec((256, 16), "tanh"),
    ClassifierSpec((512, 64), "tanh"), ClassifierSpec((256, 64), "tanh"),
)
"""The reference's 14 configurations, in its order (index i ↔ its model id i)."""

_ACTIVATIONS = {"identity": nn.Identity, "relu": nn.ReLU, "tanh": nn.Tanh}


def build_mlp(spec: ClassifierSpec, in_dim: int) -> nn.Sequential:
    """The network for ``spec``: Linear (+ activation) per hidden layer, then one logit."""
    if spec.activation not in _ACTIVATIONS:
        raise LingtestError(f"classifier activation `{spec.activation}`: expected one of "
                            f"{', '.join(_ACTIVATIONS)}")
    layers: list[nn.Module] = []
    width = in_dim
    for hidden in spec.hidden:
        layers += [nn.Linear(width, hidden), _ACTIVATIONS[spec.activation]()]
        width = hidden
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def classifier_seed(seed: int, index: int) -> int:
    """A 31-bit seed for classifier ``index`` of a run: independent streams per index."""
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0] & 0x7FFFFFFF)


@dataclass
class ClassifierBank:
    """Trained DCs over one feature space; ``predict_proba`` gives DC(x) for each of them."""

    specs: list[ClassifierSpec]
    models: list[nn.Sequential]
    mean: np.ndarray
    scale: np.ndarray
    accuracies: np.ndarray
    seeds: list[int]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def n_classifiers(self) -> int:
        return len(self.models)

    @property
    def in_dim(self) -> int:
        return int(self.mean.shape[0])

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(positive class), shape (n_classifiers, n_rows), float64."""
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.in_dim:
            raise LingtestError(f"features of shape {X.shape}: the classifier bank expects "
                                f"(rows, {self.in_dim})")
        out = np.empty((self.n_classifiers, X.shape[0]), dtype=np.float64)
        with torch.inference_mode():
            for start in range(0, X.shape[0], PREDICT_BATCH):
                xb = torch.from_numpy(_standardise(X[start:start + PREDICT_BATCH],
                                                   self.mean, self.scale))
                for k, model in enumerate(self.models):
                    model.eval()
                    out[k, start:start + xb.shape[0]] = torch.sigmoid(model(xb)[:, 0]).numpy()
        return out

    def save(self, path: str | Path) -> Path:
        """One file: specs, state dicts, standardisation, accuracies, seeds, settings."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({
            "format": FORMAT,
            "specs": [{"hidden": list(s.hidden), "activation": s.activation} for s in self.specs],
            "state_dicts": [m.state_dict() for m in self.models],
            "mean": torch.from_numpy(self.mean.copy()),
            "scale": torch.from_numpy(self.scale.copy()),
            "accuracies": [float(a) for a in self.accuracies],
            "seeds": list(self.seeds),
            "settings": dict(self.settings),
        }, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "ClassifierBank":
        """The bank ``save`` wrote; LingtestError when the file is not one."""
        try:
            blob = torch.load(Path(path), map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, EOFError) as exc:
            raise LingtestError(f"{path}: cannot read a classifier bank ({exc})") from None
        if not isinstance(blob, dict) or blob.get("format") != FORMAT:
            raise LingtestError(f"{path}: not a classifier bank (expected format {FORMAT})")
        specs = [ClassifierSpec(tuple(s["hidden"]), s["activation"]) for s in blob["specs"]]
        mean = blob["mean"].numpy()
        models = []
        for spec, state in zip(specs, blob["state_dicts"]):
            model = build_mlp(spec, mean.shape[0])
            model.load_state_dict(state)
            model.eval()
            models.append(model)
        return cls(specs, models, mean, blob["scale"].numpy(),
                   np.asarray(blob["accuracies"], dtype=np.float64), list(blob["seeds"]),
                   dict(blob["settings"]))


def _standardise(X: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return ((X - mean) / scale).astype(np.float32, copy=False)


def _check_xy(X: np.ndarray, y: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=np.float32)
    y = np.asarray(y)
    if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0] or X.shape[0] == 0:
        raise LingtestError(f"{what}: expected features (rows, dim) and labels (rows,), "
                            f"got {X.shape} and {y.shape}")
    if not np.isin(y, (0, 1)).all():
        raise LingtestError(f"{what}: labels must be 0/1 (got {sorted(set(y.tolist()))[:5]})")
    return X, y.astype(np.float32)


def _train_one(spec: ClassifierSpec, X: torch.Tensor, y: torch.Tensor,
               X_val: torch.Tensor | None, y_val: torch.Tensor | None, epochs: int, seed: int,
               lr: float, batch_size: int) -> tuple[nn.Sequential, int]:
    """Mini-batch Adam from a seeded init and a seeded shuffle (the global RNG is untouched);
    with validation rows, the weights of the epoch with the lowest validation loss."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_mlp(spec, X.shape[1])
    shuffle = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.BCEWithLogitsLoss()
    best_loss, best_epoch, best_state = float("inf"), epochs, None
    for epoch in range(1, epochs + 1):
        model.train()
        order = torch.randperm(X.shape[0], generator=shuffle)
        for start in range(0, X.shape[0], batch_size):
            idx = order[start:start + batch_size]
            optimiser.zero_grad(set_to_none=True)
            loss_fn(model(X[idx])[:, 0], y[idx]).backward()
            optimiser.step()
        if X_val is not None:
            model.eval()
            with torch.no_grad():
                loss = float(loss_fn(model(X_val)[:, 0], y_val))
            if loss < best_loss:
                best_loss, best_epoch = loss, epoch
                best_state = {k: v.clone() for k, v in model.state_dict().items()}
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return model, best_epoch


def train_classifiers(X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray,
                      y_test: np.ndarray, n: int = 14, epochs: int = 30, seed: int = 42,
                      lr: float = DEFAULT_LR, batch_size: int = DEFAULT_BATCH_SIZE,
                      val_fraction: float = DEFAULT_VAL_FRACTION,
                      threads: int | None = 1) -> ClassifierBank:
    """Train the first ``n`` of ``SPECS`` on (X_train, y_train); accuracy on the test split.

    A seeded ``val_fraction`` of the training rows is held out and each classifier keeps
    the epoch with the lowest validation log-loss (0: the last epoch), as the reference kept
    its best validation epoch: MRPC pair features overfit after 1–3 epochs, so a fixed
    budget would otherwise decide the accuracy. Classifier i starts from
    ``classifier_seed(seed, i)``, so a bank depends only on the data, the seed and the
    settings. ``threads`` caps torch's (process-wide) intra-op threads while training,
    restored afterwards; None keeps the current setting. One thread is the default: these
    matrices are too small to gain from more (3 SST-2 epochs: 10.0 s on 1 thread, 8.9 s on 2
    of an idle 2-core machine, but 73 s on 2 while other work shared the cores), and it keeps
    the bank independent of the runtime's thread count.
    """
    if not 1 <= n <= len(SPECS):
        raise LingtestError(f"n_classifiers {n}: expected 1–{len(SPECS)}")
    if not 0 <= val_fraction < 1 or epochs < 1 or batch_size < 1 or lr <= 0:
        raise LingtestError(f"training settings epochs={epochs}, lr={lr}, batch_size="
                            f"{batch_size}, val_fraction={val_fraction}: expected epochs, "
                            f"batch_size ≥ 1, lr > 0, 0 ≤ val_fraction < 1")
    X_train, y_train = _check_xy(X_train, y_train, "training data")
    X_test, y_test = _check_xy(X_test, y_test, "test data")
    if X_test.shape[1] != X_train.shape[1]:
        raise LingtestError(f"test features have {X_test.shape[1]} columns, training "
                            f"features {X_train.shape[1]}")
    n_val = int(round(val_fraction * X_train.shape[0]))
    if val_fraction > 0 and not 1 <= n_val < X_train.shape[0]:
        raise LingtestError(f"val_fraction {val_fraction} of {X_train.shape[0]} training rows "
                            f"leaves no validation or no training rows")
    order = np.random.default_rng(seed).permutation(X_train.shape[0])
    fit, val = order[n_val:], order[:n_val]
    mean = X_train[fit].mean(axis=0)
    scale = np.maximum(X_train[fit].std(axis=0), 1e-6).astype(np.float32)

    def tensors(rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.from_numpy(_standardise(X_train[rows], mean, scale)),
                torch.from_numpy(y_train[rows]))

    Xf, yf = tensors(fit)
    Xv, yv = tensors(val) if n_val else (None, None)
    specs, seeds = list(SPECS[:n]), [classifier_seed(seed, i) for i in range(n)]
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    started = time.perf_counter()
    try:
        trained = [_train_one(s, Xf, yf, Xv, yv, epochs, k, lr, batch_size)
                   for s, k in zip(specs, seeds)]
    finally:
        torch.set_num_threads(previous)
    bank = ClassifierBank(specs, [m for m, _ in trained], mean, scale, np.zeros(n), seeds, {
        "epochs": epochs, "seed": seed, "lr": lr, "batch_size": batch_size,
        "val_fraction": val_fraction, "best_epochs": [e for _, e in trained],
        "n_train": int(len(fit)), "n_val": n_val, "n_test": int(X_test.shape[0]),
        "train_seconds": round(time.perf_counter() - started, 3)})
    bank.accuracies = ((bank.predict_proba(X_test) >= 0.5) == (y_test >= 0.5)).mean(axis=1)
    return bank


# --------------------------------------------------------------------------- features and data

def pair_features(emb_s1: np.ndarray, emb_s2: np.ndarray) -> np.ndarray:
    """[u, v, |u−v|, u⊙v] per row: the usual sentence-pair features (InferSent/SBERT)."""
    u = np.asarray(emb_s1, dtype=np.float32)
    v = np.asarray(emb_s2, dtype=np.float32)
    if u.shape != v.shape or u.ndim != 2:
        raise LingtestError(f"pair features need two (rows, dim) matrices of the same shape, "
                            f"got {u.shape} and {v.shape}")
    return np.concatenate([u, v, np.abs(u - v), u * v], axis=1)


def split_pairs(texts: Sequence[str]) -> tuple[list[str], list[str]]:
    """CR4 texts "s1 [SEP] s2" → ([s1…], [s2…]); LingtestError naming the first bad text."""
    first, second = [], []
    for i, text in enumerate(texts):
        parts = text.split(SEP)
        if len(parts) != 2:
            raise LingtestError(f"pair text {i} {text[:80]!r}: expected exactly one {SEP!r}")
        first.append(parts[0])
        second.append(parts[1])
    return first, second


def sst2_rows(sst: pd.DataFrame, split: str) -> tuple[list[str], np.ndarray]:
    """SST-2 sentences of a split (label2 not null) and labels (1 = pos)."""
    rows = sst[(sst["split"] == split) & sst["label2"].notna()]
    if rows.empty:
        raise LingtestError(f"SST split `{split}` has no SST-2 sentences")
    return rows["text"].tolist(), (rows["label2"] == "pos").to_numpy(dtype=np.int64)


def mrpc_rows(mrpc: pd.DataFrame, split: str) -> tuple[list[str], list[str], np.ndarray]:
    """MRPC sentence1, sentence2 and labels (1 = paraphrase) of a split."""
    rows = mrpc[mrpc["split"] == split]
    if rows.empty:
        raise LingtestError(f"MRPC split `{split}` has no pairs")
    return (rows["sentence1"].tolist(), rows["sentence2"].tolist(),
            rows["label"].to_numpy(dtype=np.int64))


def spec_table(bank: ClassifierBank) -> pd.DataFrame:
    """One row per classifier: index, architecture, seed, kept epoch, test accuracy."""
    epochs = bank.settings.get("best_epochs") or [None] * bank.n_classifiers
    return pd.DataFrame({"classifier": range(bank.n_classifiers),
                         "architecture": [s.name for s in bank.specs], "seed": bank.seeds,
                         "best_epoch": epochs, "accuracy": bank.accuracies})


__all__ = ["SPECS", "ClassifierSpec", "ClassifierBank", "build_mlp", "classifier_seed",
           "train_classifiers", "pair_features", "split_pairs", "sst2_rows", "mrpc_rows",
           "spec_table"]
