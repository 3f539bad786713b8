"""The debugging experiment's tables: per fixed topic and condition, the topic's held-out
error against the base model, topics fixed / broken / worsened elsewhere, and Figure 7.

A topic (a CheckList test) fails when its error rate reaches ``threshold`` (20 %). For each
model group (a condition trained on given topics), a topic's change is the paired
difference, over its held-out examples, between the group's error (averaged over the
training seeds) and the base model's; its two-sided p-value comes from ``bootstrap`` paired
resamples, and Benjamini–Hochberg at ``fdr`` runs over the group's topics. **Fixed**: failed
before, passes after, significant; **broken**: the reverse; **worsened**: failed before,
still fails, significantly more often (the paper's "protected: sexual" 40 % → 58.9 % kind,
which fixed / broken alone do not count). Examples CheckList could not judge (filtered)
before, or under every seed after, are left out; a topic with fewer than ``MIN_EXAMPLES``
compared examples gets no status.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lingtest.tasks.core.io import atomic_path
from lingtest.tasks.core.method import by_model
from lingtest.tasks.core.metrics import stage_metrics
from lingtest.tasks.core.publish import Figure, Report, provenance
from lingtest.tasks.core.stats import fdr, paired_change

SUBSTITUTES = ("Substitutes: the paper's fine-tuned RoBERTa-large SST-2 model → lingtest's "
               "MiniLM SST-2 classifier (train-sentiment stage); the paper's users reviewing "
               "suggestions → an oracle labelling each suggestion like the k nearest CheckList "
               "examples of the topic (MiniLM cosine; off topic below the similarity floor, "
               "abstaining when they disagree or the text reads as no test); the paper's GPT-3 "
               "suggestions → the packaged SmolLM2-135M-Instruct (models.causal_lm); the "
               "paper's users' stopping (no more failures found) → the share of failing "
               "suggestions at most the threshold, or the round limit; the paper's DynaSent "
               "(out of domain) → the IMDb contrast sets (Gardner et al. 2020).")
MIN_EXAMPLES = 5
FIGURE7_DATA = "adaptive-debug-figure7-lines.csv"  # Figure 7's data, wide (the table is long)
CONDITION_NAMES = {"before": "base model", "adatest": "AdaTest (5 seeds + fix rounds)",
                   "checklist-data": "CheckList data ({n} per topic)",
                   "adatest-tree": "hotel tree tests (not the paper's protocol)"}


def _fail(results: pd.DataFrame) -> pd.Series:
    """1.0 fail, 0.0 pass, NaN undefined."""
    return results["verdict"].map({"fail": 1.0, "pass": 0.0})


def _groups(results: pd.DataFrame) -> list[tuple[str, str]]:
    fine_tuned = results[results["condition"] != "before"]
    return list(dict.fromkeys(zip(fine_tuned["condition"], fine_tuned["variant"])))


def topic_changes(results: pd.DataFrame, threshold: float, n_boot: int, alpha: float,
                  seed: int) -> pd.DataFrame:
    """Per model group (condition, variant) × CheckList topic: examples compared, error of
    the base model and after (%), the change with its 95 % interval and p-value, BH q-value
    within the group and the status (fixed / broken / worsened / "")."""
    checklist = results[results["set"] == "checklist"].assign(fail=_fail)
    before = checklist[checklist["condition"] == "before"].set_index("case_id")
    rows = []
    for condition, variant in _groups(results):
        part = checklist[(checklist["condition"] == condition)
                         & (checklist["variant"] == variant)]
        after = part.groupby("case_id")["fail"].mean()  # mean skips undefined seeds
        for topic, group in before.groupby("topic", sort=True):
            pair = pd.DataFrame({"before": group["fail"],
                                 "after": after.reindex(group.index)}).dropna()
            rng = np.random.default_rng([seed, len(rows)])
            change, low, high, p = paired_change(pair["before"], pair["after"], n_boot, rng)
            rows.append({"condition": condition, "variant": variant, "topic": topic,
                         "examples": len(pair),
                         "error_before": 100 * pair["before"].mean() if len(pair) else np.nan,
                         "error_after": 100 * pair["after"].mean() if len(pair) else np.nan,
                         "change_pp": 100 * change, "change_lo": 100 * low,
                         "change_hi": 100 * high, "p": p})
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table["q"] = table.groupby(["condition", "variant"])["p"].transform(
        lambda p: fdr(p.to_numpy()))
    limit = 100 * threshold
    failed_before, failed_after = table["error_before"] >= limit, table["error_after"] >= limit
    significant = (table["q"] <= alpha) & (table["examples"] >= MIN_EXAMPLES)
    table["status"] = np.select(
        [significant & failed_before & ~failed_after,
         significant & ~failed_before & failed_after,
         significant & failed_before & failed_after & (table["change_pp"] > 0)],
        ["fixed", "broken", "worsened"], "")
    return table.round({"error_before": 2, "error_after": 2, "change_pp": 2, "change_lo": 2,
                        "change_hi": 2, "p": 4, "q": 4})


def _accuracy(results: pd.DataFrame, topic: str) -> pd.Series:
    """Accuracy (%) per model of the cases under ``topic``."""
    part = results[results["topic"] == topic]
    return 100 * part.groupby("model_id", sort=False)["verdict"].apply(
        lambda v: v.eq("pass").mean())


ACCURACY = (("sst2_acc", "SST-2 validation"), ("imdb_original_acc", "IMDb contrast sets: original"),
            ("imdb_contrast_acc", "IMDb contrast sets: contrast"))


def table1(results: pd.DataFrame, changes: pd.DataFrame, topics: list[str], alpha: float,
           rounds: pd.DataFrame, topic_tests: dict[tuple[str, str], float]) -> pd.DataFrame:
    """The paper's Table 1 per fixed topic: base error on the topic's held-out tests, each
    condition's error (mean over seeds) with ``*`` when the change against the base is
    significant (BH q ≤ ``alpha``), rounds run, tests trained on, and the other topics that
    condition fixed / broke / worsened; accuracy in and out of domain (mean over seeds)."""
    accuracy = {key: _accuracy(results, topic) for key, topic in ACCURACY}
    models = results.drop_duplicates("model_id").set_index("model_id")[["condition",
                                                                       "variant"]]
    base_ids = models.index[models["condition"] == "before"]
    rows = []
    for i, topic in enumerate(topics, start=1):
        own = changes[changes["topic"] == f"CheckList: {topic}"]
        for condition in dict.fromkeys(changes["condition"]):
            if condition == "adatest-tree":
                continue
            mine = own[(own["condition"] == condition) & (own["variant"] == f"t{i}")]
            if mine.empty:
                continue
            m = mine.iloc[0]
            group = changes[(changes["condition"] == condition)
                            & (changes["variant"] == f"t{i}")]
            others = group[group["topic"] != f"CheckList: {topic}"]
            ids = models.index[(models["condition"] == condition)
                               & (models["variant"] == f"t{i}")]
            mark = "*" if m["q"] <= alpha and m["examples"] >= MIN_EXAMPLES else ""
            row = {"topic": topic, "condition": condition, "examples": int(m["examples"]),
                   "base_error": m["error_before"], "error": m["error_after"],
                   "vs_base": f"{m['error_after']:.1f}{mark}", "change_pp": m["change_pp"],
                   "q": m["q"], "status": m["status"] or "-",
                   "rounds": (round(float(rounds.loc[(rounds["topic"] == topic), "fixes"]
                                          .mean()), 2)
                              if condition == "adatest" and len(rounds) else np.nan),
                   "tests_trained": topic_tests.get((condition, f"t{i}"), 0),
                   "others_fixed": int((others["status"] == "fixed").sum()),
                   "others_broken": int((others["status"] == "broken").sum()),
                   "others_worsened": int((others["status"] == "worsened").sum())}
            for key, values in accuracy.items():
                picked = values.reindex(ids).dropna()
                row[key] = round(float(picked.mean()), 2) if len(picked) else np.nan
                row[f"base_{key}"] = round(float(values.reindex(base_ids).mean()), 2)
            rows.append(row)
    return pd.DataFrame(rows)


def condition_summary(table: pd.DataFrame, changes: pd.DataFrame,
                      topic_tests: dict[tuple[str, str], float]) -> pd.DataFrame:
    """Per condition, over the fixed topics (each trained alone): topics fixed, their mean
    held-out error before / after, other topics fixed / broken / worsened in total, and the
    mean accuracies; the hotel-tree condition's one model counted alike."""
    rows = []
    for condition, part in table.groupby("condition", sort=False):
        rows.append({"condition": condition, "topics_trained_alone": len(part),
                     "own_topic_fixed": int((part["status"] == "fixed").sum()),
                     "own_topic_significant": int(part["vs_base"].str.endswith("*").sum()),
                     "own_error_base": round(float(part["base_error"].mean()), 2),
                     "own_error_after": round(float(part["error"].mean()), 2),
                     "mean_rounds": round(float(part["rounds"].mean()), 2)
                     if part["rounds"].notna().any() else np.nan,
                     "tests_trained": round(float(part["tests_trained"].mean()), 1),
                     "others_fixed": int(part["others_fixed"].sum()),
                     "others_broken": int(part["others_broken"].sum()),
                     "others_worsened": int(part["others_worsened"].sum()),
                     **{key: round(float(part[key].mean()), 2) for key, _ in ACCURACY}})
    tree = changes[changes["condition"] == "adatest-tree"]
    if len(tree):
        rows.append({"condition": "adatest-tree", "topics_trained_alone": 0,
                     "tests_trained": topic_tests.get(("adatest-tree", "tree"), 0),
                     "others_fixed": int((tree["status"] == "fixed").sum()),
                     "others_broken": int((tree["status"] == "broken").sum()),
                     "others_worsened": int((tree["status"] == "worsened").sum())})
    return pd.DataFrame(rows)


