"""Invariance tests suggested in pairs: two inputs the model should answer alike.

AdaTest v0.2 kept tests such as ``"{}" should have the same output as "{}"`` and its prompts
listed both values of each test; lingtest's trees keep the second input in ``input_b``. A
pair is written into a prompt as ``"first" ~ "second"`` (``prompts.pair_text``), so a
prompt of a topic of pairs reads

    "The room was clean" ~ "The room was spotless"
    "Staff were rude" ~ "The staff were impolite"
    "

and the LM completes the last line up to its line break (not the first quote: a pair holds
three more); ``parse_pair`` reads the two inputs back, and a completion that is not a pair
is dropped. Pair suggestions are ranked by AdaTest's equality score (``scoring``: above 0.5
when the model's two answers differ).
"""
from __future__ import annotations

import copy
import dataclasses
import re

import numpy as np
import pandas as pd

from lingtest.tasks.adaptive.cases import INPUT_B, INVARIANCE, to_topic
from lingtest.tasks.adaptive.scoring import score_cases, score_column
from lingtest.tasks.adaptive.tree import TestTree, is_subtopic

QUOTE = '"'
_PAIR = re.compile(r'^\s*"?(.+?)"\s*~\s*"(.+?)"?\s*$')


def parse_pair(completion: str) -> tuple[str, str] | None:
    """(first, second) of a completed pair line, or None when it is not one."""
    match = _PAIR.match(completion)
    if not match:
        return None
    first, second = (" ".join(part.split()) for part in match.groups())
    if not first or not second or first == second or QUOTE in first + second:
        return None
    return first, second


def is_pair_topic(tree: TestTree, topic: str) -> bool:
    """Whether most labelled tests under ``topic`` are pairs (its suggestions should be)."""
    tests = tree.tests
    if INPUT_B not in tests.columns:
        return False
    under = tests[[is_subtopic(topic, t) for t in tests["topic"]]]
    return bool(len(under)) and (under[INPUT_B] != "").mean() > 0.5


def pair_generator(generator):
    """The generator stopping at the line break only (a pair line holds four quotes)."""
    paired = copy.copy(generator)
    paired.sampling = dataclasses.replace(generator.sampling, stop="\n")
    return paired


def split_pairs(suggestions: pd.DataFrame, tree: TestTree, topic: str) -> pd.DataFrame:
    """Completed pair lines as ``input`` / ``input_b``, unparsable ones and pairs the topic
    holds (either way round) or the batch repeats dropped."""
    pairs = [parse_pair(str(text)) for text in suggestions["input"]]
    keep = [p is not None for p in pairs]
    out = suggestions[keep].reset_index(drop=True).copy()
    out["input"] = [p[0] for p in pairs if p is not None]
    out[INPUT_B] = [p[1] for p in pairs if p is not None]
    frame = tree.frame
    known = set()
    if INPUT_B in frame.columns:
        here = frame[frame["topic"] == topic]
        known = {frozenset((a, b)) for a, b in zip(here["input"], here[INPUT_B]) if b}
    seen, rows = set(known), []
    for a, b in zip(out["input"], out[INPUT_B]):
        key = frozenset((a, b))
        rows.append(key not in seen)
        seen.add(key)
    return out[rows].reset_index(drop=True)


def rank_pairs(pairs: pd.DataFrame, topic: str, models: list) -> pd.DataFrame:
    """``pairs`` with each model's joined answers and equality score (``<model> output`` /
    ``<model> score``; the first model's also as ``output`` / ``score``), highest first; a
    pair the model left undefined (score NaN) last."""
    cases = pd.DataFrame({"case_id": [f"pair-{k}" for k in range(len(pairs))],
                          "topic": to_topic(topic), "input": pairs["input"].tolist(),
                          INPUT_B: pairs[INPUT_B].tolist(), "expectation": INVARIANCE})
    ranked = pairs.reset_index(drop=True).copy()
    for model in models:
        scored = score_cases(cases, model)
        ranked[f"{model.model_id} output"] = scored["output"].to_numpy()
        ranked[score_column(model.model_id)] = scored["score"].to_numpy()
    first = models[0].model_id
    ranked["output"] = ranked[f"{first} output"]
    ranked["score"] = ranked[score_column(first)]
    order = np.argsort(-ranked["score"].to_numpy(), kind="stable")
    return ranked.iloc[order].reset_index(drop=True)
