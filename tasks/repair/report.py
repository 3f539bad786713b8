"""The repair's tables: COSTELLO Table 3 (N_V decline per relation, paper beside lingtest, on
training and held-out triples), fixed / broken / unchanged triples, ground-truth precision and
downstream accuracy before and after, each with a 95% bootstrap interval. Every table has a
``model`` column; with several repaired models, Table 3, the fix rates and the accuracy
change get a "mean over N models" row: the mean of the per-model figures, as the paper's
Table 3 averages its 10 models (never the figure of the pooled triples)."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from scipy import stats as sps

from lingtest.tasks.core import stats
from lingtest.tasks.core.metrics import stage_metrics
from lingtest.tasks.repair.stage import without_timings

# COSTELLO Table 3, average over its 10 repaired models (training triples, re-tested).
PAPER_DECLINE = {"CR1": 53.28, "CR2": 35.39, "CR3": 57.63, "CR4": 41.76, "all": 50.48}
PAPER_ACCURACY = {"sentiment": -0.94, "paraphrase": -1.0}  # pp, SST and MRPC classifiers
PAPER_ROW = "paper: mean over 10 models"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
REPORTED_SPLITS = ("train", "heldout")
SPLITS_ORDER = ("train", "validation", "heldout")
SPLIT_NAMES = {"train": "training", "validation": "validation", "heldout": "held-out"}


def mean_label(n_models: int) -> str:
    return f"mean over {n_models} models"


def _interval(statistic, arrays: tuple[np.ndarray, ...], n_boot: int,
              rng: np.random.Generator) -> tuple[float, float, float]:
    """(value, low, high): a paired percentile bootstrap over triples; NaN bounds when the
    value is undefined or fewer than two triples."""
    value = float(statistic(*arrays))
    if len(arrays[0]) < 2 or not np.isfinite(value):
        return (value, np.nan, np.nan)
    if all(np.all(a == a[0]) for a in arrays):
        return (value, value, value)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", sps.DegenerateDataWarning)  # resamples without a violation
        ci = sps.bootstrap(arrays, statistic, paired=True, vectorized=True, axis=-1,
                           n_resamples=n_boot, method="percentile",
                           random_state=rng).confidence_interval
    return (value, float(ci.low), float(ci.high))


def _mean_value(statistic, groups: list[tuple[np.ndarray, ...]]) -> tuple[float, list]:
    """The mean of ``statistic`` over the groups where it is defined, and those groups."""
    with np.errstate(invalid="ignore", divide="ignore"):
        values = [float(statistic(*g)) if len(g[0]) else np.nan for g in groups]
    defined = [g for g, v in zip(groups, values) if np.isfinite(v)]
    return (float(np.mean([v for v in values if np.isfinite(v)])) if defined else np.nan,
            defined)


def _mean_interval(statistic, groups: list[tuple[np.ndarray, ...]], n_boot: int,
                   rng: np.random.Generator) -> tuple[float, float, float]:
    """(mean, low, high) of ``statistic`` over the models (one group of paired arrays per
    model), left out: models where it is undefined (no violated triple there). The interval
    resamples each model's own rows and averages the models' resampled figures; a numpy
    loop with the run's rng because scipy.stats.bootstrap cannot stratify by model."""
    value, defined = _mean_value(statistic, groups)
    if not defined:
        return (value, np.nan, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = np.empty((len(defined), n_boot))
        for i, arrays in enumerate(defined):
            picks = rng.integers(0, len(arrays[0]), size=(n_boot, len(arrays[0])))
            draws[i] = statistic(*(a[picks] for a in arrays), axis=-1)
    low, high = stats.percentile_bounds(draws.mean(axis=0))  # NaN resamples dropped
    return (value, low, high)


def _decline(before, after, axis=-1):
    """N_V decline in %: (N_V before − N_V after) / N_V before."""
    nb = np.sum(before, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(nb > 0, 100.0 * (nb - np.sum(after, axis=axis)) / nb, np.nan)


def _fix_rate(before, after, axis=-1):
    """Share (%) of the triples violated before that pass now."""
    nb = np.sum(before, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(nb > 0, 100.0 * np.sum(before & ~after, axis=axis) / nb, np.nan)


def _precision_change(v_b, gt_b, v_a, gt_a, axis=-1):
    """P after − P before (pp): share of reported violations that the ground truth calls buggy."""
    with np.errstate(invalid="ignore", divide="ignore"):
        before = np.sum(v_b & gt_b, axis=axis) / np.sum(v_b, axis=axis)
        after = np.sum(v_a & gt_a, axis=axis) / np.sum(v_a, axis=axis)
    return 100.0 * (after - before)


def _mean_change(before, after, axis=-1):
    return np.mean(after, axis=axis) - np.mean(before, axis=axis)


def _ci(low: float, high: float) -> str:
    return "" if not (np.isfinite(low) and np.isfinite(high)) else f"[{low:.1f}, {high:.1f}]"


def models_of(frame: pd.DataFrame) -> list[str]:
    """The repaired models in the order they were repaired."""
    return list(dict.fromkeys(frame["model"]))


def joined(labelled: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """Each triple's split, verdicts and ground truth before and after (by case id), and its
    verdict after at the original θ."""
    cols = ["case_id", "verdict", "threshold", "margin", "gt_a", "gt_b"]
    out = labelled.merge(after[cols], on="case_id", suffixes=("", "_after"), validate="1:1")
    out["violated"] = out["verdict"].eq("fail")
    out["violated_after"] = out["verdict_after"].eq("fail")
    out["violated_after_at_theta0"] = out["margin_after"] > out["threshold"]
    return out


def _flags(frame: pd.DataFrame, *columns: str) -> tuple[np.ndarray, ...]:
    return tuple(frame[c].to_numpy(bool) for c in columns)


def table3(both: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """COSTELLO Table 3's layout: N_V decline (%) per relation and overall — the paper's
    10-model mean, then (several models) the mean of lingtest's per-model declines, then
    each model's — on training and held-out triples, each with its interval."""
    rng = np.random.default_rng(seed)
    relations = sorted(both["relation"].unique())
    models = models_of(both)
    rows = [{"model": PAPER_ROW, "triples": "training", **{
        key: value for r in [*relations, "all"] for key, value in (
            (f"{r} N_V", ""), (f"{r} N_V decline %", PAPER_DECLINE.get(r, np.nan)),
            (f"{r} 95% CI", ""))}}]

    def cells(part: pd.DataFrame):
        return [*((r, part[part["relation"] == r]) for r in relations), ("all", part)]

    if len(models) > 1:
        for split in REPORTED_SPLITS:
            row: dict = {"model": mean_label(len(models)), "triples": SPLIT_NAMES[split]}
            part = both[both["split"] == split]
            for name, group in cells(part):
                per_model = [_flags(group[group["model"] == m], "violated", "violated_after")
                             for m in models]
                value, low, high = _mean_interval(_decline, per_model, n_boot, rng)
                row[f"{name} N_V"] = ""
                row[f"{name} N_V decline %"] = round(value, 2)
                row[f"{name} 95% CI"] = _ci(low, high)
            rows.append(row)
    for model in models:
        for split in REPORTED_SPLITS:
            part = both[(both["model"] == model) & (both["split"] == split)]
            row = {"model": model, "triples": SPLIT_NAMES[split]}
            for name, group in cells(part):
                b, a = _flags(group, "violated", "violated_after")
                value, low, high = _interval(_decline, (b, a), n_boot, rng)
                row[f"{name} N_V"] = f"{int(b.sum())} → {int(a.sum())}"
                row[f"{name} N_V decline %"] = round(value, 2)
                row[f"{name} 95% CI"] = _ci(low, high)
            rows.append(row)
    return pd.DataFrame(rows)


def fix_rates(both: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """Per model and split: triples, violated before, fixed / broken / unchanged, fix rate
    (θ re-derived on the repaired model, and at the original θ), N_V decline, with
    intervals; with several models first their mean per split (counts left blank)."""
    rng = np.random.default_rng(seed + 1)
    models = models_of(both)
    rows = []
    if len(models) > 1:
        for split in SPLITS_ORDER:
            part = both[both["split"] == split]
            if part.empty:
                continue
            groups = [part[part["model"] == m] for m in models]
            now = [_flags(g, "violated", "violated_after") for g in groups]
            at0 = [_flags(g, "violated", "violated_after_at_theta0") for g in groups]
            fix, lo, hi = _mean_interval(_fix_rate, now, n_boot, rng)
            fix0, lo0, hi0 = _mean_interval(_fix_rate, at0, n_boot, rng)
            decline, _ = _mean_value(_decline, now)
            rows.append({"model": mean_label(len(models)), "split": split,
                         **dict.fromkeys(("triples", "violated before", "fixed", "broken",
                                          "still violated", "violated after"), ""),
                         "fix rate %": round(fix, 2), "fix rate 95% CI": _ci(lo, hi),
                         "fix rate at original θ %": round(fix0, 2),
                         "at original θ 95% CI": _ci(lo0, hi0),
                         "N_V decline %": round(decline, 2)})
    for model in models:
        for split in SPLITS_ORDER:
            part = both[(both["model"] == model) & (both["split"] == split)]
            if part.empty:
                continue
            b, a, a0 = _flags(part, "violated", "violated_after", "violated_after_at_theta0")
            fix, lo, hi = _interval(_fix_rate, (b, a), n_boot, rng)
            fix0, lo0, hi0 = _interval(_fix_rate, (b, a0), n_boot, rng)
            rows.append({"model": model, "split": split, "triples": len(part),
                         "violated before": int(b.sum()), "fixed": int((b & ~a).sum()),
                         "broken": int((~b & a).sum()), "still violated": int((b & a).sum()),
                         "violated after": int(a.sum()),
                         "fix rate %": round(fix, 2), "fix rate 95% CI": _ci(lo, hi),
                         "fix rate at original θ %": round(fix0, 2),
                         "at original θ 95% CI": _ci(lo0, hi0),
                         "N_V decline %": round(float(_decline(b, a)), 2)})
    return pd.DataFrame(rows)


def changes(diff: pd.DataFrame) -> pd.DataFrame:
    """Fixed / broken / unchanged triples per model, split and relation (case-id diff)."""
    counts = diff.groupby(["model", "split", "relation", "change"],
                          sort=False).size().unstack(fill_value=0)
    for name in ("fixed", "broken", "unchanged"):
        if name not in counts:
            counts[name] = 0
    out = counts[["fixed", "broken", "unchanged"]].reset_index()
    # rows as a reader scans them: models as repaired, splits train → held-out, CR1 → CR4
    model_rank = {m: i for i, m in enumerate(dict.fromkeys(diff["model"]))}
    split_rank = {s: i for i, s in enumerate(SPLITS_ORDER)}
    ranked = out.assign(_model=out["model"].map(model_rank), _split=out["split"].map(split_rank))
    ranked = ranked.sort_values(["_model", "_split", "relation"], kind="stable")
    return ranked.drop(columns=["_model", "_split"]).reset_index(drop=True).rename_axis(
        columns=None)


def precision(both: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """P_A / P_B (% of reported violations buggy under GT_A / GT_B) before and after — after
    with the 14 classifiers retrained on the repaired embeddings — per model and split."""
    rng = np.random.default_rng(seed + 2)
    rows = []
    for model in models_of(both):
        for split in REPORTED_SPLITS:
            part = both[(both["model"] == model) & (both["split"] == split)]
            if part.empty:
                continue
            vb, va = _flags(part, "violated", "violated_after")
            for gt in ("gt_a", "gt_b"):
                gb, ga = _flags(part, gt, f"{gt}_after")
                with np.errstate(invalid="ignore", divide="ignore"):
                    before = 100.0 * (vb & gb).sum() / vb.sum() if vb.sum() else np.nan
                    after = 100.0 * (va & ga).sum() / va.sum() if va.sum() else np.nan
                change, lo, hi = _interval(_precision_change, (vb, gb, va, ga), n_boot, rng)
                rows.append({"model": model, "split": split,
                             "precision": "P_A" if gt == "gt_a" else "P_B",
                             "before %": round(before, 2), "after %": round(after, 2),
                             "change pp": round(change, 2), "95% CI": _ci(lo, hi),
                             "triples buggy before": int(gb.sum()),
                             "triples buggy after": int(ga.sum())})
    return pd.DataFrame(rows)


def accuracy(before: pd.DataFrame, after: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """Clean test accuracy of the downstream classifiers (SST-2 sentiment, MRPC paraphrase)
    on each model's original and repaired embeddings: mean over the bank, change with a
    paired bootstrap interval over the classifiers, the paper's change beside it; with
    several models first the mean of their changes (bootstrap within each model's bank)."""
    rng = np.random.default_rng(seed + 3)
    models = models_of(before)
    per_model: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    rows = []
    for model in models:
        b_m, a_m = before[before["model"] == model], after[after["model"] == model]
        for task in sorted(set(b_m["task"]) & set(a_m["task"])):
            b = 100 * b_m[b_m["task"] == task].sort_values("classifier")["accuracy"].to_numpy()
            a = 100 * a_m[a_m["task"] == task].sort_values("classifier")["accuracy"].to_numpy()
            per_model.setdefault(task, []).append((b, a))
            change, lo, hi, p = stats.paired_change(b, a, n_boot, rng)
            rows.append({"model": model, "task": task, "classifiers": len(b),
                         "before %": round(b.mean(), 2), "after %": round(a.mean(), 2),
                         "change pp": round(change, 2), "95% CI": _ci(lo, hi),
                         "p": round(p, 4), "paper change pp": PAPER_ACCURACY.get(task, np.nan)})
    means = []
    if len(models) > 1:
        for task, pairs in sorted(per_model.items()):
            change, lo, hi = _mean_interval(_mean_change, pairs, n_boot, rng)
            means.append({"model": mean_label(len(pairs)), "task": task, "classifiers": "",
                          "before %": round(float(np.mean([b.mean() for b, _ in pairs])), 2),
                          "after %": round(float(np.mean([a.mean() for _, a in pairs])), 2),
                          "change pp": round(change, 2), "95% CI": _ci(lo, hi), "p": "",
                          "paper change pp": PAPER_ACCURACY.get(task, np.nan)})
    return pd.DataFrame(means + rows)


SUBSTITUTES = ("Substitutes: the paper's 10 repaired hub encoders → the packaged "
               "all-MiniLM-L6-v2 (default profile), trained on the pooling it is tested with "
               "(mean + L2 norm; the paper trains the pooler output); the paper's downstream "
               "classifiers → the contrastive stage's 14 MLPs, retrained on the repaired "
               "embeddings.")


def substitutes(facts: list[dict], n_classifiers: int) -> str:
    """What stood in for the paper's repaired models, their pooler output and its
    classifiers in this run; the default run (MiniLM, 14 classifiers) keeps its sentence."""
    from lingtest.tasks.core.config import papers_models

    if [one["model_id"] for one in facts] == [MINILM] and n_classifiers == 14:
        return SUBSTITUTES
    named = []
    papers = papers_models("repair.models")  # COSTELLO's 10 (plmforfix.list)
    others = [one for one in facts if one["model_id"] not in papers]
    if others:
        named.append("the paper's 10 repaired hub encoders → " + ", ".join(
            one["model_id"] for one in others))
    pooled = [one for one in facts if one["pooling"] != "pooler"]
    if pooled:
        named.append("the pooler output the paper trains → the pooling each model is tested "
                     "with (" + ", ".join(f"{one['model_id']}: {one['pooling']}"
                                          for one in pooled) + ")")
    named.append(f"the paper's downstream classifiers → the contrastive stage's "
                 f"{n_classifiers} MLPs, retrained on the repaired embeddings")
    return "Substitutes: " + "; ".join(named) + "."


def _number(value) -> float | None:
    """A table figure for the metrics JSON: NaN (undefined) as null."""
    return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else None


def metrics(facts: list[dict], fixes: pd.DataFrame, acc: pd.DataFrame) -> dict:
    """Each model's fix rates, N_V declines and accuracy changes, and (several models)
    their means as the tables give them."""
    def figures(model: str) -> dict:
        rate = {r["split"]: r for r in fixes[fixes["model"] == model].to_dict("records")}
        out = {}
        for s in REPORTED_SPLITS:
            row = rate.get(s, {})
            out[f"fix_rate_{s}"] = _number(row.get("fix rate %"))
            out[f"fix_rate_{s}_original_theta"] = _number(row.get("fix rate at original θ %"))
            out[f"nv_decline_{s}"] = _number(row.get("N_V decline %"))
        out["accuracy_change_pp"] = {r["task"]: _number(r["change pp"])
                                     for r in acc[acc["model"] == model].to_dict("records")}
        return out

    models = {one["model_id"]: {"theta": one["theta"], "best_epoch": one["best_epoch"],
                                **figures(one["model_id"])}
              for one in facts}
    stage_wide = ({"models": len(facts), "mean": figures(mean_label(len(facts)))}
                  if len(facts) > 1 else None)
    return stage_metrics(facts[0]["setting"], models, stage_wide)


def make_report(params, workspace, facts: list[dict], both: pd.DataFrame, diff: pd.DataFrame,
                acc_before: pd.DataFrame, acc_after: pd.DataFrame):
    """The stage's ``Report`` over every repaired model (``facts``: one dict per model):
    Table 3, fix rates, changes, precision, accuracy, epochs."""
    from lingtest.tasks.core.publish import Report, provenance

    p = params.repair
    fixes = fix_rates(both, p.bootstrap, params.seed)
    acc = accuracy(acc_before, acc_after, p.bootstrap, params.seed)
    t3 = table3(both, p.bootstrap, params.seed)

    def each(render) -> str:
        return "; ".join(f"{one['model_id']}: {render(one)}" for one in facts)

    models = [line for one in facts for line in (
        f"{one['model_id']} @ {one['revision']} ({one['pooling']})",
        f"repaired: {one['repaired_path']} @ {one['repaired_revision']}")]
    n_classifiers = params.contrastive.n_classifiers
    out = Report("repair", metrics=metrics(facts, fixes, acc),
                 substitutes=substitutes(facts, n_classifiers),
                 provenance=provenance(
        params, workspace, "repair",
        inputs=[workspace.interim / "contrastive" / n for n in ("suite.parquet",
                                                                "results.parquet")],
        models=models,
        **{"setting (distance, θ kind, dictionary)": facts[0]["setting"],
           "θ of the original model": each(lambda one: one["theta"]),
           "training triples (violated / benign)":
               each(lambda one: f"{one['train_buggy']} / {one['train_benign']}"),
           "epoch kept": each(lambda one: f"{one['best_epoch']} (fewest violated "
                              f"{one['selection_split']} triples among "
                              f"{one['selection_triples']})")}))
    averaged = ("; the 'mean over N models' rows average the per-model figures (each model's "
                "decline on its own triples; a model without a violated triple in a cell is "
                "left out of that cell's mean), with a bootstrap that resamples triples within "
                "each model" if len(facts) > 1 else "")
    out.add("repair-table3", t3,
            "COSTELLO Table 3: N_V decline per relation after repair (%), the paper's average "
            "over 10 models beside lingtest's on training and held-out triples",
            notes="N_V decline = (N_V before − N_V after) / N_V before, after re-testing "
                  "through the contrastive method (θ re-derived on the repaired model); 95% "
                  f"percentile bootstrap over triples{averaged}. Held-out triples share no "
                  "seed sentence with the training or validation triples.")
    out.add("repair-fix-rates", fixes,
            "Fix rate per model and split: share of the violated triples that pass after repair",
            notes="train: the paper's number (trained on and re-tested on the same triples); "
                  "validation picked the epoch; heldout: never seen. 'at original θ' keeps "
                  f"the original model's θ instead of re-deriving it{averaged}.")
    out.add("repair-changes", changes(diff),
            "Triples fixed / broken / unchanged per model, split and relation (diff by case id)")
    out.add("repair-precision", precision(both, p.bootstrap, params.seed),
            "Ground-truth precision of the reported violations before and after repair "
            "(GT_A clearly buggy, GT_B potentially buggy; classifiers retrained on the "
            "repaired embeddings; CR4 judged by the MRPC classifiers)")
    out.add("repair-accuracy", acc,
            f"Clean test accuracy of the {n_classifiers} downstream classifiers on the "
            "original and repaired embeddings (paired bootstrap over classifiers; with "
            "several models their mean change first)")
    out.add("repair-epochs", pd.DataFrame([{"model": one["model_id"], **epoch}
                                           for one in map(without_timings, facts)
                                           for epoch in one["epochs"]]),
            "Repair epochs per model: learning rate, summed loss, micro-batches, violated "
            "selection triples after the epoch; the kept epoch marked (seconds: the run's log)")
    return out
