"""The oracle reviewer: unattended or scripted rounds of AdaTest's testing loop.

In AdaTest a person reviews the ranked suggestions and keeps some as tests. Here an oracle
does it, and says so: for each suggestion it states the label the input should get (an
expectation, ``should output <y>``) or that the input is off topic. Two oracles:

- ``RuleOracle``: a labelling function ``(topic, input) → label | None`` (None: off topic);
- ``ModelOracle``: a reference model whose answer is taken as the right one (optionally
  after ``TopicMembership`` has put the input outside the topic: off topic) — when it is
  sure (probability of its label ≥ ``min_confidence``) and the input reads as a test (two
  or more words, no word three times in a row); otherwise it abstains (``ABSTAIN``): a
  reference model accepting "Pins" as positive or "very very very" as anything grows a tree
  no reader trusts.

The oracle's expectation stands in for AdaTest's per-topic label model when the
suggestions are scored (AdaTest scores a suggestion against the label it imputes), so the
ranking and the review agree. A round (``run_round``): build prompts (the tree's tests
scored on the first model, as AdaTest scores a tree when it opens it) → generate → dedupe →
the oracle's expectations → score on every model → review (the first model's verdict:
pass / fail; off topic and abstained dropped) → append the accepted tests to the tree with
``labeler = oracle:<id>`` and a ``provenance`` cell (round, prompt id, generator, seed) →
counts. Accepted tests are written as their expectation (``output`` = the expected label,
``label`` = pass, as ``cases.case_to_row`` writes new cases), with every model's score in
its ``<model> score`` column. An oracle never overwrites a human label: a row the tree
already holds from another labeler is left as it is. The round's review table lists every
suggestion shown, worst first, with ``review`` = accepted / rejected (an undefined verdict,
or a pass under ``accept="failures"``) / kept-human / abstained / off_topic (last); the
counts name the undefined verdicts (``undefined``) when there are any.
"""
from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal

import numpy as np
import pandas as pd

from lingtest.tasks.adaptive.cases import (INPUT_B, Expectation, case_to_row, row_expectation,
                                  to_topic)
from lingtest.tasks.adaptive.generators import (Generator, dedupe, score_suggestions, suggestion_cases,
                                       suggestions_frame)
from lingtest.tasks.adaptive.prompts import Embed, PromptSettings, build_prompts, prompt_texts, score_max
from lingtest.tasks.adaptive.scoring import answered, score_cases, score_column
from lingtest.tasks.adaptive.tree import (TEST_LABELS, TestTree, ensure_topic_markers, topic_problem,
                                 write_tree)
from lingtest.tasks.core.cases import provenance_json
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.schema import decided, undefined_count
from lingtest.tasks.adaptive.tested_models import as_tested
from lingtest.tasks.models.sentiment import SentimentModel

log = logging.getLogger(__name__)

ORACLE_PREFIX = "oracle:"
PROVENANCE = "provenance"  # the tree column holding an oracle-labelled row's provenance
_ROW_NAMESPACE = uuid.UUID("8d3c1f0e-6a7b-4c2d-9e10-2b5f7a9c4d61")


class RuleOracle:
    """A labelling function as an oracle: ``label_of(topic, input)`` → label or None."""

    def __init__(self, name: str, label_of: Callable[[str, str], str | None]):
        self.oracle_id = f"{ORACLE_PREFIX}{name}"
        self.label_of = label_of

    def expect(self, topic: str, inputs: list[str]) -> list[str | None]:
        return [self.label_of(topic, text) for text in inputs]


ABSTAIN = "<abstain>"  # an oracle's answer for an input it will not label either way
_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")


def not_a_test(text: str) -> str | None:
    """Why ``text`` is not a test input (fewer than two words; a word three times in a row),
    or None."""
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) < 2:
        return "fewer than two words"
    if any(words[i] == words[i + 1] == words[i + 2] for i in range(len(words) - 2)):
        return "a word repeated three times in a row"
    return None


