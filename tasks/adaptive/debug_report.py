"""The debugging loop's tables: CheckList topics fixed / broken and accuracy before/after.

A topic (a CheckList test) fails when its error rate reaches ``threshold`` (20 %). For each
condition, a topic's change is the paired difference, over its examples, between the
fine-tuned models' error (averaged over the training seeds) and the checkpoint's; its
two-sided p-value comes from ``bootstrap`` (5,000) paired resamples, and Benjamini–Hochberg
at ``fdr`` (0.05) runs over the condition's topics. A topic is **fixed** when it failed
before, passes after and the change is significant; **broken** the other way round.
Examples CheckList could not judge (filtered) before, or under every seed after, are left
out of that topic's comparison; a topic with fewer than ``MIN_EXAMPLES`` compared examples
(CheckList's DIR tests filter most of theirs) gets no status and is not counted or plotted.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from tasks.core.io import atomic_path
from tasks.core.publish import Report, provenance
from tasks.core.stats import fdr, paired_change

SUBSTITUTES = ("Substitutes: the paper's fine-tuned RoBERTa-large SST-2 model → lingtest's "
               "MiniLM SST-2 classifier (train-sentiment stage); the paper's DynaSent "
               "(out of domain) → the IMDb contrast sets (Gardner et al. 2020); the paper's "
               "users' AdaTest topics → the mirrored hotel-review tree "
               "(imdb_hotel_conversion.csv).")
MIN_EXAMPLES = 5
CONDITION_NAMES = {"before": "original model", "adatest": "AdaTest tests (tree)",
                   "checklist-data": "CheckList data ({n} per MFT test)"}


def _fail(results: pd.DataFrame) -> pd.Series:
    """1.0 fail, 0.0 pass, NaN undefined."""
    return results["verdict"].map({"fail": 1.0, "pass": 0.0})


def topic_changes(results: pd.DataFrame, conditions: list[str], threshold: float,
                  n_boot: int, alpha: float, seed: int) -> pd.DataFrame:
    """Per CheckList topic × condition: examples compared, error before / after (%), the
    change with its 95% interval and p-value, BH q-value and the status."""
    checklist = results[results["set"] == "checklist"].assign(fail=_fail)
    before = checklist[checklist["condition"] == "before"].set_index("case_id")
    rows = []
    for condition in conditions:
        after = (checklist[checklist["condition"] == condition]
                 .groupby("case_id")["fail"].mean())  # mean skips undefined seeds
        for topic, group in before.groupby("topic", sort=True):
            pair = pd.DataFrame({"before": group["fail"], "after": after.reindex(group.index)})
            pair = pair.dropna()
            rng = np.random.default_rng([seed, len(rows)])
            change, low, high, p = paired_change(pair["before"], pair["after"], n_boot, rng)
            rows.append({"condition": condition, "topic": topic, "examples": len(pair),
                         "error_before": 100 * pair["before"].mean() if len(pair) else np.nan,
                         "error_after": 100 * pair["after"].mean() if len(pair) else np.nan,
                         "change_pp": 100 * change, "change_lo": 100 * low,
                         "change_hi": 100 * high, "p": p})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table["q"] = table.groupby("condition")["p"].transform(lambda p: fdr(p.to_numpy()))
    limit = 100 * threshold
    failed_before, failed_after = table["error_before"] >= limit, table["error_after"] >= limit
    significant = table["q"] <= alpha
    significant &= table["examples"] >= MIN_EXAMPLES
    table["status"] = np.select(
        [significant & failed_before & ~failed_after, significant & ~failed_before & failed_after],
        ["fixed", "broken"], "")
    return table.round({"error_before": 2, "error_after": 2, "change_pp": 2, "change_lo": 2,
                        "change_hi": 2, "p": 4, "q": 4})


def _accuracy(results: pd.DataFrame, topic: str) -> pd.Series:
    """Accuracy (%) per model of the cases under ``topic``."""
    part = results[results["topic"] == topic]
    return 100 * part.groupby("model_id", sort=False)["verdict"].apply(lambda v: v.eq("pass")
                                                                         .mean())


def table1(results: pd.DataFrame, changes: pd.DataFrame, trained_on: dict[str, int],
           conditions: list[str], threshold: float, checklist_n: int = 50) -> pd.DataFrame:
    """The paper's Table 1 layout: per condition, accuracy in and out of domain (mean and
    standard deviation over training seeds) and CheckList topics failing / fixed / broken,
    over the topics with at least ``MIN_EXAMPLES`` examples judged before."""
    models = results.drop_duplicates("model_id").set_index("model_id")["condition"]
    accuracy = {name: _accuracy(results, topic) for name, topic in (
        ("sst2_validation", "SST-2 validation"),
        ("imdb_original", "IMDb contrast sets: original"),
        ("imdb_contrast", "IMDb contrast sets: contrast"))}
    checklist = results[results["set"] == "checklist"].assign(fail=_fail)
    judged = checklist[checklist["condition"] == "before"].groupby("topic")["fail"].count()
    topics = judged.index[judged >= MIN_EXAMPLES]
    checklist = checklist[checklist["topic"].isin(topics)]
    errors = checklist.groupby(["model_id", "topic"], sort=False)["fail"].mean()
    failing = (errors >= threshold).groupby(level=0, sort=False).sum()
    rows = []
    for condition in ["before", *conditions]:
        ids = models.index[models == condition]
        row = {"condition": condition,
               "data": CONDITION_NAMES.get(condition, condition).format(n=checklist_n),
               "seeds": 0 if condition == "before" else len(ids),
               "training_examples": trained_on.get(condition, 0)}
        for name, values in accuracy.items():
            picked = values.reindex(ids).dropna()
            row[f"{name}_acc"] = round(float(picked.mean()), 2) if len(picked) else np.nan
            row[f"{name}_sd"] = round(float(picked.std(ddof=1)), 2) if len(picked) > 1 \
                else np.nan
        row["checklist_topics"] = len(topics)
        row["topics_failing"] = round(float(failing.reindex(ids).mean()), 2)
        part = changes[changes["condition"] == condition] if len(changes) else changes
        row["topics_fixed"] = int((part["status"] == "fixed").sum()) if len(part) else 0
        row["topics_broken"] = int((part["status"] == "broken").sum()) if len(part) else 0
        rows.append(row)
    return pd.DataFrame(rows)


def scatter(changes: pd.DataFrame, threshold: float, path: Path, checklist_n: int = 50
            ) -> Path:
    """``scatter_figure`` written to ``path`` (PNG, atomically)."""
    fig = scatter_figure(changes, threshold, checklist_n)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    return path


def scatter_figure(changes: pd.DataFrame, threshold: float, checklist_n: int = 50):
    """Error before vs after per CheckList topic, one panel per condition (the paper's
    Figure 7 view); fixed topics green, broken red, a legend below. Bare Figure: safe in
    worker threads."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    changes = changes[changes["examples"] >= MIN_EXAMPLES]
    conditions = list(dict.fromkeys(changes["condition"]))
    fig = Figure(figsize=(4.2 * len(conditions), 4.2), dpi=120)
    FigureCanvasAgg(fig)
    axes = np.atleast_1d(fig.subplots(1, len(conditions), sharey=True))
    colors = {"fixed": "tab:green", "broken": "tab:red", "": "tab:gray"}
    for ax, condition in zip(axes, conditions):
        part = changes[changes["condition"] == condition]
        ax.scatter(part["error_before"], part["error_after"], s=18,
                   c=[colors[s] for s in part["status"]], alpha=0.85)
        ax.plot([0, 100], [0, 100], color="black", lw=0.6)
        ax.axhline(100 * threshold, color="tab:orange", lw=0.6, ls="--")
        ax.axvline(100 * threshold, color="tab:orange", lw=0.6, ls="--")
        fixed, broken = (part["status"] == "fixed").sum(), (part["status"] == "broken").sum()
        ax.set_title(f"{CONDITION_NAMES.get(condition, condition).format(n=checklist_n)}\n"
                     f"{fixed} fixed, {broken} broken", fontsize=9)
        ax.set_xlabel("error before (%)")
        ax.set_xlim(-3, 103)
        ax.set_ylim(-3, 103)
    axes[0].set_ylabel("error after, mean over seeds (%)")
    fig.suptitle("CheckList topics before and after fine-tuning", fontsize=10)
    fig.legend(handles=_legend(colors, threshold), loc="lower center", ncol=3, fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.11, 1, 1))
    return fig


