"""What a pipeline run will load, download, compute and take, before it starts (``lingtest
plan``): per stage (dvc.yaml's order) every model it loads with where its files are now and
its size, the model calls it makes, counted from the effective parameters and the data
stage's tables as the stage's own code makes them, and the time those calls take on this
machine's CPU and on a GPU.

The rule (``RULE``): a forward pass costs 2 FLOPs per weight a token passes through
(embeddings left out; a language model's output layer added), a training step 6, a
nearest-neighbour search 2 per word pair and dimension, a classifier bank's training 6 per
weight, row and epoch. CPU seconds = FLOPs ÷ this CPU's rate for that kind of work, measured
on the packaged MiniLM and SmolLM2 (``flows/cpu_calibration.py``): a model's cost is the
measured one scaled by its parameter count and its tokens. GPU seconds = FLOPs ÷ an assumed
sustained throughput (``--gpu-tflops``), since no GPU is here to measure. Only the model
work is counted: start-up, parsing, tagging and reports are not.

Counts are ``exact`` (from the tables, or from a suite the stage built earlier with the
same settings), ``at most`` (a bound from the parameters where the run decides, e.g. how
many fills a model proposes) or ``estimate`` (a yield measured on the default run, scaled).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from flows.cpu_calibration import Calibration, bank_weights, passes_tokens
from flows.model_sizes import HUB_ARCHITECTURE, UNCASED_BERT_VOCABULARY, Size, model_size
from tasks.core.errors import LingtestError
from tasks.core.paths import Workspace

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
CHAT_TOKENS = 30  # a chat template's system prompt and role markers around a prompt
SAMPLE_TOKENS = 32  # AdaTest suggestions: new tokens per completion (generators.py)
SUGGESTION_PROMPT_TOKENS = 160  # AdaTest prompt: a handful of example tests and the topic
# Triples' distinct texts per seed of each relation's pool, in the default run's suite
# (2026-11-29: CR1 4,902 texts from 2,210 SST test sentences, CR2 1,227 / 2,210, CR3 1,764
# / 588 contrast pairs, CR4 552 / 279 MRPC validation paraphrases) and triples per pool seed:
# the estimate for a relation no suite of the same settings was built for.
DEFAULT_YIELD = {"CR1": (4902 / 2210, 1833 / 2210), "CR2": (1227 / 2210, 409 / 2210),
                 "CR3": (1764 / 588, 588 / 588), "CR4": (552 / 279, 184 / 279)}
RELATION_SETTINGS = {"CR1": ("sst_split", "cr1_triples"),
                     "CR2": ("sst_split", "synonym_scope", "synonym_probability"),
                     "CR3": ("contrast_split", "synonym_scope", "synonym_probability"),
                     "CR4": ("mrpc_split",)}
# S²LCT masked sentences per seed with no max_masks_per_seed, measured on the default run's
# 510 seeds (its induced PCFG, 2026-11-29): 31.8 with one inserted word of the default tags,
# 58.9 with two of any tag (ALiCT's), 20.8 of them with two masks.
UNCAPPED_MASKS = {1: (31.8, 0.0), 2: (58.9, 20.8)}
CAPABILITY_SUITE_KEYS = ("specs_dir", "capabilities", "seeds_per_lc", "word_sentiment",
                         "parser", "pcfg_heldout", "max_masks_per_seed", "max_inserted_words",
                         "insert_tags", "pos_check", "fill_model", "fill_candidates",
                         "max_expansions_per_seed", "trials", "mask_sampling",
                         "top_productions", "min_logprob_per_word",
                         "min_right_context_logprob")
CONSISTENCY_SUITE_KEYS = ("questions", "n_questions", "max_values", "ipm", "strength",
                          "generator", "import_dir", "prompt_prefix", "prompt_suffix",
                          "prompt_join")
DEBUG_SUITE_KEYS = ("topics", "checklist_examples", "seed_tests", "ood_split", "eval_max",
                    "conditions", "tree", "tree_topics")
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
    from tasks.models.registry import hub_cache_snapshot

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
    """Every model ``stage`` loads (``flows.validation.configured_models``; train-sentiment:
    the packaged MiniLM it fine-tunes), resolved without loading weights."""
    from flows.validation import check_model, configured_models
    from tasks.core.plugin_spec import ModelEntry
    from tasks.models.sentiment import MINILM_SST2_ID
    from tasks.training.sentiment import BASE_MODEL

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
    from tasks.models.model_spec import parse_model

    try:
        ref = parse_model(spec, "model", params.models.names, workspace.root)
    except LingtestError:
        return spec
    return ref.target if ref.form in ("hub", "hf", "seq2seq", "builtin") else spec


def _as_encoder(model_id: str, params) -> dict:
    from tasks.models.registry import resolve

    try:
        return resolve(model_id, "encoder", offline=params.models.offline).as_row()
    except LingtestError as error:
        return {"id": model_id, "source": "missing", "reason": str(error)}


def _size(model_id: str, path: str | None) -> Size | None:
    """``model_size``, for a lingtest classifier folder that is not built yet: MiniLM's."""
    from tasks.models.sentiment import MINILM_SST2_ID
    from tasks.training.sentiment import BASE_MODEL

    if model_id == MINILM_SST2_ID and not (path and Path(path).is_dir()):
        from tasks.models.registry import resolve

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
            from tasks.models.registry import resolve, transformer_dir, transformers_classes

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


