"""Curated label corrections of AdaTest trees, applied when a tree's tests are trained on.

The mirrored hotel tree holds a few rows whose recorded label contradicts their text
("Expensive for what you get" recorded as positive beside four "… expensive for what you get"
rows recorded as negative). Training on them teaches the noise, so the debugging stage reads
a correction list (CSV: tree, topic, input, old_label, new_label, reason; ``new_label`` =
``drop`` removes the test) and applies it at load. A correction whose row is gone or whose
old label no longer matches is refused: the list must describe the file it corrects.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from lingtest.tasks.core.errors import LingtestError

COLUMNS = ["tree", "topic", "input", "old_label", "new_label", "reason"]
DROP = "drop"


def read_corrections(path: Path) -> pd.DataFrame:
    """The correction list, checked for its columns, labels and a reason on every row."""
    if not path.exists():
        raise LingtestError(f"adaptive.debug.corrections: no file at {path}; fix: point it at "
                            "a CSV with columns " + ", ".join(COLUMNS) + " (or null: none)")
    from lingtest.tasks.core.io import check_input_file

    check_input_file(path, "a CSV with columns " + ", ".join(COLUMNS))
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise LingtestError(f"adaptive.debug.corrections: {path}: not a readable CSV "
                            f"({str(exc).strip()[:160]}); fix: UTF-8 CSV with the header "
                            + ",".join(COLUMNS)) from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise LingtestError(f"adaptive.debug.corrections: {path} lacks columns {missing}; fix: "
                            "its header is " + ",".join(COLUMNS))
    bad = frame[~frame["new_label"].isin(["neg", "pos", DROP])
                | ~frame["old_label"].isin(["neg", "pos"]) | frame["reason"].str.strip().eq("")]
    if len(bad):
        raise LingtestError(f"adaptive.debug.corrections: {path} line {int(bad.index[0]) + 2}: "
                            "old_label neg|pos, new_label neg|pos|drop and a reason are needed")
    return frame[COLUMNS]


def apply_corrections(tests: pd.DataFrame, corrections: pd.DataFrame, tree: Path
                      ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``tests`` (text, label, topic) of ``tree`` with the corrections naming its file applied;
    returns (tests, the corrections applied)."""
    mine = corrections[corrections["tree"] == tree.name]
    out = tests.copy()
    for row in mine.itertuples(index=False):
        hit = out["text"].eq(row.input) & out["topic"].eq(row.topic)
        if not hit.any():
            raise LingtestError(f"adaptive.debug.corrections: {tree.name} has no test "
                                f"{row.input!r} under {row.topic}; fix: remove or update the "
                                "correction")
        stale = out.loc[hit, "label"].ne(row.old_label)
        if stale.any():
            raise LingtestError(f"adaptive.debug.corrections: {row.input!r} in {tree.name} "
                                f"reads {out.loc[hit, 'label'].iloc[0]}, not {row.old_label}; "
                                "fix: update the correction's old_label")
        if row.new_label == DROP:
            out = out[~hit]
        else:
            out.loc[hit, "label"] = row.new_label
    return out.reset_index(drop=True), mine.reset_index(drop=True)
