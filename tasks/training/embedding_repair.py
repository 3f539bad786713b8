"""Repair fine-tuning of a sentence encoder (COSTELLO §5.4, its released ``Fixing.py``).

The loss pulls each violated ("buggy") triple (s, s⁺, s⁻) towards d(s, s⁺) + θ < d(s, s⁻) and
keeps benign sentences where the original model put them:

    L = α · TripletMarginLoss(e, e⁺, e⁻; margin θ) + (1 − α) · MSE(e_new, e_old)

Each micro-batch holds ``batch_triples`` buggy triples and as many benign ones (all three of
a benign triple's sentences are anchored); the smaller set is cycled so the larger is seen
once per epoch; gradients accumulate over ``accumulation`` micro-batches; SGD with StepLR; all
weights train (dropout on, as ``Fixing.py``'s ``net.train()``). The embedding trained is the
pooling the model is tested with (``lingtest.tasks.models.encoders.pool``: mean + L2 norm for MiniLM;
the pooler output for plain BERT-style hub models, as the paper). After every epoch the
caller's ``count_violations`` scores the model in eval mode, and the epoch with the fewest
violations is kept (the first such epoch on ties, as ``Fixing.py``).

Differences from ``Fixing.py``, on purpose (Fidelity notes: docs/methods/contrastive.md):
each pass of the cycled set is reshuffled (``itertools.cycle`` replays its first order);
gradients left over at an epoch's end are applied, not carried into the next epoch;
padding is per batch, not to 512 tokens (masked pooling gives the same vectors).
"""
from __future__ import annotations

import copy
import logging
import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lingtest.tasks.repair.params import RepairParams
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.training.common import torch_threads, write_model_dir