# --------------------------------------------------------------------------- stages

def _data(count: Counting) -> list[Work]:
    return []


def _train_sentiment(count: Counting) -> list[Work]:
    from tasks.data.sst import sst2_split
    from tasks.training.sentiment import BASE_MODEL, MAX_LENGTH

    t, seed = count.params.capabilities.train_sentiment, count.params.seed
    sst = count.table("sst")
    train, test = sst2_split(sst, "train"), sst2_split(sst, "test")
    n_train = min(len(train), t.max_train or len(train))
    n_test = min(len(test), t.max_test or len(test))
    lengths = count.lengths(train["text"], MAX_LENGTH)
    steps = t.epochs * math.ceil(n_train / t.batch_size)
    tokens = padded_tokens(lengths, t.batch_size, steps, seed)
    model = str(BASE_MODEL)
    return [count.training("train-sentiment", model, "fine-tune on SST-2 train", steps,
                           tokens, "exact", f"{t.epochs} epoch(s) × ⌈{n_train} / "
                           f"{t.batch_size}⌉ padded batches (tokens simulated)"),
            count.forward("train-sentiment", model, "score SST-2 test",
                          count.lengths(test["text"], MAX_LENGTH)[:n_test], "exact",
                          f"{n_test} test sentences")]


@dataclass
class SuiteTexts:
    """The triples' texts a contrastive run embeds: known ones, and estimated counts."""

    frame: pd.DataFrame         # the known triples (seed, positive, negative)
    seeds: list[str]
    estimated: int = 0          # texts estimated beyond ``texts``
    estimated_tokens: int = 0
    triples: int = 0
    bound: str = "exact"
    basis: list[str] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)


def contrastive_suite(count: Counting, c, seed: int) -> SuiteTexts:
    """The suite's texts: an imported suite's; per relation, the built suite's when it was
    built with the same settings, else its pool's size × the relation's yield (the built
    suite's, else ``DEFAULT_YIELD``)."""
    from tasks.contrastive.suite import _pool

    out = SuiteTexts(pd.DataFrame(columns=["seed", "positive", "negative"]), [])
    if c.suite:
        from tasks.contrastive import costello_json

        path = Path(c.suite) if Path(c.suite).is_absolute() else count.workspace.root / c.suite
        suite = costello_json.select_imported(costello_json.read_costello_suite(path),
                                              c.relations, c.max_seeds, seed, path)
        return _known(out, suite, f"the imported suite {path.name}")
    built = count.interim("contrastive", "suite.parquet")
    tables = {}
    for relation in c.relations:
        rows = built[built["relation"] == relation] if built is not None else None
        recorded = _recorded_settings(rows)
        wanted = {key: getattr(c, key) for key in ("max_seeds", *RELATION_SETTINGS[relation])}
        if rows is not None and len(rows) and recorded is not None and \
                recorded.get("seed") == seed and \
                all(recorded.get(k) == v for k, v in wanted.items()):
            _known(out, rows, f"{relation}: the built suite (same settings)")
            continue
        if not tables:
            tables = {name: count.table(name) for name in ("sst", "contrast_pairs", "mrpc")}
        pool, texts_of = _pool(SimpleNamespace(table=tables.__getitem__, params=c), relation)
        if rows is not None and len(rows) and recorded is not None:
            old = _pool(SimpleNamespace(table=tables.__getitem__, params=SimpleNamespace(
                **{**c.model_dump(), **{k: recorded.get(k, getattr(c, k))
                                        for k in RELATION_SETTINGS[relation]}})), relation)[0]
            distinct = len(set(rows["seed"]) | set(rows["positive"]) | set(rows["negative"]))
            per_text, per_triple = distinct / max(len(old), 1), len(rows) / max(len(old), 1)
            source = "the built suite's yield"
        else:
            per_text, per_triple = DEFAULT_YIELD[relation]
            source = "the default run's yield"
        seeds = len(pool) if c.max_seeds is None else min(len(pool), c.max_seeds)
        n_texts, n_triples = round(per_text * seeds), round(per_triple * seeds)
        sample = [t for _, row in pool.head(200).iterrows() for t in texts_of(row)]
        joined = " [SEP] ".join if relation == "CR4" else None
        if joined:
            sample = [joined(texts_of(row)) for _, row in pool.head(200).iterrows()]
        mean = float(np.mean(count.lengths(sample, c.max_length or 512))) if sample else 0.0
        out.estimated += n_texts
        out.estimated_tokens += round(mean * n_texts)
        out.triples += n_triples
        out.seeds += [t for _, row in pool.iterrows() for t in texts_of(row)]
        out.kinds.add("paraphrase" if relation == "CR4" else "sentiment")
        out.bound = "estimate"
        out.basis.append(f"{relation}: {seeds} pool seeds × {per_text:.2f} texts ({source})")
    return out