def figure7_table(changes: pd.DataFrame, topics: list[str]) -> pd.DataFrame:
    """Per condition and k = number of topics trained on (the first k; k = 0 the base
    model): the mean held-out error (%) over the trained topics and over the other
    CheckList topics (macro: each topic weighs the same), topics judged ≥ MIN_EXAMPLES."""
    judged = changes[changes["examples"] >= MIN_EXAMPLES]
    names = [f"CheckList: {t}" for t in topics]
    rows = []
    for condition in dict.fromkeys(judged["condition"]):
        if condition == "adatest-tree":
            continue
        for k in range(0, len(topics) + 1):
            variant = "t1" if k <= 1 else f"k{k}"
            part = judged[(judged["condition"] == condition) & (judged["variant"] == variant)]
            if part.empty:
                continue
            trained = part["topic"].isin(names[:max(k, 1)])
            column = "error_before" if k == 0 else "error_after"
            rows.append({"condition": "before" if k == 0 else condition, "k": k,
                         "trained_error": round(float(part.loc[trained, column].mean()), 2),
                         "others_error": round(float(part.loc[~trained, column].mean()), 2),
                         "base_trained_error": round(float(part.loc[trained, "error_before"]
                                                           .mean()), 2),
                         "base_others_error": round(float(part.loc[~trained, "error_before"]
                                                          .mean()), 2),
                         "other_topics": int((~trained).sum()),
                         "broken": int((part.loc[~trained, "status"] == "broken").sum()),
                         "worsened": int((part.loc[~trained, "status"] == "worsened").sum())})
    table = pd.DataFrame(rows)
    return table.drop_duplicates(["condition", "k"]) if len(table) else table


