"""S²LCT report tables: Table 3 per model, the CheckList comparison and examples.

Table 3 (the paper's layout), per capability: #seeds (seed cases), #expansions, seed fail %,
expansion fail %, #pass→fail — the number of failing *expansions* whose seed the model passed
(the paper's unit: failures the expansions found beyond the seeds; its LC8 BERT figure, 134
with 50 seeds, exceeds the seed count) — and, labelled apart, #pass→fail seeds: the seeds
passed that have at least one failing expansion. Failure rates carry 95% percentile-bootstrap
intervals (``lingtest.tasks.core.stats.rate_interval``, resampling the cases of that cell; NaN for
fewer than two cases). A case whose model answer named no label (verdict ``undefined``, an
LLM classifier's) is neither: rates and intervals are over the decided (pass/fail) cases, and
a table whose results hold any undefined verdict gains columns counting them (tables of
models that always answer keep today's columns). The paper's seed fail % for
its three SST-2 models stand beside each row for reference: those models are not the ones
tested here (see the report's substitutes).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from lingtest.tasks.core.metrics import stage_metrics
from lingtest.tasks.core.schema import UNDEFINED, decided, undefined_count
from lingtest.tasks.core.stats import rate_interval

# S²LCT Table 3, seed fail % of BERT / RoBERTa / DistilBERT (fine-tuned on SST-2).
PAPER_SEED_FAIL = {
    "LC1": (78.95, 89.47, 100.0), "LC2": (4.0, 4.0, 2.0), "LC3": (24.0, 56.0, 78.0),
    "LC4": (92.0, 82.0, 88.0), "LC5": (92.31, 92.31, 92.31), "LC6": (100.0, 100.0, 100.0),
    "LC7": (84.0, 42.0, 76.0), "LC8": (44.0, 26.0, 40.0), "LC9": (4.0, 2.0, 6.0),
    "LC10": (42.0, 58.0, 92.0), "LC11": (100.0, 100.0, 94.0),
}
PAPER_MODELS = ("BERT", "RoBERTa", "DistilBERT")


PASS_TO_FAIL_COUNTS = ("distinct", "alict")
TABLE_LAYOUTS = ("alict", "ase22")
# ALiCT's published results: about 27 expansions per seed (e.g. 2,323 for one LC's 50 seeds).
PAPER_EXPANSIONS_PER_SEED = 27
EXAMPLES = 40  # expansions drawn at random (seeded) for the examples report


def alict_multiplicity(suite: pd.DataFrame) -> pd.Series:
    """Per expansion case id, how often ALiCT's code would hold its text: the (masked
    sentence, word) proposals that gave it (``proposals`` in its provenance; 1 if absent).
    ALiCT keeps every such duplicate in the seed's expansion list and in the test suite, and
    ``Result.analyze_model`` counts each pair of them: m² per failing expansion."""
    exps = suite[suite["kind"] == "expansion"]
    counts = [int(json.loads(p).get("proposals", 1)) for p in exps["provenance"]]
    return pd.Series(counts, index=exps["case_id"].to_numpy(), dtype=np.int64)


def table3(results: pd.DataFrame, capabilities: list[str], n_boot: int = 1000,
           seed: int = 0, count: str = "distinct",
           multiplicity: pd.Series | None = None) -> pd.DataFrame:
    """One model's Table 3 (``results``: ``model_tasks.RESULT_COLUMNS`` rows of that model).

    ``count``: ``distinct`` (the paper's text: each failing expansion of a passed seed once)
    or ``alict`` (ALiCT's ``Result.py``: duplicates counted, see ``alict_multiplicity``)."""
    if count not in PASS_TO_FAIL_COUNTS:
        raise ValueError(f"capabilities.pass_to_fail_count must be one of "
                         f"{', '.join(PASS_TO_FAIL_COUNTS)} (got {count!r})")
    rng = np.random.default_rng(seed)
    rows = []
    for lc in capabilities:
        part = results[results["capability"] == lc]
        seeds = part[part["kind"] == "seed"]
        exps = part[part["kind"] == "expansion"]
        seed_fail = fail_flags(seeds["verdict"])
        exp_fail = fail_flags(exps["verdict"])
        passed = set(seeds.loc[seeds["verdict"] == "pass", "case_id"])
        pass_to_fail = exps[(exps["verdict"] == "fail") & exps["parent_case_id"].isin(passed)]
        s, s_lo, s_hi = rate_interval(seed_fail, n_boot, rng)
        e, e_lo, e_hi = rate_interval(exp_fail, n_boot, rng)
        paper = PAPER_SEED_FAIL.get(lc, (np.nan,) * 3)
        rows.append({"capability": lc, "seeds": len(seeds), "expansions": len(exps),
                     "seed_undefined": undefined_count(seeds["verdict"]),
                     "exp_undefined": undefined_count(exps["verdict"]),
                     "seed_fail_%": s, "seed_fail_lo": s_lo, "seed_fail_hi": s_hi,
                     "exp_fail_%": e, "exp_fail_lo": e_lo, "exp_fail_hi": e_hi,
                     "pass_to_fail": len(pass_to_fail) if count == "distinct" else int(
                         (multiplicity.reindex(pass_to_fail["case_id"]).fillna(1) ** 2).sum()
                         if multiplicity is not None else len(pass_to_fail)),
                     "pass_to_fail_seeds": int(pass_to_fail["parent_case_id"].nunique()),
                     **{f"paper_seed_fail_% {m}": v for m, v in zip(PAPER_MODELS, paper)}})
    table = only_if_undefined(pd.DataFrame(rows), results,
                              ["seed_undefined", "exp_undefined"])
    numeric = [c for c in table.columns if "%" in c or c.endswith(("_lo", "_hi"))]
    table[numeric] = table[numeric].astype(float).round(2)
    return table


UNDEFINED_NOTE = ("Undefined: cases whose model answer named no label (an LLM classifier's "
                  "undefined answer), neither passed nor failed; the failure rates and "
                  "their intervals are over the decided (pass/fail) cases.")


def noted(notes: str, *verdicts: pd.Series) -> str:
    """``notes`` with ``UNDEFINED_NOTE`` after them when any of ``verdicts`` is undefined
    (the notes of a run whose models always answer stay as they were)."""
    if not any(v.eq(UNDEFINED).any() for v in verdicts):
        return notes
    return " ".join(part for part in (notes, UNDEFINED_NOTE) if part)


def fail_flags(verdicts: pd.Series) -> np.ndarray:
    """1/0 per decided verdict (fail/pass): what a failure rate and its interval resample."""
    return verdicts[decided(verdicts)].eq("fail").to_numpy()


def only_if_undefined(table: pd.DataFrame, results: pd.DataFrame,
                      columns: list[str]) -> pd.DataFrame:
    """``table`` without its undefined-count ``columns`` when no result is undefined, so a
    model that always answers keeps the tables it had before such counts existed."""
    if results["verdict"].eq(UNDEFINED).any():
        return table
    return table.drop(columns=columns)


def trial_membership(suite: pd.DataFrame) -> dict[str, tuple[int, ...]]:
    """Per case id, the trials (seed samplings) it belongs to: a seed's from its provenance
    (``trials``; absent: trial 0 only), an expansion's its seed's."""
    seeds = suite[suite["kind"] == "seed"]
    of_seed = {cid: tuple(json.loads(p).get("trials", [0]))
               for cid, p in zip(seeds["case_id"], seeds["provenance"])}
    exps = suite[suite["kind"] != "seed"]
    return {**of_seed, **{cid: of_seed.get(parent, (0,))
                          for cid, parent in zip(exps["case_id"], exps["parent_case_id"])}}


def in_trial(results: pd.DataFrame, membership: dict[str, tuple[int, ...]],
             trial: int) -> pd.DataFrame:
    """The result rows of one trial's cases."""
    return results[[trial in membership.get(c, (0,)) for c in results["case_id"]]]


def ase22_table(results: pd.DataFrame, capabilities: list[str],
                membership: dict[str, tuple[int, ...]], trials: int) -> pd.DataFrame:
    """One model's table in S²LCT's ASE'22 layout: per capability, the median over
    ``trials`` seed samplings of #test cases (seeds and expansions together), one failure
    rate over all of them (the decided ones; #undefined beside when any), and #pass→fail
    (distinct failing expansions of passed seeds); the failure rate's range over the
    trials beside."""
    by_trial = [in_trial(results, membership, trial) for trial in range(trials)]
    rows = []
    for lc in capabilities:
        per_trial = []
        for drawn in by_trial:
            cases = drawn[drawn["capability"] == lc]
            seeds = cases[cases["kind"] == "seed"]
            exps = cases[cases["kind"] == "expansion"]
            passed = set(seeds.loc[seeds["verdict"] == "pass", "case_id"])
            failing = exps[(exps["verdict"] == "fail") & exps["parent_case_id"].isin(passed)]
            flags = fail_flags(cases["verdict"])
            per_trial.append({
                "seeds": len(seeds), "expansions": len(exps), "test_cases": len(cases),
                "undefined": undefined_count(cases["verdict"]),
                "fail_%": 100 * flags.mean() if len(flags) else np.nan,
                "pass_to_fail": len(failing)})
        frame = only_if_undefined(pd.DataFrame(per_trial), results, ["undefined"])
        rows.append({"capability": lc, "trials": trials,
                     **{f"{k} (median)": float(frame[k].median()) for k in frame.columns},
                     "fail_% min": float(frame["fail_%"].min()),
                     "fail_% max": float(frame["fail_%"].max())})
    return pd.DataFrame(rows).round(2)


def checklist_table(verdicts: pd.DataFrame) -> pd.DataFrame:
    """CheckList failure rate (%) per test, one column per model, with examples judged; a
    model with undefined examples (no label for a needed text) gets their count beside."""
    from lingtest.tasks.capabilities.checklist_run import failure_table

    parts = []
    for model_id, group in verdicts.groupby("model_id", sort=False):
        table = failure_table(group.drop(columns="model_id"))
        shown = ["examples", *([UNDEFINED] if UNDEFINED in table else []), "failure_rate"]
        parts.append(table.set_index(["test", "type", "capability"])[shown].rename(columns={
            "examples": f"examples {model_id}", UNDEFINED: f"undefined {model_id}",
            "failure_rate": f"fail % {model_id}"}))
    return pd.concat(parts, axis=1).reset_index()


def examples(suite: pd.DataFrame, results: pd.DataFrame, seed: int,
             n: int = EXAMPLES) -> pd.DataFrame:
    """``n`` expansions drawn at random (seeded) from the whole suite, one per distinct text,
    each beside its seed, with each model's prediction (``output``) and verdict on both.
    Why random: the first seeds of each capability are the easiest to read, not typical."""
    wide = results.rename(columns={"output": "prediction"}).pivot_table(
        index="case_id", columns="model_id", values=["prediction", "verdict"], aggfunc="first")
    wide.columns = [f"{what} {model}" for what, model in wide.columns]
    exps = suite[suite["kind"] == "expansion"].drop_duplicates("text")
    if len(exps) > n:
        rng = np.random.default_rng([seed, 3])
        exps = exps.iloc[np.sort(rng.choice(len(exps), n, replace=False))]
    seeds = suite.set_index("case_id")
    rows = []
    for row in exps.itertuples(index=False):
        parent = row.parent_case_id
        rows.append({"capability": row.capability, "seed": seeds.at[parent, "text"],
                     "expansion": row.text, "inserted": " ".join(
                         json.loads(row.provenance).get("words", [])),
                     "expected": row.expectation,
                     **{f"seed {k}": v for k, v in wide.loc[parent].to_dict().items()},
                     **wide.loc[row.case_id].to_dict()})
    return pd.DataFrame(rows)


def funnel(built_stats: list[dict]) -> pd.DataFrame:
    """Per capability: proposals → rejections per validation rule → kept, and expansions per
    seed (the volume to read Table 3's counts against)."""
    table = pd.DataFrame(built_stats)
    table["expansions_per_seed"] = (table["kept"] / table["cases"].where(table["cases"] > 0)
                                    ).round(2)
    return table


def neutral_share(results: pd.DataFrame, capabilities: list[str]) -> pd.DataFrame:
    """Per model and capability: the share of seeds predicted neutral, and of the failing
    seeds, how many were predicted neutral. Why: a binary model's neutral band turns
    uncertain predictions into failures of capabilities that expect pos or neg. The share is
    of the seeds given a label; seeds given none are counted apart when there are any."""
    rows = []
    seeds = results[results["kind"] == "seed"]
    for (model_id, lc), part in seeds.groupby(["model_id", "capability"], sort=False):
        failing = part[part["verdict"] == "fail"]
        labelled = part[part["output"] != UNDEFINED]
        rows.append({"model_id": model_id, "capability": lc, "seeds": len(part),
                     "undefined_seeds": undefined_count(part["verdict"]),
                     "neutral_%": round(100 * labelled["output"].eq("neutral").mean(), 2)
                     if len(labelled) else float("nan"),
                     "failing_seeds": len(failing),
                     "failing_neutral_%": round(100 * failing["output"].eq("neutral").mean(), 2)
                     if len(failing) else float("nan")})
    order = {lc: i for i, lc in enumerate(capabilities)}
    table = only_if_undefined(pd.DataFrame(rows), results, ["undefined_seeds"])
    return table.sort_values(["model_id", "capability"], key=lambda c: c.map(order)
                             if c.name == "capability" else c, kind="stable"
                             ).reset_index(drop=True)


def headline_metrics(tables: dict[str, pd.DataFrame], suite: pd.DataFrame, pcfg: dict,
                     curve: pd.DataFrame | None) -> dict:
    """Headline figures for `dvc metrics show` / `dvc exp show`: each model's overall fail
    rates (over decided cases: each capability's rate weighted by its decided cases),
    pass→fail counts, its number of undefined cases when there are any, and coverage at the
    largest suite size (``coverage.<suite>.*``); under ``all`` the case counts and the
    PCFG's bracket F1."""
    models: dict[str, dict] = {}
    for model_id, table in tables.items():
        seed_undefined, exp_undefined = (table.get(c, pd.Series(0, index=table.index))
                                         for c in ("seed_undefined", "exp_undefined"))
        table = table.assign(seeds=table["seeds"] - seed_undefined,
                             expansions=table["expansions"] - exp_undefined)
        seeds, exps = table["seeds"].sum(), table["expansions"].sum()
        undefined = int(seed_undefined.sum() + exp_undefined.sum())
        models[model_id] = {
            "seed_fail_%": round(float((table["seed_fail_%"] * table["seeds"]).sum() / seeds), 2)
            if seeds else None,
            "exp_fail_%": round(float((table["exp_fail_%"].fillna(0) * table["expansions"]).sum()
                                      / exps), 2) if exps else None,
            "pass_to_fail": int(table["pass_to_fail"].sum()),
            "pass_to_fail_seeds": int(table["pass_to_fail_seeds"].sum()),
            **({"undefined": undefined} if undefined else {})}
    if curve is not None and len(curve):
        for model_id, part in curve.groupby("model_id", sort=False):
            largest = part[part["size"] == part["size"].max()]
            models.setdefault(model_id, {})["coverage"] = {
                row.suite: {"size": int(row.size), "boundcov": round(row.boundcov, 4),
                            "sactcov": round(row.sactcov, 4)} for row in largest.itertuples()}
    return stage_metrics("overall; coverage at the largest size", models, {
        "cases": {"seeds": int((suite["kind"] == "seed").sum()),
                  "expansions": int((suite["kind"] == "expansion").sum())},
        "pcfg_bracket_f1": round(pcfg["bracket"].get("f1", float("nan")), 4)})