def _recorded_settings(rows: pd.DataFrame | None) -> dict | None:
    if rows is None or not len(rows):
        return None
    facts = json.loads(rows["provenance"].iloc[0])
    return facts.get("parameters")


def _known(out: SuiteTexts, rows: pd.DataFrame, basis: str) -> SuiteTexts:
    from tasks.contrastive.classifier_tasks import needed_kinds

    out.frame = pd.concat([out.frame, rows[["seed", "positive", "negative"]]],
                          ignore_index=True)
    out.seeds += list(rows["seed"].drop_duplicates())
    out.triples += len(rows)
    out.kinds |= set(needed_kinds(rows))
    out.basis.append(basis)
    return out


def _vocabulary(count: Counting, model: str, c, seed: int):
    """(the model's vocab dictionary when its tokenizer is here, else None; its size or
    bound; how known; the model's normal forms of words, as ``Encoder.normal_forms``, by
    which ``embedding_tasks._to_embed`` deduplicates every dictionary, or None)."""
    from tasks.contrastive.thresholds import cap_words, distinct_forms
    from tasks.models.encoders import _st_settings, whole_words
    from tasks.models.registry import transformers_classes

    size = count.size(model)
    if size is None:
        return None, 0, "unknown", None
    if size.tokenizer:
        (auto_tokenizer,) = transformers_classes("AutoTokenizer")
        tokenizer = auto_tokenizer.from_pretrained(size.tokenizer)
        words = cap_words(whole_words(tokenizer), c.dictionary_max_words, seed)
        row = count.rows[model]
        lowercase = _st_settings(Path(row.path))[1] if row.path else False
        normalizer = getattr(getattr(tokenizer, "backend_tokenizer", None), "normalizer", None)

        def forms(ws: list[str]) -> list[str]:
            cased = [w.lower() if lowercase else w for w in ws]
            return [normalizer.normalize_str(w) for w in cased] if normalizer else cased

        return distinct_forms(words, forms(words)), 0, "exact", forms
    if HUB_ARCHITECTURE.get(model) in UNCASED_BERT_VOCABULARY:  # MiniLM's tokenizer has it
        n = len(whole_words(count.tokenizer))
        return (None, min(n, c.dictionary_max_words or n), "bert-base-uncased's whole words",
                None)
    return (None, min(size.vocab, c.dictionary_max_words or size.vocab),
            "at most its vocabulary", None)


def _max_length(count: Counting, model: str, c) -> int:
    """The tokens a text keeps: ``contrastive.max_length``, else the model's own (a
    sentence-transformers model's max_seq_length), at most 512, as ``load_encoder``."""
    from tasks.models.encoders import DEFAULT_MAX_LENGTH, _st_settings

    row = count.rows.get(model)
    own = _st_settings(Path(row.path))[0] if row is not None and row.path else None
    return c.max_length or own or DEFAULT_MAX_LENGTH


@dataclass
class EmbeddingInputs:
    """What every encoder of a contrastive run embeds besides its vocabulary."""

    suite: SuiteTexts
    data: dict
    texts: list[str]
    dataset: list[str]
    user: list[str]


def embedding_inputs(count: Counting, c, seed: int) -> EmbeddingInputs:
    """The triples' texts, the downstream classifiers' data and the extra dictionaries
    (``ContrastiveMethod._embedding_inputs``), once per plan and setting."""
    from tasks.contrastive import classifier_tasks, thresholds, validation

    def make() -> EmbeddingInputs:
        suite = contrastive_suite(count, c, seed)
        tables = {name: count.table(name) for name in ("sst", "mrpc")}
        data = classifier_tasks.classifier_data(tables, c, seed, tuple(
            k for k in ("sentiment", "paraphrase") if k in suite.kinds))
        texts = validation.needed_texts(suite.frame, data, [], c.paraphrase_features)
        needs = thresholds.needs_dictionaries(c.thresholds)
        dataset = thresholds.dictionary_from_dataset(dict.fromkeys(suite.seeds)) \
            if needs else []
        user = thresholds.read_dictionary(count.workspace.root / c.dictionary_file) \
            if needs and c.dictionary_file else []
        return EmbeddingInputs(suite, data, texts, dataset, user)

    return count.memo(("contrastive inputs", c.model_dump_json(), seed), make)