def _legend(colors: dict[str, str], threshold: float) -> list:
    """What the marks mean: a topic is fixed / broken when its error crosses the threshold
    with a significant change (BH q ≤ fdr); the rest are grey."""
    from matplotlib.lines import Line2D

    def dot(color: str, label: str) -> Line2D:
        return Line2D([], [], ls="", marker="o", ms=5, color=color, label=label)

    return [dot(colors["fixed"], "fixed (now passes, significant)"),
            dot(colors["broken"], "broken (now fails, significant)"),
            dot(colors[""], "no significant crossing"),
            Line2D([], [], color="tab:orange", lw=0.8, ls="--",
                   label=f"failure threshold ({100 * threshold:g} %)"),
            Line2D([], [], color="black", lw=0.6, label="no change")]


def headline(table: pd.DataFrame) -> dict:
    """Fixed / broken topics and accuracies per condition (DVC metrics), from ``table1``."""
    out = {}
    for row in table.itertuples(index=False):
        out[f"{row.condition} sst2 acc"] = row.sst2_validation_acc
        out[f"{row.condition} imdb contrast acc"] = row.imdb_contrast_acc
        if row.condition != "before":
            out[f"{row.condition} fixed"] = row.topics_fixed
            out[f"{row.condition} broken"] = row.topics_broken
    return out


