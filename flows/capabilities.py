"""The ``capabilities`` stage (S²LCT): specs → seeds → parse → masks → fill → models →
Table 3 per model, the CheckList comparison and the coverage curve (Figure 4)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from prefect import flow
from prefect.runtime import flow_run

from tasks.capabilities import expansion, report
from tasks.capabilities import pipeline as cp
from tasks.capabilities.coverage import length_summary, plot_coverage_curve
from tasks.capabilities.search import load_word_polarity
from tasks.capabilities.specs import BUILTIN_SPECS, load_specs
from tasks.capabilities.train_sentiment import sst2_split
from tasks.core import io
from tasks.core.artifacts import publish_table
from tasks.core.config import Params
from tasks.core.errors import LingtestError
from tasks.core.paths import Workspace
from tasks.core.runtime import git_commit

TABLES = ("sst", "word_polarity", "ptb_trees", "checklist_suite")


def substitutes(params: Params) -> str:
    """The paper's assets this run replaced, for every report's header."""
    c = params.capabilities
    named = []
    if any(m in ("lingtest/minilm-sst2", "vader") for m in c.models):
        named.append("the paper's SST-2 BERT / RoBERTa / DistilBERT → " + " and ".join(
            m for m in c.models if m in ("lingtest/minilm-sst2", "vader"))
            + " (MiniLM fine-tuned on SST-2 by the train-sentiment stage)")
    if c.parser == "pcfg":
        named.append("benepar benepar_en3 → a PCFG induced from the Penn Treebank sample, "
                     "parsing spaCy's PTB tags (vectorised CKY)")
    if "bert" not in c.fill_model.lower():
        named.append(f"BERT fill-mask → {c.fill_model} proposing words from the left context, "
                     "re-scored on the whole sentence")
    if c.word_sentiment == "lexicon":
        named.append("SentiWordNet → word polarity from SST's single-word phrase labels and "
                     "the Hu & Liu opinion lexicon")
    return "Substitutes: " + "; ".join(named) + "." if named else ""


@flow(name="capabilities", log_prints=True)
def capabilities_flow(params: Params, root: str) -> dict:
    c, workspace = params.capabilities, Workspace(Path(root))
    files = {name: workspace.processed / f"{name}.parquet" for name in TABLES}
    absent = [str(f) for f in files.values() if not f.is_file()]
    if absent:
        raise LingtestError(f"missing processed tables {', '.join(absent)}: run "
                            "`lingtest run data` (or `dvc repro data`) first")
    out = workspace.interim / "capabilities"
    reports = io.staging_dir(workspace.reports / "capabilities")  # swapped in whole at the end
    specs = load_specs(workspace.root / c.specs_dir if c.specs_dir else BUILTIN_SPECS,
                       c.capabilities)
    models = cp.load_models(c, params.models.offline, root)  # fail fast on a missing model

    tagged = cp.tag_sentences(str(files["sst"]), params.models.spacy, params.models.offline)
    polarity_path = str(files["word_polarity"]) if c.word_sentiment == "lexicon" else None
    polarity = load_word_polarity(
        c.word_sentiment, pd.read_parquet(polarity_path) if polarity_path else None,
        workspace.nltk_data)
    seeds, seed_counts = cp.seed_cases(specs, tagged, polarity, c.seeds_per_lc, params.seed)
    grammar_path = out / "pcfg.json"
    pcfg = cp.induce_grammar(str(files["ptb_trees"]), c.pcfg_heldout)
    with io.atomic_path(grammar_path) as tmp:
        pcfg["pcfg"].save(tmp)
    settings = {"max_masks_per_seed": c.max_masks_per_seed,
                "fill_candidates": c.fill_candidates,
                "max_expansions_per_seed": c.max_expansions_per_seed,
                "word_sentiment": c.word_sentiment}
    expanded, fill_stats = [], []
    for spec in specs:
        cases = seeds[seeds["capability"] == spec.id].reset_index(drop=True)
        frame, stats = cp.expand_capability(
            spec, cases, str(grammar_path), polarity_path, polarity, str(files["ptb_trees"]),
            tagged, {**settings, "mask_sampling": c.mask_sampling,
                     "top_productions": c.top_productions,
                     "min_logprob_per_word": c.min_logprob_per_word,
                     "min_right_context_logprob": c.min_right_context_logprob},
            params.seed, c.fill_model, c.parser, params.models.spacy, params.models.offline)
        expanded.append(frame)
        fill_stats.append(stats)
    suite = pd.concat([seeds.assign(parent_case_id=""), *expanded], ignore_index=True)
    suite = suite.drop_duplicates("case_id").reset_index(drop=True)
    io.write_parquet(out / "suite.parquet", suite)
    expansion.write_suite_jsonl(suite, out / "suite.jsonl")

    results = pd.concat([cp.run_suite(m, suite) for m in models], ignore_index=True)
    io.write_parquet(out / "results.parquet", results)
    checklist = pd.read_parquet(files["checklist_suite"])
    verdicts = pd.concat([cp.run_checklist(m, checklist, c.checklist_max_examples, params.seed,
                                           c.batch_size) for m in models], ignore_index=True)
    io.write_parquet(out / "checklist_verdicts.parquet", verdicts)

    lcs = [s.id for s in specs]
    coverage = _coverage(params, files, suite, checklist, lcs,
                         [m for m in models if cp.has_hidden_states(m)])

    provenance = _provenance(params, workspace, files, models, pcfg)
    tables = {m.model_id: report.table3(results[results["model_id"] == m.model_id], lcs,
                                        c.bootstrap, params.seed) for m in models}
    _publish(params, specs, suite, results, verdicts, seed_counts, fill_stats, pcfg, tables,
             coverage, reports, provenance)
    io.replace_dir(reports, workspace.reports / "capabilities")
    io.write_json(workspace.reports / "capabilities-metrics.json",
                  _metrics(tables, suite, pcfg, coverage["curve"]))
    return {"cases": len(suite), "seeds": int((suite["kind"] == "seed").sum()),
            "expansions": int((suite["kind"] == "expansion").sum()),
            "flow_run_id": str(flow_run.id)}


def _coverage(params: Params, files: dict, suite: pd.DataFrame, checklist: pd.DataFrame,
              lcs: list[str], models: list) -> dict:
    """Coverage of every model with hidden states: whole suites at equal sizes, each LC
    against its CheckList test at equal size, and both suites' length distributions."""
    c = params.capabilities
    sampled = cp.checklist_run.sample_suite(checklist, c.checklist_max_examples, params.seed)
    suites = {"S²LCT": list(dict.fromkeys(suite["text"])),
              "CheckList": list(dict.fromkeys(t for ts in sampled["texts"] for t in ts))}
    pairs = cp.coverage_pairs(suite, checklist, lcs, params.seed)
    lengths = coverage_lengths(suites, pairs)
    curves, by_lc, info = [], [], {}
    if models:
        train = sst2_split(pd.read_parquet(files["sst"]), "train")
        if c.coverage_max_train and c.coverage_max_train < len(train):
            train = train.sample(n=c.coverage_max_train, random_state=params.seed)
        for model in models:
            curve, pairs_table, model_info = cp.coverage_curve(
                model, train["text"].tolist(), suites, pairs, c.coverage_sizes,
                c.coverage_repeats, params.seed)
            curves.append(curve)
            by_lc.append(pairs_table)
            info.update({f"coverage {model.model_id} {k}": v for k, v in model_info.items()})
    return {"curve": pd.concat(curves, ignore_index=True) if curves else None,
            "by_lc": pd.concat(by_lc, ignore_index=True) if by_lc else None,
            "lengths": lengths, "info": info}