def contrastive_work(count: Counting, stage: str, models: list[str], c, seed: int,
                     distances: list[str] | None = None, original: bool = False) -> list[Work]:
    """Per encoder: the texts it embeds (triples, classifier data, dictionaries, as
    ``embedding_tasks.embed``), its nearest-neighbour searches and its classifier banks.
    ``original``: a model whose vectors and searches the contrastive stage left in its
    store and task cache (only its banks train again)."""
    from tasks.contrastive import thresholds

    inputs = embedding_inputs(count, c, seed)
    suite, needs = inputs.suite, thresholds.needs_dictionaries(c.thresholds)
    work = []
    for model in models:
        vocab, vocab_count, vocab_known, forms = count.memo(
            ("vocab", model, c.dictionary_max_words, seed),
            lambda: _vocabulary(count, model, c, seed)) if needs else ([], 0, "exact", None)
        size = count.size(model)
        dim = size.hidden if size else None
        if not original:
            words = {"vocab": vocab or [], "dataset": inputs.dataset, "user": inputs.user}
            if forms is not None:
                words = {name: thresholds.distinct_forms(ws, forms(ws))
                         for name, ws in words.items()}
            everything = list(dict.fromkeys([*inputs.texts,
                                             *(w for ws in words.values() for w in ws)]))
            lengths = count.lengths(everything, _max_length(count, model, c))
            if suite.estimated:
                lengths += [round(suite.estimated_tokens / suite.estimated)] * suite.estimated
            if vocab is None:
                lengths += [3] * vocab_count  # a word: 1-2 pieces and the 2 special tokens
            bound = ("estimate" if suite.bound == "estimate" else
                     "exact" if vocab is not None else "at most")
            work.append(count.forward(
                stage, model, "embed texts", lengths, bound,
                f"{len(lengths)} distinct texts: triples ({'; '.join(suite.basis)}), "
                f"classifier data, dictionaries (vocab: {vocab_known})"))
            n_vocab = len(vocab) if vocab is not None else vocab_count
            sizes = {"vocab": n_vocab, "dataset": len(words["dataset"]),
                     "user": len(words["user"])}
            for metric in distances or c.distances:
                for name, n in sizes.items():
                    if needs and n >= 2 and (name != "dataset" or metric == "l2"):
                        work.append(count.search(stage, model, metric, name, n, dim,
                                                 "at most" if name == "vocab" and vocab is None
                                                 else "exact"))
        for kind, split in inputs.data.items():
            in_dim = None if dim is None else dim * (
                4 if kind == "paraphrase" and c.paraphrase_features == "pair" else 1)
            work.append(count.banks(stage, model, kind, len(split["train_y"]),
                                    c.classifier_epochs, c.n_classifiers, in_dim, "exact"))
    return work


def _contrastive(count: Counting) -> list[Work]:
    params = count.params
    c = params.contrastive
    models = list(c.encoders or params.models.encoders)
    return contrastive_work(count, "contrastive", models, c, params.seed)


def _repair(count: Counting) -> list[Work]:
    """Per repaired model (``repair/stage.py``): the fine-tuning steps, the violation counts
    that pick the epoch, and the re-tests through the contrastive method."""
    from tasks.repair.params import REPAIR_ALL

    params = count.params
    p, c = params.repair, params.contrastive
    tested = list(c.encoders or params.models.encoders)
    chosen = tested[:1] if p.models is None else tested if p.models == [REPAIR_ALL] \
        else list(p.models)
    suite = embedding_inputs(count, c, params.seed).suite
    triple_texts = [t for _, row in suite.frame.iterrows()
                    for t in (row["seed"], row["positive"], row["negative"])]
    lengths = count.lengths(triple_texts, c.max_length or 512)
    if suite.estimated:
        lengths += [round(suite.estimated_tokens / suite.estimated)] * suite.estimated
    train = round(suite.triples * (1 - p.heldout - p.validation))
    per_epoch = math.ceil(train / p.batch_triples)
    if p.max_steps_per_epoch is not None:
        per_epoch = min(per_epoch, p.max_steps_per_epoch)
    steps = p.epochs * per_epoch
    selected = round(suite.triples * (p.validation if p.selection == "validation"
                                      else 1 - p.heldout - p.validation))
    if p.selection_max_triples is not None:
        selected = min(selected, p.selection_max_triples)
    # violated and benign micro-batches of random triples, each padded to its longest text
    step_tokens = 2 * padded_tokens(lengths, 3 * p.batch_triples, steps, params.seed)
    # the chosen triples' texts in suite order, padded batches of 64, before and each epoch
    per_text = in_order_padded(lengths, 64) / max(len(lengths), 1)
    counted = 3 * selected * (p.epochs + 1)
    retest = c.model_copy(update={
        "classifier_max_train": p.classifier_max_train or c.classifier_max_train,
        "classifier_max_test": p.classifier_max_test or c.classifier_max_test})
    bound = "at most" if suite.bound == "exact" else "estimate"
    work = []
    for model in chosen:
        work.append(count.training(
            "repair", model, "fine-tune on violated and benign triples", steps, step_tokens,
            bound, f"{p.epochs} epochs × ≤ {per_epoch} micro-batches of {p.batch_triples} "
            f"violated + {p.batch_triples} benign triples (of ≤ {train} training triples)"))
        item = count.forward("repair", model, "count violated triples after each epoch",
                             [round(per_text)] * counted, bound,
                             f"({p.epochs} + 1) × {selected} triples × 3 texts, padded "
                             "batches of 64", exact_passes=False)
        work.append(item)
        for item in contrastive_work(count, "repair", [model], retest, params.seed,
                                     [p.distance]):
            item.what = f"re-test the repaired model: {item.what}"
            work.append(item)
        if (retest.classifier_max_train, retest.classifier_max_test) != (
                c.classifier_max_train, c.classifier_max_test):
            for item in contrastive_work(count, "repair", [model], retest, params.seed,
                                         [p.distance], original=True):
                item.what = f"re-test the original model: {item.what}"
                work.append(item)
    return work