class ModelOracle:
    """A reference model as an oracle: its answer is the expected label when its probability
    for that label is at least ``min_confidence`` and the input reads as a test; otherwise it
    abstains. Given a ``membership`` (``TopicMembership``), inputs it places outside the topic
    are off topic (None). VADER's "probabilities" are word proportions (a clearly negative
    review may be 0.27 negative): with VADER as the oracle lower the floor. An input the
    reference model gives no label (``undefined``) is abstained on."""

    def __init__(self, model: SentimentModel, min_confidence: float = 0.8,
                 membership=None):
        if not 0 <= min_confidence <= 1:
            raise LingtestError(f"oracle min_confidence={min_confidence}: use a probability "
                                "between 0 and 1 (0: take every answer)")
        self.model = as_tested(model)
        if self.model.kind != "classifier":
            raise LingtestError(f"oracle {model.model_id}: a raw-score model gives no label; "
                                "name a classifier as the oracle")
        self.min_confidence = min_confidence
        self.membership = membership
        self.oracle_id = f"{ORACLE_PREFIX}{model.model_id}"

    def expect(self, topic: str, inputs: list[str]) -> list[str | None]:
        if not inputs:
            return []
        labels, probs = self.model.predict_with_probabilities(inputs)
        probs = np.asarray(probs, float)
        # the probability of the label given (a binary model's neutral band has none: 0);
        # NaN (never sure) for an undefined answer
        given = np.array([p[self.model.labels.index(y)] if answered(y, p) else np.nan
                          for y, p in zip(labels, probs)], float)
        sure = given >= self.min_confidence
        inside = (self.membership.on_topic(topic, inputs) if self.membership is not None
                  else np.ones(len(inputs), dtype=bool))
        return [None if not on else label if ok and not_a_test(text) is None else ABSTAIN
                for text, label, ok, on in zip(inputs, labels, sure, inside)]


@dataclass
class RoundResult:
    """A round's tree (accepted tests appended), its reviewed suggestions and its counts."""

    tree: TestTree
    suggestions: pd.DataFrame
    counts: dict = field(default_factory=dict)


def row_id(topic: str, text: str) -> str:
    """A stable id for an oracle-accepted row: a uuid5 of its topic and input."""
    return uuid.uuid5(_ROW_NAMESPACE, f"{topic}\n{text}").hex


def append_accepted(tree: TestTree, rows: dict[str, dict[str, str]]) -> tuple[TestTree,
                                                                             list[str]]:
    """``tree`` with ``rows`` (id → cells) appended; a row whose id the tree holds is
    replaced only when an oracle labelled it, never a human's. Returns (tree, ids written)."""
    frame = tree.frame
    labelers = frame["labeler"] if len(frame) else pd.Series(dtype=object)
    kept = {i: r for i, r in rows.items()
            if i not in frame.index or str(labelers.get(i, "")).startswith(ORACLE_PREFIX)}
    for i in sorted(set(rows) - set(kept)):
        log.info("%s: row %s keeps its label by %s; the oracle does not overwrite it",
                 tree.source, i, frame.at[i, "labeler"])
    if not kept:
        return tree, []
    columns = list(dict.fromkeys([*frame.columns, *(c for r in kept.values() for c in r)]))
    out = frame.reindex(columns=columns, fill_value="")
    for i, row in kept.items():
        out.loc[i] = [str(row.get(c, "")) for c in columns]
    out = ensure_topic_markers(out, [r["topic"] for r in kept.values()])
    return TestTree(out, tree.source, tree.lineterminator, tree.index_name), list(kept)


def row_cases(frame: pd.DataFrame, binary_labels: tuple[str, str] | None) -> pd.DataFrame:
    """The labelled test rows as cases whose ``case_id`` is the row id (so a tree holding
    one test twice, in two topics, is scored rather than refused: the prompt builder and
    `lingtest review` score every row; the stages' cases keep one case per test)."""
    rows = []
    for rid, row in frame[frame["label"].isin(TEST_LABELS)].iterrows():
        found = row_expectation(row, binary_labels, f"row {rid}")
        if found is not None:
            rows.append({"case_id": rid, "topic": to_topic(row["topic"]),
                         "input": row["input"], INPUT_B: str(row.get(INPUT_B, "") or ""),
                         "expectation": found[0].text})
    return pd.DataFrame(rows, columns=["case_id", "topic", "input", INPUT_B, "expectation"])


def prompt_scores(tree: TestTree, model: SentimentModel,
                  binary_labels: tuple[str, str] | None) -> np.ndarray:
    """Each tree row's score for the prompt builder: every labelled test scored on ``model``
    now (AdaTest scores the tree on the model it tests), whatever ``<model> score`` cells the
    tree holds: after a round only the new rows carry one, and an empty cell would fall back
    to the row's pass/fail label, judged against another model. Rows that are no test (or
    have no score) get the builder's label rule (``score_max`` of "")."""
    results = score_cases(row_cases(tree.frame, binary_labels), model)
    by_row = dict(zip(results["case_id"], results["score"]))
    return np.array([score_max("" if pd.isna(by_row.get(i, np.nan)) else by_row[i], label)
                     for i, label in zip(tree.frame.index, tree.frame["label"])])


