"""S²LCT report tables: Table 3 per model, the CheckList comparison and examples.

Table 3 (the paper's layout), per capability: #seeds (seed cases), #expansions, seed fail %,
expansion fail %, #pass→fail — the number of failing *expansions* whose seed the model passed
(the paper's unit: failures the expansions found beyond the seeds; its LC8 BERT figure, 134
with 50 seeds, exceeds the seed count) — and, labelled apart, #pass→fail seeds: the seeds
passed that have at least one failing expansion. Failure rates carry 95% percentile-bootstrap
intervals (``tasks.core.stats.rate_interval``, resampling the cases of that cell; NaN for
fewer than two cases). The paper's seed fail % for
its three SST-2 models stand beside each row for reference: those models are not the ones
tested here (see the report's substitutes).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from tasks.core.stats import rate_interval

# S²LCT Table 3, seed fail % of BERT / RoBERTa / DistilBERT (fine-tuned on SST-2).
PAPER_SEED_FAIL = {
    "LC1": (78.95, 89.47, 100.0), "LC2": (4.0, 4.0, 2.0), "LC3": (24.0, 56.0, 78.0),
    "LC4": (92.0, 82.0, 88.0), "LC5": (92.31, 92.31, 92.31), "LC6": (100.0, 100.0, 100.0),
    "LC7": (84.0, 42.0, 76.0), "LC8": (44.0, 26.0, 40.0), "LC9": (4.0, 2.0, 6.0),
    "LC10": (42.0, 58.0, 92.0), "LC11": (100.0, 100.0, 94.0),
}
PAPER_MODELS = ("BERT", "RoBERTa", "DistilBERT")


def table3(results: pd.DataFrame, capabilities: list[str], n_boot: int = 1000,
           seed: int = 0) -> pd.DataFrame:
    """One model's Table 3 (``results``: ``pipeline.RESULT_COLUMNS`` rows of that model)."""
    rng = np.random.default_rng(seed)
    rows = []
    for lc in capabilities:
        part = results[results["capability"] == lc]
        seeds = part[part["kind"] == "seed"]
        exps = part[part["kind"] == "expansion"]
        seed_fail = seeds["verdict"].eq("fail").to_numpy()
        exp_fail = exps["verdict"].eq("fail").to_numpy()
        passed = set(seeds.loc[seeds["verdict"] == "pass", "case_id"])
        pass_to_fail = exps[(exps["verdict"] == "fail") & exps["parent_case_id"].isin(passed)]
        s, s_lo, s_hi = rate_interval(seed_fail, n_boot, rng)
        e, e_lo, e_hi = rate_interval(exp_fail, n_boot, rng)
        paper = PAPER_SEED_FAIL.get(lc, (np.nan,) * 3)
        rows.append({"capability": lc, "seeds": len(seeds), "expansions": len(exps),
                     "seed_fail_%": s, "seed_fail_lo": s_lo, "seed_fail_hi": s_hi,
                     "exp_fail_%": e, "exp_fail_lo": e_lo, "exp_fail_hi": e_hi,
                     "pass_to_fail": len(pass_to_fail),
                     "pass_to_fail_seeds": int(pass_to_fail["parent_case_id"].nunique()),
                     **{f"paper_seed_fail_% {m}": v for m, v in zip(PAPER_MODELS, paper)}})
    table = pd.DataFrame(rows)
    numeric = [c for c in table.columns if "%" in c or c.endswith(("_lo", "_hi"))]
    table[numeric] = table[numeric].astype(float).round(2)
    return table


def checklist_table(verdicts: pd.DataFrame) -> pd.DataFrame:
    """CheckList failure rate (%) per test, one column per model, with examples judged."""
    from tasks.capabilities.checklist_run import failure_table

    parts = []
    for model_id, group in verdicts.groupby("model_id", sort=False):
        table = failure_table(group.drop(columns="model_id"))
        parts.append(table.set_index(["test", "type", "capability"])[
            ["examples", "failure_rate"]].rename(columns={
                "examples": f"examples {model_id}", "failure_rate": f"fail % {model_id}"}))
    return pd.concat(parts, axis=1).reset_index()


def examples(suite: pd.DataFrame, results: pd.DataFrame, per_lc: int = 2) -> pd.DataFrame:
    """Per capability, the first ``per_lc`` seeds that have expansions, each with its
    expansions, and each model's prediction (``output``) and verdict. The published columns
    keep their names (``expected``, ``prediction <model>``)."""
    wide = results.rename(columns={"output": "prediction"}).pivot_table(
        index="case_id", columns="model_id", values=["prediction", "verdict"], aggfunc="first")
    wide.columns = [f"{what} {model}" for what, model in wide.columns]
    rows = []
    for lc, group in suite.groupby("capability", sort=False):
        kids = group[group["kind"] == "expansion"]
        parents = [p for p in dict.fromkeys(kids["parent_case_id"])][:per_lc]
        for parent in parents:
            seed_row = group[group["case_id"] == parent]
            for _, row in pd.concat([seed_row, kids[kids["parent_case_id"] == parent]]
                                    ).iterrows():
                rows.append({"capability": lc, "kind": row["kind"], "text": row["text"],
                             "expected": row["expectation"],
                             **wide.loc[row["case_id"]].to_dict()})
    return pd.DataFrame(rows)


def headline_metrics(tables: dict[str, pd.DataFrame], suite: pd.DataFrame, pcfg: dict,
                     curve: pd.DataFrame | None) -> dict:
    """Headline figures for `dvc metrics show` / `dvc exp show`: case counts, the PCFG's
    bracket F1, each model's overall fail rates and pass→fail counts, coverage at the
    largest suite size."""
    out: dict = {"cases": {"seeds": int((suite["kind"] == "seed").sum()),
                           "expansions": int((suite["kind"] == "expansion").sum())},
                 "pcfg_bracket_f1": round(pcfg["bracket"].get("f1", float("nan")), 4)}
    for model_id, table in tables.items():
        seeds, exps = table["seeds"].sum(), table["expansions"].sum()
        out[model_id] = {
            "seed_fail_%": round(float((table["seed_fail_%"] * table["seeds"]).sum() / seeds), 2)
            if seeds else None,
            "exp_fail_%": round(float((table["exp_fail_%"].fillna(0) * table["expansions"]).sum()
                                      / exps), 2) if exps else None,
            "pass_to_fail": int(table["pass_to_fail"].sum()),
            "pass_to_fail_seeds": int(table["pass_to_fail_seeds"].sum())}
    if curve is not None and len(curve):
        out["coverage_at_largest_size"] = {}
        for model_id, part in curve.groupby("model_id", sort=False):
            largest = part[part["size"] == part["size"].max()]
            out["coverage_at_largest_size"][model_id] = {
                row.suite: {"size": int(row.size), "boundcov": round(row.boundcov, 4),
                            "sactcov": round(row.sactcov, 4)} for row in largest.itertuples()}
    return json.loads(json.dumps(out))
