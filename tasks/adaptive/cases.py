"""A test tree's tests as lingtest cases, and back.

AdaTest stores a test as (input, output, label): the model's output and whether that output
is right. lingtest states the expectation explicitly, one of

- ``should output <y>``       (the model must answer y),
- ``should not output <y>``   (any answer but y),
- ``should have the same output for both inputs``  (invariance between ``input`` and
  ``input_b``; a tree keeps ``input_b`` as an extra column, which AdaTest loads and ignores),
- ``should score below <t>``  (a raw-score test, AdaTest's ``RawScorer``: the model's failure
  score for the input stays below t, 0.5 by default; the tree states it in an extra
  ``expectation`` column, since its ``output`` cell holds a generated text or a score).

From the CSV: a ``pass`` row expects its output; a ``fail`` row expects, for a binary task
(``binary_labels``, e.g. ``("neg", "pos")`` for the hotel-review tree), the other class,
otherwise "should not output" its output. Rows that are no test (topic markers, ``off_topic``,
unlabelled ``""`` / ``Unknown``) stay in the tree and give no case.

Table ``cases`` (one row per test):

===============  ====  ====================================================================
column           type  meaning
===============  ====  ====================================================================
case_id          str   ``case_id("adaptive", [input] or [input, input_b], expectation)``
method           str   ``adaptive``
topic            str   the tree topic; the root ``""`` is written ``/``
input, input_b   str   the text(s); ``input_b`` is ``""`` unless the test is an invariance
expectation      str   one of the three forms above
provenance       str   JSON: source file, row id, the rule that gave the expectation
tree_id          str   the row id in the tree (a uuid hex)
tree_output      str   the tree's ``output`` cell (the output that was labelled)
tree_label       str   ``pass`` / ``fail``
tree_labeler     str   who labelled it
tree_description str   the row's description
tree_extra       str   JSON object of the row's other cells (``author``, score columns, …),
                       in column order
===============  ====  ====================================================================

``cases_to_tree(cases, base)`` writes the cases back into ``base`` (its markers and
non-test rows kept, its test rows replaced by the cases'), so ``cases_to_tree(tree_to_cases
(t), t)`` writes the same bytes as ``t``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lingtest.tasks.adaptive.tree import (BASE_COLUMNS, TEST_LABELS, TestTree, ensure_topic_markers,
                                 new_tree, topic_problem)
from lingtest.tasks.core.cases import case_id, provenance_json
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.schema import Contract

METHOD = "adaptive"
CONTRACT = Contract(method=METHOD, group="topic", texts=("input", "input_b"))
ROOT = "/"  # the root topic in the cases' topic column (the contract wants a non-empty group)
INPUT_B = "input_b"
INVARIANCE = "should have the same output for both inputs"
COLUMNS = ["case_id", "method", "topic", "input", INPUT_B, "expectation", "provenance",
           "tree_id", "tree_output", "tree_label", "tree_labeler", "tree_description",
           "tree_extra"]
EXPECTATION_COLUMN = "expectation"  # a tree's optional statement of a row's expectation
SCORE_BELOW = "should score below {threshold}"
RAW_THRESHOLD = 0.5
_EXPECTATION = re.compile(r"^should (not )?output (.+)$", re.DOTALL)
_SCORE_BELOW = re.compile(r"^should score below (0(?:\.\d+)?|1(?:\.0+)?)$")


@dataclass(frozen=True)
class Expectation:
    """A parsed expectation: ``kind`` is ``output``, ``not_output`` or ``invariance``."""

    kind: str
    label: str = ""

    @property
    def text(self) -> str:
        if self.kind == "invariance":
            return INVARIANCE
        if self.kind == "score_below":
            return SCORE_BELOW.format(threshold=self.label)
        return f"should {'not ' if self.kind == 'not_output' else ''}output {self.label}"


def parse_expectation(text: str) -> Expectation:
    """The expectation a case's text states; unknown text is an error naming the forms."""
    if text == INVARIANCE:
        return Expectation("invariance")
    below = _SCORE_BELOW.match(text)
    if below:
        return Expectation("score_below", below.group(1))
    match = _EXPECTATION.match(text)
    if not match or not match.group(2).strip():
        raise LingtestError(f"adaptive case expectation {text!r} is not one of 'should output "
                            f"<y>', 'should not output <y>', {INVARIANCE!r}, 'should score "
                            f"below <t>' (t in [0, 1], e.g. 0.5)")
    return Expectation("not_output" if match.group(1) else "output", match.group(2))


def expectation_of(output: str, label: str, binary_labels: tuple[str, str] | None) -> tuple[
        Expectation, str]:
    """A labelled (output, label) pair as an expectation, and the rule used."""
    if label == "pass":
        return Expectation("output", output), "pass: should output its output"
    if binary_labels is not None and output in binary_labels:
        other = binary_labels[1 - binary_labels.index(output)]
        return Expectation("output", other), "fail, binary task: should output the other class"
    return Expectation("not_output", output), "fail: should not output its output"


def row_expectation(row: pd.Series, binary_labels: tuple[str, str] | None, where: str
                    ) -> tuple[Expectation, str] | None:
    """A labelled tree row's expectation and the rule that gave it (None: a test row with
    no output, which states none). ``where`` names the row in an error."""
    stated = row.get(EXPECTATION_COLUMN, "")
    if stated:
        try:
            return parse_expectation(stated), "stated in the expectation column"
        except LingtestError as error:
            raise LingtestError(f"{where}: {error}") from None
    if row.get(INPUT_B, ""):
        return Expectation("invariance"), "input_b set: invariance"
    if row["output"] == "":
        return None
    return expectation_of(row["output"], row["label"], binary_labels)