FIGURE7_CONDITIONS = ("adatest", "checklist-data")
FIGURE7_LINES = [f"{c} {column}_error" for column in ("trained", "others")
                 for c in (*FIGURE7_CONDITIONS, "base")]


def figure7_data(table: pd.DataFrame) -> pd.DataFrame:
    """What Figure 7 plots, wide: one row per k ≥ 1, each condition's mean error on the
    trained and the other topics and the base model's on the same topics
    (``FIGURE7_LINES``; blank: that condition did not run)."""
    trained = table[table["k"] > 0]
    out = pd.DataFrame({"k": sorted(trained["k"].unique())})
    for column in ("trained", "others"):
        for condition in FIGURE7_CONDITIONS:
            part = trained[trained["condition"] == condition].set_index("k")
            out[f"{condition} {column}_error"] = (
                part[f"{column}_error"].reindex(out["k"]).to_numpy(dtype=float))
        base = trained.drop_duplicates("k").set_index("k")
        out[f"base {column}_error"] = base[f"base_{column}_error"].reindex(out["k"]).to_numpy(
            dtype=float)
    return out[["k", *FIGURE7_LINES]]


def figure7(table: pd.DataFrame, path: Path, checklist_n: int = 50) -> Path:
    """``figure7_figure`` written to ``path`` (PNG, atomically)."""
    fig = figure7_figure(table, checklist_n)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    return path


