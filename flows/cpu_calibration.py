"""How fast this machine's CPU runs the pipeline's kinds of work, measured on the packaged
models (MiniLM, SmolLM2) and kept under ``$LINGTEST_CACHE``: ``lingtest plan`` divides a
stage's counted work by these rates (``flows/run_estimate.py``).

Every rate is in FLOP/s of the same count the plan makes of a stage's work, so its rule
is one division: a forward pass costs 2 FLOPs per weight a token passes through (``Size.
compute``, plus ``lm_head`` for a language model's output layer), a training step 6 (forward
and backward), a nearest-neighbour search 2 per (word pair × dimension), a classifier bank's
training 6 per weight per row per epoch. The measured rates fold in what the real code path
costs beside the arithmetic (tokenising, exact-length passes, Python), so the stage's own
calls are timed, not a bare matrix product.
"""
from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lingtest.tasks.core.errors import LingtestError

ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
GENERATOR = "HuggingFaceTB/SmolLM2-135M-Instruct"
KINDS = ("encode", "train", "generate", "search_l1", "search_dot", "banks")
FORMAT = 2  # 2: training timed at batches of 32, searches at a vocabulary's scale
ENCODE_TEXTS = 128
TRAIN_BATCH = 32  # train-sentiment's batch_size
GENERATE_TOKENS = 24
# Stand-in sentences when data/processed/sst.parquet is absent (before `lingtest run data`).
FALLBACK_TEXTS = (
    "the film is a charming and often affecting journey .",
    "it 's a bad sign when you 're rooting for the film to end .",
    "an utterly compelling ` who wrote it ' in which the reputation of the most famous author "
    "who ever lived comes into question .",
    "the story loses its bite in a last-minute happy ending that 's even less plausible than "
    "the rest of the picture .",
)


@dataclass
class Calibration:
    """Measured rates (FLOP/s, see the module doc) and what they were measured on."""

    encode: float
    train: float
    generate: float
    search_l1: float
    search_dot: float
    banks: float
    machine: str = ""
    threads: int = 1
    engine: str = ""
    measured: str = ""
    details: dict = field(default_factory=dict)

    def rate(self, kind: str) -> float:
        if kind not in KINDS:
            raise LingtestError(f"no measured rate for work of kind {kind!r}; kinds: {KINDS}")
        return float(getattr(self, kind))


def machine() -> str:
    """This CPU as the calibration file is keyed on: model name, cores, torch version."""
    import torch

    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores, torch {torch.__version__}"


def calibration_path() -> Path:
    from lingtest.tasks.models.registry import lingtest_cache

    return lingtest_cache() / "plan" / "calibration.json"


def load_or_measure(params, workspace=None, fresh: bool = False, say=None) -> Calibration:
    """The calibration stored for this machine, thread count and LM engine, else measured
    now (about a minute) on the project's SST sentences and stored. ``fresh``: measure
    again."""
    path = calibration_path()
    key = {"format": FORMAT, "machine": machine(), "threads": params.runtime.threads,
           "engine": f"{params.models.lm_engine}/{params.models.lm_precision}"}
    if not fresh and path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            stored = {}
        if {k: stored.get(k) for k in key} == key:
            return Calibration(**stored["rates"])
    if say is not None:
        say(f"lingtest plan: measuring this CPU once ({machine()}, {key['threads']} thread(s)); "
            f"stored in {path}")
    found = measure(params, _sentences(workspace))
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    staging.write_text(json.dumps({**key, "rates": asdict(found)}, indent=2) + "\n",
                       encoding="utf-8")
    os.replace(staging, path)
    return found


def _sentences(workspace) -> list[str] | None:
    """The first SST sentences of the project's table (None before the data stage)."""
    path = workspace.processed / "sst.parquet" if workspace is not None else None
    if path is None or not path.is_file():
        return None
    import pandas as pd

    return pd.read_parquet(path, columns=["text"])["text"].head(ENCODE_TEXTS).tolist()


