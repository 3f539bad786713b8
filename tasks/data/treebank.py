"""Bracketed-tree parsing (shared with SST) and the Penn Treebank sample as a table.

Table ``ptb_trees`` (one row per parsed WSJ sentence of nltk's 10% treebank sample):

=========  ======  ==============================================================
column     dtype   meaning
=========  ======  ==============================================================
tree_id    str     ``<file stem>-<index in file>``, e.g. ``wsj_0001-000``
fileid     str     nltk file id, e.g. ``wsj_0001.mrg``
tree       str     cleaned tree on one line, e.g. ``(S (NP (NNP Mr.) ...) ...)``
n_tokens   int64   number of leaves of the cleaned tree
=========  ======  ==============================================================

Cleaning (what S²LCT's reference CFG needs): ``-NONE-`` leaves (traces, null elements)
are dropped, then every constituent left without children; labels lose function tags,
indices and gapping marks (``NP-SBJ-1`` → ``NP``, ``PP-LOC=2`` → ``PP``, ``ADVP|PRT`` →
``ADVP``) while labels that start with ``-`` (``-LRB-``, ``-RRB-``) stay whole; a node
whose only child carries the same label is replaced by that child (``(NP (NP …))`` →
``(NP …)``); the file's label-less outer bracket ``( (S …) )`` is removed. Leaves
(words) are kept verbatim, PTB escapes included.

The parser is a one-pass stack machine over ``(``, ``)`` and atoms (about 1 s for all
11 855 SST trees), reporting malformed input with the file and 1-based line.
"""
from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Union

import pandas as pd

from lingtest.tasks.core.errors import InputFormatError

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_TAG_SPLIT = re.compile(r"[-=|]")
_MRG_NAME = re.compile(r"treebank/combined/(wsj_\d+\.mrg)")


@dataclass(slots=True)
class Node:
    """A constituent: its label and its children (sub-constituents or leaf strings)."""

    label: str
    children: list[Union["Node", str]] = field(default_factory=list)


Child = Union[Node, str]


def iter_bracketed(text: str, path: str | Path, first_line: int = 1) -> Iterator[tuple[int, Node]]:
    """Yield ``(line, tree)`` for each top-level bracketed tree in ``text``.

    ``line`` is the 1-based line where the tree starts (``first_line`` is the line of
    ``text[0]``). Unbalanced brackets, atoms outside brackets and empty constituents
    raise InputFormatError naming ``path`` and the line.
    """
    fix = "every '(' needs its ')' and every node a label and at least one child"
    stack: list[Node] = []
    expect_label = False
    start_line = first_line
    for line, line_text in enumerate(text.split("\n"), start=first_line):
        for tok in _TOKEN.findall(line_text):
            if tok == "(":
                node = Node("", [])
                if stack:
                    stack[-1].children.append(node)
                else:
                    start_line = line
                stack.append(node)
                expect_label = True
            elif tok == ")":
                if not stack:
                    raise InputFormatError(path, line, "unbalanced ')' closes nothing", fix)
                node = stack.pop()
                if not node.children:
                    raise InputFormatError(path, line, f"empty constituent '({node.label})'", fix)
                expect_label = False
                if not stack:
                    yield start_line, node
            elif not stack:
                raise InputFormatError(path, line, f"text outside brackets: {tok!r}", fix)
            elif expect_label:
                stack[-1].label = tok
                expect_label = False
            else:
                stack[-1].children.append(tok)
    if stack:
        raise InputFormatError(
            path, start_line,
            f"unbalanced brackets: {len(stack)} '(' not closed (truncated tree?)", fix,
        )


def parse_one(text: str, path: str | Path, line: int) -> Node:
    """Parse ``text`` (one line) as exactly one tree; anything else is an error."""
    trees = [tree for _, tree in iter_bracketed(text, path, line)]
    if len(trees) != 1:
        raise InputFormatError(path, line, f"expected one tree on the line, found {len(trees)}",
                               "write one bracketed tree per line")
    return trees[0]


def leaves(tree: Node) -> list[str]:
    """The words of ``tree`` left to right (iterative: deep SST trees stay cheap)."""
    out: list[str] = []
    stack: list[Child] = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        else:
            stack.extend(reversed(item.children))
    return out


def to_string(tree: Child) -> str:
    """The one-line bracketed form ``(LABEL child child)``."""
    if isinstance(tree, str):
        return tree
    return "(" + " ".join([tree.label, *map(to_string, tree.children)]) + ")"


def strip_label(label: str) -> str:
    """``NP-SBJ-1`` → ``NP``; labels starting with '-' (``-LRB-``, ``-NONE-``) are kept."""
    if not label or label.startswith("-"):
        return label
    return _TAG_SPLIT.split(label, 1)[0] or label


def clean_tree(tree: Node) -> Node | None:
    """The cleaned copy of a PTB tree (see module docstring); None if nothing is left."""
    if tree.label == "-NONE-":
        return None
    kids: list[Child] = []
    for child in tree.children:
        if isinstance(child, str):
            kids.append(child)
        else:
            cleaned = clean_tree(child)
            if cleaned is not None:
                kids.append(cleaned)
    if not kids:
        return None
    node = Node(strip_label(tree.label), kids)
    while len(node.children) == 1 and isinstance(node.children[0], Node) \
            and node.children[0].label == node.label:
        node = node.children[0]
    return node


def _unwrap_root(tree: Node) -> Node:
    """Drop the label-less outer bracket of .mrg files when it wraps a single tree."""
    if tree.label == "" and len(tree.children) == 1 and isinstance(tree.children[0], Node):
        return tree.children[0]
    return tree


def read_treebank_zip(zip_path: str | Path) -> pd.DataFrame:
    """Read ``treebank.zip`` (nltk_data layout) into the ``ptb_trees`` table."""
    zip_path = Path(zip_path)
    rows: list[dict] = []
    with zipfile.ZipFile(zip_path) as archive:
        names = sorted(n for n in archive.namelist() if _MRG_NAME.fullmatch(n))
        if not names:
            raise InputFormatError(zip_path, None, "no treebank/combined/wsj_*.mrg files inside",
                                   "use nltk_data's corpora/treebank.zip")
        for name in names:
            fileid = _MRG_NAME.fullmatch(name).group(1)
            where = f"{zip_path}!{name}"
            text = archive.read(name).decode("utf-8")
            for index, (line, raw) in enumerate(iter_bracketed(text, where)):
                tree = clean_tree(_unwrap_root(raw))
                if tree is None:
                    raise InputFormatError(where, line, "tree holds only -NONE- elements")
                rows.append({
                    "tree_id": f"{fileid[:-4]}-{index:03d}",
                    "fileid": fileid,
                    "tree": to_string(tree),
                    "n_tokens": len(leaves(tree)),
                })
    return pd.DataFrame(rows, columns=["tree_id", "fileid", "tree", "n_tokens"]).astype(
        {"n_tokens": "int64"})


def build_ptb_trees(raw: Path) -> pd.DataFrame:
    """The ``ptb_trees`` table from ``raw/nltk_data/corpora/treebank.zip``."""
    return read_treebank_zip(Path(raw) / "nltk_data" / "corpora" / "treebank.zip")
