"""A person's review of one AdaTest round in the Prefect UI (the form a paused flow shows).

The paused run's description is a Markdown table of the round's suggestions, ranked by the
model's failure score (highest first), with the model's output and the score; the form has one multi-select per verdict (``fail``: valid tests the model
fails, ``passing``: valid tests it passes, ``off_topic``), a ``subtopic`` the accepted tests go
under, and ``stop``. Every default is empty, so nothing enters the tree without a click.
Accepted tests are written in AdaTest's layout (``output`` = the model's output, ``label`` =
pass / fail) with ``labeler`` = the reviewer and a ``provenance`` cell (round, prompt id,
generator, seed).

A suggestion the model gave no label (output ``undefined``, score NaN) is listed last with
an undefined score; picked under ``fail`` or ``passing`` it is not written (its output is no
label a test could expect or forbid) and the round's counts say how many (``undefined``).
"""
from __future__ import annotations

from typing import List, Literal

import pandas as pd
import pydantic
from prefect.input import RunInput

import numpy as np

from lingtest.tasks.adaptive.generators import Generator, dedupe, suggestions_frame
from lingtest.tasks.adaptive.label_model import rank_suggestions
from lingtest.tasks.adaptive.prompts import Embed, PromptSettings, build_prompts, prompt_texts
from lingtest.tasks.adaptive.review import PROVENANCE, append_accepted, prompt_scores, row_id
from lingtest.tasks.adaptive.tree import TestTree, topic_problem
from lingtest.tasks.core.cases import provenance_json
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.schema import UNDEFINED

VERDICT_FIELDS = ("fail", "passing", "off_topic")
_TREE_LABEL = {"fail": "fail", "passing": "pass", "off_topic": "off_topic"}