def coverage_lengths(suites: dict[str, list[str]], pairs: dict) -> pd.DataFrame:
    """Length distributions of both whole suites, then of each LC and its CheckList test."""
    named = dict(suites)
    for lc, (test, ours, theirs) in pairs.items():
        named[f"{lc} (S²LCT)"] = ours
        named[f"{lc}: {test} (CheckList)"] = theirs
    return length_summary(named)


def _metrics(tables: dict[str, pd.DataFrame], suite: pd.DataFrame, pcfg: dict,
             curve: pd.DataFrame | None) -> dict:
    """Headline figures for `dvc metrics show` / `dvc exp show`."""
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


def _provenance(params: Params, workspace: Workspace, files: dict, models: list,
                pcfg: dict) -> dict:
    return {
        "seed": params.seed, "profile": params.profile,
        "parameters (capabilities)": params.capabilities.model_dump_json(),
        "inputs (sha256)": ", ".join(f"{f.name}={io.sha256_file(f)[:12]}" for f in files.values()),
        "models under test": "; ".join(f"{m.model_id} @ {m.revision}" for m in models),
        "fill model": params.capabilities.fill_model,
        "parser": params.capabilities.parser + (
            f" (labelled-bracket F1 {pcfg['bracket']['f1']:.3f} on "
            f"{pcfg['bracket']['sentences']} held-out treebank trees)"
            if pcfg.get("bracket") else ""),
        "code": git_commit(workspace.root),
    }