Triple = tuple[str, str, str]
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def _logger() -> logging.Logger:
    """The Prefect run's logger inside a flow or task; a plain one elsewhere."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(__name__)



@dataclass
class EpochRecord:
    epoch: int
    lr: float
    loss: float
    steps: int
    seconds: float
    violations: int  # the caller's count after this epoch (eval mode)


@dataclass
class RepairOutcome:
    best_epoch: int
    best_violations: int
    before_violations: int
    state_dict: dict
    epochs: list[EpochRecord] = field(default_factory=list)

    def epoch_table(self) -> list[dict]:
        return [vars(r) | {"kept": r.epoch == self.best_epoch} for r in self.epochs]


def embed_batch(encoder, texts: Sequence[str]):
    """The tested pooling of ``texts`` through ``encoder.model`` as it is now (grad kept)."""
    import torch

    from lingtest.tasks.models.encoders import pool
    from lingtest.tasks.models.pooling import parse_pooling

    mode, normalize = parse_pooling(encoder.pooling)
    batch = [t.lower() if encoder.lowercase else t for t in texts]
    inputs = encoder.tokenizer(batch, padding=True, truncation=True,
                               max_length=encoder.max_length, return_tensors="pt")
    inputs = {k: v.to(encoder.device) for k, v in inputs.items()}
    output = encoder.model(**inputs)
    pooled = pool(output.last_hidden_state, inputs["attention_mask"], mode,
                  getattr(output, "pooler_output", None))
    return torch.nn.functional.normalize(pooled, p=2, dim=1) if normalize else pooled


def triplet_loss(distance: str, margin: float):
    """``Fixing.py``'s TripletMarginLoss(margin=θ, p=2) — mean of max(d(e, e⁺) − d(e, e⁻) + θ,
    0), distances as ``pairwise_distance`` (eps 1e-6) — written out, since torch rejects
    θ = 0 (the ``zero`` threshold); for L1 and cosine the same hinge on that distance."""
    import torch
    from torch.nn import functional as F

    if distance not in ("l1", "l2", "cos"):
        raise LingtestError(f"repair.distance `{distance}`: expected l1, l2 or cos")

    def dist(a, b):
        if distance == "cos":
            return 1.0 - F.cosine_similarity(a, b)
        return F.pairwise_distance(a, b, p=2.0 if distance == "l2" else 1.0, eps=1e-6)

    def loss(anchor, positive, negative):
        return torch.clamp(dist(anchor, positive) - dist(anchor, negative) + margin,
                           min=0.0).mean()

    return loss


def pair_batches(n_buggy: int, n_benign: int, size: int, generator,
                 cap: int | None = None) -> list[tuple[list[int], list[int]]]:
    """One epoch's micro-batches: (buggy rows, benign rows). The larger set is seen once in a
    fresh order; the smaller is cycled, reshuffled at every pass; ``cap`` keeps the first
    ``cap`` micro-batches (a different sample each epoch, since the orders are fresh)."""
    import torch

    if n_buggy == 0 or n_benign == 0:
        raise LingtestError(f"repair needs violated and benign training triples (got "
                            f"{n_buggy} violated, {n_benign} benign)")
    steps = max(math.ceil(n_buggy / size), math.ceil(n_benign / size))
    if cap is not None:
        steps = min(steps, cap)

    def stream(n: int) -> list[list[int]]:
        out: list[list[int]] = []
        while len(out) < steps:
            order = torch.randperm(n, generator=generator).tolist()
            out += [order[i:i + size] for i in range(0, n, size)]
        return out[:steps]

    return list(zip(stream(n_buggy), stream(n_benign)))


def repair_encoder(encoder, buggy: Sequence[Triple], benign: Sequence[Triple],
                   benign_targets: np.ndarray, theta: float, settings: RepairParams,
                   seed: int, count_violations: Callable[[Callable], int],
                   threads: int | None = None) -> RepairOutcome:
    """Fine-tune ``encoder.model`` in place; return the kept epoch's weights and the log.

    ``benign_targets``: the original model's embeddings of the benign triples, shape
    (len(benign), 3, dim), eval mode. ``count_violations(embed)`` gets a function giving the
    current model's embeddings of a list of texts (eval mode, no gradients) and returns how
    many of its triples are still violated; it is called before training and after each epoch.
    """
    import torch
    from torch import nn, optim

    targets = torch.as_tensor(np.asarray(benign_targets, dtype=np.float32))
    if targets.shape[:2] != (len(benign), 3):
        raise LingtestError(f"benign_targets of shape {tuple(targets.shape)}: expected "
                            f"({len(benign)}, 3, dim)")
    model = encoder.model

    def embed_eval(texts: list[str]) -> np.ndarray:
        model.eval()
        rows = []
        with torch.inference_mode():
            for start in range(0, len(texts), 64):
                rows.append(embed_batch(encoder, texts[start:start + 64]).float().cpu().numpy())
        return np.concatenate(rows) if rows else np.empty((0, encoder.dim), np.float32)

    with torch_threads(threads):
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        before = int(count_violations(embed_eval))
        triplet, mse = triplet_loss(settings.distance, float(theta)), nn.MSELoss()
        optimizer = optim.SGD(model.parameters(), lr=settings.lr,
                              weight_decay=settings.weight_decay)
        scheduler = optim.lr_scheduler.StepLR(optimizer, step_size=settings.lr_step,
                                              gamma=settings.lr_gamma)
        alpha, accumulate = settings.alpha, settings.accumulation
        best = RepairOutcome(0, before, before, {})
        for epoch in range(1, settings.epochs + 1):
            started, total = time.perf_counter(), 0.0
            lr = optimizer.param_groups[0]["lr"]
            batches = pair_batches(len(buggy), len(benign), settings.batch_triples, generator,
                                   settings.max_steps_per_epoch)
            model.train()
            optimizer.zero_grad()
            pending = 0
            for step, (bug_rows, ben_rows) in enumerate(batches, start=1):
                texts = [t for r in bug_rows for t in buggy[r]]
                e = embed_batch(encoder, texts).view(len(bug_rows), 3, -1)
                loss1 = triplet(e[:, 0], e[:, 1], e[:, 2]) / accumulate
                ref = embed_batch(encoder, [t for r in ben_rows for t in benign[r]])
                loss2 = mse(ref, targets[ben_rows].reshape(ref.shape)) / accumulate
                loss = alpha * loss1 + (1 - alpha) * loss2
                loss.backward()
                total += float(loss.detach())
                pending += 1
                if step % accumulate == 0:
                    optimizer.step()
                    optimizer.zero_grad()
                    pending = 0
            if pending:  # Fixing.py carries these gradients into the next epoch
                optimizer.step()
                optimizer.zero_grad()
            scheduler.step()
            violations = int(count_violations(embed_eval))
            record = EpochRecord(epoch, lr, total, len(batches),
                                 round(time.perf_counter() - started, 3), violations)
            best.epochs.append(record)
            _logger().info("repair epoch %d: loss %.5f, %d steps, %.1f s, %d violated",
                           epoch, total, len(batches), record.seconds, violations)
            if epoch == 1 or violations < best.best_violations:
                best.best_epoch, best.best_violations = epoch, violations
                best.state_dict = copy.deepcopy(model.state_dict())
        model.load_state_dict(best.state_dict)
        model.eval()
    return best


def save_repaired(encoder, out_dir: Path) -> Path:
    """Write the encoder's current weights as a model folder that ``load_encoder`` reads back
    with the same pooling: the source's sentence-transformers files (modules, pooling,
    normalisation) are copied, the transformer weights and tokenizer written anew."""
    from lingtest.tasks.models.registry import st_modules

    source = encoder.resolution.path
    folder = Path(source) if source and Path(source).is_dir() else None
    state = None
    if (folder is None or st_modules(folder) is None) and encoder.pooling == "cls" and \
            getattr(encoder.model, "pooler", None) is not None:
        # A plain HF model tested on [CLS] because its checkpoint has no pooler weights (a
        # RoBERTa's): saved without the pooler transformers drew, so it loads as [CLS] again
        state = {key: value for key, value in encoder.model.state_dict().items()
                 if key.split(".")[0] != "pooler"}

    def write(stage: Path) -> None:
        if folder is not None:
            from lingtest.tasks.models.registry import transformer_dir

            inner = transformer_dir(folder).relative_to(folder)
            for item in folder.iterdir():
                if item.name in WEIGHT_FILES or item.name.startswith(".") or \
                        item.suffix in (".onnx", ".h5", ".msgpack") or item.name in (
                        "onnx", "openvino", "__pycache__", "__init__.py"):
                    continue
                if item.is_dir():
                    if (inner != Path(".") and item.name == inner.parts[0]):
                        continue
                    shutil.copytree(item, stage / item.name)
                else:
                    shutil.copy2(item, stage / item.name)
            target = stage / inner
        else:
            target = stage
        target.mkdir(parents=True, exist_ok=True)
        encoder.model.save_pretrained(target, safe_serialization=True, state_dict=state)
        encoder.tokenizer.save_pretrained(target)
        for sub in stage.rglob("*"):
            if sub.is_dir():
                sub.chmod(0o755)
            else:
                sub.chmod(0o644)

    return write_model_dir(Path(out_dir), write)