def debugging_report(loop, suite: pd.DataFrame, results: pd.DataFrame, runs) -> Report:
    d, params = loop.debug, loop.params
    changes = topic_changes(results, d.conditions, d.threshold, d.bootstrap, d.fdr,
                            params.seed)
    trained_on = {loop.variant(r.unit.model_id)[0]: r.extra["trained_on"] for r in runs}
    summary = table1(results, changes, trained_on, d.conditions, d.threshold, d.checklist_n)
    training = pd.concat([frame.assign(condition=c) for c, frame in loop.training.items()
                          if c in d.conditions], ignore_index=True)
    by_topic = (training.groupby(["condition", "topic"], sort=True)
                .agg(examples=("text", "size"),
                     pos=("label", lambda v: int((v == "pos").sum())))
                .reset_index())
    revisions = [f"{r.unit.model_id} ({r.extra['revision']})" for r in runs]
    report = Report(loop.stage, substitutes=SUBSTITUTES, provenance=provenance(
        params, loop.workspace, "adaptive.debug", inputs=[loop.tree_path],
        models=revisions, training_seeds=str(loop.train_seeds)))
    report.add("adatest-debug-table1", summary,
               "AdaTest debugging loop: accuracy before/after and CheckList topics "
               "fixed/broken per condition (the paper's Table 1 layout)",
               notes=f"Accuracy in %, mean (sd) over {d.seeds} training seeds. CheckList "
                     f"topics with ≥ {MIN_EXAMPLES} examples judged before. A topic fails "
                     f"at ≥ {100 * d.threshold:g}% error; fixed / broken need a significant "
                     f"change ({d.bootstrap} paired bootstrap resamples, Benjamini–Hochberg "
                     f"FDR {d.fdr}). Training data is mixed {d.mix_ratio:g}:1 with SST-2 "
                     "training sentences; no evaluated example was trained on.")
    report.add("adatest-debug-topics", changes,
               "AdaTest debugging loop: CheckList topic error before/after per condition",
               notes="change_pp = after − before in percentage points (95% paired bootstrap "
                     "interval); q = BH-adjusted p within the condition.")
    report.add("adatest-debug-training", by_topic,
               "AdaTest debugging loop: the topic data each condition trained on "
               "(before mixing with SST-2)")
    if len(changes) and (changes["examples"] >= MIN_EXAMPLES).any():
        report.figures["adatest-debug-figure7.png"] = (
            lambda path: scatter(changes, d.threshold, path, d.checklist_n))
    report.metrics = headline(summary)
    return report
