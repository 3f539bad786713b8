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
from tasks.capabilities.coverage import plot_coverage_curve
from tasks.capabilities.search import load_word_polarity
from tasks.capabilities.specs import BUILTIN_SPECS, load_specs
from tasks.capabilities.train_sentiment import sst2_split
from tasks.core import io
from tasks.core.artifacts import publish_table
from tasks.core.config import Params
from tasks.core.errors import LingtestError
from tasks.core.paths import Workspace
from tasks.core.runtime import git_commit
from tasks.models.sentiment import MINILM_SST2_ID

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
    out, reports = workspace.interim / "capabilities", workspace.reports / "capabilities"
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
    pcfg = cp.induce_grammar(str(files["ptb_trees"]), c.pcfg_heldout, str(grammar_path))
    if not grammar_path.is_file():  # a cache hit in a fresh checkout: write the grammar again
        pcfg = cp.induce_grammar.with_options(refresh_cache=True)(
            str(files["ptb_trees"]), c.pcfg_heldout, str(grammar_path))
    settings = {"max_masks_per_seed": c.max_masks_per_seed,
                "fill_candidates": c.fill_candidates,
                "max_expansions_per_seed": c.max_expansions_per_seed,
                "word_sentiment": c.word_sentiment}
    tagged_token = cp.frame_token(tagged, ["sentence_id", "tokens", "tag"])
    expanded, fill_stats = [], []
    for spec in specs:
        cases = seeds[seeds["capability"] == spec.id].reset_index(drop=True)
        frame, stats = cp.expand_capability(
            spec, spec.model_dump_json(), cases, cp.frame_token(cases, ["case_id", "text"]),
            str(grammar_path), polarity_path, polarity, str(files["ptb_trees"]), tagged,
            tagged_token, settings,
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

    curve, cov_info = None, {}
    minilm = next((m for m in models if m.model_id == MINILM_SST2_ID), None)
    if minilm is not None:
        train = sst2_split(pd.read_parquet(files["sst"]), "train")
        if c.coverage_max_train and c.coverage_max_train < len(train):
            train = train.sample(n=c.coverage_max_train, random_state=params.seed)
        sampled = cp.checklist_run.sample_suite(checklist, c.checklist_max_examples, params.seed)
        suites = {"S²LCT": list(dict.fromkeys(suite["text"])),
                  "CheckList": list(dict.fromkeys(t for ts in sampled["texts"] for t in ts))}
        curve, cov_info = cp.coverage_curve(minilm, train["text"].tolist(), suites,
                                            c.coverage_sizes, c.coverage_repeats, params.seed)

    provenance = _provenance(params, workspace, files, models, pcfg)
    _publish(params, specs, suite, results, verdicts, seed_counts, fill_stats, pcfg,
             curve, cov_info, reports, provenance)
    tables = {m.model_id: report.table3(results[results["model_id"] == m.model_id],
                                        [s.id for s in specs], c.bootstrap, params.seed)
              for m in models}
    io.write_json(workspace.reports / "capabilities-metrics.json",
                  _metrics(tables, suite, pcfg, curve))
    return {"cases": len(suite), "seeds": int((suite["kind"] == "seed").sum()),
            "expansions": int((suite["kind"] == "expansion").sum()),
            "flow_run_id": str(flow_run.id)}


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
            "pass_to_fail": int(table["pass_to_fail"].sum())}
    if curve is not None and len(curve):
        largest = curve[curve["size"] == curve["size"].max()]
        out["coverage_at_largest_size"] = {
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
             pcfg: dict, curve: pd.DataFrame | None, cov_info: dict, reports: Path,
             provenance: dict) -> None:
    c, notes = params.capabilities, substitutes(params)
    lcs = [s.id for s in specs]
    titles = pd.DataFrame({"capability": lcs, "title": [s.capability for s in specs]})
    fill = pd.DataFrame(fill_stats).drop(columns="cases")  # = seed_counts' cases
    counts = titles.merge(seed_counts, on="capability").merge(fill, on="capability")
    publish_table("s2lct-suite", counts,
                  "S²LCT suite: SST matches, seeds and expansion statistics per capability",
                  reports, provenance=provenance, notes=notes)
    for model_id in results["model_id"].drop_duplicates():
        slug = model_id.replace("/", "-").replace("_", "-").lower()
        table = report.table3(results[results["model_id"] == model_id], lcs, c.bootstrap,
                              params.seed)
        publish_table(f"s2lct-table3-{slug}"[:120], table,
                      f"S²LCT Table 3 for {model_id}: failures per capability (95% bootstrap "
                      "intervals; the paper's seed fail % for its models beside)", reports,
                      provenance=provenance, notes=notes + " #pass_to_fail: seed cases the "
                      "model passed with at least one failing expansion.")
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
    if curve is not None:
        publish_table("s2lct-coverage", curve.round(6),
                      "BoundCov / SActCov of the fine-tuned MiniLM on equal-size random "
                      "samples of both suites (the paper's Figure 4)", reports,
                      provenance={**provenance, **{f"coverage {k}": v
                                                   for k, v in cov_info.items()}}, notes=notes)
        plot_coverage_curve(curve, reports / "s2lct-figure4-coverage.png",
                            f"{MINILM_SST2_ID}: coverage against suite size")