def in_order_padded(lengths: list[int], batch: int) -> int:
    """Tokens padded batches of ``batch`` consecutive texts run."""
    return sum(len(part) * max(part) for part in
               (lengths[i:i + batch] for i in range(0, len(lengths), batch)))


def _capabilities(count: Counting) -> list[Work]:
    from tasks.capabilities.checklist_run import sample_suite
    from tasks.capabilities.fill import CONTEXT_TOKENS, SCORED_PER_KEPT, fill_kind
    from tasks.capabilities.report import PAPER_EXPANSIONS_PER_SEED
    from tasks.capabilities.specs import BUILTIN_SPECS, load_specs
    from tasks.data.sst import sst2_split

    params, root = count.params, count.workspace.root
    c, seed = params.capabilities, params.seed
    k, w, keep = c.fill_candidates, c.max_inserted_words, c.max_expansions_per_seed
    specs = load_specs(root / c.specs_dir if c.specs_dir else BUILTIN_SPECS, c.capabilities)
    sst = count.table("sst")
    seed_tokens = round(float(np.mean(count.lengths(sst["text"]))))
    recorded = count.recorded("capabilities", "capabilities")
    built = count.interim("capabilities", "suite.parquet")
    funnel = _funnel(count)
    same = (recorded is not None and built is not None and funnel is not None
            and recorded.get("seed") == seed
            and all(recorded.get(key) == value for key, value in c.model_dump(
                mode="json", include=set(CAPABILITY_SUITE_KEYS)).items()))
    two_share = UNCAPPED_MASKS[2][1] / UNCAPPED_MASKS[2][0] if w > 1 else 0.0
    if same:
        suite_texts = list(dict.fromkeys(built["text"]))
        suite_lengths = count.lengths(suite_texts)
        seeds, masked = int(funnel["cases"].sum()), int(funnel["masked"].sum())
        proposed, valid = int(funnel["proposed"].sum()), int(funnel["valid"].sum())
        suite_bound, fill_bound = "exact", "exact"
        suite_basis = f"the built suite (same settings): {len(suite_texts)} distinct texts"
    else:
        seeds = len(specs) * c.seeds_per_lc * c.trials
        per_seed = c.max_masks_per_seed or UNCAPPED_MASKS[min(w, 2)][0]
        masked = round(seeds * per_seed)
        proposed = valid = masked * k
        kept = keep if keep is not None else PAPER_EXPANSIONS_PER_SEED
        suite_lengths = [seed_tokens + w] * (seeds * (1 + kept))
        suite_bound = "at most" if keep is not None else "estimate"
        fill_bound = "at most" if c.max_masks_per_seed is not None else "estimate"
        suite_basis = (f"≤ {len(specs)} capabilities × {c.seeds_per_lc} seeds × {c.trials} "
                       f"trial(s), each with " + (f"≤ {keep} expansions" if keep is not None
                                                  else f"about {kept} expansions (ALiCT's "
                                                  "published results)"))
    fill = c.fill_model
    if fill_kind(fill) == "causal_lm" and w == 1:
        scored = min(valid, seeds * SCORED_PER_KEPT * keep) if keep is not None else valid
        lengths = [seed_tokens] * seeds + [CONTEXT_TOKENS + 2] * scored
        basis = (f"one pass per seed ({seeds}) proposes every fill; {scored} valid fills "
                 f"scored on the seed's cached pass (≤ {CONTEXT_TOKENS} tokens after the gap)")
    else:
        second = round(masked * two_share) * k * (w - 1)
        rescored = valid if fill_kind(fill) == "causal_lm" else 0
        lengths = [seed_tokens + w] * (masked + second + rescored)
        basis = (f"{masked} masked sentences"
                 + ("" if c.max_masks_per_seed is not None or same else
                    f" ({UNCAPPED_MASKS[min(w, 2)][0]} per seed with no cap, measured on the "
                    "default run's seeds)")
                 + f", one pass each, and {second} for the second word (k = {k} per mask)"
                 + (f"; {rescored} fills re-scored" if rescored else ""))
    work = [count.forward("capabilities", fill, "propose fills (fill model)", lengths,
                          fill_bound, basis, lm=True, exact_passes=False, unit="passes")]
    checklist = count.table("checklist_suite")
    sampled = sample_suite(checklist, c.checklist_max_examples, seed)
    checklist_texts = list(dict.fromkeys(t for ts in sampled["texts"] for t in ts))
    checklist_lengths = count.lengths(checklist_texts)
    train = sst2_split(sst, "train")
    n_train = min(len(train), c.coverage_max_train or len(train))
    train_lengths = count.lengths(train["text"])[:n_train]
    smallest = min(len(suite_lengths), len(checklist_lengths))
    drawn = sum(min(size, smallest) for size in {*c.coverage_sizes, smallest}
                if size <= smallest) * c.coverage_repeats
    sampled_lengths = suite_lengths + checklist_lengths[:min(drawn, len(checklist_lengths))] \
        + [seed_tokens] * len(suite_lengths)
    for row in (r for r in count.rows.values() if r.key == "capabilities.models"):
        model = row.model
        work.append(count.forward("capabilities", model, "classify the S²LCT suite",
                                  suite_lengths, suite_bound, suite_basis))
        work.append(count.forward("capabilities", model, "classify the CheckList sample",
                                  checklist_lengths, "exact",
                                  f"{len(checklist_texts)} distinct texts "
                                  f"(≤ {c.checklist_max_examples or 'all'} per test)"))
        if model in NO_WEIGHTS or row.parameters is None:
            continue  # coverage hooks hidden states
        work.append(count.forward("capabilities", model, "coverage: neuron bounds",
                                  train_lengths, "exact", f"{n_train} SST-2 training sentences"))
        work.append(count.forward("capabilities", model, "coverage: sampled suites",
                                  sampled_lengths, "at most",
                                  f"the S²LCT suite, ≤ {drawn} CheckList texts of the samples "
                                  "and as many CheckList texts as the capabilities' pairs take"))
    return work


