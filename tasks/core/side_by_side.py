"""A user's models beside the pipeline's baseline models on one suite: failure rates per
group (and setting) side by side, and per case what each user model fixes or breaks against
each baseline model (``schema.compare_results``). Works on any method's contract rows, so
every method gets the same comparison; the baseline's rows are the pipeline's stored
results, never recomputed.
"""
from __future__ import annotations

import re

import pandas as pd

from lingtest.tasks.core.schema import UNDEFINED, Contract, change_counts, compare_results


def fail_percent(verdicts: pd.Series) -> float:
    """Share of failures among the decided verdicts (pass / fail), in %; NaN with none."""
    decided = verdicts[verdicts.isin(["pass", "fail"])]
    return float(100 * decided.eq("fail").mean()) if len(decided) else float("nan")


def with_groups(results: pd.DataFrame, suite: pd.DataFrame, contract: Contract) -> pd.DataFrame:
    """The result rows with their case's group (capability, topic, relation, question)."""
    if contract.group in results.columns:
        return results
    return results.merge(suite[["case_id", contract.group]], on="case_id", how="left")


def side_by_side(results: pd.DataFrame, suite: pd.DataFrame, contract: Contract,
                 models: list[str]) -> pd.DataFrame:
    """Fail % per group (× the method's settings) per model, models as columns in order,
    with an ``all`` row per setting; only cases every model answered are counted. Fail %
    is over decided verdicts; a model with undefined ones gets ``<model> undefined`` (their
    count) after its rate, a model without none."""
    rows = with_groups(results[results["model_id"].isin(models)], suite, contract)
    shared = rows.groupby("case_id")["model_id"].nunique()
    rows = rows[rows["case_id"].isin(shared[shared == len(models)].index)]
    keys = [contract.group, *contract.result_keys]
    both = pd.concat([rows, rows.assign(**{contract.group: "all"})], ignore_index=True)
    rates = both.groupby([*keys, "model_id"])["verdict"].apply(fail_percent)
    table = rates.unstack("model_id").reindex(columns=models)
    undefined = both.assign(_u=both["verdict"].eq(UNDEFINED)).groupby(
        [*keys, "model_id"])["_u"].sum().unstack("model_id").reindex(columns=models)
    counted = [m for m in models if undefined[m].sum() > 0]
    table = table.join(undefined[counted].astype("int64").rename(
        columns=lambda m: f"{m} undefined"))
    table = table.join(both.groupby(keys)["case_id"].nunique().rename("cases")).reset_index()
    table["_all"] = table[contract.group].eq("all")  # the overall rows last
    table = table.sort_values(["_all", *keys], kind="stable", key=_natural).drop(columns="_all")
    shown = [c for m in models for c in (m, *([f"{m} undefined"] if m in counted else []))]
    return table[[*keys, "cases", *shown]].round(2).reset_index(drop=True).rename(
        columns={m: f"{m} fail %" for m in models})


def _natural(column: pd.Series) -> pd.Series:
    """Sort key: LC2 before LC10 (digit runs compared as numbers), as ranks."""
    if pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        return column

    def parts(text: object) -> tuple:
        return tuple((0, int(p), "") if p.isdigit() else (1, 0, p)
                     for p in re.split(r"(\d+)", str(text)))

    order = {value: rank for rank, value in enumerate(sorted(set(column), key=parts))}
    return column.map(order)


CHANGE_COLUMNS = ["model", "against", "fixed", "broken", "unchanged", "added", "removed"]


def case_changes(results: pd.DataFrame, contract: Contract, mine: list[str],
                 baseline: list[str]) -> pd.DataFrame:
    """Per (user model, baseline model): cases the user model passes where the baseline
    fails (``fixed``), fails where it passes (``broken``), and the rest."""
    keys = ["case_id", *contract.result_keys]
    rows = []
    for model in mine:
        after = results[results["model_id"] == model]
        for base in baseline:
            before = results[results["model_id"] == base]
            rows.append({"model": model, "against": base,
                         **change_counts(compare_results(before, after, keys))})
    return pd.DataFrame(rows, columns=CHANGE_COLUMNS)


def changed_cases(results: pd.DataFrame, suite: pd.DataFrame, contract: Contract,
                  model: str, base: str, limit: int = 20) -> pd.DataFrame:
    """The first ``limit`` cases ``model`` fixes or breaks against ``base``, with their text."""
    keys = ["case_id", *contract.result_keys]
    diff = compare_results(results[results["model_id"] == base],
                           results[results["model_id"] == model], keys)
    diff = diff[diff["change"].isin(["fixed", "broken"])]
    texts = suite[["case_id", contract.group, contract.texts[0]]].drop_duplicates("case_id")
    diff = diff.merge(texts, on="case_id", how="left").rename(
        columns={"verdict_before": f"{base}", "verdict_after": f"{model}"})
    return diff.sort_values(["change", "case_id"]).head(limit).reset_index(drop=True)