def to_topic(tree_topic: str) -> str:
    return tree_topic or ROOT


def from_topic(case_topic: str) -> str:
    return "" if case_topic == ROOT else case_topic


def tree_to_cases(tree: TestTree, binary_labels: tuple[str, str] | None = None) -> pd.DataFrame:
    """The tree's labelled tests as cases (see the module docstring), in tree order."""
    if binary_labels is not None and (len(binary_labels) != 2
                                      or binary_labels[0] == binary_labels[1]):
        raise LingtestError(f"binary_labels {binary_labels!r}: expected two distinct labels, "
                            "e.g. ('neg', 'pos')")
    extra_columns = [c for c in tree.frame.columns if c not in BASE_COLUMNS]
    rows, first_row = [], {}
    for row_id, row in tree.tests.iterrows():
        input_b = row.get(INPUT_B, "")
        found = row_expectation(row, binary_labels, f"{tree.source}: row {row_id}")
        if found is None:
            raise LingtestError(f"{tree.source}: test row {row_id} is labelled {row['label']!r} "
                                "but has no output; fill in the output that was labelled, or "
                                "clear the label")
        expect, rule = found
        texts = [row["input"], input_b] if input_b else [row["input"]]
        cid = case_id(METHOD, texts, expect.text)
        if cid in first_row:
            raise LingtestError(f"{tree.source}: rows {first_row[cid]} and {row_id} are the same "
                                f"test ({texts!r}, {expect.text!r}); one case per test: delete "
                                "one row, or change its input")
        first_row[cid] = row_id
        rows.append({
            "case_id": cid, "method": METHOD, "topic": to_topic(row["topic"]),
            "input": row["input"], INPUT_B: input_b, "expectation": expect.text,
            "provenance": provenance_json(source=Path(tree.source).name, row_id=row_id,
                                          rule=rule, generator="adatest-csv"),
            "tree_id": row_id, "tree_output": row["output"], "tree_label": row["label"],
            "tree_labeler": row["labeler"], "tree_description": row["description"],
            "tree_extra": json.dumps({c: row[c] for c in extra_columns if c != INPUT_B},
                                     ensure_ascii=False)})
    return pd.DataFrame(rows, columns=COLUMNS)


def case_to_row(case: pd.Series) -> dict[str, str]:
    """One case as a tree row. Cases read from a tree give back their cells; new cases get
    output = the named label and label pass ("should output") or fail ("should not output");
    an invariance case keeps its recorded output and label, else both empty."""
    expect = parse_expectation(case["expectation"])
    topic = from_topic(str(case["topic"]))
    problem = topic_problem(topic)
    if problem:
        raise LingtestError(f"case {case.get('case_id')}: {problem}; topics are paths such as "
                            "/Rooms (the root is '/')")
    recorded = _text(case.get("tree_label"))
    if recorded:
        output, label = _text(case.get("tree_output")), recorded
    elif expect.kind in ("invariance", "score_below"):
        output, label = "", ""
    else:
        output, label = expect.label, "pass" if expect.kind == "output" else "fail"
    row = {"topic": topic, "input": case["input"], "output": output, "label": label,
           "labeler": _text(case.get("tree_labeler")) or "lingtest",
           "description": _text(case.get("tree_description"))}
    extra = _text(case.get("tree_extra"))
    row.update(json.loads(extra) if extra else {})
    input_b = _text(case.get(INPUT_B))
    if input_b or expect.kind == "invariance":
        row[INPUT_B] = input_b
    if expect.kind == "score_below":
        row[EXPECTATION_COLUMN] = expect.text
    return row


def _text(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def case_row_id(case: pd.Series) -> str:
    """The case's tree row id, or its case_id padded to a uuid-hex length for a new case."""
    return _text(case.get("tree_id")) or (str(case["case_id"]) * 2)


def cases_to_tree(cases: pd.DataFrame, base: TestTree | None = None) -> TestTree:
    """The cases as a tree. With ``base``: its rows that are no test (markers, off_topic,
    unlabelled) and its layout kept, its test rows replaced by the cases (rows of ``base``
    keep their place; new rows follow). Without: a new tree with imputed topic markers."""
    rows = {case_row_id(case): case_to_row(case) for _, case in cases.iterrows()}
    if len(rows) < len(cases):
        raise LingtestError("cases_to_tree: several cases share one tree_id; one row per case")
    if base is None:
        tree = new_tree(list(rows.values()), list(rows))
        tree.frame = ensure_topic_markers(tree.frame)
        return tree
    frame = base.frame
    columns = list(frame.columns) + [c for r in rows.values() for c in r
                                     if c not in frame.columns]
    columns = list(dict.fromkeys(columns))
    kept = [i for i, label in zip(frame.index, frame["label"])
            if label not in TEST_LABELS or i in rows]
    out = frame.loc[kept].reindex(columns=columns, fill_value="")
    new_ids = [i for i in rows if i not in out.index]
    if new_ids:
        out = pd.concat([out, pd.DataFrame([{c: "" for c in columns}] * len(new_ids),
                                           index=pd.Index(new_ids, dtype=object),
                                           columns=columns)])
    for row_id, row in rows.items():
        for column, value in row.items():
            out.at[row_id, column] = value
    # a lossless round trip: only rows new to ``base`` get imputed markers for their topics
    known = set(frame["topic"])
    out = ensure_topic_markers(out, [rows[i]["topic"] for i in new_ids
                                     if rows[i]["topic"] not in known])
    return TestTree(out, base.source, base.lineterminator, base.index_name)