def _funnel(count: Counting) -> pd.DataFrame | None:
    path = count.workspace.reports / "capabilities" / "capabilities-suite.csv"
    return pd.read_csv(path) if path.is_file() else None


def _consistency(count: Counting) -> list[Work]:
    from tasks.models.llm import parse_llm

    params = count.params
    c, root = params.consistency, count.workspace.root
    recorded = count.recorded("consistency", "consistency")
    queries = count.interim("consistency", "queries.parquet")
    same = (recorded is not None and queries is not None and recorded.get("seed") == params.seed
            and all(recorded.get(k) == getattr(c, k) for k in CONSISTENCY_SUITE_KEYS))
    if same:
        prompts, bound, basis = list(queries["prompt"]), "at most", "the built suite's prompts"
    else:
        count.table("questions")
        built, old = ((len(queries) / max(queries["question_id"].nunique(), 1),
                       (recorded or {}).get("max_values") or 3) if queries is not None
                      else (431 / 3, 3))  # the default run: 431 prompts of 3 questions
        per_question = built * ((c.max_values or old) / old) ** c.strength
        n = c.n_questions
        prompts = ["is this a question of a typical length in the question set ?"] * round(
            per_question * n)
        bound, basis = "estimate", (f"{n} questions × {per_question:.0f} covering-array rows "
                                    "(the built suite's rows per question, scaled by "
                                    "max_values^strength)")
    lengths = count.lengths(prompts)
    work = []
    for spec in c.llms:
        model = _model_of(count, spec, parse_llm(spec, "consistency.llms", params.models.names,
                                                 root).bare)
        tokens = sum(lengths) + len(prompts) * (CHAT_TOKENS + c.max_new_tokens)
        item = count.generation("consistency", model, "answer prompts",
                                len(prompts), tokens, bound,
                                f"{len(prompts)} prompts ({basis}), each ≤ {c.max_new_tokens} "
                                f"new tokens (an answer stops once its JSON is complete)")
        work.append(item)
    return work


def _model_of(count: Counting, spec: str, bare: str) -> str:
    """The plan's id of a configured spec: the one its model row carries."""
    for row in count.rows.values():
        if row.model in (spec, bare):
            return row.model
    return bare


def _adaptive(count: Counting) -> list[Work]:
    from tasks.adaptive.method import AdaptiveMethod

    method = AdaptiveMethod(count.params, count.workspace)
    absent = [str(p.relative_to(count.workspace.root)) if p.is_relative_to(count.workspace.root)
              else str(p) for p in method.tree_paths() if not p.is_file()]
    if absent:
        raise MissingInputs(absent)
    suite = method.build_suite()
    texts = [t for column in ("input", "input_b") if column in suite
             for t in suite[column] if t]
    lengths = count.lengths(texts)
    return [count.forward("adaptive", row.model, "score the trees' tests", lengths, "exact",
                          f"{len(texts)} test inputs of {len(method.tree_paths())} tree(s)")
            for row in count.rows.values() if row.key == "adaptive.models"]


