"""AdaTest test trees in AdaTest's own CSV layout (microsoft/adaptive-testing v0.3.5).

A tree file is a CSV whose first column is unnamed and holds each row's id (a uuid hex),
followed by ``topic,input,output,label,labeler,description`` and any further columns:
one ``<model> score`` column per scored model, and whatever else a tree carries
(``author``, ``test_ids``, raw outputs, lingtest's ``input_b`` for invariance tests).

- ``topic`` is a path: ``""`` is the root, ``/A/B`` a subtopic; AdaTest writes spaces as
  ``%20`` (older trees, e.g. ``abstract_capabilities.csv``, keep plain spaces: both load).
- ``label`` is ``pass`` / ``fail`` (a labelled test), ``topic_marker`` (one row per topic,
  carrying the topic's ``description``), ``off_topic`` (an input that does not belong to its
  topic), ``""`` (not labelled yet) or ``Unknown`` (AdaTest's own test trees use it).

Every cell is read as text (``dtype=str, keep_default_na=False``) so nothing becomes NaN or a
float; writing back keeps row ids, row and column order, unknown columns, multi-line inputs
and the file's line ending, so an unchanged tree that AdaTest (pandas) wrote is written
byte for byte as it was read.
AdaTest's own loader is not lossless (it re-sorts rows by id, drops duplicate rows and
rewrites topics); this one changes nothing and refuses malformed files instead.
"""
from __future__ import annotations

import csv
import io
import os
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lingtest.tasks.core.errors import InputFormatError

BASE_COLUMNS = ("topic", "input", "output", "label", "labeler", "description")
TEST_LABELS = ("pass", "fail")
LABELS = ("pass", "fail", "topic_marker", "off_topic", "", "Unknown")
SCORE_SUFFIX = " score"
# Imputed topic markers get ids derived from their topic, so rebuilding a tree is repeatable.
_MARKER_NAMESPACE = uuid.UUID("5b0f6a4e-2f7c-4f1e-9a51-6c0a3d1e7a11")


@dataclass
class TestTree:
    """One tree: ``frame`` indexed by row id (str), every cell a str, columns in file order;
    ``lineterminator`` and ``index_name`` are what the file used, so writing reproduces it."""

    __test__ = False  # not a pytest test class, whatever its name

    frame: pd.DataFrame
    source: str = "<memory>"
    lineterminator: str = "\n"
    index_name: str | None = None

    @property
    def tests(self) -> pd.DataFrame:
        """The labelled tests (pass / fail rows)."""
        return self.frame[self.frame["label"].isin(TEST_LABELS)]

    @property
    def score_columns(self) -> list[str]:
        return [c for c in self.frame.columns if c.endswith(SCORE_SUFFIX)]

    def topics(self) -> list[str]:
        """Every topic of the tree, markers and tests alike, in order of first appearance."""
        return list(dict.fromkeys(self.frame["topic"]))

    def description(self, topic: str) -> str:
        """The description on the topic's marker row ("" when it has none)."""
        marks = self.frame[(self.frame["topic"] == topic) & (self.frame["label"] == "topic_marker")]
        return str(marks["description"].iloc[0]) if len(marks) else ""


# --------------------------------------------------------------------------- topics

def is_subtopic(topic: str, candidate: str) -> bool:
    """True when ``candidate`` is ``topic`` or lies under it (AdaTest's ``is_subtopic``)."""
    if len(topic) == len(candidate):
        return topic == candidate
    return candidate.startswith(topic) and candidate[len(topic)] == "/"


def parent_topics(topic: str) -> list[str]:
    """The root, every ancestor and the topic itself: ``/A/B`` → ``["", "/A", "/A/B"]``."""
    parts = topic.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def topic_name(topic: str) -> str:
    """The last path part as a person reads it (``%20`` → space)."""
    return urllib.parse.unquote(topic.rsplit("/", 1)[-1])


def topic_problem(topic: str) -> str | None:
    """Why ``topic`` is not a tree path, or None when it is one."""
    if topic == "":
        return None
    if not topic.startswith("/"):
        return f"topic {topic!r} does not start with '/'"
    if topic.endswith("/") or "//" in topic:
        return f"topic {topic!r} has an empty path part"
    if "\n" in topic or "\r" in topic:
        return f"topic {topic!r} holds a line break"
    return None


# --------------------------------------------------------------------------- reading

