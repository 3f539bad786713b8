"""What ``lingtest review`` holds between requests: one tree file, its models, each topic's
suggestions and the undo history. Every change is written to the tree file at once (atomic
rename, ``tree.write_tree``: AdaTest's layout, untouched rows byte for byte) and can be undone.

Rows a reviewer labels (an accepted suggestion, a written test, a changed expected output)
get ``labeler`` = the reviewer; accepted suggestions and written tests carry a
``provenance`` cell (JSON: round, generator, seed, prompt id, the text a suggestion had
before it was edited; ``written`` for a test typed in). Moving a test or renaming a topic
changes only ``topic``. Scores are not written: the app computes them per model as it shows
a page (the ``adaptive`` stage re-scores tracked trees).

Several models are scored side by side; the *driving* one (first in ``models``; the page can
switch it) ranks suggestions and gives ``output`` to the rows the reviewer files. Several
generators can be named; the chosen one makes the next round (each loaded on first use, then
kept). One round per topic at a time: a second request while one runs is refused.

A model that gives a text no label answers ``undefined`` (score NaN): the page shows that
output with no score, a folder counts such tests apart from its pass / fail counts,
suggestions without a score come last, and such a text cannot be filed as right or wrong
under that driving model (its output is no label a test could expect).
"""
from __future__ import annotations

import json
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from lingtest.tasks.adaptive.cases import EXPECTATION_COLUMN, INPUT_B, RAW_THRESHOLD, SCORE_BELOW
from lingtest.tasks.adaptive.generators import Generator, dedupe, suggestions_frame
from lingtest.tasks.adaptive.label_model import CachedEmbed, rank_suggestions
from lingtest.tasks.adaptive.pairs import is_pair_topic, pair_generator, rank_pairs, split_pairs
from lingtest.tasks.adaptive.prompts import PromptSettings, build_prompts, prompt_texts
from lingtest.tasks.adaptive.review import PROVENANCE, prompt_scores, row_cases, row_id
from lingtest.tasks.adaptive.review_form import append_reviewed
from lingtest.tasks.adaptive.scoring import score_cases, score_column
from lingtest.tasks.adaptive.templates import expand_template
from lingtest.tasks.adaptive.tested_models import as_tested
from lingtest.tasks.adaptive.topic_suggestions import suggest_topic_names
from lingtest.tasks.adaptive.tree import (TEST_LABELS, TestTree, ensure_topic_markers, is_subtopic,
                                 read_tree, topic_name, topic_problem, write_tree)
from lingtest.tasks.core.cases import provenance_json
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.schema import UNDEFINED, undefined_count

VERDICTS = ("fail", "pass", "off_topic")
UNDO_DEPTH = 100


