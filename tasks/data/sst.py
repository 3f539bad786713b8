"""Stanford Sentiment Treebank: PTB-style trees with a 0–4 label on every node.

Table ``sst`` (one row per sentence; 8544 train / 1101 dev / 2210 test):

===========  ==========  ===============================================================
column       dtype       meaning
===========  ==========  ===============================================================
sentence_id  str         ``<split>-<index of the tree in its file, 5 digits>``: ``train-00000``
split        str         ``train`` / ``dev`` / ``test``
tokens       list[str]   the tree's leaves verbatim (PTB escapes kept: ``-LRB-``, ``\\/``,
                         ````` / ``''``), so positions line up with ``tree``
text         str         detokenised sentence: quotes and brackets restored, no space
                         before punctuation and clitics (``do n't`` → ``don't``)
label5       int64       root label 0–4 (very negative … very positive)
label3       str         ``neg`` (0–1), ``neutral`` (2), ``pos`` (3–4): S²LCT's 3 classes
label2       str|None    ``neg`` / ``pos`` as in SST-2; None for neutral sentences
tree         str         the original tree line, stripped of surrounding whitespace
===========  ==========  ===============================================================

Every node label must be an integer 0–4; a malformed line is an InputFormatError
naming the file and the 1-based line.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pandas as pd

from lingtest.tasks.core.errors import InputFormatError, LingtestError
from lingtest.tasks.data.treebank import Node, leaves, parse_one

SPLITS = ("train", "dev", "test")
COLUMNS = ["sentence_id", "split", "tokens", "text", "label5", "label3", "label2", "tree"]

_UNESCAPE = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{",
             "-RCB-": "}", "``": '"', "''": '"', "`": "'"}
_ATTACH_LEFT = {",", ".", "!", "?", ";", ":", "%", "-rrb-", "-rsb-", "-rcb-", "...", "''", "'",
                "n't", "'s", "'re", "'ve", "'ll", "'d", "'m"}
_ATTACH_RIGHT = {"-lrb-", "-lsb-", "-lcb-", "$", "#", "``", "`"}
_BACKSLASH = re.compile(r"\\(.)")
_FIX = "each line must be one tree whose every node label is an integer 0-4"


def label3(label5: int) -> str:
    """SST-5 root label → S²LCT's 3 classes ([0,0.4] neg, (0.4,0.6] neutral, else pos)."""
    return "neg" if label5 <= 1 else "neutral" if label5 == 2 else "pos"


def detokenize(tokens: list[str]) -> str:
    """Readable text from PTB tokens: undo escapes, glue punctuation and clitics.

    Closing marks and clitics (``n't``, ``'s``, a lone ``'``) attach to the word before,
    opening brackets/quotes, ``$`` and ``#`` to the word after; ``--`` keeps its spaces.
    """
    out: list[str] = []
    glue_next = True
    for tok in tokens:
        low = tok.lower()
        word = _UNESCAPE.get(tok, _BACKSLASH.sub(r"\1", tok))
        if out and not glue_next and low not in _ATTACH_LEFT:
            out.append(" ")
        out.append(word)
        glue_next = low in _ATTACH_RIGHT
    return "".join(out)


def _check_labels(tree: Node, path: Path, line: int) -> None:
    """Raise unless every node label is an integer 0–4."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if node.label not in ("0", "1", "2", "3", "4"):
            raise InputFormatError(path, line, f"node label {node.label!r} is not an integer 0-4",
                                   _FIX)
        stack.extend(child for child in node.children if isinstance(child, Node))


def iter_sst_trees(path: str | Path) -> Iterator[tuple[int, str, Node]]:
    """Yield ``(line, line text, tree)`` for each non-blank line of an SST tree file."""
    path = Path(path)
    with open(path, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            text = raw.strip()
            if not text:
                continue
            tree = parse_one(text, path, number)
            _check_labels(tree, path, number)
            yield number, text, tree


def preterminal_labels(tree: Node) -> Iterator[tuple[str, int]]:
    """``(word, label)`` for each single-word node ``(k word)`` of an SST tree."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if len(node.children) == 1 and isinstance(node.children[0], str):
            yield node.children[0], int(node.label)
        else:
            stack.extend(child for child in node.children if isinstance(child, Node))


def _rows(path: str | Path, split: str) -> list[tuple]:
    rows = []
    for index, (_, text, tree) in enumerate(iter_sst_trees(path)):
        tokens = leaves(tree)
        label5 = int(tree.label)
        three = label3(label5)
        rows.append((f"{split}-{index:05d}", split, tokens, detokenize(tokens), label5, three,
                     None if three == "neutral" else three, text))
    return rows


def _table(rows: list[tuple]) -> pd.DataFrame:
    # Built in one go, not by pd.concat: concatenated string columns stay chunked and
    # then give different Parquet bytes than the same table after a pickle round trip.
    return pd.DataFrame(rows, columns=COLUMNS).astype({"label5": "int64"})


def read_sst_split(path: str | Path, split: str) -> pd.DataFrame:
    """One SST tree file (e.g. ``trees/train.txt``) as ``sst`` rows of ``split``."""
    return _table(_rows(path, split))


def read_sst(trees_dir: str | Path) -> pd.DataFrame:
    """All three splits from a folder holding ``train.txt``, ``dev.txt``, ``test.txt``."""
    return _table([row for split in SPLITS
                   for row in _rows(Path(trees_dir) / f"{split}.txt", split)])


def build_sst(raw: Path) -> pd.DataFrame:
    """The ``sst`` table from ``raw/sst/trees``."""
    return read_sst(Path(raw) / "sst" / "trees")


def sst2_split(sst: pd.DataFrame, split: str) -> pd.DataFrame:
    """Sentences of ``split`` with a binary label (SST-2: neutral roots dropped)."""
    missing = {"split", "text", "label2"} - set(sst.columns)
    if missing:
        raise LingtestError(f"SST table lacks columns {sorted(missing)}; fix: lingtest run data")
    part = sst[(sst["split"] == split) & sst["label2"].notna()]
    if part.empty:
        raise LingtestError(f"SST table has no `{split}` sentences with label2; fix: "
                            f"lingtest run data")
    return part.reset_index(drop=True)