def _adaptive_debug(count: Counting) -> list[Work]:
    from tasks.adaptive.debug import ADATEST, CHECKLIST_DATA

    params = count.params
    d = params.adaptive.debug
    model = next((r.model for r in count.rows.values() if r.key == "adaptive.debug.model"),
                 d.model)
    generator = params.models.causal_lm
    recorded = count.recorded("adaptive-debug", "debug")
    built = count.interim("adaptive-debug", "suite.parquet")
    same = (recorded is not None and built is not None and recorded.get("seed") == params.seed
            and all(recorded.get(k) == v for k, v in d.model_dump(
                mode="json", include=set(DEBUG_SUITE_KEYS)).items()))
    if same:
        suite_lengths, bound = count.lengths(built["text"]), "exact"
    else:
        checklist = count.table("checklist_suite")
        n = checklist["test"].nunique() * d.checklist_examples + 3 * (d.eval_max or 1000)
        suite_lengths, bound = [18] * n, "at most"
    topics, seeds = len(d.topics), d.seeds
    variants = topics + (topics - 1 if d.cumulative else 0)
    models = 1 + len(d.conditions) * variants * seeds
    loop_tests = d.seed_tests + d.rounds * d.prompts * d.completions
    per_condition = {CHECKLIST_DATA: d.checklist_n, ADATEST: loop_tests}
    texts = 0
    for condition in d.conditions:
        per_topic = per_condition.get(condition, d.checklist_n)
        topic_counts = [per_topic] * topics
        if d.cumulative:
            topic_counts += [per_topic * k for k in range(2, topics + 1)]
        texts += sum(topic_counts) * seeds
    mixed = round(texts * (1 + d.mix_ratio))
    loop_train = round(topics * seeds * d.rounds * loop_tests * (1 + d.mix_ratio))
    steps = d.epochs * (math.ceil(mixed / d.batch_size) + math.ceil(loop_train / d.batch_size))
    sst_lengths = count.lengths(count.table("sst")["text"])
    work = [count.forward("adaptive-debug", model, "evaluate every model", suite_lengths
                          * models, bound, f"{models} models × {len(suite_lengths)} cases",
                          calls=models * len(suite_lengths)),
            count.training("adaptive-debug", model, "fine-tune each model", steps,
                           padded_tokens(sst_lengths, d.batch_size, steps, params.seed),
                           "at most", f"{d.epochs} epoch(s) over ≤ {mixed} topic and SST-2 "
                           f"texts, and ≤ {d.rounds} fixes per topic loop (tokens as SST "
                           "sentences')")]
    if ADATEST in d.conditions:
        samples = topics * seeds * d.rounds * d.prompts * d.completions
        work.append(count.generation(
            "adaptive-debug", _model_of(count, generator, generator), "suggest tests",
            samples, samples * (SUGGESTION_PROMPT_TOKENS + SAMPLE_TOKENS), "at most",
            f"{topics} topics × {seeds} seed(s) × ≤ {d.rounds} rounds × {d.prompts} prompts × "
            f"{d.completions} completions of ≤ {SAMPLE_TOKENS} tokens"))
    return work


ESTIMATORS = {"data": _data, "train-sentiment": _train_sentiment, "contrastive": _contrastive,
              "capabilities": _capabilities, "consistency": _consistency,
              "adaptive": _adaptive, "adaptive-debug": _adaptive_debug, "repair": _repair}


# --------------------------------------------------------------------------- the plan

def selected_stages(names: list[str] | None) -> list[str]:
    """The stages to plan, in dvc.yaml's order (all when ``names`` is empty); an unknown name
    is refused, naming the stages."""
    from flows.registry import STAGES, stage_spec

    wanted = [n.strip() for name in names or [] for n in name.split(",") if n.strip()]
    for name in wanted:
        stage_spec(name)  # the registry's one error for an unknown stage
    return [s for s in STAGES if not wanted or s in wanted]


def check_gpu_tflops(gpu_tflops: float) -> float:
    if not gpu_tflops > 0 or math.isinf(gpu_tflops):
        raise LingtestError(f"lingtest plan --gpu-tflops {gpu_tflops}: give the GPU's "
                            "sustained TFLOP/s, a finite number above 0 (default "
                            f"{DEFAULT_GPU_TFLOPS:g})")
    return gpu_tflops