def _record_lines(text: str) -> list[int]:
    """The file line each CSV record starts on (1-based; multi-line cells counted)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    starts, previous_end = [], 0
    for _ in reader:
        starts.append(previous_end + 1)
        previous_end = reader.line_num
    return starts


def _line_terminator(text: str) -> str:
    first = text.find("\n")
    return "\r\n" if first > 0 and text[first - 1] == "\r" else "\n"


def parse_tree(text: str, source: str = "<memory>") -> TestTree:
    """A tree from CSV text; a malformed one raises InputFormatError naming line and fix."""
    if not text.strip():
        raise InputFormatError(source, 1, "the test tree file is empty",
                               "an AdaTest tree starts with the header "
                               "',topic,input,output,label,labeler,description'")
    try:
        frame = pd.read_csv(io.StringIO(text, newline=""), index_col=0, dtype=str,
                            keep_default_na=False, na_filter=False)
    except (pd.errors.ParserError, ValueError, csv.Error) as exc:
        line = _parser_error_line(str(exc))
        raise InputFormatError(source, line, f"not a well-formed CSV ({exc})",
                               "every row needs as many comma-separated cells as the header; "
                               "quote cells holding commas, quotes or line breaks") from None
    lines = _record_lines(text)
    missing = [c for c in BASE_COLUMNS if c not in frame.columns]
    if missing:
        raise InputFormatError(source, 1, f"the header lacks the column(s) {missing}",
                               "an AdaTest tree has an unnamed id column, then "
                               "topic,input,output,label,labeler,description")
    duplicated_columns = [c for c in frame.columns if "." in c and c.rsplit(".", 1)[0]
                          in frame.columns and c.rsplit(".", 1)[1].isdigit()]
    if duplicated_columns:
        raise InputFormatError(source, 1, f"the header repeats a column ({duplicated_columns[0]})",
                               "give every column a distinct name")
    frame.index = frame.index.map(str)
    _check_rows(frame, lines, source)
    return TestTree(frame, source, _line_terminator(text), frame.index.name)


def _parser_error_line(message: str) -> int | None:
    words = message.replace(",", " ").split()
    for before, word in zip(words, words[1:]):
        if before == "line" and word.isdigit():
            return int(word)
    return None


def _check_rows(frame: pd.DataFrame, lines: list[int], source: str) -> None:
    def line_of(position: int) -> int | None:
        return lines[position + 1] if position + 1 < len(lines) else None

    ids = list(frame.index)
    seen: dict[str, int] = {}
    for position, row_id in enumerate(ids):
        if row_id == "":
            raise InputFormatError(source, line_of(position), "a row has no id in the first column",
                                   "give it a fresh id, e.g. python -c 'import uuid; "
                                   "print(uuid.uuid4().hex)'")
        if row_id in seen:
            raise InputFormatError(source, line_of(position),
                                   f"row id {row_id!r} repeats the row on line "
                                   f"{line_of(seen[row_id])}",
                                   "give one of the two rows a fresh uuid, or delete it")
        seen[row_id] = position
    for position, label in enumerate(frame["label"]):
        if label not in LABELS:
            raise InputFormatError(source, line_of(position), f"label {label!r} is not an AdaTest "
                                   "label", f"use one of {', '.join(map(repr, LABELS))}")
    for position, topic in enumerate(frame["topic"]):
        problem = topic_problem(topic)
        if problem:
            raise InputFormatError(source, line_of(position), problem,
                                   "topics are paths such as /Rooms or /Facilities/Pool; "
                                   "the root topic is the empty string")


def read_tree(path: str | os.PathLike) -> TestTree:
    """Read an AdaTest CSV file (see the module docstring)."""
    from lingtest.tasks.core.io import read_input_text

    path = Path(path)
    if not path.exists():
        raise InputFormatError(path, None, "no such test tree file",
                               "check the path (the mirror's trees are under adatest/)")
    return parse_tree(read_input_text(path), str(path))


# --------------------------------------------------------------------------- writing

def tree_csv(tree: TestTree) -> str:
    """The CSV text of ``tree``: same layout, ids, order and line ending it was read with."""
    frame = tree.frame.copy()
    frame.index.name = tree.index_name
    return frame.to_csv(lineterminator=tree.lineterminator)


def write_tree(tree: TestTree, path: str | os.PathLike) -> Path:
    """Write ``tree`` (atomically: a temporary file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(tree_csv(tree).encode("utf-8"))
    os.replace(partial, path)
    return path


# --------------------------------------------------------------------------- building

def marker_id(topic: str) -> str:
    """The id of an imputed topic marker: a uuid5 of its topic, stable across runs."""
    return uuid.uuid5(_MARKER_NAMESPACE, topic).hex


def ensure_topic_markers(frame: pd.DataFrame, topics: list[str] | None = None,
                         labeler: str = "imputed") -> pd.DataFrame:
    """``frame`` with a topic_marker row for every topic (of ``topics``, default all of the
    frame's) and ancestor lacking one (AdaTest's ``ensure_topic_markers``), appended after
    the existing rows with stable ids."""
    marked = set(frame.loc[frame["label"] == "topic_marker", "topic"])
    added = []
    for topic in dict.fromkeys(frame["topic"] if topics is None else topics):
        for parent in parent_topics(topic):
            if parent not in marked:
                marked.add(parent)
                added.append({**{c: "" for c in frame.columns}, "topic": parent,
                              "label": "topic_marker", "labeler": labeler})
    if not added:
        return frame
    markers = pd.DataFrame(added, columns=frame.columns,
                           index=pd.Index([marker_id(m["topic"]) for m in added], dtype=object))
    return pd.concat([frame, markers])


def new_tree(rows: list[dict[str, str]], ids: list[str], columns: list[str] | None = None,
             source: str = "<memory>") -> TestTree:
    """A tree from row dicts (missing cells → ""), AdaTest's column order first."""
    extra = [c for r in rows for c in r if c not in BASE_COLUMNS]
    columns = columns or [*BASE_COLUMNS, *dict.fromkeys(extra)]
    frame = pd.DataFrame([{c: str(r.get(c, "")) for c in columns} for r in rows],
                         columns=columns, index=pd.Index(ids, dtype=object), dtype=object)
    return TestTree(frame.astype(object), source)
