"""AdaTest's debugging experiment as a stage (``adaptive-debug``; paper §4, Table 1, Fig. 7).

Per CheckList topic to fix (``topics``, CheckList MFT tests), its examples are split into
5 seed tests, a pool and the evaluated held-out sample (``debug_protocol.split_topic``).
The model under test (the SST-2 MiniLM classifier) is fine-tuned from its checkpoint in
each condition, with ``seeds`` training seeds:

- ``adatest``: the paper's protocol — from the topic's seed tests, test–fix–retest rounds
  (LM suggestions, reviewed by an oracle standing in for the paper's users, failing ones
  added, fine-tune, re-test) until the topic passes or after ``rounds`` fixes; the model is
  trained on the tree that loop grew (``debug_protocol.debug_topic``);
- ``checklist-data`` (the paper's comparison): ``checklist_n`` examples of the topic from
  its pool;
- ``adatest-tree`` (optional; the stage's former design): every labelled test of the
  mirrored hotel tree (``tree``, ``tree_topics``) with the curated label corrections.

Each condition's data is mixed ``mix_ratio``:1 with SST-2 training sentences. Models: one per
topic alone (Table 1) and, with ``cumulative``, one per first-k topics (Figure 7). Every
model is tested on what no condition trained on: the held-out sample of every CheckList
test (the fixed topics' own included), SST-2 validation and the IMDb contrast sets (out of
domain; the paper used DynaSent). One unit per model; ``debug_report`` makes the tables.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from lingtest.tasks.adaptive.cases import INVARIANCE, tree_to_cases
from lingtest.tasks.adaptive.corrections import COLUMNS as CORRECTION_COLUMNS
from lingtest.tasks.adaptive.corrections import apply_corrections, read_corrections
from lingtest.tasks.adaptive.debug_protocol import (LoopSettings, NearestExampleOracle, TopicRun,
                                           TopicSplit, checklist_sample, debug_topic,
                                           split_topic)
from lingtest.tasks.adaptive.tree import read_tree
from lingtest.tasks.capabilities.checklist_run import run_checklist, sample_suite
from lingtest.tasks.core.caching import NO_CACHE, task
from lingtest.tasks.core.cases import case_id, provenance_json
from lingtest.tasks.core.config import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.method import Method, Unit, UnitResult, by_model
from lingtest.tasks.core.metrics import SETTING
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.publish import Report
from lingtest.tasks.core.schema import UNDEFINED, Contract
from lingtest.tasks.data.sst import sst2_split
from lingtest.tasks.models.model_spec import ModelRef, parse_model
from lingtest.tasks.models.sentiment import (LABELS2, MINILM_CONFIG, MINILM_SST2_DIR, MINILM_SST2_ID,
                                    load_configured)
from lingtest.tasks.training.common import torch_threads
from lingtest.tasks.training.sentiment import TRAINING_LOCK, continue_training

log = logging.getLogger(__name__)
METHOD = "adaptive-debug"
CONTRACT = Contract(method=METHOD, group="topic", texts=("text",))
BEFORE = "before"
ADATEST, CHECKLIST_DATA, TREE = "adatest", "checklist-data", "adatest-tree"
CHECKLIST, SST2, IMDB = "checklist", "sst2-validation", "imdb-contrast"
RESULT_COLUMNS = ["case_id", "method", "model_id", "revision", "output", "verdict", "score",
                  "condition", "variant", "trained_topics", "train_seed", "set", "topic"]


@task(name="adatest-loop", task_run_name="loop-t{i}@{seed}", cache_policy=NO_CACHE)
def topic_loop(method: "DebuggingLoop", i: int, topic: str, seed: int) -> TopicRun:
    """One topic's AdaTest loop as a task (``DebuggingLoop.run_loops``)."""
    return method.topic_loop(i, topic, seed)


