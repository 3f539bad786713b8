"""Subtopic names suggested by the generator, as AdaTest's browser does in its "topics" mode
(microsoft/adaptive-testing v0.3.5: ``PromptBuilder.__call__(suggest_topics=True)`` picks
the prompt's rows, ``TextCompletionGenerator._create_prompt_strings(mode="topics")`` writes
the prompt, ``TestTreeBrowser._generate_suggestions`` cleans and dedupes the names).

- **Rows**: topic markers only (the root's excluded); ×100 for each level of the focus path
  the marker's topic starts with (prefix + ``/``: the focus topic's descendants), ×100 more
  for the focus topic's direct children; every score 1 (AdaTest does not score topics).
  The picks then follow ``prompts._pick`` (random slots, skips, diversity over the names'
  MiniLM embeddings when given).
- **Prompt**: one line per pick, ``A subtopic of "<parent>" is "<name>"``, ending with
  ``A subtopic of "<focus>" is "`` for the LM to complete (topic paths shown unquoted, as a
  person reads them).
- **Names**: ``/`` becomes `` or ``, spaces collapse; repeats (case-insensitive), the focus
  topic's existing subtopics and names a topic path cannot hold are dropped.
"""
from __future__ import annotations

import urllib.parse

import numpy as np

from lingtest.tasks.adaptive.generators import Generator
from lingtest.tasks.adaptive.prompts import Embed, PromptSettings, _pick, cosine_similarities
from lingtest.tasks.adaptive.tree import TestTree, topic_name, topic_problem

MAX_NAME_CHARS = 40  # a longer completion is a sentence, not a topic name


def topic_weights_for_names(topics: list[str], topic: str) -> np.ndarray:
    """AdaTest's topic weight in "topics" mode for each topic marker's path."""
    arr = np.array(topics, dtype=object)
    weights = np.ones(len(topics))
    parts = topic.split("/")
    for i in range(1, len(parts)):
        prefix = "/".join(parts[:i + 1]) + "/"
        weights *= 1 + 99 * np.array([t.startswith(prefix) for t in arr], dtype=float)
    weights *= 1 + 99 * np.array([t.rsplit("/", 1)[0] == topic for t in arr], dtype=float)
    weights *= np.array([t != "" and "__suggestions__" not in t for t in arr], dtype=float)
    top = weights.max() if len(weights) else 0.0
    return weights / top if top > 0 else weights


def readable(path: str) -> str:
    return urllib.parse.unquote(path) or "/"


def topic_prompts(tree: TestTree, topic: str, rng: np.random.Generator, repetitions: int,
                  settings: PromptSettings = PromptSettings(),
                  embed: Embed | None = None) -> list[str]:
    """``repetitions`` prompt strings asking for a subtopic name of ``topic``."""
    frame = tree.frame
    markers = sorted(set(frame.loc[frame["label"] == "topic_marker", "topic"]))
    weights = topic_weights_for_names(markers, topic)
    ask = f'A subtopic of "{readable(topic)}" is "'
    if weights.sum() == 0:  # no topic to show: the bare question (zero-shot)
        return [ask] * repetitions
    ids = np.array(markers, dtype=object)
    similarities = None
    if embed is not None and settings.prompt_diversity:
        similarities = cosine_similarities(np.asarray(embed([topic_name(t) for t in markers]),
                                                      dtype=np.float64))
    texts = []
    for _ in range(repetitions):
        picks = _pick(ids, ids, weights, np.ones(len(ids)), similarities, topic, rng, settings)
        lines = [f'A subtopic of "{readable(ids[k].rsplit("/", 1)[0])}" is '
                 f'"{topic_name(ids[k])}"' for k in reversed(picks)]
        texts.append("\n".join([*lines, ask]))
    return texts


def clean_names(completions: list[list[str]], existing: list[str],
                limit: int | None = None) -> list[str]:
    """The usable names among ``completions``, first occurrence first (see the docstring)."""
    seen = {name.casefold() for name in existing}
    names = []
    for text in (t for batch in completions for t in batch):
        name = " ".join(text.replace("/", " or ").split()).strip(" .,:;'\"")
        key = name.casefold()
        if not name or len(name) > MAX_NAME_CHARS or key in seen:
            continue
        if topic_problem("/" + urllib.parse.quote(name, safe="")):
            continue
        seen.add(key)
        names.append(name)
    return names[:limit] if limit else names


def suggest_topic_names(tree: TestTree, topic: str, generator: Generator, seed: int,
                        existing: list[str], count: int = 10, prompts: int = 3,
                        completions: int = 6, settings: PromptSettings = PromptSettings(),
                        embed: Embed | None = None) -> list[str]:
    """Up to ``count`` new subtopic names for ``topic`` (``prompts`` × ``completions`` drawn)."""
    texts = topic_prompts(tree, topic, np.random.default_rng(seed), prompts, settings, embed)
    return clean_names(generator.complete(texts, completions, seed), existing, count)