def run_round(tree: TestTree, topic: str, generator: Generator, oracle, models:
              list[SentimentModel], round_no: int = 1, seed: int = 0,
              settings: PromptSettings = PromptSettings(), prompts: int | None = None,
              completions: int | None = None, accept: Literal["all", "failures"] = "all",
              embed: Embed | None = None, path: str | Path | None = None,
              binary_labels: tuple[str, str] | None = None) -> RoundResult:
    """One oracle-reviewed round for ``topic`` (see the module docstring). ``prompts`` ×
    ``completions`` default to AdaTest's plan (8 × 12); ``accept="failures"`` keeps only the
    tests the first model fails; ``path`` writes the grown tree there; ``binary_labels`` reads
    the tree's fail rows (``cases.tree_to_cases``) when the first model scores them; ``embed``
    is the encoder behind ``settings.prompt_diversity`` (default: the packaged MiniLM)."""
    problem = topic_problem(topic)
    if problem:
        raise LingtestError(f"adaptive round: {problem}; name a tree topic such as /Rooms")
    if accept not in ("all", "failures"):
        raise LingtestError(f"adaptive round accept={accept!r}: use 'all' or 'failures'")
    if not models:
        raise LingtestError("adaptive round: no model under test; name at least one")
    rng = np.random.default_rng(seed)
    first = models[0].model_id
    items = build_prompts(tree, topic, rng, settings, repetitions=prompts, embed=embed,
                          scores=prompt_scores(tree, models[0], binary_labels))
    texts = prompt_texts(items, topic)
    n = completions or max(1, settings.max_suggestions // max(1, len(texts)))
    generated = suggestions_frame(texts, generator.complete(texts, n, seed),
                                  generator.generator_id, seed)
    shown = dedupe(generated, tree, topic)
    expected = oracle.expect(topic, list(shown["input"]))
    abstained = np.array([label == ABSTAIN for label in expected], dtype=bool)
    on_topic = np.array([label is not None for label in expected], dtype=bool) & ~abstained
    cases = suggestion_cases(shown[on_topic].reset_index(drop=True), topic,
                             [Expectation("output", str(y)).text
                              for y, keep in zip(expected, on_topic) if keep], round_no)
    ranked, _ = score_suggestions(cases, models)
    verdicts = ranked[f"{first} verdict"]
    wanted = verdicts.eq("fail") if accept == "failures" else decided(verdicts)
    accepted = ranked[wanted]
    rows = {}
    for _, case in accepted.iterrows():
        row = case_to_row(case)
        row["labeler"] = oracle.oracle_id
        row[PROVENANCE] = case["provenance"]
        for model in models:
            value = case[score_column(model.model_id)]
            row[score_column(model.model_id)] = "" if pd.isna(value) else repr(float(value))
        rows[row_id(row["topic"], row["input"])] = row
    grown, written = append_accepted(tree, rows)
    if path is not None:
        write_tree(grown, path)
    ids = [row_id(topic, text) for text in ranked["input"]]
    review = ranked.assign(row_id=ids, review=np.where(
        [i in written for i in ids], "accepted", np.where(wanted, "kept-human", "rejected")))
    dropped = [pd.DataFrame({
        "topic": to_topic(topic), "input": part["input"].to_numpy(),
        "provenance": [provenance_json(round=round_no, prompt_id=r["prompt_id"],
                                       generator=r["generator"], seed=int(r["seed"]))
                       for _, r in part.iterrows()],
        "row_id": [row_id(topic, t) for t in part["input"]], "review": why})
        for part, why in ((shown[abstained], "abstained"),
                          (shown[~on_topic & ~abstained], "off_topic"))]
    review = pd.concat([review, *dropped], ignore_index=True)
    counts = {"round": round_no, "topic": topic, "generator": generator.generator_id,
              "oracle": oracle.oracle_id, "generated": len(generated), "shown": len(shown),
              "off_topic": int((~on_topic & ~abstained).sum()),
              "abstained": int(abstained.sum()), "accepted": len(written),
              "failures": int((review["review"].eq("accepted")
                               & review[f"{first} verdict"].eq("fail")).sum())}
    undefined = undefined_count(verdicts)
    if undefined:  # the first model gave no answer: rejected, and said so
        counts["undefined"] = undefined
    return RoundResult(grown, review, counts)
