"""The units ``lingtest plan`` (``flows/run_estimate.py``) counts a run in: the models each
stage loads, with where their files are and their size (``stage_model_rows``); the
model work a stage does (``Work``: passes, tokens, FLOPs, seconds), counted over the data
stage's tables (``Counting``); and the plan that sums them (``Plan``)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from lingtest.flows.cpu_calibration import Calibration, bank_weights, passes_tokens
from lingtest.flows.model_sizes import Size, model_size
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace

DEFAULT_GPU_TFLOPS = 10.0
GPU_ASSUMPTION = ("sustained fp32 throughput; 10 TFLOP/s is about a third of an NVIDIA A10G's "
                  "or L4's fp32 peak (31 / 30 TFLOP/s), what BERT-sized batches of short texts "
                  "keep up on such a card")
RULE = ("FLOPs = 2 × weights a token passes through × tokens run (forward; 6 for a training "
        "step; a language model's output layer counted), 2 × words² × dimension per "
        "nearest-neighbour search, 6 × classifier weights × rows × epochs per bank; CPU "
        "seconds = FLOPs ÷ this CPU's measured rate for that kind of work (MiniLM, SmolLM2); "
        "GPU seconds = FLOPs ÷ the assumed GPU throughput. Model work only: start-up, "
        "parsing and reports are not counted.")
SIZE_RULE = ("download = parameters × bytes per parameter of the checkpoint's dtype (float32: "
             "4 unless the checkpoint is known to be stored otherwise)")
TOKENS = ("tokens as bert-base-uncased's WordPiece counts them (the packaged MiniLM's "
          "tokenizer), for every model")
NO_WEIGHTS = ("vader",)  # a lexicon: no network, no FLOPs


@dataclass
class ModelRow:
    """One model a stage loads, where its files are and how large it is."""

    stage: str
    key: str
    model: str
    kind: str
    where: str          # packaged | cached | to download | local | built by <stage> | ...
    parameters: int | None = None
    download_bytes: int | None = None
    size_source: str = ""
    note: str = ""
    path: str | None = None  # its files' folder when on this machine
    target: str = ""         # the hub id (or folder) the spec loads: seq2seq:<id> → <id>


@dataclass
class Work:
    """One kind of model work of a stage on one model, counted."""

    stage: str
    model: str
    what: str
    calls: int
    unit: str           # what a call is: texts, steps, prompts, words, ...
    tokens: int
    flops: float | None
    kind: str           # the calibration rate it is divided by
    bound: str          # exact | at most | estimate
    basis: str          # how it was counted
    cpu_seconds: float | None = None
    gpu_seconds: float | None = None


@dataclass
class Plan:
    profile: str
    stages: list[str]
    models: list[ModelRow]
    work: list[Work]
    calibration: Calibration
    gpu_tflops: float
    notes: list[str] = field(default_factory=list)

    def timed(self) -> "Plan":
        for item in self.work:
            if item.flops is None:
                continue
            item.cpu_seconds = item.flops / self.calibration.rate(item.kind)
            item.gpu_seconds = item.flops / (self.gpu_tflops * 1e12)
        return self

    def downloads(self) -> dict[str, ModelRow]:
        """Each model to download once, by id: the row of the first stage that loads it
        (that stage's run downloads it; later ones find it in the cache)."""
        first: dict[str, ModelRow] = {}
        for row in self.models:
            if row.where == "to download":
                first.setdefault(row.model, row)
        return first

    def stage_totals(self, stage: str) -> dict:
        work = [w for w in self.work if w.stage == stage]
        mine = [r for r in self.downloads().values() if r.stage == stage]
        return {"stage": stage,
                "download_gb": round(sum(r.download_bytes or 0 for r in mine) / 1e9, 3),
                "downloads": len(mine),
                "cpu_hours": _hours(w.cpu_seconds for w in work),
                "gpu_hours": _hours(w.gpu_seconds for w in work),
                "bounds": sorted({w.bound for w in work}),
                "counted": all(w.flops is not None for w in work)}

    def totals(self) -> dict:
        rows = self.downloads().values()
        per_stage = [self.stage_totals(s) for s in self.stages]
        return {"download_gb": round(sum(r.download_bytes or 0 for r in rows) / 1e9, 3),
                "downloads": len(rows),
                "downloads_of_unknown_size": [r.model for r in rows if r.download_bytes is None],
                "cpu_hours": round(sum(s["cpu_hours"] for s in per_stage), 3),
                "gpu_hours": round(sum(s["gpu_hours"] for s in per_stage), 4),
                "complete": all(s["counted"] for s in per_stage)}

    def as_json(self) -> dict:
        return {"profile": self.profile, "stages": self.stages,
                "rule": {"time": RULE, "download": SIZE_RULE, "tokens": TOKENS,
                         "gpu_tflops": self.gpu_tflops, "gpu_assumption": GPU_ASSUMPTION},
                "calibration": asdict(self.calibration),
                "models": [asdict(m) for m in self.models],
                "work": [asdict(w) for w in self.work],
                "per_stage": [self.stage_totals(s) for s in self.stages],
                "totals": self.totals(), "notes": self.notes}


def _hours(seconds) -> float:
    return round(sum(s for s in seconds if s is not None) / 3600, 4)


# --------------------------------------------------------------------------- models

def where(row: dict, target: str) -> str:
    """Where a resolved model's files are, for the plan: packaged, cached, to download, local,
    built by an earlier stage, or the source the row names (endpoint, python, ...);
    ``target``: the hub id a spec such as ``seq2seq:<id>`` loads."""
    from lingtest.tasks.models.registry import hub_cache_snapshot

    source = row.get("source") or ""
    if source == "package":
        return "packaged"
    if source == "hub-cache":
        return "cached"
    if source == "hub":
        return "cached" if hub_cache_snapshot(target) is not None else "to download"
    if source == "local":
        path = row.get("path")
        return "local" if path and Path(path).exists() else "built by train-sentiment"
    if source == "missing":
        return f"missing: {row.get('reason', '')}"
    return source


def stage_model_rows(stage: str, params, workspace: Workspace) -> list[ModelRow]:
    """Every model ``stage`` loads (``lingtest.flows.validation.configured_models``; train-sentiment:
    the packaged MiniLM it fine-tunes), resolved without loading weights."""
    from lingtest.flows.validation import check_model, configured_models
    from lingtest.tasks.core.plugin_spec import ModelEntry
    from lingtest.tasks.models.sentiment import MINILM_SST2_ID
    from lingtest.tasks.training.sentiment import BASE_MODEL

    entries = configured_models(params, [stage])
    if stage == "train-sentiment":
        entries = [ModelEntry("capabilities.train_sentiment", str(BASE_MODEL), "encoder")]
    rows = []
    for entry in entries:
        try:
            found = check_model(entry.key, entry.spec, entry.kind, params, workspace)
        except LingtestError as error:
            found = {"id": entry.spec, "kind": entry.kind, "source": "missing",
                     "reason": str(error)}
            if entry.spec == MINILM_SST2_ID:  # not trained yet: the train-sentiment stage's
                found = {**found, "source": "local", "path": None}
        if found.get("source") == "contrastive":  # repair: the contrastive stage's files
            found = {**_as_encoder(entry.spec, params), "kind": found["kind"]}
        model = str(found.get("id") or entry.spec)
        target = _target(model, params, workspace)
        placed = where(found, target)
        size = None if found.get("kind") == "spacy" or model in NO_WEIGHTS else \
            _size(target, found.get("path"))
        note = "the contrastive stage's download" if entry.key == "repair.models" else ""
        path = found.get("path")
        rows.append(ModelRow(stage, entry.key, model, str(found.get("kind") or entry.kind),
                             placed, size.parameters if size else None,
                             size.download_bytes if size else None,
                             size.source if size else "", note,
                             path if path and Path(path).is_dir() else None, target))
    return rows


def _target(spec: str, params, workspace: Workspace) -> str:
    """The id or folder a spec loads (``seq2seq:<id>`` → ``<id>``); the spec otherwise."""
    from lingtest.tasks.models.model_spec import parse_model

    try:
        ref = parse_model(spec, "model", params.models.names, workspace.root)
    except LingtestError:
        return spec
    return ref.target if ref.form in ("hub", "hf", "seq2seq", "builtin") else spec


def _as_encoder(model_id: str, params) -> dict:
    from lingtest.tasks.models.registry import resolve

    try:
        return resolve(model_id, "encoder", offline=params.models.offline).as_row()
    except LingtestError as error:
        return {"id": model_id, "source": "missing", "reason": str(error)}


def _size(model_id: str, path: str | None) -> Size | None:
    """``model_size``, for a lingtest classifier folder that is not built yet: MiniLM's."""
    from lingtest.tasks.models.sentiment import MINILM_SST2_ID
    from lingtest.tasks.training.sentiment import BASE_MODEL

    if model_id == MINILM_SST2_ID and not (path and Path(path).is_dir()):
        from lingtest.tasks.models.registry import resolve

        base = resolve(str(BASE_MODEL), "encoder", offline=True)
        return model_size(str(BASE_MODEL), base.path)
    return model_size(model_id, path)


# --------------------------------------------------------------------------- counting

class Counting:
    """What the stages' counts share: the parameters, the project's tables, token counts and
    model sizes, and the constructors of ``Work`` that turn counts into FLOPs."""

    def __init__(self, params, workspace: Workspace, rows: list[ModelRow],
                 shared: dict | None = None):
        self.params, self.workspace = params, workspace
        self.rows = {r.model: r for r in rows}
        self.pass_tokens = params.runtime.pass_tokens
        self.shared = {} if shared is None else shared  # what the stages of one plan share
        self._lengths: dict[tuple[str, int], int] = self.shared.setdefault("lengths", {})

    def memo(self, key, make):
        """``make()`` once per plan for ``key``."""
        memo = self.shared.setdefault("memo", {})
        if key not in memo:
            memo[key] = make()
        return memo[key]

    # ---- inputs
    def table(self, name: str) -> pd.DataFrame:
        path = self.workspace.processed / f"{name}.parquet"
        if not path.is_file():
            raise MissingInputs([f"data/processed/{name}.parquet"])
        return pd.read_parquet(path)

    def interim(self, stage: str, name: str) -> pd.DataFrame | None:
        path = self.workspace.interim / stage / name
        return pd.read_parquet(path) if path.is_file() else None

    def recorded(self, stage: str, section: str) -> dict | None:
        """The parameters the committed report of ``stage`` was made with (its
        provenance.json), with its seed; None when there is no such report."""
        path = self.workspace.reports / stage / "provenance.json"
        if not path.is_file():
            return None
        facts = json.loads(path.read_text(encoding="utf-8"))
        found = facts.get(f"parameters ({section})")
        if found is None:
            return None
        found = json.loads(found) if isinstance(found, str) else found
        return {**found, "seed": facts.get("seed")}

    @property
    def tokenizer(self):
        def load():
            from lingtest.tasks.models.registry import resolve, transformer_dir, transformers_classes

            (auto_tokenizer,) = transformers_classes("AutoTokenizer")
            res = resolve("sentence-transformers/all-MiniLM-L6-v2", "encoder", offline=True)
            return auto_tokenizer.from_pretrained(
                str(transformer_dir(Path(res.require().path))))

        return self.memo("tokenizer", load)

    def lengths(self, texts, max_length: int = 512) -> list[int]:
        """Token counts (special tokens included, truncated at ``max_length``), ``TOKENS``."""
        texts = [str(t) for t in texts]
        todo = [t for t in dict.fromkeys(texts) if (t, max_length) not in self._lengths]
        if todo:
            ids = self.tokenizer(todo, truncation=True, max_length=max_length)["input_ids"]
            self._lengths.update({(t, max_length): len(i) for t, i in zip(todo, ids)})
        return [self._lengths[(t, max_length)] for t in texts]

    def size(self, model: str) -> Size | None:
        row = self.rows.get(model)
        if row is None or row.parameters is None:
            return None
        return _size(_target(model, self.params, self.workspace), row.path)

    # ---- work
    def forward(self, stage: str, model: str, what: str, lengths: list[int], bound: str,
                basis: str, lm: bool = False, exact_passes: bool = True,
                calls: int | None = None, unit: str = "texts") -> Work:
        """Forward passes over texts of these token counts: exact-length passes (the fill-up
        copies counted) for lingtest's own encoders and classifiers, else as they are."""
        tokens = passes_tokens(lengths, self.pass_tokens) if exact_passes else sum(lengths)
        size = self.size(model)
        flops = None if size is None else 2 * (size.compute + (size.lm_head if lm else 0)) \
            * tokens
        return Work(stage, model, what, len(lengths) if calls is None else calls, unit, tokens,
                    0.0 if model in NO_WEIGHTS else flops, "encode", bound, basis)

    def training(self, stage: str, model: str, what: str, steps: int, tokens: int,
                 bound: str, basis: str) -> Work:
        size = self.size(model)
        return Work(stage, model, what, steps, "steps", tokens,
                    None if size is None else 6 * size.compute * tokens, "train", bound, basis)

    def generation(self, stage: str, model: str, what: str, prompts: int, tokens: int,
                   bound: str, basis: str) -> Work:
        size = self.size(model)
        flops = None if size is None else 2 * (size.compute + size.lm_head) * tokens
        return Work(stage, model, what, prompts, "prompts", tokens, flops, "generate", bound,
                    basis)

    def search(self, stage: str, model: str, metric: str, dictionary: str, words: int,
               dim: int | None, bound: str) -> Work:
        flops = None if dim is None else 2.0 * words * words * dim
        return Work(stage, model, f"nearest neighbours {metric}, {dictionary} dictionary",
                    words, "words", 0, flops, "search_l1" if metric == "l1" else "search_dot",
                    bound, "every word against every other, blocked (thresholds.py)")

    def banks(self, stage: str, model: str, kind: str, rows: int, epochs: int, n: int,
              dim: int | None, bound: str) -> Work:
        flops = None if dim is None else 6.0 * bank_weights(dim, n) * rows * 0.9 * epochs
        return Work(stage, model, f"classifier bank ({kind})", n, "classifiers", 0, flops,
                    "banks", bound, f"{n} MLPs × {epochs} epochs × {rows} rows (90 % trained "
                    "on, 10 % pick the epoch)")


class MissingInputs(LingtestError):
    """Files the data stage writes that a stage's counts read, absent."""

    def __init__(self, paths: list[str]):
        self.paths = paths
        super().__init__(", ".join(paths))


def padded_tokens(lengths: list[int], batch: int, batches: int, seed: int = 0) -> int:
    """Tokens ``batches`` padded batches of ``batch`` texts drawn at random run (each padded
    to its longest text), from a simulation over ``lengths``."""
    if not lengths or batches <= 0:
        return 0
    rng = np.random.default_rng(seed)
    values = np.asarray(lengths)
    draws = min(batches, 2000)
    longest = values[rng.integers(0, len(values), (draws, batch))].max(axis=1)
    return int(round(float(longest.mean()) * batch * batches))