def _publish(params: Params, specs: list, suite: pd.DataFrame, results: pd.DataFrame,
             verdicts: pd.DataFrame, seed_counts: pd.DataFrame, fill_stats: list[dict],
             pcfg: dict, tables: dict[str, pd.DataFrame], coverage: dict, reports: Path,
             provenance: dict) -> None:
    notes = substitutes(params)
    lcs = [s.id for s in specs]
    titles = pd.DataFrame({"capability": lcs, "title": [s.capability for s in specs]})
    fill = pd.DataFrame(fill_stats).drop(columns="cases")  # = seed_counts' cases
    counts = titles.merge(seed_counts, on="capability").merge(fill, on="capability")
    publish_table("s2lct-suite", counts,
                  "S²LCT suite: SST matches, seeds and expansion statistics per capability",
                  reports, provenance=provenance, notes=notes)
    for model_id, table in tables.items():
        publish_table(f"s2lct-table3-{_slug(model_id)}"[:120], table,
                      f"S²LCT Table 3 for {model_id}: failures per capability (95% bootstrap "
                      "intervals; the paper's seed fail % for its models beside)", reports,
                      provenance=provenance, notes=notes + " #pass_to_fail (the paper's "
                      "unit): failing expansions whose seed the model passed; "
                      "#pass_to_fail_seeds: the passed seeds with at least one failing "
                      "expansion.")
    publish_table("s2lct-checklist", report.checklist_table(verdicts),
                  "CheckList sentiment suite (released tests, seeded sample per test): "
                  "failure rate % per test and model", reports, provenance=provenance,
                  notes=notes)
    publish_table("s2lct-examples", report.examples(suite, results),
                  "Seeds and their expansions per capability, with each model's prediction",
                  reports, provenance=provenance, notes=notes)
    publish_table("s2lct-pcfg", pd.DataFrame([{**pcfg["grammar"], **{
        f"bracket_{k}": round(v, 4) if isinstance(v, float) else v
        for k, v in pcfg["bracket"].items()}}]),
        "Induced PCFG: size and labelled-bracket scores on held-out treebank trees", reports,
        provenance=provenance)
    publish_table("s2lct-lengths", coverage["lengths"],
                  "Text length (whitespace tokens) of both suites, and of each capability and "
                  "its CheckList test (ALiCT's map) as compared for coverage", reports,
                  provenance=provenance, notes=notes)
    curve, by_lc = coverage["curve"], coverage["by_lc"]
    if curve is None:
        return
    cov_provenance = {**provenance, **coverage["info"]}
    publish_table("s2lct-coverage", curve.round(6),
                  "BoundCov / SActCov of every model with hidden states on equal-size random "
                  "samples of both suites (the paper's Figure 4)", reports,
                  provenance=cov_provenance, notes=notes)
    publish_table("s2lct-coverage-by-lc", by_lc.round(6),
                  "BoundCov / SActCov of each capability against its CheckList MFT test "
                  "(ALiCT's LC→test map), both sampled to the same size", reports,
                  provenance=cov_provenance, notes=notes)
    for model_id, part in curve.groupby("model_id", sort=False):
        plot_coverage_curve(part, reports / f"s2lct-figure4-coverage-{_slug(model_id)}.png",
                            f"{model_id}: coverage against suite size")


def _slug(model_id: str) -> str:
    return model_id.replace("/", "-").replace("_", "-").lower()