def make_plan(params, workspace: Workspace, stages: list[str], calibration: Calibration,
              gpu_tflops: float = DEFAULT_GPU_TFLOPS) -> Plan:
    """The plan of ``stages`` under ``params``: models, counted work, times."""
    check_gpu_tflops(gpu_tflops)
    rows = [row for stage in stages for row in stage_model_rows(stage, params, workspace)]
    plan = Plan(params.profile, stages, rows, [], calibration, gpu_tflops)
    missing: set[str] = set()
    shared: dict = {}
    for stage in stages:
        count = Counting(params, workspace, [r for r in rows if r.stage == stage], shared)
        estimator = ESTIMATORS.get(stage)
        if estimator is None:
            plan.notes.append(f"{stage}: no count of its model calls (a stage the plan does "
                              "not know); its time is not in the totals")
            plan.work.append(Work(stage, "", "not counted", 0, "", 0, None, "encode",
                                  "unknown", "no estimator for this stage"))
            continue
        try:
            plan.work += estimator(count)
        except MissingInputs as absent:
            missing |= set(absent.paths)
            plan.work.append(Work(stage, "", "not counted: needs the data stage's outputs", 0,
                                  "", 0, None, "encode", "unknown", ", ".join(absent.paths)))
    c = params.capabilities
    extra = (["benepar's benepar_en3 parser (benepar.download('benepar_en3'))"]
             if c.parser == "benepar" else []) + (
        ["NLTK's SentiWordNet (python -m nltk.downloader sentiwordnet)"]
        if c.word_sentiment == "sentiwordnet" else [])
    if "capabilities" in stages and extra:
        plan.notes.append(f"capabilities also downloads {' and '.join(extra)}, not counted in "
                          "the download sizes")
    if missing:
        plan.notes.insert(0, "the counts of model calls need the data stage's outputs "
                          f"(missing: {', '.join(sorted(missing))}); fix: lingtest run data, "
                          "then plan again")
    return plan.timed()


# --------------------------------------------------------------------------- output

def _gb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


def _params_text(n: int | None) -> str:
    return "—" if n is None else f"{n / 1e6:.1f} M"


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _count_text(n: int) -> str:
    return f"{n:,}"


def render(plan: Plan, console) -> None:
    """The plan as readable tables: per stage its models and its work, then the totals."""
    from rich.table import Table

    console.print(f"[bold]lingtest plan[/bold]: profile {plan.profile}, stages "
                  f"{', '.join(plan.stages)}")
    for note in plan.notes:
        console.print(f"[yellow]note[/yellow]: {note}")
    downloader = {model: row.stage for model, row in plan.downloads().items()}
    for stage in plan.stages:
        rows = [r for r in plan.models if r.stage == stage]
        work = [w for w in plan.work if w.stage == stage]
        totals = plan.stage_totals(stage)
        console.print(f"\n[bold]{stage}[/bold]: {len(rows)} model(s), "
                      f"{totals['downloads']} to download ({totals['download_gb']:.2f} GB), "
                      f"CPU {_time(totals['cpu_hours'] * 3600)}, GPU "
                      f"{_time(totals['gpu_hours'] * 3600)}")
        if rows:
            table = Table("model", "kind", "where", "parameters", "download", "size from")
            for r in rows:
                first = downloader.get(r.model, stage)
                table.add_row(r.model, r.kind, r.where, _params_text(r.parameters),
                              "—" if r.where != "to download" else _gb(r.download_bytes)
                              if first == stage else f"in {first}",
                              r.size_source.split(":")[0] if r.size_source else "—")
            console.print(table)
        if not work:
            console.print("no model calls")
            continue
        table = Table("work", "models", "calls", "tokens", "count", "CPU", "GPU")
        for what, items in _grouped(work).items():
            calls = sum(w.calls for w in items)
            cpu = None if any(w.cpu_seconds is None for w in items) else \
                sum(w.cpu_seconds for w in items)
            gpu = None if any(w.gpu_seconds is None for w in items) else \
                sum(w.gpu_seconds for w in items)
            bounds = sorted({w.bound for w in items})
            table.add_row(what, str(len({w.model for w in items})),
                          f"{_count_text(calls)} {items[0].unit}".strip(),
                          _count_text(sum(w.tokens for w in items)), "/".join(bounds),
                          _time(cpu), _time(gpu))
        console.print(table)
    totals = plan.totals()
    table = Table("stage", "to download", "CPU hours", "GPU hours", "count")
    for stage in plan.stages:
        s = plan.stage_totals(stage)
        table.add_row(stage, f"{s['downloads']} ({s['download_gb']:.2f} GB)",
                      f"{s['cpu_hours']:.2f}", f"{s['gpu_hours']:.3f}",
                      "/".join(s["bounds"]) or "—")
    table.add_row("[bold]total[/bold]", f"{totals['downloads']} ({totals['download_gb']:.2f} GB)",
                  f"{totals['cpu_hours']:.2f}", f"{totals['gpu_hours']:.3f}",
                  "" if totals["complete"] else "incomplete")
    console.print("\n[bold]totals[/bold]")
    console.print(table)
    cal = plan.calibration
    console.print(f"\nrule: {RULE}")
    console.print(f"sizes: {SIZE_RULE}; {TOKENS}.")
    console.print(f"CPU: {cal.machine}, {cal.threads} torch thread(s), measured {cal.measured}: "
                  + ", ".join(f"{kind} {cal.rate(kind) / 1e9:.1f}" for kind in
                              ("encode", "train", "generate", "search_l1", "search_dot",
                               "banks")) + f" GFLOP/s (LM engine {cal.engine})")
    console.print(f"GPU: {plan.gpu_tflops:g} TFLOP/s assumed ({GPU_ASSUMPTION}).")


def _grouped(work: list[Work]) -> dict[str, list[Work]]:
    out: dict[str, list[Work]] = {}
    for item in work:
        out.setdefault(item.what, []).append(item)
    return out