def measure(params, texts: list[str] | None = None) -> Calibration:
    """Time each kind of work on this CPU at ``runtime.threads`` torch threads."""
    from lingtest.flows.model_sizes import model_size
    from lingtest.tasks.models.registry import resolve
    from lingtest.tasks.training.common import torch_threads

    texts = list(texts or FALLBACK_TEXTS)
    texts = (texts * -(-ENCODE_TEXTS // len(texts)))[:ENCODE_TEXTS]
    encoder_res = resolve(ENCODER, "encoder", offline=True).require()
    encoder_size = model_size(ENCODER, encoder_res.path)
    details: dict = {}
    with torch_threads(params.runtime.threads) as threads:
        encode = _encode_rate(texts, encoder_size.compute, params.runtime.pass_tokens, details)
        train = _train_rate(texts, encoder_res.path, encoder_size.compute, details)
        generate, engine = _generate_rate(params, details)
        search_l1, search_dot = _search_rates(details)
        banks = _bank_rate(details)
    return Calibration(encode, train, generate, search_l1, search_dot, banks, machine(),
                       threads, engine, time.strftime("%Y-%m-%d %H:%M"), details)


def _encode_rate(texts: list[str], compute: int, pass_tokens: int, details: dict) -> float:
    """MiniLM embedding ``texts`` as the contrastive stage does: exact-length passes of at
    least ``pass_tokens`` tokens, the fill-up copies counted as tokens run
    (``passes_tokens``), as the plan counts a stage's; the faster of two rounds."""
    from lingtest.tasks.models.encoders import load_encoder

    encoder = load_encoder(ENCODER, offline=True, device="cpu", pass_tokens=pass_tokens)
    encoder.encode(texts[:8])  # warm-up: the first pass pays one-off costs
    tokens = passes_tokens(encoder.token_counts(texts), pass_tokens)
    seconds = min(_timed(encoder.encode, texts) for _ in range(2))
    details["encode"] = {"texts": len(texts), "tokens run": tokens, "seconds": round(seconds, 3)}
    return 2 * compute * tokens / seconds


def _timed(call, *args) -> float:
    started = time.perf_counter()
    call(*args)
    return time.perf_counter() - started


def passes_tokens(lengths, pass_tokens: int) -> int:
    """Tokens the exact-length passes run for texts of these token counts: per length, whole
    passes of ``pass_rows`` texts, the last one filled up with copies
    (``lingtest.tasks.models.encoders.exact_length_passes``)."""
    from collections import Counter

    from lingtest.tasks.models.encoders import pass_rows

    total = 0
    for length, count in Counter(lengths).items():
        rows = pass_rows(length, pass_tokens)
        total += -(-count // rows) * rows * length
    return total


def _train_rate(texts: list[str], path: str, compute: int, details: dict) -> float:
    """MiniLM fine-tuned as train-sentiment does: padded batches of 32, AdamW; the padding
    counted as tokens run, as the plan counts a stage's."""
    import torch

    from lingtest.tasks.models.registry import transformer_dir, transformers_classes

    auto_model, auto_tokenizer = transformers_classes("AutoModel", "AutoTokenizer")
    folder = transformer_dir(Path(path))
    model, tokenizer = auto_model.from_pretrained(folder), auto_tokenizer.from_pretrained(folder)
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.train()
    batches = [texts[i:i + TRAIN_BATCH] for i in range(0, len(texts), TRAIN_BATCH)]
    tokens, seconds = 0, 0.0
    for index, batch in enumerate(batches):
        inputs = tokenizer(batch, padding=True, truncation=True, max_length=128,
                           return_tensors="pt")
        started = time.perf_counter()
        loss = model(**inputs).last_hidden_state.pow(2).mean()
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        if index:  # the first step is a warm-up
            seconds += time.perf_counter() - started
            tokens += int(inputs["attention_mask"].numel())
    details["train"] = {"steps": len(batches) - 1, "tokens": tokens, "seconds": round(seconds, 3)}
    return 6 * compute * tokens / seconds


def _generate_rate(params, details: dict) -> tuple[float, str]:
    """SmolLM2 greedy generation on the engine the stages pick (``models.lm_engine``), one
    batch of ``consistency.batch_size`` prompts, as the consistency stage answers them."""
    from lingtest.flows.model_sizes import model_size
    from lingtest.tasks.models.causal_lm import load_causal_lm
    from lingtest.tasks.models.registry import resolve

    m = params.models
    lm = load_causal_lm(GENERATOR, offline=True, device="cpu", engine=m.lm_engine,
                        precision=m.lm_precision)
    size = model_size(GENERATOR, resolve(GENERATOR, "causal_lm", offline=True).path)
    things = ("lighthouse keeper", "lost dog", "city at night", "mountain village",
              "river boat", "small bakery", "winter train", "violin maker")
    batch = params.consistency.batch_size
    prompts = [f"Write a long story about a {things[i % len(things)]} (part {i})."
               for i in range(batch)]
    lm.generate_batch(prompts[:2], max_new_tokens=4)  # warm-up
    started = time.perf_counter()
    answers = lm.generate_batch(prompts, max_new_tokens=GENERATE_TOKENS, batch_size=batch)
    seconds = time.perf_counter() - started
    prompt_tokens = sum(len(lm._prompt_ids(p, True, None)) for p in prompts)
    new_tokens = sum(len(lm.tokenizer(a, add_special_tokens=False)["input_ids"]) + 1
                     for a in answers)
    tokens = prompt_tokens + new_tokens
    engine = getattr(lm, "engine", "transformers")
    details["generate"] = {"prompts": len(prompts), "prompt_tokens": prompt_tokens,
                           "new_tokens": new_tokens, "seconds": round(seconds, 3),
                           "engine": engine}
    return 2 * (size.compute + size.lm_head) * tokens / seconds, engine


def _search_rates(details: dict) -> tuple[float, float]:
    """One block of the contrastive stage's blocked nearest-neighbour search
    (``thresholds.nearest_neighbours``: rows against the whole dictionary, then argmin) at a
    vocabulary's scale, 16,384 words of 384 dimensions: L1 (scipy's cityblock on float64,
    256 rows) and the product L2 and cosine share (float32, 1,024 rows)."""
    import numpy as np
    from scipy.spatial.distance import cdist

    words, dim = 16384, 384
    vectors = np.random.default_rng(0).standard_normal((words, dim)).astype(np.float32)
    wide = vectors.astype(np.float64)
    rates = []
    def l1(rows: int) -> None:
        cdist(wide[:rows], wide, "cityblock").argmin(axis=1)

    def dot(rows: int) -> None:
        (vectors[:rows] @ vectors.T).argmin(axis=1)

    for metric, search, rows in (("l1", l1, 256), ("l2", dot, 1024)):
        seconds = min(_timed(search, rows) for _ in range(2))
        details[f"search_{metric}"] = {"rows": rows, "words": words, "dim": dim,
                                       "seconds": round(seconds, 3)}
        rates.append(2 * rows * words * dim / seconds)
    return rates[0], rates[1]


def _bank_rate(details: dict) -> float:
    """Two of COSTELLO's downstream classifiers trained for one epoch on 2,000 random rows."""
    import numpy as np

    from lingtest.tasks.contrastive.classifiers import train_classifiers

    rows, dim, n = 2000, 384, 2
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((rows, dim)).astype(np.float32), rng.integers(0, 2, rows)
    started = time.perf_counter()
    train_classifiers(x, y, x[:200], y[:200], n=n, epochs=1, seed=0, threads=None)
    seconds = time.perf_counter() - started
    details["banks"] = {"rows": rows, "dim": dim, "classifiers": n, "seconds": round(seconds, 3)}
    return 6 * bank_weights(dim, n) * rows / seconds


def bank_weights(dim: int, n: int) -> int:
    """Weights of the first ``n`` of COSTELLO's classifiers over ``dim`` input features."""
    from lingtest.tasks.contrastive.classifiers import SPECS

    total = 0
    for spec in SPECS[:n]:
        width = dim
        for hidden in (*spec.hidden, 1):
            total += width * hidden + hidden
            width = hidden
    return total