class CachedModel:
    """A model under test (``tested_models``) that answers each distinct text once (pages
    re-score the tree)."""

    def __init__(self, model):
        self.model = as_tested(model)
        self.model_id, self.revision = self.model.model_id, self.model.revision
        self.kind, self.labels = self.model.kind, self.model.labels
        self.answers: dict[str, tuple[str, object]] = {}

    def _answers(self, texts: list[str]) -> list[tuple[str, object]]:
        new = [t for t in dict.fromkeys(texts) if t not in self.answers]
        if new:
            if self.kind == "raw":
                outputs, values = self.model.outputs_and_scores(new)
            else:
                outputs, values = self.model.predict_with_probabilities(new)
            self.answers.update(zip(new, zip(outputs, np.asarray(values, float))))
        return [self.answers[t] for t in texts]

    def predict_with_probabilities(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        found = self._answers(texts)
        return ([a for a, _ in found],
                np.array([p for _, p in found]).reshape(-1, len(self.labels)))

    def outputs_and_scores(self, texts: list[str]) -> tuple[list[str], np.ndarray]:
        found = self._answers(texts)
        return [a for a, _ in found], np.array([p for _, p in found], float)

    def predict(self, texts: list[str]) -> list[str]:
        return [a for a, _ in self._answers(texts)]


@dataclass(frozen=True)
class ReviewSettings:
    """Who reviews and how suggestions are made (``prompts`` × ``completions``: AdaTest's
    plan, 8 × 12, when None)."""

    reviewer: str = "reviewer"
    seed: int = 0
    prompts: int | None = None
    completions: int | None = None
    binary_labels: tuple[str, str] | None = None
    prompt_settings: PromptSettings = PromptSettings()

    def __post_init__(self) -> None:
        if not self.reviewer.strip():
            raise LingtestError("lingtest review --reviewer: give your name (the labeler of "
                                "the rows you label)")
        for name in ("prompts", "completions"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise LingtestError(f"lingtest review --{name} {value}: must be >= 1")


def subtopic_path(topic: str, name: str) -> str:
    """``topic``/``name`` with spaces as ``%20`` (AdaTest's topic paths)."""
    name = name.strip()
    if not name or "/" in name:
        raise LingtestError(f"topic name {name!r}: give a name without '/', e.g. Cleanliness")
    path = f"{topic}/{urllib.parse.quote(name, safe='')}"
    problem = topic_problem(path)
    if problem:
        raise LingtestError(f"topic name {name!r}: {problem}")
    return path


class ReviewSession:
    """One tree under review (see the module docstring). Thread-safe: one lock around
    every read and change; generating suggestions runs outside it."""

    def __init__(self, path: str | Path, models: list,
                 generator: Callable[[], Generator] | dict[str, Callable[[], Generator]],
                 settings: ReviewSettings = ReviewSettings(), embed=None):
        if not models:
            raise LingtestError("lingtest review: no model under test; name one with --model")
        self.path = Path(path)
        self.tree = read_tree(self.path)
        self.models = [CachedModel(m) for m in models]  # the driving model first
        self.model_ids = [m.model_id for m in self.models]  # as named, for the page's menu
        # generator name → factory; loaded on first use and kept (``load_generator``)
        self.generators = generator if isinstance(generator, dict) else {"generator": generator}
        self.generator_name = next(iter(self.generators))
        self._loaded: dict[str, Generator] = {}
        self._loading = threading.Lock()
        self._busy: set[str] = set()  # topics whose round of suggestions is being made
        self.topic_names: dict[str, list[str]] = {}  # suggested subtopic names per topic
        self.topic_rounds: dict[str, int] = {}
        self.listeners: list[Callable[[TestTree], None]] = []  # told of each saved tree
        self.settings = settings
        self.embed = CachedEmbed(embed) if embed is not None else None
        self.history: list[tuple[str, TestTree]] = []
        self.suggestions: dict[str, pd.DataFrame] = {}
        self.rounds: dict[str, int] = {}
        self.recent: str | None = None  # the row the last change filed or changed
        self.lock = threading.RLock()

    # ------------------------------------------------------------------ reading
    @property
    def generator(self) -> Generator:
        return self.load_generator(self.generator_name)

    def load_generator(self, name: str) -> Generator:
        """Generator ``name``, loaded once (one load at a time; requests wait for it)."""
        with self._loading:
            if name not in self._loaded:
                self._loaded[name] = self.generators[name]()
            return self._loaded[name]

    @property
    def driving(self) -> CachedModel:
        return self.models[0]

    def choose(self, model: str | None = None, generator: str | None = None) -> None:
        """Switch the driving model (every topic's suggestions re-ranked by its scores) and
        the generator of the next round; an unknown name is refused naming the choices."""
        with self.lock:
            if model is not None and model not in self.model_ids:
                raise LingtestError(f"driving model {model!r}: not under test here; choose "
                                    f"one of {', '.join(self.model_ids)} (or restart with "
                                    f"--model {model})")
            if generator is not None and generator not in self.generators:
                raise LingtestError(f"generator {generator!r}: not named at start; choose one "
                                    f"of {', '.join(self.generators)} (or restart with "
                                    f"--generator {generator})")
            if model is not None and model != self.driving.model_id:
                self.models.sort(key=lambda m: m.model_id != model)
                column = score_column(model)
                self.suggestions = {
                    t: s.sort_values(column, ascending=False, kind="stable")
                    for t, s in self.suggestions.items()}
            if generator is not None:
                self.generator_name = generator

    def scored_tests(self) -> pd.DataFrame:
        """Every labelled test row with each model's output, score and verdict
        (``<model> output|score|verdict``), indexed by row id."""
        frame = self.tree.frame
        cases = row_cases(frame, self.settings.binary_labels)
        out = pd.DataFrame(index=pd.Index(cases["case_id"], dtype=object))
        for model in self.models:
            results = score_cases(cases, model).set_index("case_id")
            out[f"{model.model_id} output"] = results["output"]
            out[score_column(model.model_id)] = results["score"]
            out[f"{model.model_id} verdict"] = results["verdict"]
        out["expectation"] = cases.set_index("case_id")["expectation"]
        return out

    def children(self, topic: str) -> list[str]:
        """The direct subtopics of ``topic``, in order of first appearance."""
        depth = topic.count("/") + 1
        found = []
        for t in self.tree.topics():
            if t != topic and is_subtopic(topic, t):
                child = "/".join(t.split("/")[:depth + 1])
                if child not in found:
                    found.append(child)
        return found

    def view(self, topic: str) -> dict:
        """What the page for ``topic`` shows."""
        with self.lock:
            self._topic(topic)
            frame = self.tree.frame
            scored = self.scored_tests()
            first = self.models[0].model_id
            verdicts = scored[f"{first} verdict"].reindex(frame.index)  # the driving model's
            folders = []
            for child in self.children(topic):
                under = [is_subtopic(child, t) for t in frame["topic"]]
                folders.append({"path": child, "name": topic_name(child),
                                "fail": int((verdicts[under] == "fail").sum()),
                                "pass": int((verdicts[under] == "pass").sum()),
                                "undefined": undefined_count(verdicts[under])})
            tests = []
            here = frame[(frame["topic"] == topic) & (frame["label"] != "topic_marker")]
            for rid, row in here.iterrows():
                item = {"id": rid, "input": row["input"], "input_b": row.get(INPUT_B, ""),
                        "label": row["label"],
                        "output": row["output"], "labeler": row["labeler"],
                        "expected": "", "models": []}
                if rid in scored.index:
                    item["expected"] = scored.at[rid, "expectation"]
                    for model in self.models:
                        score = scored.at[rid, score_column(model.model_id)]
                        item["models"].append({
                            "id": model.model_id,
                            "output": scored.at[rid, f"{model.model_id} output"],
                            "score": _score(score),
                            "verdict": scored.at[rid, f"{model.model_id} verdict"]})
                tests.append(item)
            tests.sort(key=lambda t: (t["label"] not in TEST_LABELS,
                                      -(t["models"][0]["score"] or 0) if t["models"] else 0))
            parents = [{"path": p, "name": topic_name(p) if p else "root"}
                       for p in _ancestors(topic)]
            suggestions = self.suggestions.get(topic)
            return {"topic": topic, "name": topic_name(topic) if topic else "root",
                    "parents": parents, "folders": folders, "tests": tests,
                    "description": self.tree.description(topic),
                    "topics": [t for t in self.tree.topics()],
                    "models": [m.model_id for m in self.models],
                    "labels": list(self.models[0].labels),
                    "model_ids": self.model_ids, "driving": first,
                    "generators": list(self.generators), "generator": self.generator_name,
                    "topic_names": self.topic_names.get(topic, []),
                    "busy": topic in self._busy,
                    "suggestions": [] if suggestions is None else
                    _suggestion_items(suggestions, self.models),
                    "suggested": suggestions is not None,
                    "pair_topic": is_pair_topic(self.tree, topic),
                    "round": self.rounds.get(topic, 0),
                    "undo": self.history[-1][0] if self.history else None,
                    "recent": self.recent,
                    "path": str(self.path), "reviewer": self.settings.reviewer}

    def preview(self, topic: str, text: str) -> list[dict]:
        """Each model's output and failure score for a text being typed (the label the
        topic's nearest tests ask for: ``label_model``); for a template, its worst
        expansion per model (AdaTest scores a template by its worst)."""
        text = " ".join(text.split())
        if not text:
            return []
        texts = expand_template(text)
        with self.lock:
            ranked = rank_suggestions(pd.DataFrame({"input": texts}), self.tree, topic,
                                      self.models, self.settings.binary_labels, self.embed)
        items = _suggestion_items(ranked, self.models)
        worst = []
        for k, _ in enumerate(self.models):
            cell = dict(max((item["models"][k] for item in items),  # an undefined one last
                            key=lambda m: -np.inf if m["score"] is None else m["score"]))
            if len(texts) > 1:
                cell["output"] = f"{cell['output']} (worst of {len(texts)})"
            worst.append(cell)
        return worst

    # ------------------------------------------------------------------ suggestions
    def _claim(self, key: str, what: str) -> None:
        """Mark ``key`` busy, or refuse: one round per topic at a time (two tabs, a double
        click)."""
        if key in self._busy:
            raise LingtestError(f"{what} are being made already (another tab or a second "
                                "click); wait for them, then reload the page")
        self._busy.add(key)

    def suggest(self, topic: str, pairs: bool | None = None) -> int:
        """A new round of suggestions for ``topic`` (AdaTest's prompts, the chosen generator,
        dedupe), ranked by the driving model's failure score; returns how many. ``pairs``
        (default: whether most of the topic's tests are invariance pairs) suggests pairs
        ranked by the equality score (``pairs``)."""
        with self.lock:
            self._topic(topic)
            self._claim(topic, f"suggestions for {topic_name(topic) or 'root'}")
        try:
            return self._suggest(topic, pairs)
        finally:
            with self.lock:
                self._busy.discard(topic)

    def _suggest(self, topic: str, pairs: bool | None) -> int:
        with self.lock:
            round_no = self.rounds.get(topic, 0) + 1
            tree, seed = self.tree, self.settings.seed + 1000 * (round_no - 1)
            s = self.settings
            scores = prompt_scores(tree, self.driving, s.binary_labels)
            pairs = is_pair_topic(tree, topic) if pairs is None else pairs
            name = self.generator_name
        generator = self.load_generator(name)
        generator = pair_generator(generator) if pairs else generator
        items = build_prompts(tree, topic, np.random.default_rng(seed), s.prompt_settings,
                              repetitions=s.prompts, scores=scores,
                              embed=self.embed if s.prompt_settings.prompt_diversity else None,
                              pairs=pairs)
        texts = prompt_texts(items, topic)
        n = s.completions or max(1, s.prompt_settings.max_suggestions // max(1, len(texts)))
        made = suggestions_frame(texts, generator.complete(texts, n, seed),
                                 generator.generator_id, seed)
        with self.lock:
            if pairs:
                ranked = rank_pairs(split_pairs(made, self.tree, topic), topic, self.models)
            else:
                ranked = rank_suggestions(dedupe(made, self.tree, topic), self.tree, topic,
                                          self.models, s.binary_labels, self.embed)
            ranked["sid"] = [f"{round_no}-{k}" for k in range(len(ranked))]
            ranked["round"] = round_no
            self.suggestions[topic], self.rounds[topic] = ranked, round_no
            return len(ranked)

    def suggest_topics(self, topic: str, count: int = 10) -> list[str]:
        """Up to ``count`` subtopic names for ``topic`` from the chosen generator
        (``topic_suggestions``), none an existing subtopic's; each creatable in one click."""
        key = f"topics:{topic}"
        with self.lock:
            self._topic(topic)
            self._claim(key, f"subtopic names for {topic_name(topic) or 'root'}")
        try:
            with self.lock:
                tree, name = self.tree, self.generator_name
                round_no = self.topic_rounds.get(topic, 0) + 1
                existing = [topic_name(t) for t in self.children(topic)]
            s = self.settings
            names = suggest_topic_names(
                tree, topic, self.load_generator(name), s.seed + 1000 * (round_no - 1),
                existing, count, settings=s.prompt_settings,
                embed=self.embed if s.prompt_settings.prompt_diversity else None)
            with self.lock:
                self.topic_names[topic], self.topic_rounds[topic] = names, round_no
            return names
        finally:
            with self.lock:
                self._busy.discard(key)

    # ------------------------------------------------------------------ changes
    def _change(self, what: str, tree: TestTree, recent: str | None = None) -> None:
        self.history = [*self.history, (what, self.tree)][-UNDO_DEPTH:]
        self.tree, self.recent = tree, recent
        write_tree(tree, self.path)
        self._saved()

    def _saved(self) -> None:
        for listener in self.listeners:  # quick ones (a recorder marks itself due)
            listener(self.tree)

    def _frame(self, frame: pd.DataFrame) -> TestTree:
        t = self.tree
        return TestTree(frame, t.source, t.lineterminator, t.index_name)

    def _labelled_rows(self, topic: str, text: str, verdict: str, pair: bool = False,
                       **provenance) -> dict[str, dict]:
        """Row id → row for a filed text: one row per expansion of a template
        (``templates``), labelled ``verdict`` with the first model's output; a raw-score
        model's rows state their expectation (``should score below 0.5``); ``pair``: the
        text is ``first ~ second``, an invariance test."""
        if verdict not in VERDICTS:
            raise LingtestError(f"verdict {verdict!r}: use one of {', '.join(VERDICTS)}")
        text = " ".join(text.split())
        if not text:
            raise LingtestError("an empty input is no test; type the text first")
        if pair:
            return self._pair_row(topic, text, verdict, provenance)
        texts = expand_template(text)
        if len(texts) > 1:
            provenance["template"] = text
        first = self.models[0]
        outputs = first.predict(texts)
        if verdict != "off_topic":
            _refuse_undefined(first.model_id, texts, outputs)
        rows = {}
        for expansion, output in zip(texts, outputs):
            row = {"topic": topic, "input": expansion, "output": output, "label": verdict,
                   "labeler": self.settings.reviewer, "description": "",
                   PROVENANCE: provenance_json(**provenance)}
            if first.kind == "raw":
                row[EXPECTATION_COLUMN] = SCORE_BELOW.format(threshold=RAW_THRESHOLD)
            rows[row_id(topic, expansion)] = row
        return rows

    def _pair_row(self, topic: str, text: str, verdict: str, provenance: dict
                  ) -> dict[str, dict]:
        first, tilde, second = (part.strip() for part in text.partition("~"))
        if not tilde or not first or not second:
            raise LingtestError(f"pair {text!r}: write the two inputs as 'first ~ second'")
        outputs = self.models[0].predict([first, second])
        if verdict != "off_topic":
            _refuse_undefined(self.models[0].model_id, [first, second], outputs)
        row = {"topic": topic, "input": first, INPUT_B: second, "output": "|".join(outputs),
               "label": verdict, "labeler": self.settings.reviewer, "description": "",
               PROVENANCE: provenance_json(**provenance)}
        return {row_id(topic, f"{first}\n{second}"): row}

    def accept(self, topic: str, sid: str, verdict: str, text: str | None = None) -> str:
        """File suggestion ``sid`` (edited to ``text`` if given) as fail / pass / off_topic:
        ``output`` = the first model's answer, ``label`` = the verdict. Returns the (first)
        row id."""
        with self.lock:
            shown = self.suggestions.get(topic)
            if shown is None or sid not in set(shown["sid"]):
                raise LingtestError(f"suggestion {sid!r} of {topic!r} is not shown any more; "
                                    "reload the page")
            s = shown[shown["sid"] == sid].iloc[0]
            pair = bool(s.get(INPUT_B, ""))
            shown_text = f"{s['input']} ~ {s[INPUT_B]}" if pair else s["input"]
            text = shown_text if text is None else text
            fields = {"round": int(s["round"]), "prompt_id": s["prompt_id"],
                      "generator": s["generator"], "seed": int(s["seed"])}
            if " ".join(text.split()) != shown_text:
                fields["edited_from"] = shown_text
            rows = self._labelled_rows(topic, text, verdict, pair, **fields)
            grown, _ = append_reviewed(self.tree, rows)
            rid = next(iter(rows))
            self._change(f"file {_what(rows)} as {verdict}", grown, rid)
            self.suggestions[topic] = shown[shown["sid"] != sid]
            return rid

    def add_test(self, topic: str, text: str, verdict: str) -> str:
        """A test typed in by the reviewer (a template: one per expansion), labelled like an
        accepted suggestion."""
        with self.lock:
            self._topic(topic)
            rows = self._labelled_rows(topic, text, verdict, written=True)
            grown, _ = append_reviewed(self.tree, rows)
            rid = next(iter(rows))
            self._change(f"add {_what(rows)} as {verdict}", grown, rid)
            return rid

    def _topic(self, topic: str) -> None:
        if topic and topic not in self.tree.topics():
            raise LingtestError(f"{self.path}: no topic {topic!r}; reload the page")

    def _row(self, rid: str) -> pd.Series:
        if rid not in self.tree.frame.index:
            raise LingtestError(f"{self.path}: no row {rid!r}; reload the page")
        return self.tree.frame.loc[rid]

    def set_expected(self, rid: str, label: str) -> None:
        """The test should output ``label``: written as AdaTest does a passing test
        (``output`` = label, ``label`` = pass)."""
        with self.lock:
            row = self._row(rid)
            if row["label"] not in TEST_LABELS:
                raise LingtestError(f"row {rid} is no test ({row['label']!r}); label it first")
            labels = self.models[0].labels
            if not labels:
                raise LingtestError(f"{self.models[0].model_id} is a raw-score model: its "
                                    "tests expect a low score, not an output")
            if label not in labels:
                raise LingtestError(f"expected output {label!r}: use one of {labels}")
            frame = self.tree.frame.copy()
            frame.loc[rid, ["output", "label", "labeler"]] = [label, "pass",
                                                              self.settings.reviewer]
            self._change(f"expect {label} for {row['input']!r}", self._frame(frame), rid)

    def move(self, rid: str, topic: str) -> None:
        with self.lock:
            row = self._row(rid)
            self._topic(topic)
            frame = self.tree.frame.copy()
            frame.loc[rid, "topic"] = topic
            self._change(f"move {row['input']!r} to {topic_name(topic) or 'root'}",
                         self._frame(frame), rid)

    def delete(self, rid: str) -> None:
        with self.lock:
            row = self._row(rid)
            self._change(f"delete {row['input']!r}", self._frame(self.tree.frame.drop(rid)))

    def create_topic(self, parent: str, name: str) -> str:
        with self.lock:
            path = subtopic_path(parent, name)
            if path in self.tree.topics():
                raise LingtestError(f"topic {path!r} exists already")
            frame = ensure_topic_markers(self.tree.frame, [path], labeler=self.settings.reviewer)
            self._change(f"create {name.strip()!r}", self._frame(frame))
            offered = self.topic_names.get(parent, [])
            self.topic_names[parent] = [n for n in offered if n != name.strip()]
            return path

    def rename_topic(self, topic: str, name: str) -> str:
        """``topic`` and everything under it moved to ``<parent>/<name>``."""
        with self.lock:
            if not topic or topic not in self.tree.topics():
                raise LingtestError(f"{self.path}: no topic {topic!r} to rename")
            path = subtopic_path(topic.rsplit("/", 1)[0], name)
            if path == topic:
                return path
            if path in self.tree.topics():
                raise LingtestError(f"topic {path!r} exists already; pick another name")
            frame = self.tree.frame.copy()
            frame["topic"] = [path + t[len(topic):] if is_subtopic(topic, t) else t
                              for t in frame["topic"]]
            self._change(f"rename {topic_name(topic)!r} to {name.strip()!r}",
                         self._frame(frame))
            def renamed(t: str) -> str:
                return path + t[len(topic):] if is_subtopic(topic, t) else t

            self.suggestions = {renamed(t): v for t, v in self.suggestions.items()}
            self.rounds = {renamed(t): v for t, v in self.rounds.items()}
            self.topic_names = {renamed(t): v for t, v in self.topic_names.items()}
            return path

    def delete_topic(self, topic: str) -> None:
        """``topic``, its subtopics and every row in them."""
        with self.lock:
            if not topic or topic not in self.tree.topics():
                raise LingtestError(f"{self.path}: no topic {topic!r} to delete")
            frame = self.tree.frame
            keep = [not is_subtopic(topic, t) for t in frame["topic"]]
            self._change(f"delete topic {topic_name(topic)!r}", self._frame(frame[keep]))

    def undo(self) -> str:
        """Put back the tree as it was before the last change (and write it)."""
        with self.lock:
            if not self.history:
                raise LingtestError("nothing to undo")
            what, before = self.history[-1]
            self.history = self.history[:-1]
            self.tree, self.recent = before, None
            write_tree(before, self.path)
            self._saved()
            return what


def _what(rows: dict[str, dict]) -> str:
    """How the undo button names a filing: the input, or a template's count."""
    first = next(iter(rows.values()))
    return repr(first["input"]) if len(rows) == 1 else \
        f"{len(rows)} tests of {json.loads(first[PROVENANCE])['template']!r}"


def _ancestors(topic: str) -> list[str]:
    parts = topic.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def _refuse_undefined(model_id: str, texts: list[str], outputs: list[str]) -> None:
    """An error when the driving model gave one of ``texts`` no label: a row's output is the
    label its test expects (right) or forbids (wrong), and ``undefined`` is neither."""
    silent = [t for t, o in zip(texts, outputs) if o == UNDEFINED]
    if silent:
        raise LingtestError(f"{model_id} gave {silent[0]!r} no label (undefined), so it cannot "
                            "be filed as right or wrong; make a model that labels it the "
                            "driving one, or file it as off topic")


def _suggestion_items(ranked: pd.DataFrame, models: list) -> list[dict]:
    items = []
    for _, s in ranked.iterrows():
        items.append({"sid": s.get("sid", ""), "input": s["input"],
                      "input_b": s.get(INPUT_B, "") or "",
                      "models": [{"id": m.model_id, "output": s[f"{m.model_id} output"],
                                  "score": _score(s[score_column(m.model_id)]),
                                  "verdict": ""} for m in models]})
    return items


def _score(value: object) -> float | None:
    """A failure score for the page and its JSON: None where the model gave no answer."""
    return None if pd.isna(value) else float(value)
