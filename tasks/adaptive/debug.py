"""AdaTest's debugging loop as a stage (``adaptive-debug``; paper §4, the fix step).

The model under test (the SST-2 MiniLM classifier) is fine-tuned further, from its
checkpoint, in two conditions, each with ``seeds`` training seeds:

- ``adatest``: every test of the chosen topics of a test tree, with its gold label (a
  passing test's output, a failing test's other class), mixed 1:1 with SST-2 training
  sentences;
- ``checklist-data`` (the paper's comparison, its Figure 7): ``checklist_n`` = 50 labelled
  examples of each CheckList MFT test whose labels a binary model can learn, mixed 1:1 alike.

Every model — the checkpoint and each fine-tuned copy — is then tested on what no condition
trained on: CheckList's sentiment tests as topics (a seeded sample per test, minus every
example whose text either condition trained on), SST-2 validation and the IMDb contrast sets
(out of domain; the paper used DynaSent). One unit per (condition, seed), so a task runner
spreads them; ``debug_report`` turns the verdicts into the tables.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from tasks.adaptive.cases import INVARIANCE, tree_to_cases
from tasks.adaptive.tree import read_tree
from tasks.capabilities.checklist_run import run_checklist, sample_suite
from tasks.core.cases import case_id, provenance_json
from tasks.core.config import Params
from tasks.core.errors import LingtestError
from tasks.core.method import Method, Unit, UnitResult
from tasks.core.paths import Workspace
from tasks.core.publish import Report
from tasks.core.schema import Contract
from tasks.data.sst import sst2_split
from tasks.models.model_spec import ModelRef, parse_model
from tasks.models.sentiment import (LABELS2, MINILM_CONFIG, MINILM_SST2_DIR, MINILM_SST2_ID,
                                    load_configured)
from tasks.training.sentiment import TRAINING_LOCK, continue_training

log = logging.getLogger(__name__)
METHOD = "adaptive-debug"
CONTRACT = Contract(method=METHOD, group="topic", texts=("text",))
BEFORE = "before"
CHECKLIST, SST2, IMDB = "checklist", "sst2-validation", "imdb-contrast"
LEARNABLE = {0: "neg", 2: "pos"}  # CheckList labels a binary classifier can be taught
RESULT_COLUMNS = ["case_id", "method", "model_id", "revision", "output", "verdict", "score",
                  "condition", "train_seed", "set", "topic"]


def tree_training_set(tree_path: Path, topics: list[str],
                      binary_labels: tuple[str, str] | None) -> pd.DataFrame:
    """(text, label, topic) of the tree's tests under ``topics`` (all when empty) that state
    one class: invariance and "should not output" tests give no gold label."""
    cases = tree_to_cases(read_tree(tree_path), binary_labels)
    if topics:
        wanted = [t.rstrip("/") for t in topics]
        unknown = [t for t in wanted if not cases["topic"].eq(t).any()
                   and not cases["topic"].str.startswith(t + "/").any()]
        if unknown:
            raise LingtestError(f"adaptive.debug.topics: {unknown} hold no test in "
                                f"{tree_path}; fix: pick topics of the tree "
                                f"({sorted(cases['topic'].unique())})")
        cases = cases[cases["topic"].apply(lambda t: any(t == w or t.startswith(w + "/")
                                                         for w in wanted))]
    labelled = cases[cases["expectation"].str.startswith("should output ")
                     & cases["expectation"].ne(INVARIANCE)]
    out = pd.DataFrame({"text": labelled["input"],
                        "label": labelled["expectation"].str.removeprefix("should output "),
                        "topic": labelled["topic"]}).reset_index(drop=True)
    if out.empty:
        raise LingtestError(f"adaptive.debug: {tree_path} has no labelled test under "
                            f"{topics or 'any topic'} to train on")
    return out


def checklist_training_set(checklist: pd.DataFrame, evaluated: pd.DataFrame, n: int,
                           seed: int) -> pd.DataFrame:
    """``n`` learnable examples of each labelled MFT test, drawn first from the examples the
    evaluation sample left out (seeded per test), then from the sample (those leave it)."""
    mft = checklist[checklist["expectation"].eq("label == labels[i]")
                    & checklist["label"].isin(list(LEARNABLE))]
    in_sample = set(zip(evaluated["test"], evaluated["example_id"]))
    parts = []
    for test, group in mft.groupby("test", sort=True):
        key = np.frombuffer(str(test).encode("utf-8"), dtype=np.uint8).tolist()
        rng = np.random.default_rng([seed, 7, *key])
        sampled = group.apply(lambda r: (r["test"], r["example_id"]) in in_sample, axis=1)
        pool, fallback = group[~sampled], group[sampled]
        take = pool.iloc[np.sort(rng.choice(len(pool), min(n, len(pool)), replace=False))]
        if len(take) < n and len(fallback):
            extra = min(n - len(take), len(fallback))
            take = pd.concat([take, fallback.iloc[np.sort(rng.choice(
                len(fallback), extra, replace=False))]])
        parts.append(take)
    if not parts:
        raise LingtestError("checklist-data: the CheckList suite has no labelled MFT test")
    chosen = pd.concat(parts)
    return pd.DataFrame({"text": chosen["texts"].map(lambda t: str(t[0])),
                         "label": chosen["label"].map(lambda x: LEARNABLE[int(x)]),
                         "topic": "CheckList: " + chosen["test"],
                         "example_id": chosen["example_id"].astype(int),
                         "test": chosen["test"]}).reset_index(drop=True)


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
    ``undefined``), else the argmax class against the stated one (score = P(stated))."""
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
        probs = model.predict_proba(labelled["text"].tolist())
        gold = labelled["expectation"].str.removeprefix("should output ")
        column = gold.map({label: i for i, label in enumerate(model.labels)}).to_numpy()
        predicted = [model.labels[i] for i in probs.argmax(1)]
        out.append(pd.DataFrame({
            "case_id": labelled["case_id"], "output": predicted,
            "verdict": np.where(np.array(predicted) == gold.to_numpy(), "pass", "fail"),
            "score": probs[np.arange(len(probs)), column]}, index=labelled.index))
    rows = pd.concat(out).loc[suite.index]
    return rows.assign(set=suite["set"], topic=suite["topic"])


