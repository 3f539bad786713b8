"""The case/result contract every method writes (one contract for every method), checked at write.

A *case* is one test: ``case_id`` (content hash of method, inputs and expectation), ``method``,
the method's grouping column, its text column(s), the ``expectation`` (text) and the
``provenance`` (JSON text). A *result* is one model's answer to one case: ``case_id``,
``method``, ``model_id``, the resolved ``revision``, the raw ``output``, the ``verdict``
(pass / fail / undefined) and a continuous ``score`` (NaN when the method has none). Methods
add their own columns; the contract columns are checked with pandera on every write, so a
method cannot drift from it silently.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pandera.pandas as pa

from lingtest.tasks.core import io
from lingtest.tasks.core.errors import LingtestError

VERDICTS = ("pass", "fail", "undefined")
# A model's answer that names no label (an LLM classifier's "I cannot tell", an error after
# retries): its label and its verdict, with an all-NaN probability row. Never a pass or a fail.
UNDEFINED = "undefined"
DECIDED = ("pass", "fail")
CASE_ID = r"^[0-9a-f]{16}$"


@dataclass(frozen=True)
class Contract:
    """How one method's cases and results are laid out: its name in the ``method`` column,
    its grouping column, its text columns and the columns that, with ``case_id`` and
    ``model_id``, identify one result row (settings such as a distance or threshold)."""

    method: str
    group: str
    texts: tuple[str, ...]
    result_keys: tuple[str, ...] = ()

    @property
    def result_index(self) -> list[str]:
        return ["case_id", "model_id", *self.result_keys]


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (TypeError, ValueError):
        return False
    return True


def case_schema(contract: Contract) -> pa.DataFrameSchema:
    text = pa.Column(str, nullable=False)
    return pa.DataFrameSchema(
        {"case_id": pa.Column(str, pa.Check.str_matches(CASE_ID), unique=True),
         "method": pa.Column(str, pa.Check.eq(contract.method)),
         contract.group: pa.Column(str, pa.Check.str_length(min_value=1)),
         **{name: text for name in contract.texts},
         "expectation": pa.Column(str, pa.Check.str_length(min_value=1)),
         "provenance": pa.Column(str, pa.Check(_is_json, element_wise=True,
                                               error="provenance is not JSON text"))},
        strict=False, coerce=False, name=f"{contract.method} cases")


def result_schema(contract: Contract) -> pa.DataFrameSchema:
    return pa.DataFrameSchema(
        {"case_id": pa.Column(str, pa.Check.str_matches(CASE_ID)),
         "method": pa.Column(str, pa.Check.eq(contract.method)),
         "model_id": pa.Column(str, pa.Check.str_length(min_value=1)),
         "revision": pa.Column(str, pa.Check.str_length(min_value=1)),
         "output": pa.Column(str, nullable=True),
         "verdict": pa.Column(str, pa.Check.isin(VERDICTS)),
         "score": pa.Column(float, nullable=True)},
        strict=False, coerce=False,
        name=f"{contract.method} results")


def _check(schema: pa.DataFrameSchema, frame: pd.DataFrame, what: str) -> pd.DataFrame:
    try:
        return schema.validate(frame, lazy=True)
    except pa.errors.SchemaErrors as err:
        cases = err.failure_cases.head(5)
        detail = "; ".join(f"column {row.column!r}: {row.check} (e.g. {row.failure_case!r})"
                           for row in cases.itertuples())
        raise LingtestError(f"{what} break the case/result contract (tasks/core/schema.py): "
                            f"{detail}. Fix the method's table builder.") from None


def check_cases(frame: pd.DataFrame, contract: Contract) -> pd.DataFrame:
    return _check(case_schema(contract), frame, f"{contract.method} cases")


def check_results(frame: pd.DataFrame, contract: Contract) -> pd.DataFrame:
    checked = _check(result_schema(contract), frame, f"{contract.method} results")
    keys = contract.result_index
    repeated = checked[checked.duplicated(keys, keep=False)]
    if len(repeated):
        first = repeated.iloc[0]
        raise LingtestError(
            f"{contract.method} results break the case/result contract (tasks/core/schema.py): "
            f"{len(repeated)} rows share their {', '.join(keys)} (e.g. "
            f"{', '.join(f'{k}={first[k]!r}' for k in keys)}); one row per case, model and "
            "setting. Fix the method's result builder, or name the setting in result_keys.")
    return checked


def write_cases(path: str | os.PathLike, frame: pd.DataFrame, contract: Contract) -> Path:
    """Check, then write: a table that breaks the contract is never written."""
    return io.write_parquet(path, check_cases(frame, contract))


def write_results(path: str | os.PathLike, frame: pd.DataFrame, contract: Contract) -> Path:
    return io.write_parquet(path, check_results(frame, contract))


def passed(verdicts: pd.Series) -> pd.Series:
    return verdicts.eq("pass")


def decided(verdicts: pd.Series) -> pd.Series:
    """Which verdicts are pass or fail: failure rates count these only, so an undefined
    answer neither lowers nor raises a rate."""
    return verdicts.isin(DECIDED)


def undefined_count(verdicts: pd.Series) -> int:
    return int(verdicts.eq(UNDEFINED).sum())


def compare_results(before: pd.DataFrame, after: pd.DataFrame,
                    keys: tuple[str, ...] | list[str] = ("case_id",)) -> pd.DataFrame:
    """Diff two runs (two revisions of a model, or before/after a repair) case by case.

    One row per key present in either run, with both verdicts and ``change``: ``fixed`` (did
    not pass, passes now), ``broken`` (passed, does not now), ``unchanged``, or ``added`` /
    ``removed`` for cases only one run has. A fail turning undefined is unchanged: neither
    passes.
    """
    keys = list(keys)
    for name, frame in (("before", before), ("after", after)):
        if frame.duplicated(keys).any():
            raise LingtestError(f"compare_results: the {name} run has several rows per "
                                f"{keys}; pass the setting columns as keys too")
    merged = before[keys + ["verdict"]].merge(after[keys + ["verdict"]], on=keys, how="outer",
                                              suffixes=("_before", "_after"), sort=True)
    was, now = merged["verdict_before"], merged["verdict_after"]
    change = pd.Series("unchanged", index=merged.index, dtype=object)
    change[passed(now) & ~passed(was)] = "fixed"
    change[passed(was) & ~passed(now)] = "broken"
    change[was.isna()] = "added"
    change[now.isna()] = "removed"
    merged["change"] = change
    return merged


def change_counts(diff: pd.DataFrame) -> dict[str, int]:
    """How many cases each kind of change holds (all five keys, zeros included)."""
    counts = diff["change"].value_counts()
    return {name: int(counts.get(name, 0))
            for name in ("fixed", "broken", "unchanged", "added", "removed")}
