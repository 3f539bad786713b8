"""What a review session changed, for its Prefect flow run (``lingtest.flows.review_session``): the
tree as it is now against the tree at the session's start, so an undone change is no change
and a renamed topic counts each of its rows as moved.

Counts: ``accepted`` (new rows from a suggestion: their provenance has a round), ``written``
(typed in), ``relabelled`` (a kept row whose label or output changed: an expected output
set), ``moved`` (a kept row in another topic), ``deleted`` (rows gone), ``topics created`` /
``topics deleted`` (topic markers). The filed rows are listed with verdict and provenance.
"""
from __future__ import annotations

import json
import urllib.parse

import pandas as pd

from lingtest.tasks.adaptive.review import PROVENANCE
from lingtest.tasks.adaptive.tree import TestTree

FILED_COLUMNS = ["topic", "input", "verdict", "output", "labeler", "source", "generator",
                 "round", "edited_from"]


def _provenance(text: object) -> dict:
    try:
        value = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def session_changes(start: TestTree, now: TestTree) -> tuple[dict[str, int], pd.DataFrame]:
    """The counts and the filed rows (one per new test row, in file order)."""
    before, after = start.frame, now.frame
    markers_before = before["label"] == "topic_marker"
    markers_after = after["label"] == "topic_marker"
    new = after.index.difference(before.index, sort=False)
    gone = before.index.difference(after.index, sort=False)
    kept = after.index.intersection(before.index, sort=False)
    filed = after.loc[new][~markers_after.loc[new]]
    provenance = [_provenance(after.at[rid, PROVENANCE]) if PROVENANCE in after.columns
                  else {} for rid in filed.index]
    rows = pd.DataFrame({
        "topic": [urllib.parse.unquote(t) or "/" for t in filed["topic"]],
        "input": list(filed["input"]), "verdict": list(filed["label"]),
        "output": list(filed["output"]), "labeler": list(filed["labeler"]),
        "source": ["written" if p.get("written") else "suggestion" if "round" in p else ""
                   for p in provenance],
        "generator": [p.get("generator", "") for p in provenance],
        "round": [str(p.get("round", "")) for p in provenance],
        "edited_from": [p.get("edited_from", "") for p in provenance]},
        columns=FILED_COLUMNS)
    old, cur = before.loc[kept], after.loc[kept]
    counts = {
        "accepted": int((rows["source"] == "suggestion").sum()),
        "written": int((rows["source"] == "written").sum()),
        "relabelled": int(((old["label"] != cur["label"]) | (old["output"] != cur["output"]))
                          [~markers_after.loc[kept]].sum()),
        "moved": int((old["topic"] != cur["topic"])[~markers_after.loc[kept]].sum()),
        "deleted": int((~markers_before.loc[gone]).sum()),
        "topics created": int(markers_after.loc[new].sum()),
        "topics deleted": int(markers_before.loc[gone].sum()),
    }
    return counts, rows.reset_index(drop=True)


def changes_markdown(title: str, counts: dict[str, int], rows: pd.DataFrame,
                     facts: dict[str, str]) -> str:
    """The flow run's artifact: who, what, the counts, then every filed row."""
    lines = [f"# {title}", ""]
    lines += [f"- **{key}**: {value}" for key, value in facts.items()]
    lines += ["", " · ".join(f"**{count}** {name}" for name, count in counts.items()), ""]
    if len(rows):
        cells = rows.astype(str).apply(lambda c: c.str.replace("|", r"\|", regex=False))
        lines += [f"## Filed rows ({len(rows)})", "", cells.to_markdown(index=False)]
    else:
        lines += ["No rows filed yet."]
    return "\n".join(lines) + "\n"