class DebuggingLoop(Method):
    """The ``adaptive-debug`` stage: fine-tune per condition and seed, re-test, compare."""

    stage = METHOD
    contract = CONTRACT

    def __init__(self, params: Params, workspace: Workspace):
        super().__init__(params, workspace)
        self.debug = params.adaptive.debug
        self.training: dict[str, pd.DataFrame] = {}  # condition → (text, label, topic)
        self.headline: dict = {}  # the report's metrics, returned by ``summary``

    @property
    def tree_path(self) -> Path:
        tree = self.debug.tree or self.params.adaptive.trees[0]
        path = Path(tree).expanduser()
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

    def check_inputs(self) -> None:
        processed = self.workspace.processed
        needed = [processed / f"{t}.parquet" for t in ("checklist_suite", "sst",
                                                         "contrast_pairs")]
        missing = [str(p) for p in needed if not p.is_file()]
        if missing:
            raise LingtestError(f"adaptive-debug: missing tables {missing}; fix: lingtest run "
                                "data")
        if not self.tree_path.is_file():
            raise LingtestError(f"adaptive.debug.tree: no test tree at {self.tree_path}; fix: "
                                "lingtest run data, or point it at an AdaTest CSV")
        if not (self.model_folder / MINILM_CONFIG).is_file():
            raise LingtestError(f"adaptive.debug.model: {self.model_folder} holds no lingtest "
                                "classifier to continue from; fix: lingtest run train-sentiment "
                                "(or name a folder it wrote)")

    def model_ids(self) -> list[str]:
        name = self.model_ref.name
        return [name] + [f"{name}+{c}@{s}" for c in self.debug.conditions for s in self.train_seeds]

    def variant(self, model_id: str) -> tuple[str, int | None]:
        """(condition, training seed) of a unit's model id."""
        name = self.model_ref.name
        if model_id == name:
            return BEFORE, None
        condition, seed = model_id.removeprefix(f"{name}+").rsplit("@", 1)
        return condition, int(seed)

    def build_suite(self) -> pd.DataFrame:
        d, seed, processed = self.debug, self.params.seed, self.workspace.processed
        checklist = pd.read_parquet(processed / "checklist_suite.parquet")
        evaluated = sample_suite(checklist, d.checklist_examples, seed)
        labels = self.params.adaptive.binary_labels
        self.training["adatest"] = tree_training_set(self.tree_path, d.topics,
                                                     tuple(labels) if labels else None)
        if "checklist-data" in d.conditions:
            chosen = checklist_training_set(checklist, evaluated, d.checklist_n, seed)
            self.training["checklist-data"] = chosen
            taken = set(zip(chosen["test"], chosen["example_id"]))
            evaluated = evaluated[[(t, e) not in taken for t, e in
                                   zip(evaluated["test"], evaluated["example_id"])]]
        trained = {t for frame in self.training.values() for t in frame["text"]}
        sst = sst2_split(pd.read_parquet(processed / "sst.parquet"), "dev")
        pairs = pd.read_parquet(processed / "contrast_pairs.parquet")
        if d.ood_split != "all":
            pairs = pairs[pairs["split"] == d.ood_split]
        if d.eval_max is not None:
            sst = sst.sample(n=min(d.eval_max, len(sst)), random_state=seed).sort_index()
            pairs = pairs.sample(n=min(d.eval_max, len(pairs)), random_state=seed).sort_index()
        imdb_label = {"Positive": "pos", "Negative": "neg"}
        parts = [checklist_cases(evaluated, trained),
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

    def training_set(self, condition: str, seed: int) -> pd.DataFrame:
        """The condition's topic data plus ``mix_ratio`` × as many SST-2 training sentences
        (a sample drawn with the training seed)."""
        if condition not in self.training:
            raise LingtestError(f"adaptive.debug.conditions: unknown condition `{condition}` "
                                "(adatest, checklist-data)")
        topic = self.training[condition][["text", "label"]]
        train = sst2_split(pd.read_parquet(self.workspace.processed / "sst.parquet"), "train")
        n = min(len(train), round(self.debug.mix_ratio * len(topic)))
        original = train.sample(n=n, random_state=seed)[["text", "label2"]].rename(
            columns={"label2": "label"})
        return pd.concat([topic, original], ignore_index=True)

    def run_unit(self, suite: pd.DataFrame, unit: Unit) -> UnitResult:
        d = self.debug
        condition, seed = self.variant(unit.model_id)
        if condition == BEFORE:
            with TRAINING_LOCK:  # building the head draws from torch's global generator
                model = load_configured(self.model_ref, self.params, self.workspace.root,
                                        d.neutral_band)
            trained_on = 0
        else:
            data = self.training_set(condition, seed)
            model = continue_training(self.model_folder, data["text"].tolist(), data["label"],
                                      seed, epochs=d.epochs, batch_size=d.batch_size, lr=d.lr,
                                      threads=self.params.runtime.threads,
                                      neutral_band=tuple(d.neutral_band),
                                      model_id=unit.model_id,
                                      pass_tokens=self.params.runtime.pass_tokens,
                                      **self.params.runtime.encoder_path())
            trained_on = len(data)
        if tuple(model.labels) != LABELS2:
            raise LingtestError(f"adaptive.debug.model: `{d.model}` predicts {model.labels}; "
                                f"the debugging loop fine-tunes a binary {LABELS2} classifier")
        rows = evaluate(unit.take(suite), model, batch_size=64).assign(
            method=METHOD, model_id=unit.model_id, revision=str(model.revision),
            condition=condition, train_seed=-1 if seed is None else seed)
        return UnitResult(unit, rows[RESULT_COLUMNS], {"revision": str(model.revision),
                                                       "trained_on": trained_on})

    def report(self, suite: pd.DataFrame, results: pd.DataFrame,
               runs: list[UnitResult]) -> Report:
        from tasks.adaptive.debug_report import debugging_report

        report = debugging_report(self, suite, results, runs)
        self.headline = report.metrics
        return report

    def summary(self, suite: pd.DataFrame, results: pd.DataFrame,
                runs: list[UnitResult]) -> dict:
        return {"cases": len(suite), "models": len(runs), **self.headline}