def figure7_figure(table: pd.DataFrame, checklist_n: int = 50):
    """The paper's Figure 7 view: x = number of topics trained on, y = mean held-out error
    on the trained topics (left) and the other topics (right), one line per condition and
    the base model's error on the same topics dashed. Bare Figure: safe in worker threads."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.4, 3.8), dpi=120)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharey=True)
    colors = {"adatest": "tab:blue", "checklist-data": "tab:orange"}
    trained = table[table["k"] > 0]
    for ax, column, title in ((axes[0], "trained", "topics trained on"),
                              (axes[1], "others", "other CheckList topics")):
        for condition, part in trained.groupby("condition", sort=False):
            label = CONDITION_NAMES.get(condition, condition).format(n=checklist_n)
            ax.plot(part["k"], part[f"{column}_error"], marker="o",
                    color=colors.get(condition, "tab:gray"), label=label)
        base = trained.drop_duplicates("k")
        ax.plot(base["k"], base[f"base_{column}_error"], ls="--", color="black", marker=".",
                label="base model (same topics)")
        ax.set_title(f"held-out error: {title}", fontsize=9)
        ax.set_xlabel("number of topics trained on")
        ax.set_xticks(sorted(trained["k"].unique()))
        ax.set_ylim(-3, 103)
    axes[0].set_ylabel("mean error (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def headline(summary: pd.DataFrame) -> dict[str, dict]:
    """Per condition the DVC metrics, from ``condition_summary``."""
    out: dict[str, dict] = {}
    for row in summary.to_dict("records"):
        values = out.setdefault(row["condition"], {})
        for key in ("own_topic_fixed", "own_error_after", "others_broken", "others_worsened",
                    "sst2_acc"):
            value = row.get(key)
            if value is not None and not (isinstance(value, float) and np.isnan(value)):
                values[key] = value
    return out


def training_tests(loop) -> pd.DataFrame:
    """Every test each condition trained on before mixing with SST-2 (which tests were
    used): condition, topic, training seed, text, label, source, round."""
    frames = [run.tests.assign(condition="adatest", train_seed=seed)
              for (_, seed), run in loop.topic_runs.items()]
    frames += [data.assign(condition="checklist-data", train_seed=seed)
               for (_, seed), data in loop.checklist_data.items()]
    if loop.tree_data is not None:
        frames.append(loop.tree_data.assign(condition="adatest-tree", train_seed=-1))
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)[["condition", "topic", "train_seed", "text",
                                                 "label", "source", "round"]]


def debugging_report(loop, suite: pd.DataFrame, results: pd.DataFrame, runs) -> Report:
    d, params = loop.debug, loop.params
    changes = topic_changes(results, d.threshold, d.bootstrap, d.fdr, params.seed)
    topic_tests = {}
    per_model = {model_id: its_runs[0] for model_id, its_runs in by_model(runs).items()}
    for model_id, run in per_model.items():  # a model's shards share its by-products
        condition, tag, _ = loop.variant(model_id)
        if condition != "before":
            topic_tests.setdefault((condition, tag), []).append(run.extra["topic_tests"])
    topic_tests = {key: float(np.mean(v)) for key, v in topic_tests.items()}
    rounds = (pd.concat([run.rounds for run in loop.topic_runs.values()], ignore_index=True)
              .assign(train_seed=[s for (_, s), run in loop.topic_runs.items()
                                  for _ in range(len(run.rounds))])
              if loop.topic_runs else pd.DataFrame())
    table = table1(results, changes, list(d.topics), d.fdr,
                   rounds.groupby(["topic", "train_seed"], as_index=False)["fixes"].max()
                   if len(rounds) else rounds, topic_tests)
    summary = condition_summary(table, changes, topic_tests)
    fig7 = figure7_table(changes, list(d.topics))
    tests = training_tests(loop)
    revisions = [f"{model_id} ({run.extra['revision']})" for model_id, run in per_model.items()]
    splits = pd.DataFrame([{"topic": s.topic, "seed_tests": len(s.seeds), "pool": len(s.pool),
                            "held_out": s.held_out} for s in loop.splits.values()])
    inputs = [loop.workspace.processed / f"{t}.parquet"
              for t in ("checklist_suite", "sst", "contrast_pairs")]
    if "adatest-tree" in d.conditions:
        inputs.append(loop.tree_path)
        if loop.corrections_path is not None:
            inputs.append(loop.corrections_path)
    report = Report(loop.stage, substitutes=SUBSTITUTES, provenance=provenance(
        params, loop.workspace, "adaptive.debug", inputs=inputs, models=revisions,
        training_seeds=str(loop.train_seeds), generator=params.models.causal_lm,
        held_out_dropped=str(loop.dropped_held_out)))
    design = (f"Each condition is fine-tuned from the base model on one topic's data (mixed "
              f"{d.mix_ratio:g}:1 with SST-2 training sentences): adatest on the tree grown "
              f"from {d.seed_tests} seed tests of the topic by at most {d.rounds} "
              "test–fix–retest rounds (suggestions reviewed by the nearest-example oracle, "
              f"failing ones added); checklist-data on {d.checklist_n} CheckList examples of "
              "the topic's pool. Both are evaluated on the held-out sample of every CheckList "
              f"test ({d.checklist_examples} per test; the topic's own included; never "
              f"trained on: {loop.dropped_held_out} sampled examples whose text a condition "
              "trained on were dropped), SST-2 validation and the IMDb contrast sets.")
    report.add("adaptive-debug-table1", table,
               "AdaTest debugging: per fixed topic, held-out error of the base model and each "
               "condition (the paper's Table 1)",
               notes=f"{design} Errors in %, mean over {d.seeds} training seed(s); `*`: "
                     f"significant change against the base model ({d.bootstrap} paired "
                     f"bootstrap resamples, Benjamini–Hochberg FDR {d.fdr} over the model's "
                     f"CheckList topics). A topic fails at ≥ {100 * d.threshold:g}% error; "
                     "others_*: the other CheckList topics that model fixed / broke / worsened "
                     "(worsened: failing before, significantly worse, still failing).")
    report.add("adaptive-debug-summary", summary,
               "AdaTest debugging: per condition over the fixed topics",
               notes="Sums / means of Table 1's rows per condition.")
    report.add("adaptive-debug-figure7", fig7,
               "AdaTest debugging: held-out error by the number of topics trained on "
               "(the paper's Figure 7)",
               notes="k topics = the first k of adaptive.debug.topics trained on together "
                     "(k = 0: the base model); mean topic error over the trained topics and "
                     "over the other CheckList topics.")
    report.add("adaptive-debug-topics", changes,
               "AdaTest debugging: every CheckList topic's held-out error per model group",
               notes="variant t<i>: topic i alone, k<k>: the first k topics; change_pp = after "
                     "− base in percentage points (95 % paired bootstrap interval); q = BH "
                     "within the group.")
    if len(rounds):
        report.add("adaptive-debug-rounds", rounds,
                   "AdaTest debugging: the test–fix–retest rounds per topic and seed",
                   notes="failing_share: failing among the oracle-labelled suggestions; the "
                         "loop stops when it is at most the threshold (after a fix) or after "
                         "the round limit; fixes: fine-tunings so far.")
    if len(splits):
        report.add("adaptive-debug-splits", splits,
                   "AdaTest debugging: each fixed topic's seed / pool / held-out examples")
    if len(loop.corrections):
        report.add("adaptive-debug-corrections", loop.corrections,
                   "Label corrections applied to the hotel tree (adatest-tree)")
    if len(tests):
        report.frames["adaptive-debug-training-tests.csv"] = tests
    if len(fig7):
        report.figures["adaptive-debug-figure7.png"] = Figure(
            lambda path: figure7(fig7, path, d.checklist_n), figure7_data(fig7),
            data_name=FIGURE7_DATA)
    base = loop.model_ref.name
    report.metrics = stage_metrics(
        f"{len(d.topics)} topic(s), mean over {d.seeds} training seed(s)",
        {f"{base}+{condition}": values for condition, values in headline(summary).items()})
    return report