def suggest(tree: TestTree, topic: str, generator: Generator, model, seed: int,
            prompts: int | None = None, completions: int | None = None,
            settings: PromptSettings = PromptSettings(), top: int = 20,
            binary_labels: tuple[str, str] | None = None,
            embed: Embed | None = None) -> pd.DataFrame:
    """A round's suggestions for a person: prompts → generate → dedupe → every suggestion
    scored on ``model`` (``label_model.rank_suggestions``: the label the topic's nearest tests
    ask for, ``output`` and failure ``score``) → the ``top`` highest scores, highest first
    (a person reads a table, not a hundred lines; all prompts × completions compete).
    ``embed`` is the sentence encoder behind the prompts' diversity
    (``settings.prompt_diversity``) and the nearest tests (None: the topic's label shares)."""
    problem = topic_problem(topic)
    if problem:
        raise LingtestError(f"adapt --topic: {problem}; name a tree topic such as /Rooms")
    if top < 1:
        raise LingtestError(f"adapt --top {top}: show at least 1 suggestion")
    rng = np.random.default_rng(seed)
    items = build_prompts(tree, topic, rng, settings, repetitions=prompts, embed=embed,
                          scores=prompt_scores(tree, model, binary_labels))
    texts = prompt_texts(items, topic)
    n = completions or max(1, settings.max_suggestions // max(1, len(texts)))
    shown = dedupe(suggestions_frame(texts, generator.complete(texts, n, seed),
                                     generator.generator_id, seed), tree, topic)
    return rank_suggestions(shown, tree, topic, [model], binary_labels, embed).head(top)


def _cell(text: str) -> str:
    """A Markdown table cell: pipes escaped, line breaks as spaces."""
    return str(text).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def review_markdown(suggestions: pd.DataFrame, topic: str, round_no: int, model_id: str) -> str:
    """The paused run's description: what to review and how."""
    lines = [f"### AdaTest round {round_no}: {topic}", "",
             f"Pick each suggestion the model **{_cell(model_id)}** fails under `fail`, the ones it "
             "gets right under `passing`, and inputs outside the topic under `off_topic`; "
             "anything not picked is dropped. Tick `stop` to end after this round.", "",
             "Highest failure score first (how likely the model fails the input, 0..1, "
             "against the label the topic's most similar tests ask for).", "",
             f"| # | input | {_cell(model_id)} output | failure score |", "|---|---|---|---|"]
    for number, (_, row) in enumerate(suggestions.iterrows(), 1):
        score = row.get("score", float("nan"))
        shown = (UNDEFINED if row["output"] == UNDEFINED else "") if pd.isna(score) \
            else f"{float(score):.2f}"
        lines.append(f"| {number} | {_cell(row['input'])} | {_cell(row['output'])} | {shown} |")
    return "\n".join(lines)


def review_input(options: list[str]) -> type[RunInput]:
    """The form's model: ``fail`` / ``passing`` / ``off_topic`` multi-selects over ``options``
    (the suggestions' inputs), ``subtopic`` and ``stop``; every default empty."""
    choice = Literal[tuple(options)] if options else str  # type: ignore[valid-type]
    selection = (List[choice], pydantic.Field(default_factory=list))
    return pydantic.create_model(
        "AdaptReview", __base__=RunInput,
        fail=(selection[0], pydantic.Field(default_factory=list,
                                           description="Valid tests the model fails")),
        passing=(selection[0], pydantic.Field(default_factory=list,
                                              description="Valid tests the model passes")),
        off_topic=(selection[0], pydantic.Field(default_factory=list,
                                                description="Inputs outside the topic")),
        subtopic=(str, pydantic.Field("", description="Put accepted tests under this "
                                                      "subtopic (blank: the topic itself)")),
        stop=(bool, pydantic.Field(False, description="Stop after this round")))


def apply_review(tree: TestTree, suggestions: pd.DataFrame, form, topic: str, reviewer: str,
                 round_no: int, model_id: str) -> tuple[TestTree, dict]:
    """``tree`` with the picked suggestions appended (see the module docstring) and the
    round's counts. An input picked under two verdicts, or a bad subtopic, is refused."""
    picks = {name: list(getattr(form, name)) for name in VERDICT_FIELDS}
    seen: dict[str, str] = {}
    for name, inputs in picks.items():
        for text in inputs:
            if text in seen:
                raise LingtestError(f"review round {round_no}: {text!r} is picked under both "
                                    f"{seen[text]!r} and {name!r}; pick it under one")
            seen[text] = name
    subtopic = form.subtopic.strip().strip("/")
    target = f"{topic}/{subtopic}" if subtopic else topic
    problem = topic_problem(target)
    if problem:
        raise LingtestError(f"review round {round_no} subtopic {form.subtopic!r}: {problem}; "
                            "give a name such as Cleanliness")
    by_input = suggestions.drop_duplicates("input").set_index("input")
    unknown = [t for t in seen if t not in by_input.index]
    if unknown:
        raise LingtestError(f"review round {round_no}: {unknown[0]!r} is not a suggestion of "
                            "this round; pick from the listed inputs")
    rows, undefined = {}, 0
    for text, name in seen.items():
        s = by_input.loc[text]
        if name != "off_topic" and str(s["output"]) == UNDEFINED:
            undefined += 1  # "undefined" is no label: a test cannot expect or forbid it
            continue
        rows[row_id(target, text)] = {
            "topic": target, "input": text, "output": str(s["output"]),
            "label": _TREE_LABEL[name], "labeler": reviewer, "description": "",
            PROVENANCE: provenance_json(round=round_no, prompt_id=s["prompt_id"],
                                        generator=s["generator"], seed=int(s["seed"]))}
    grown, written = append_reviewed(tree, rows)
    counts = {"round": round_no, "topic": target, "reviewer": reviewer,
              "shown": len(suggestions), **{n: len(p) for n, p in picks.items()},
              "written": len(written), "stop": bool(form.stop),
              **({UNDEFINED: undefined} if undefined else {})}
    return grown, counts


def append_reviewed(tree: TestTree, rows: dict[str, dict[str, str]]):
    """A reviewer's rows appended; unlike an oracle, a person may relabel a row they see."""
    frame = tree.frame.drop(index=[i for i in rows if i in tree.frame.index])
    return append_accepted(TestTree(frame, tree.source, tree.lineterminator, tree.index_name),
                           rows)