def tree_training_set(tree_path: Path, topics: list[str],
                      binary_labels: tuple[str, str] | None,
                      corrections: pd.DataFrame | None = None
                      ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(text, label, topic) of the tree's tests under ``topics`` (all when empty) that state
    one class (invariance and "should not output" tests give no gold label), with the
    curated ``corrections`` applied; returns (tests, corrections applied)."""
    cases = tree_to_cases(read_tree(tree_path), binary_labels)
    labelled = cases[cases["expectation"].str.startswith("should output ")
                     & cases["expectation"].ne(INVARIANCE)]
    out = pd.DataFrame({"text": labelled["input"],
                        "label": labelled["expectation"].str.removeprefix("should output "),
                        "topic": labelled["topic"]}).reset_index(drop=True)
    applied = pd.DataFrame(columns=CORRECTION_COLUMNS)
    if corrections is not None:  # on the whole tree: a stale row is refused whatever is chosen
        out, applied = apply_corrections(out, corrections, tree_path)
    if topics:
        wanted = [t.rstrip("/") for t in topics]
        unknown = [t for t in wanted if not cases["topic"].eq(t).any()
                   and not cases["topic"].str.startswith(t + "/").any()]
        if unknown:
            raise LingtestError(f"adaptive.debug.tree_topics: {unknown} hold no test in "
                                f"{tree_path}; fix: pick topics of the tree "
                                f"({sorted(cases['topic'].unique())})")

        def under(topic: str) -> bool:
            return any(topic == w or topic.startswith(w + "/") for w in wanted)

        out = out[out["topic"].apply(under)].reset_index(drop=True)
        applied = applied[applied["topic"].apply(under)].reset_index(drop=True)
    if out.empty:
        raise LingtestError(f"adaptive.debug: {tree_path} has no labelled test under "
                            f"{topics or 'any topic'} to train on")
    return out.assign(source="tree", round=0), applied


def checklist_cases(evaluated: pd.DataFrame, trained_texts: set[str]) -> pd.DataFrame:
    """The sampled CheckList examples no condition trained on, as contract cases."""
    keep = ~evaluated["texts"].map(lambda texts: any(str(t) in trained_texts for t in texts))
    rows = []
    for r in evaluated[keep].itertuples(index=False):
        texts = [str(t) for t in r.texts]
        rows.append({"case_id": case_id("checklist", texts, r.expectation), "method": METHOD,
                     "topic": f"CheckList: {r.test}", "text": texts[0],
                     "expectation": r.expectation, "set": CHECKLIST,
                     "provenance": provenance_json(source="checklist_suite", test=r.test,
                                                   example_id=int(r.example_id)),
                     "texts": json.dumps(texts, ensure_ascii=False), "test": r.test,
                     "type": r.type, "capability": r.capability,
                     "example_id": int(r.example_id),
                     "label": "" if pd.isna(r.label) else str(int(r.label))})
    return pd.DataFrame(rows)


def labelled_cases(texts: list[str], labels: list[str], topic: str, kind: str,
                   source: str) -> pd.DataFrame:
    """Sentences with one gold class (SST-2 validation, IMDb contrast sets) as cases."""
    rows = [{"case_id": case_id(METHOD, [text], f"should output {label}"), "method": METHOD,
             "topic": topic, "text": text, "expectation": f"should output {label}",
             "set": kind, "provenance": provenance_json(source=source, index=i)}
            for i, (text, label) in enumerate(zip(texts, labels))]
    return pd.DataFrame(rows)


def evaluate(suite: pd.DataFrame, model, batch_size: int) -> pd.DataFrame:
    """Verdicts of ``model`` on every case: CheckList's own rules (a filtered example is
    ``undefined``), else the argmax class against the stated one (score = P(stated)); a
    text whose probabilities are not numbers (the model gave it no label) is ``undefined``
    (score NaN), never a pass or a fail."""
    out = []
    checklist = suite[suite["set"] == CHECKLIST]
    if len(checklist):
        table = checklist.assign(texts=checklist["texts"].map(json.loads),
                                 label=checklist["label"].map(lambda x: int(x) if x else None))
        verdicts = run_checklist(table, model, batch_size=batch_size)
        verdicts.index = checklist.index
        out.append(pd.DataFrame({
            "case_id": checklist["case_id"],
            "output": verdicts["predictions"].map(lambda p: json.dumps(list(p))),
            "verdict": verdicts["verdict"].replace({"filtered": "undefined"}),
            "score": np.nan}, index=checklist.index))
    labelled = suite[suite["set"] != CHECKLIST]
    if len(labelled):
        probs = np.asarray(model.predict_proba(labelled["text"].tolist()), float)
        gold = labelled["expectation"].str.removeprefix("should output ")
        column = gold.map({label: i for i, label in enumerate(model.labels)}).to_numpy()
        silent = ~np.isfinite(probs).all(1)
        predicted = np.where(silent, UNDEFINED, [model.labels[i] for i in
                                                 np.nan_to_num(probs, nan=0.0).argmax(1)])
        out.append(pd.DataFrame({
            "case_id": labelled["case_id"], "output": predicted,
            "verdict": np.where(silent, UNDEFINED, np.where(predicted == gold.to_numpy(),
                                                            "pass", "fail")),
            "score": probs[np.arange(len(probs)), column]}, index=labelled.index))
    rows = pd.concat(out).loc[suite.index]
    return rows.assign(set=suite["set"], topic=suite["topic"])




class DebuggingLoop(Method):
    """The ``adaptive-debug`` stage: per topic and condition fine-tune, re-test, compare."""

    stage = METHOD
    contract = CONTRACT

    def __init__(self, params: Params, workspace: Workspace):
        super().__init__(params, workspace)
        self.debug = params.adaptive.debug
        self.splits: dict[str, TopicSplit] = {}
        self.topic_runs: dict[tuple[str, int], TopicRun] = {}  # (topic, seed) → AdaTest loop
        self.checklist_data: dict[tuple[str, int], pd.DataFrame] = {}
        self.tree_data: pd.DataFrame | None = None
        self.corrections: pd.DataFrame = pd.DataFrame(columns=CORRECTION_COLUMNS)
        self.dropped_held_out = 0  # evaluated examples left out: a condition trained on them
        self._sst_train: pd.DataFrame | None = None
        self.headline: dict = {}  # the report's metrics, returned by ``summary``

    # ------------------------------------------------------------------ configuration
    @property
    def tree_path(self) -> Path:
        tree = self.debug.tree or self.params.adaptive.trees[0]
        path = Path(tree).expanduser()
        return path if path.is_absolute() else self.workspace.root / path

    @property
    def corrections_path(self) -> Path | None:
        if self.debug.corrections is None:
            return None
        path = Path(self.debug.corrections).expanduser()
        return path if path.is_absolute() else self.workspace.root / path

    @property
    def model_folder(self) -> Path:
        ref = self.model_ref
        return (self.workspace.root / MINILM_SST2_DIR if ref.target == MINILM_SST2_ID
                else Path(ref.target))

    @property
    def model_ref(self) -> ModelRef:
        """``adaptive.debug.model`` parsed: its display name keys results and reports."""
        return parse_model(self.debug.model, "adaptive.debug.model", self.params.models.names,
                           self.workspace.root)

    @property
    def train_seeds(self) -> list[int]:
        return [self.params.seed + i for i in range(self.debug.seeds)]

    def variants(self, condition: str) -> list[str]:
        """Model tags of a condition: ``t<i>`` topic i alone, ``k<k>`` the first k topics
        (``cumulative``; k = 1 is ``t1``), ``tree`` the hotel tree."""
        if condition == TREE:
            return ["tree"]
        k = len(self.debug.topics)
        cumulative = [f"k{j}" for j in range(2, k + 1)] if self.debug.cumulative else []
        return [f"t{i}" for i in range(1, k + 1)] + cumulative

    def variant_topics(self, tag: str) -> list[str]:
        """The CheckList topics a model tag trained on."""
        topics, kind, number = self.debug.topics, tag[:1], tag[1:]
        if not number.isdigit():  # "tree", "" (the base model)
            return []
        return [topics[int(number) - 1]] if kind == "t" else list(topics[:int(number)])

    def check_inputs(self) -> None:
        processed = self.workspace.processed
        needed = [processed / f"{t}.parquet" for t in ("checklist_suite", "sst",
                                                         "contrast_pairs")]
        missing = [str(p) for p in needed if not p.is_file()]
        if missing:
            raise LingtestError(f"adaptive-debug: missing tables {missing}; fix: lingtest run "
                                "data")
        if TREE in self.debug.conditions:
            if not self.tree_path.is_file():
                raise LingtestError(f"adaptive.debug.tree: no test tree at {self.tree_path}; "
                                    "fix: lingtest run data, or point it at an AdaTest CSV")
            if self.corrections_path is not None:
                read_corrections(self.corrections_path)
        if not (self.model_folder / MINILM_CONFIG).is_file():
            raise LingtestError(f"adaptive.debug.model: {self.model_folder} holds no lingtest "
                                "classifier to continue from; fix: lingtest run train-sentiment "
                                "(or name a folder it wrote)")
        if not self.debug.topics and set(self.debug.conditions) - {TREE}:
            raise LingtestError("adaptive.debug.topics: empty; the adatest and checklist-data "
                                "conditions fix CheckList topics; fix: name at least one "
                                "CheckList MFT test (e.g. 'used to, but now')")

    def model_ids(self) -> list[str]:
        name = self.model_ref.name
        return [name] + [f"{name}+{c}:{tag}@{s}" for c in self.debug.conditions
                         for tag in self.variants(c) for s in self.train_seeds]

    def variant(self, model_id: str) -> tuple[str, str, int | None]:
        """(condition, model tag, training seed) of a unit's model id."""
        name = self.model_ref.name
        if model_id == name:
            return BEFORE, "", None
        rest, seed = model_id.removeprefix(f"{name}+").rsplit("@", 1)
        condition, tag = rest.rsplit(":", 1)
        return condition, tag, int(seed)

    # ------------------------------------------------------------------ training data
    def sst_train(self) -> pd.DataFrame:
        if self._sst_train is None:
            self._sst_train = sst2_split(pd.read_parquet(self.workspace.processed
                                                         / "sst.parquet"), "train")
        return self._sst_train

    def mixed(self, topic_data: pd.DataFrame, seed: int) -> pd.DataFrame:
        """The topic data plus ``mix_ratio`` × as many SST-2 training sentences (a sample
        drawn with the training seed)."""
        train = self.sst_train()
        n = min(len(train), round(self.debug.mix_ratio * len(topic_data)))
        original = train.sample(n=n, random_state=seed)[["text", "label2"]].rename(
            columns={"label2": "label"})
        return pd.concat([topic_data[["text", "label"]], original], ignore_index=True)

    def fine_tune(self, topic_data: pd.DataFrame, seed: int, model_id: str):
        """The checkpoint fine-tuned on ``topic_data`` mixed with SST-2 (``mixed``)."""
        d = self.debug
        data = self.mixed(topic_data, seed)
        return continue_training(self.model_folder, data["text"].tolist(), data["label"],
                                 seed, epochs=d.epochs, batch_size=d.batch_size, lr=d.lr,
                                 threads=self.params.runtime.threads,
                                 neutral_band=tuple(d.neutral_band), model_id=model_id,
                                 pass_tokens=self.params.runtime.pass_tokens,
                                 **self.params.runtime.encoder_path())

    def base_model(self):
        with TRAINING_LOCK:  # building the head draws from torch's global generator
            return load_configured(self.model_ref, self.params, self.workspace.root,
                                   self.debug.neutral_band)

    def run_loops(self) -> None:
        """The AdaTest condition's test–fix–retest loop per topic and training seed, one
        call each (``topic_loop``): each is seeded by its topic and seed alone, so the flow
        spreads them over its worker processes, if any, with the same results."""
        jobs = [(i, topic, seed) for i, topic in enumerate(self.debug.topics, start=1)
                for seed in self.train_seeds]
        runs = self.fan_out(topic_loop, [(self, *job) for job in jobs])
        self.topic_runs = {(topic, seed): run for (_, topic, seed), run in zip(jobs, runs)}

    def topic_loop(self, i: int, topic: str, seed: int) -> TopicRun:
        """The AdaTest loop on topic ``i`` with training seed ``seed``."""
        from lingtest.tasks.adaptive.generators import make_generator
        from lingtest.tasks.adaptive.prompts import minilm_embed

        d, offline = self.debug, self.params.models.offline
        generator = make_generator(self.params.models.causal_lm, offline=offline,
                                   root=self.workspace.root, names=self.params.models.names)
        embed = minilm_embed(offline)
        settings = LoopSettings(d.rounds, d.threshold, d.prompts, d.completions)
        split, name, fixes = self.splits[topic], self.model_ref.name, iter(range(1, d.rounds + 1))

        def fine_tune(tests: pd.DataFrame) -> object:
            return self.fine_tune(tests, seed, f"{name}+loop{i}r{next(fixes)}@{seed}")

        log.info("adaptive-debug: AdaTest loop on `%s` (seed %d)", topic, seed)
        # the LM, the encoder and the scoring on runtime.threads (2 threads on 2 shared
        # cores made SmolLM2's sampling 10-20x slower)
        with torch_threads(self.params.runtime.threads):
            oracle = NearestExampleOracle(split, embed, self.params.seed, d.oracle_k,
                                          d.oracle_similarity)
            return debug_topic(split, self.base_model(), fine_tune, generator, oracle, embed,
                               settings, seed)

    def training_data(self, condition: str, tag: str, seed: int) -> pd.DataFrame:
        """What a model trained on before mixing: (text, label, topic, source, round)."""
        if condition == TREE:
            return self.tree_data
        topics = self.variant_topics(tag)
        if condition == ADATEST:
            return pd.concat([self.topic_runs[(t, seed)].tests for t in topics],
                             ignore_index=True)
        if condition == CHECKLIST_DATA:
            return pd.concat([self.checklist_data[(t, seed)] for t in topics],
                             ignore_index=True)
        raise LingtestError(f"adaptive.debug.conditions: unknown condition `{condition}` "
                            f"({ADATEST}, {CHECKLIST_DATA}, {TREE})")

    def trained_texts(self) -> set[str]:
        frames = [run.tests for run in self.topic_runs.values()]
        frames += list(self.checklist_data.values())
        if self.tree_data is not None:
            frames.append(self.tree_data)
        return {t for frame in frames for t in frame["text"]}

    # ------------------------------------------------------------------ suite and units
    def build_suite(self) -> pd.DataFrame:
        d, seed, processed = self.debug, self.params.seed, self.workspace.processed
        checklist = pd.read_parquet(processed / "checklist_suite.parquet")
        held_out = sample_suite(checklist, d.checklist_examples, seed)
        conditions = set(d.conditions)
        if conditions & {ADATEST, CHECKLIST_DATA}:
            self.splits = {t: split_topic(checklist, held_out, t, d.seed_tests, seed)
                           for t in d.topics}
        if CHECKLIST_DATA in conditions:
            self.checklist_data = {(t, s): checklist_sample(self.splits[t], d.checklist_n, s)
                                   for t in d.topics for s in self.train_seeds}
        if TREE in conditions:
            labels = self.params.adaptive.binary_labels
            corrections = (read_corrections(self.corrections_path)
                           if self.corrections_path is not None else None)
            self.tree_data, self.corrections = tree_training_set(
                self.tree_path, d.tree_topics, tuple(labels) if labels else None, corrections)
        if ADATEST in conditions:
            self.run_loops()
        cases = checklist_cases(held_out, self.trained_texts())
        self.dropped_held_out = len(held_out) - len(cases)
        sst = sst2_split(pd.read_parquet(processed / "sst.parquet"), "dev")
        pairs = pd.read_parquet(processed / "contrast_pairs.parquet")
        if d.ood_split != "all":
            pairs = pairs[pairs["split"] == d.ood_split]
        if d.eval_max is not None:
            sst = sst.sample(n=min(d.eval_max, len(sst)), random_state=seed).sort_index()
            pairs = pairs.sample(n=min(d.eval_max, len(pairs)), random_state=seed).sort_index()
        imdb_label = {"Positive": "pos", "Negative": "neg"}
        parts = [cases,
                 labelled_cases(sst["text"].tolist(), sst["label2"].tolist(),
                                "SST-2 validation", SST2, "sst:dev"),
                 labelled_cases(pairs["original"].tolist(),
                                pairs["original_label"].map(imdb_label).tolist(),
                                "IMDb contrast sets: original", IMDB,
                                f"contrast_pairs:{d.ood_split}:original"),
                 labelled_cases(pairs["contrast"].tolist(),
                                pairs["contrast_label"].map(imdb_label).tolist(),
                                "IMDb contrast sets: contrast", IMDB,
                                f"contrast_pairs:{d.ood_split}:contrast")]
        suite = pd.concat(parts, ignore_index=True)
        repeated = suite["case_id"].duplicated()
        if repeated.any():
            log.info("adaptive-debug: %d repeated cases (same texts and expectation) scored "
                     "once", int(repeated.sum()))
        suite = suite[~repeated].reset_index(drop=True)
        for column in ("texts", "test", "type", "capability", "label"):
            suite[column] = suite[column].fillna("")
        suite["example_id"] = suite["example_id"].fillna(-1).astype("int64")
        return suite

    def units(self, suite: pd.DataFrame) -> list[Unit]:
        """One unit per condition, whatever ``runtime.shards`` says: a unit fine-tunes its
        model before it evaluates, so shards of the evaluation would train it once each."""
        return [Unit(model_id) for model_id in self.model_ids()]

    def run_unit(self, suite: pd.DataFrame, unit: Unit) -> UnitResult:
        d = self.debug
        condition, tag, seed = self.variant(unit.model_id)
        if condition == BEFORE:
            model, topic_data = self.base_model(), None
        else:
            topic_data = self.training_data(condition, tag, seed)
            model = self.fine_tune(topic_data, seed, unit.model_id)
        if tuple(model.labels) != LABELS2:
            raise LingtestError(f"adaptive.debug.model: `{d.model}` predicts {model.labels}; "
                                f"the debugging loop fine-tunes a binary {LABELS2} classifier")
        rows = evaluate(unit.take(suite), model, batch_size=64).assign(
            method=METHOD, model_id=unit.model_id, revision=str(model.revision),
            condition=condition, variant=tag, trained_topics=len(self.variant_topics(tag)),
            train_seed=-1 if seed is None else seed)
        return UnitResult(unit, rows[RESULT_COLUMNS], {
            "revision": str(model.revision),
            "topic_tests": 0 if topic_data is None else len(topic_data),
            "trained_on": 0 if topic_data is None else len(self.mixed(topic_data, seed))})

    def report(self, suite: pd.DataFrame, results: pd.DataFrame,
               runs: list[UnitResult]) -> Report:
        from lingtest.tasks.adaptive.debug_report import debugging_report

        report = debugging_report(self, suite, results, runs)
        self.headline = {f"{model} {key}": value for model, values in report.metrics.items()
                         if model != SETTING for key, value in values.items()}
        return report

    def summary(self, suite: pd.DataFrame, results: pd.DataFrame,
                runs: list[UnitResult]) -> dict:
        return {"cases": len(suite), "models": len(by_model(runs)), **self.headline}
