"""Neuron boundary coverage of a test suite (S²LCT Eq. 3–4), S²LCT against CheckList.

S²LCT (and ALiCT after it) measure how diverse a suite is by the DeepGauge corner-region
criteria (Ma et al., 2018). For each neuron n of the chosen layers, training inputs give
``low_n = min_x φ(x, n)`` and ``high_n = max_x φ(x, n)``; for a test set T:

* UpperCorner(T) = {n : ∃ x ∈ T, φ(x, n) > high_n}
* LowerCorner(T) = {n : ∃ x ∈ T, φ(x, n) < low_n}
* BoundCov(T) = (|UpperCorner(T)| + |LowerCorner(T)|) / (2 |N|)   (Eq. 3; DeepGauge NBCov)
* SActCov(T) = |UpperCorner(T)| / |N|                             (Eq. 4; DeepGauge SNACov)

Neurons and per-example activations (documented choices):

* Layers — for a Hugging Face encoder classifier, every transformer block's FFN
  intermediate output: the ``*Intermediate`` modules of BERT / RoBERTa / ELECTRA (output
  after the activation function, the FFN's hidden units) and DistilBERT's ``ffn.lin1``
  (before its activation: the module holding the same units). Any other network falls back
  to every ``nn.Linear``. Each output feature of a layer is one neuron.
* Reduction — a layer output with a token axis (batch, tokens, features) is averaged over
  the tokens the attention mask keeps (all tokens without a mask), so a neuron's activation
  reflects the whole sentence rather than the [CLS] position alone; a (batch, features)
  output is used as it is.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from lingtest.tasks.core.errors import LingtestError

Batch = Mapping[str, torch.Tensor] | torch.Tensor
Bounds = tuple[np.ndarray, np.ndarray]
CURVE_COLUMNS = ["suite", "size", "boundcov", "sactcov"]
PAIR_COLUMNS = ["capability", "checklist_test", "size", "s2lct_texts", "checklist_texts",
                "s2lct_boundcov", "checklist_boundcov", "s2lct_sactcov", "checklist_sactcov"]

# ALiCT's map from its capabilities to CheckList's MFT tests (python/sa/utils/Macros.py,
# LC_MAP, matched by capability title), keyed by our LC ids; LC10 and LC11 split ALiCT's
# "(question, no)" capability and share its test.
LC_TO_CHECKLIST = {
    "LC1": "neutral words in context",
    "LC2": "Sentiment-laden words in context",
    "LC3": "used to, but now",
    "LC4": "simple negations: not negative",
    "LC5": "simple negations: not neutral is still neutral",
    "LC6": "simple negations: I thought x was negative, but it was not (should be neutral "
           "or positive)",
    "LC7": "Hard: Negation of positive with neutral stuff in the middle (should be negative)",
    "LC8": "my opinion is what matters",
    "LC9": "Q & A: yes",
    "LC10": "Q & A: no",
    "LC11": "Q & A: no",
}


def default_layers(model: nn.Module) -> dict[str, nn.Module]:
    """The FFN intermediate modules of a HF encoder, else every ``nn.Linear`` (see module doc)."""
    found = {name: module for name, module in model.named_modules()
             if type(module).__name__.endswith("Intermediate")}
    if not found:
        found = {name: module for name, module in model.named_modules()
                 if name.endswith("ffn.lin1") and isinstance(module, nn.Linear)}
    if not found:
        found = {name: module for name, module in model.named_modules()
                 if isinstance(module, nn.Linear)}
    if not found:
        raise LingtestError(f"{type(model).__name__} has no FFN intermediate or nn.Linear "
                            "layer to measure coverage on; pass layers explicitly")
    return found


def _reduce(output: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """(batch, features) per example: masked mean over tokens for a 3-D output."""
    if isinstance(output, tuple):
        output = output[0]
    output = output.detach().float()
    if output.dim() == 2:
        return output
    if output.dim() != 3:
        raise LingtestError(f"layer output of shape {tuple(output.shape)}: expected "
                            "(batch, features) or (batch, tokens, features)")
    if mask is None:
        return output.mean(dim=1)
    weights = mask.to(output.dtype).unsqueeze(-1)
    return (output * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


def iter_activations(model: nn.Module, batches: Iterable[Batch],
                     layers: Mapping[str, nn.Module] | None = None) -> Iterator[np.ndarray]:
    """(batch, neurons) float32 activations of ``layers`` (default: ``default_layers``), batch
    by batch, so bounds over a large training set never hold all activations at once.

    A batch is a tensor (the model's one positional input) or a mapping of keyword inputs,
    e.g. a tokenizer's output; its ``attention_mask`` drives the token mean. Neurons are
    ordered layer by layer in the order ``layers`` lists them.
    """
    layers = dict(layers) if layers is not None else default_layers(model)
    captured: dict[str, torch.Tensor] = {}
    mask_box: list[torch.Tensor | None] = [None]

    def hook_for(name: str):
        def hook(_module: nn.Module, _inputs: tuple, output: torch.Tensor) -> None:
            captured[name] = _reduce(output, mask_box[0])
        return hook

    handles = [module.register_forward_hook(hook_for(name)) for name, module in layers.items()]
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            captured.clear()
            with torch.no_grad():
                if isinstance(batch, torch.Tensor):
                    mask_box[0] = None
                    model(batch)
                else:
                    mask_box[0] = batch.get("attention_mask")
                    model(**batch)
            absent = [name for name in layers if name not in captured]
            if absent:
                raise LingtestError(f"layers {absent} did not run in the forward pass")
            yield torch.cat([captured[name] for name in layers], dim=1).numpy()
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)


def activations(model: nn.Module, batches: Iterable[Batch],
                layers: Mapping[str, nn.Module] | None = None) -> np.ndarray:
    """(examples, neurons) float32 activations: ``iter_activations`` stacked.

    Memory is examples × neurons × 4 bytes (BERT-base FFN: 36,864 neurons ≈ 147 KB per
    example), so sample a suite before recording it.
    """
    rows = list(iter_activations(model, batches, layers))
    if not rows:
        raise LingtestError("no input batches: cannot record activations")
    return np.concatenate(rows, axis=0)


def text_passes(tokenizer, texts: Sequence[str], max_length: int = 128,
                pass_tokens: int | None = None) -> list[tuple[list[int], dict]]:
    """``texts`` as exact-length passes (``encoders.exact_length_passes``: no padding, a
    shape fixed by the length): a text's activations are the same bits whichever texts share
    its pass, so any subset of a suite, in any order, gives each text the same flags."""
    from lingtest.tasks.models.encoders import PASS_TOKENS, exact_length_passes

    return list(exact_length_passes(tokenizer, texts, max_length, pass_tokens or PASS_TOKENS))


def text_bounds(model: nn.Module, tokenizer, texts: Sequence[str], max_length: int = 128,
                pass_tokens: int | None = None,
                layers: Mapping[str, nn.Module] | None = None) -> Bounds:
    """``bounds`` of ``texts`` run in exact-length passes (a pass's fill-up copies repeat a
    real text, so they move no bound)."""
    return bounds(model, (inputs for _, inputs in text_passes(tokenizer, texts, max_length,
                                                                pass_tokens)), layers)


def text_corner_flags(model: nn.Module, tokenizer, texts: Sequence[str], bounds_: Bounds,
                      max_length: int = 128, pass_tokens: int | None = None,
                      layers: Mapping[str, nn.Module] | None = None) -> CornerFlags:
    """``CornerFlags`` of ``texts``, in their order, from exact-length passes (``corner_flags``
    of the passes, without their fill-up copies)."""
    passes = text_passes(tokenizer, texts, max_length, pass_tokens)
    flags = corner_flags(model, (inputs for _, inputs in passes), bounds_, layers)
    rows, order, start = [], [], 0
    for real, inputs in passes:
        rows += range(start, start + len(real))  # the real rows come first in a pass
        order += real
        start += len(inputs["input_ids"])
    return flags.take(np.asarray(rows)[np.argsort(order, kind="stable")])


def bounds_from_activations(train: np.ndarray) -> Bounds:
    """Per-neuron (low, high): the minimum and maximum training activation."""
    train = np.asarray(train, dtype=np.float64)
    if train.ndim != 2 or len(train) == 0:
        raise LingtestError(f"training activations of shape {train.shape}: expected a "
                            "non-empty (examples, neurons) array")
    return train.min(axis=0), train.max(axis=0)


def bounds(model: nn.Module, train_inputs: Iterable[Batch],
           layers: Mapping[str, nn.Module] | None = None) -> Bounds:
    """Per-neuron (low, high) over the training inputs' activations, as a running min/max."""
    low = high = None
    for rows in iter_activations(model, train_inputs, layers):
        if len(rows) == 0:
            continue
        rows = rows.astype(np.float64)
        low = rows.min(axis=0) if low is None else np.minimum(low, rows.min(axis=0))
        high = rows.max(axis=0) if high is None else np.maximum(high, rows.max(axis=0))
    if low is None or high is None:
        raise LingtestError("no training inputs: cannot set activation bounds")
    return low, high


def _corners(bounds_: Bounds, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    low, high = bounds_
    test = np.asarray(test, dtype=np.float64)
    if test.ndim != 2 or test.shape[1] != len(high) or len(low) != len(high):
        raise LingtestError(f"test activations of shape {test.shape} do not match "
                            f"{len(high)} bounded neurons")
    if len(test) == 0:
        return np.zeros(len(high), bool), np.zeros(len(high), bool)
    return (test > high).any(axis=0), (test < low).any(axis=0)


def boundcov(bounds_: Bounds, test: np.ndarray) -> float:
    """(|upper-corner neurons| + |lower-corner neurons|) / (2 |N|), Eq. 3."""
    upper, lower = _corners(bounds_, test)
    return float((upper.sum() + lower.sum()) / (2 * len(upper)))


def sactcov(bounds_: Bounds, test: np.ndarray) -> float:
    """|upper-corner neurons| / |N|: strong activations above the training maximum, Eq. 4."""
    upper, _ = _corners(bounds_, test)
    return float(upper.sum() / len(upper))


@dataclass(frozen=True)
class CornerFlags:
    """Per test example, the neurons it drives above the training maximum (``upper``) and
    below the minimum (``lower``), bit-packed (examples, ⌈neurons/8⌉): two bits per neuron
    and example instead of four bytes of activation, so tens of thousands of texts on a
    BERT-base (36,864 FFN neurons) fit in memory, and any sample's coverage is an OR."""

    upper: np.ndarray
    lower: np.ndarray
    neurons: int

    @classmethod
    def of(cls, bounds_: Bounds, test: np.ndarray) -> CornerFlags:
        low, high = bounds_
        test = np.asarray(test)
        if test.ndim != 2 or test.shape[1] != len(high) or len(low) != len(high):
            raise LingtestError(f"test activations of shape {test.shape} do not match "
                                f"{len(high)} bounded neurons")
        return cls(np.packbits(test > high, axis=1), np.packbits(test < low, axis=1),
                   len(high))

    @classmethod
    def concat(cls, parts: Sequence[CornerFlags], neurons: int) -> CornerFlags:
        width = (neurons + 7) // 8
        if not parts:
            return cls(np.zeros((0, width), np.uint8), np.zeros((0, width), np.uint8), neurons)
        return cls(np.concatenate([p.upper for p in parts]),
                   np.concatenate([p.lower for p in parts]), neurons)

    def __len__(self) -> int:
        return len(self.upper)

    def take(self, rows: Sequence[int] | np.ndarray) -> CornerFlags:
        rows = np.asarray(rows, dtype=np.int64)
        return CornerFlags(self.upper[rows], self.lower[rows], self.neurons)

    def coverage(self) -> tuple[float, float]:
        """(BoundCov, SActCov) of all these examples together (Eq. 3 and 4)."""
        if len(self) == 0:
            return 0.0, 0.0
        upper = int(np.unpackbits(np.bitwise_or.reduce(self.upper, axis=0)).sum())
        lower = int(np.unpackbits(np.bitwise_or.reduce(self.lower, axis=0)).sum())
        return (upper + lower) / (2 * self.neurons), upper / self.neurons


def corner_flags(model: nn.Module, batches: Iterable[Batch], bounds_: Bounds,
                 layers: Mapping[str, nn.Module] | None = None) -> CornerFlags:
    """``CornerFlags`` of every example, batch by batch: activations are never all held."""
    parts = [CornerFlags.of(bounds_, rows) for rows in iter_activations(model, batches, layers)]
    return CornerFlags.concat(parts, len(bounds_[1]))


@dataclass(frozen=True)
class FlagRows:
    """A suite as rows of a shared ``CornerFlags`` (``rows``: each text's row there, -1 for a
    text no draw takes, which needs no forward pass); ``take`` refuses such a text."""

    flags: CornerFlags
    rows: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, picked: Sequence[int] | np.ndarray) -> CornerFlags:
        index = self.rows[np.asarray(picked, dtype=np.int64)]
        if (index < 0).any():
            raise LingtestError("a coverage sample drew a text whose flags were not computed")
        return self.flags.take(index)


def curve_draws(lengths: Mapping[str, int], sizes: Sequence[int], seed: int,
                repeats: int = 1) -> list[tuple[str, int, list[np.ndarray]]]:
    """(suite, size, the rows of each repeat) in ``coverage_curve``'s order: the samples
    depend on the suites' lengths alone, so only the drawn texts need activations."""
    rng = np.random.default_rng(seed)
    return [(suite, size, [rng.choice(n, size, replace=False) for _ in range(repeats)])
            for size in sorted({int(s) for s in sizes}) for suite, n in lengths.items()]


def coverage_curve(bounds_: Bounds,
                   activations_by_suite: Mapping[str, np.ndarray | CornerFlags | FlagRows],
                   sizes: Sequence[int], seed: int, repeats: int = 1) -> pd.DataFrame:
    """BoundCov / SActCov of equal-size random samples of each suite, per size.

    Every suite is sampled at the same sizes (without replacement), so the suites are
    compared at equal cost; with ``repeats`` > 1 the metrics are averaged over that many
    samples. A size larger than the smallest suite is an error: the samples would no longer
    be of equal size.
    """
    if not activations_by_suite:
        raise LingtestError("coverage_curve needs at least one suite's activations")
    if repeats < 1:
        raise LingtestError(f"repeats={repeats}: must be ≥ 1")
    smallest = min(len(a) for a in activations_by_suite.values())
    for size in sizes:
        if not 1 <= size <= smallest:
            raise LingtestError(f"suite size {size}: must be between 1 and {smallest}, the "
                                "size of the smallest suite")
    flags = {suite: acts if isinstance(acts, (CornerFlags, FlagRows))
             else CornerFlags.of(bounds_, acts) for suite, acts in activations_by_suite.items()}
    rows = []
    for suite, size, draws in curve_draws({name: len(f) for name, f in flags.items()}, sizes,
                                          seed, repeats):
        mean = np.mean([flags[suite].take(drawn).coverage() for drawn in draws], axis=0)
        rows.append((suite, size, float(mean[0]), float(mean[1])))
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def paired_coverage(bounds_: Bounds,
                    pairs: Mapping[str, tuple[str, np.ndarray | CornerFlags | FlagRows,
                                              np.ndarray | CornerFlags | FlagRows]],
                    seed: int, repeats: int = 1) -> pd.DataFrame:
    """Each capability's cases against its CheckList test at equal size (the smaller of the
    two): ``pairs`` maps an LC id to (test name, LC activations, test activations)."""
    rows = []
    for lc, (test, ours, theirs) in pairs.items():
        size = min(len(ours), len(theirs))
        if size == 0:
            continue
        curve = coverage_curve(bounds_, {"s2lct": ours, "checklist": theirs}, [size], seed,
                               repeats).set_index("suite")
        rows.append((lc, test, size, len(ours), len(theirs),
                     curve.loc["s2lct", "boundcov"], curve.loc["checklist", "boundcov"],
                     curve.loc["s2lct", "sactcov"], curve.loc["checklist", "sactcov"]))
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)
