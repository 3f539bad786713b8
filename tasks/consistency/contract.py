"""The case/result contract (``tasks/core/schema.py``) for KomMKonLLM's tables.

A case is one derived query (one covering-array row of one question): ``queries.parquet``
keeps its own columns and gains ``case_id``, ``method``, ``expectation`` and ``provenance``.
A result is one model's answer to it: the store's row plus ``case_id``, ``method``, the
model's ``revision``, the raw answer as ``output``, the ``verdict`` and ``score`` (NaN: a
yes/no answer has no continuous score).

Decisions:

* ``expectation`` is the question's annotation as text, ``"true"`` / ``"false"``; a question
  without one (null ``answer``) gets ``"unannotated"`` — never empty, and its rows can then
  only be ``undefined``;
* ``verdict``: ``undefined`` when the oracle read no answer (``parsed`` "undefined") or none
  arrived (every call failed: ``parsed`` null), ``pass`` when the parsed answer equals the
  annotation, ``fail`` otherwise — an unparsable answer is never a wrong one (the guide's rule);
* ``revision`` is the model record's resolved revision (package version and file hash for a
  local model); an HTTP model has none, so its digest stands in where the server gives one,
  else ``unversioned <base URL>``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from lingtest.tasks.core.cases import case_id, provenance_json
from lingtest.tasks.core.errors import LingtestError

METHOD = "consistency"
UNANNOTATED = "unannotated"


def expectation_text(answer: object) -> str:
    """The annotation as the contract's text: "true", "false" or "unannotated"."""
    if answer is None or (not isinstance(answer, (bool, np.bool_)) and pd.isna(answer)):
        return UNANNOTATED
    return "true" if bool(answer) else "false"


def suite_cases(queries: pd.DataFrame, questions: pd.DataFrame, **provenance: object
                ) -> pd.DataFrame:
    """``queries`` (one row per covering-array row, its columns kept in order) with the
    contract's ``case_id``, ``method``, ``expectation`` and ``provenance`` (the row's values,
    store id and ``provenance``: generator, strength, seed, …) appended."""
    answers = dict(zip(questions["question_id"], questions["answer"]))
    unknown = sorted(set(queries["question_id"]) - set(answers))
    if unknown:
        raise LingtestError(f"derived queries of unknown questions {unknown[:5]}: the queries "
                            "and questions tables come from different runs")
    out = queries.copy()
    out["expectation"] = [expectation_text(answers[q]) for q in out["question_id"]]
    out["case_id"] = [case_id(METHOD, [q, str(int(row)), prompt], expectation)
                      for q, row, prompt, expectation in
                      zip(out["question_id"], out["array_row"], out["prompt"],
                          out["expectation"])]
    out["method"] = METHOD
    out["provenance"] = [provenance_json(row_values=[int(v) for v in values], store_id=store,
                                         **provenance)
                         for values, store in zip(out["row_values"], out["store_id"])]
    return out


def revision(record: dict) -> str:
    """A model record's resolved revision (see the module's decisions)."""
    if record.get("revision"):
        return str(record["revision"])
    if record.get("digest"):
        return f"digest {record['digest']}"
    return f"unversioned {record.get('base_url') or record.get('model_id')}"


def verdicts(results: pd.DataFrame) -> pd.Series:
    """pass / fail / undefined per result row (see the module's decisions)."""
    parsed = results["parsed"]
    undefined = parsed.isna() | parsed.eq("undefined")
    expected = results["expectation"]
    correct = parsed.eq(expected) & expected.isin(["true", "false"])
    out = np.where(undefined | ~expected.isin(["true", "false"]), "undefined",
                   np.where(correct, "pass", "fail"))
    return pd.Series(out, index=results.index, dtype=object)


def contract_results(results: pd.DataFrame, suite: pd.DataFrame,
                     revisions: dict[int, str]) -> pd.DataFrame:
    """The store's result rows (``store_tasks.collect_results``, order and columns kept) with
    ``case_id`` and ``method`` first and ``revision``, ``output``, ``verdict``, ``score``
    last. ``revisions``: model key → ``revision(record)``."""
    keys = suite[["question_id", "array_row", "case_id", "expectation"]]
    merged = results.merge(keys, on=["question_id", "array_row"], how="left",
                           validate="many_to_one")
    if merged["case_id"].isna().any():
        row = merged[merged["case_id"].isna()].iloc[0]
        raise LingtestError(f"result of {row['question_id']!r} row {row['array_row']} has no "
                            "case in the suite (queries.parquet): rebuild the suite")
    out = results.copy()
    out.insert(0, "case_id", merged["case_id"].to_numpy())
    out.insert(1, "method", METHOD)
    out["revision"] = [revisions[int(key)] for key in out["model_key"]]
    out["output"] = out["raw_text"].astype(object).where(out["raw_text"].notna(), None)
    out["verdict"] = verdicts(merged).to_numpy()
    out["score"] = np.nan
    return out
