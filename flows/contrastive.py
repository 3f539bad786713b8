"""The ``contrastive`` stage (COSTELLO): suite → per-model embeddings, thresholds, downstream
classifiers and ground truth → Table 1, Table 2, Figure 6 and the violation list."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from prefect import flow
from prefect.logging import get_run_logger

from tasks.contrastive import pipeline as cp
from tasks.contrastive import costello_json, report, suite, thresholds
from tasks.contrastive.classifiers import spec_table
from tasks.core import io
from tasks.core.artifacts import publish_table
from tasks.core.config import Params
from tasks.core.paths import Workspace
from tasks.core.runtime import git_commit

SUBSTITUTES = ("Substitutes: the paper's 42 hub encoders → the packaged all-MiniLM-L6-v2 "
               "(default profile); the paper's SST/MRPC downstream classifiers → 14 MLPs "
               "trained here on the tested model's embeddings.")


METRICS_FILE = "contrastive-metrics.json"  # beside, not inside, the reports/contrastive out


def headline_metrics(results: pd.DataFrame) -> dict:
    """For ``dvc exp show``: per model and relation N_V, P_A, P_B at the headline setting
    (L2 distance, θ = μ−σ, vocabulary dictionary — the setting of the violation list)."""
    out: dict[str, dict] = {}
    for model_id in results["model_id"].unique():
        table = report.table2(results, model_id)
        row = table[(table["distance"] == "l2") & (table["dictionary"] == "vocab") &
                    (table["threshold"] == report.THRESHOLD_LABEL["mu-sigma"])]
        if row.empty:
            continue
        cells = row.iloc[0]
        relations = sorted(results["relation"].unique())
        out[str(model_id)] = {rel: {m: (None if pd.isna(cells[f"{rel} {m}"])
                                        else round(float(cells[f"{rel} {m}"]), 4))
                                    for m in ("N_V", "P_A", "P_B")} for rel in relations}
    return {"setting": "l2 mu-sigma vocab", "models": out}


@flow(name="contrastive-model", flow_run_name="contrastive-{model_id}")
def test_encoder(model_id: str, params: Params, root: str) -> dict:
    """Validate every triple of the stage's suite on one model: thresholds, ground truth,
    verdicts. Takes paths, not tables: flow-run parameters must stay small."""
    c = params.contrastive
    workspace = Workspace(Path(root))
    suite_frame = pd.read_parquet(workspace.interim / "contrastive" / "suite.parquet")
    tables = {name: pd.read_parquet(workspace.processed / f"{name}.parquet")
              for name in ("sst", "mrpc")}
    mode = c.paraphrase_features
    data = cp.classifier_data(tables, c, params.seed, tuple(cp.needed_kinds(suite_frame)))
    overlap = cp.training_overlap(suite_frame, data)
    if overlap:
        get_run_logger().warning(
            "suite seeds that are training sentences of the downstream classifiers (their "
            "ground truth is judged on seen data), per relation: %s", overlap)
    extra = {"dataset": thresholds.dictionary_from_dataset(suite_frame["seed"].drop_duplicates())}
    if c.dictionary_file:
        extra["user"] = thresholds.read_dictionary(cp.resolve_path(c.dictionary_file, workspace))
    texts = cp.needed_texts(suite_frame, data, [], mode)
    info, embedded = cp.embed(model_id, texts, str(workspace.data / "cache" / "embeddings"),
                              params.models.offline, params.runtime.device, c, params.seed,
                              extra)
    thetas, nn_rows = {}, []
    for metric in c.distances:
        for name, words in info["dictionaries"].items():
            if name == "dataset" and metric != "l2":
                continue  # the paper reports the dataset dictionary for L2 only
            vectors = embedded(words)
            nn = cp.nearest_neighbour_distances(vectors, metric, name, c.block_size)
            nn = thresholds.rule_distances(nn, metric, c.threshold_rule)
            kinds = [k for k in c.thresholds if name == "vocab" or k != "zero"]
            thetas[(metric, name)] = thresholds.thresholds(nn, kinds, c.threshold_rule)
            nn_rows.append({"model_id": model_id, "distance": metric, "dictionary": name,
                            "words": len(words), "nn_mean": float(np.mean(nn)),
                            "nn_std": float(np.std(nn)), "nn_min": float(np.min(nn)),
                            **{f"θ {k}": v for k, v in thetas[(metric, name)].items()}})
    banks = {}
    for kind, split in data.items():
        X_train = cp.features(kind, split["train"], embedded, mode)
        X_test = cp.features(kind, split["test"], embedded, mode)
        banks[kind] = cp.train_classifiers(
            kind, X_train, split["train_y"], X_test, split["test_y"], c.n_classifiers,
            c.classifier_epochs, params.seed)
    truth = cp.triple_truth(suite_frame, embedded, banks, c.alpha, mode)
    results = cp.validate(suite_frame, embedded, info, c, thetas, truth)
    accuracy = pd.concat([spec_table(bank).assign(model_id=model_id, task=kind)
                          for kind, bank in banks.items()], ignore_index=True)
    info["training_overlap"] = overlap
    return {"info": info, "results": results, "thresholds": pd.DataFrame(nn_rows),
            "accuracy": accuracy, "banks": banks}


@flow(name="contrastive", log_prints=True)
def contrastive_flow(params: Params, root: str) -> dict:
    workspace = Workspace(Path(root))
    c = params.contrastive
    out = workspace.interim / "contrastive"
    reports = io.staging_dir(workspace.reports / "contrastive")  # swapped in whole at the end
    inputs = cp.suite_inputs(c, workspace)
    suite_frame = cp.build_suite(inputs, cp.settings_of(params), params.seed,
                                 str(workspace.nltk_data), params.models.spacy,
                                 params.models.offline)
    io.write_parquet(out / "suite.parquet", suite_frame)
    costello_json.write_costello_suite(suite_frame, out / "suite.json")
    runs = [test_encoder(model_id, params, root)
            for model_id in (c.encoders or params.models.encoders)]

    results = pd.concat([r["results"] for r in runs], ignore_index=True)
    io.write_parquet(out / "results.parquet", results)
    for run in runs:
        slug = run["info"]["model_id"].replace("/", "__")
        for kind, bank in run["banks"].items():
            bank.save(out / "classifiers" / f"{slug}-{kind}.pt")
    provenance = _provenance(params, workspace, inputs, runs)
    violations = report.violation_list(results, suite_frame)
    io.write_parquet(out / "violations.parquet", violations)
    _publish(suite_frame, results, violations, runs, reports, provenance)
    io.replace_dir(reports, workspace.reports / "contrastive")
    io.write_json(workspace.reports / METRICS_FILE, headline_metrics(results))
    return {"triples": len(suite_frame),
            "violations": int((results["verdict"] == "fail").sum()),
            "embedded_now": {r["info"]["model_id"]: r["info"]["embedded_now"] for r in runs}}


def _provenance(params: Params, workspace: Workspace, inputs: list[str], runs: list[dict]) -> dict:
    return {
        "seed": params.seed, "profile": params.profile,
        "parameters (contrastive)": params.contrastive.model_dump_json(),
        "inputs (sha256)": ", ".join(f"{Path(f).name}={io.sha256_file(f)[:12]}" for f in inputs),
        "models": "; ".join(f"{r['info']['model_id']} @ {r['info']['revision']} "
                            f"({r['info']['pooling']})" for r in runs),
        "code": git_commit(workspace.root),
        "substitutes": SUBSTITUTES,
        "seeds among the classifiers' training sentences (per relation)": "; ".join(
            f"{r['info']['model_id']}: {r['info']['training_overlap'] or 'none'}" for r in runs),
    }


def _publish(suite_frame: pd.DataFrame, results: pd.DataFrame, violations: pd.DataFrame,
             runs: list[dict], reports: Path, provenance: dict) -> None:
    publish_table("costello-table1", suite.table1(suite_frame),
                  "COSTELLO Table 1: triples per contrastive relation", reports,
                  provenance=provenance)
    accuracy = pd.concat([r["accuracy"] for r in runs], ignore_index=True)
    summary = (accuracy.groupby(["model_id", "task"])["accuracy"]
               .agg(["mean", "min", "max", "count"]).reset_index())
    publish_table("costello-classifiers", summary,
                  "Downstream classifiers: test accuracy (SST-2 sentiment, MRPC paraphrase)",
                  reports, provenance=provenance)
    publish_table("costello-thresholds", pd.concat([r["thresholds"] for r in runs]),
                  "Adaptive thresholds: nearest-neighbour distances of dictionary words",
                  reports, provenance=provenance)
    for run in runs:
        model_id = run["info"]["model_id"]
        slug = model_id.replace("/", "-").replace("_", "-").lower()
        table = report.table2(results, model_id)
        publish_table(f"costello-table2-{slug}"[:120], table,
                      f"COSTELLO Table 2 for {model_id}: violations (N_V) and precision "
                      "(P_A, P_B, %) per distance and threshold", reports,
                      provenance=provenance, notes=SUBSTITUTES)
        report.precision_figure(table, reports / f"costello-figure6-{slug}.png",
                                f"{model_id}: precision against threshold")
    if results["model_id"].nunique() > 1:
        publish_table("costello-table2", report.table2(results),
                      "COSTELLO Table 2, all models: each N_V, P_A and P_B is the mean over "
                      "models of the per-model figure (as the paper); N_M: models with at "
                      "least one violation of that relation", reports, provenance=provenance,
                      notes=SUBSTITUTES)
    headline = violations[(violations["distance"] == "l2") &
                          (violations["dictionary"] == "vocab") &
                          (violations["threshold_kind"] == "mu-sigma")]
    publish_table("costello-violations", headline,
                  "Violations at L2, θ = μ−σ (vocabulary dictionary), largest margin first; "
                  "every setting's list: data/interim/contrastive/violations.parquet",
                  reports, provenance=provenance)
