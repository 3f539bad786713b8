"""The ``consistency`` stage (KomMKonLLM): questions → IPMs → covering arrays → derived
prompts → result database → per LLM: pending prompts answered in batches → oracle →
per-model and per-question summaries, Table 4, bar charts, results.csv and DVC metrics."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from prefect import flow
from prefect.logging import get_run_logger

from tasks.consistency import pipeline as cp
from tasks.consistency import report
from tasks.consistency.ipm import IPM
from tasks.consistency.metrics import CONSISTENCY_DEFINITIONS, definitions
from tasks.consistency.oracle import oracle_version
from tasks.consistency.store import redact
from tasks.core import io
from tasks.core.artifacts import publish_table
from tasks.core.config import Params
from tasks.core.errors import check_calls
from tasks.core.paths import Workspace
from tasks.core.runtime import git_commit

SUBSTITUTES = ("Substitute: the guide's LLMs → the packaged SmolLM2-135M-Instruct (Q4_1 GGUF, "
               "de-quantised to float32, greedy decoding on CPU) in the default profile.")
METRICS_FILE = "consistency-metrics.json"  # beside, not inside, the reports/consistency out


@flow(name="consistency-model", flow_run_name="consistency-{spec}")
def query_model(spec: str, params: Params, root: str, run_id: int) -> dict:
    """Send one LLM the run's prompts it has not answered yet. Takes paths, not tables; the
    model is not loaded when the database already answers every prompt. The database URL is
    derived here, not passed: Prefect stores a subflow's parameters, and it may hold a password."""
    logger = get_run_logger()
    workspace = Workspace(Path(root))
    url = cp.database_url(params.consistency, workspace)
    queries = str(workspace.interim / "consistency" / "queries.parquet")
    settings = cp.llm_settings(params)
    prompts = cp.prompt_settings(params.consistency)
    ident = cp.identity(spec, settings, prompts)
    state = cp.check_model(url, spec, ident, queries)
    if state["model_key"] is not None and state["pending"] == 0:
        logger.info("%s (model key %d): all %d prompts already answered; not loading it",
                    spec, state["model_key"], state["total"])
        return {"spec": spec, "model_key": state["model_key"], "sent": 0, "errors": 0,
                "total": state["total"], "system_fingerprints": []}
    logger.info("%s: %d of %d prompts pending", spec, state["pending"], state["total"])
    done = cp.answer_pending(url, spec, ident, settings, prompts, queries, run_id)
    return {"spec": spec, **done}


@flow(name="consistency", log_prints=True)
def consistency_flow(params: Params, root: str) -> dict:
    workspace = Workspace(Path(root))
    c = params.consistency
    out = workspace.interim / "consistency"
    reports = io.staging_dir(workspace.reports / "consistency")  # swapped in whole at the end
    url = cp.database_url(c, workspace)
    if c.import_dir:  # the guide's own ca-N.csv + synonyms-N.txt: exactly its questions
        questions, queries, source = cp.import_guide(c, workspace, out)
        questions_path = io.write_parquet(out / "questions.parquet", questions)
    else:
        source = cp.questions_input(c, workspace)
        questions = cp.select_questions(source, bool(c.questions), c.n_questions, params.seed)
        questions_path = io.write_parquet(out / "questions.parquet", questions)
        queries = _derive(params, workspace, questions, out)
    queries_path = io.write_parquet(out / "queries.parquet", queries)

    commit = git_commit(workspace.root)
    run_params = {"seed": params.seed, "profile": params.profile,
                  "consistency": c.model_dump(mode="json"), "models": params.models.model_dump()}
    run_id = cp.record_queries(url, str(questions_path), str(queries_path), run_params,
                               params.seed, commit)
    try:
        runs = [query_model(spec, params, root, run_id) for spec in c.llms]
        cp.judge(url, c.oracle)
        results = cp.collect_results(url, [r["model_key"] for r in runs], str(queries_path),
                                     c.oracle)
    except BaseException:
        cp.finish_run(url, run_id, "failed")
        raise
    cp.finish_run(url, run_id, "completed")

    io.write_parquet(out / "results.parquet", report.export(results))
    provenance = _provenance(params, workspace, source, url, runs, commit)
    table = report.summary(results, c.bootstrap, params.seed, c.recall_definition,
                           c.consistency_definition)
    _publish(results, questions, table, reports, provenance, c.consistency_definition)
    io.replace_dir(reports, workspace.reports / "consistency")
    sent = {r["spec"]: r["sent"] for r in runs}
    metrics = report.metrics_json(table, {r["spec"]: r["total"] for r in runs})
    io.write_json(workspace.reports / METRICS_FILE, metrics)
    summary = {"run_id": run_id, "questions": len(questions), "array_rows": len(queries),
               "prompts": int(queries[["store_id", "prompt"]].drop_duplicates().shape[0]),
               "sent": int(sum(sent.values())), "sent_by_model": sent,
               "errors": int(sum(r["errors"] for r in runs)), "database": redact(url)}
    io.write_json(workspace.data / "consistency" / "last-run.json", summary)
    return check_calls("consistency", summary)  # failed calls: non-zero exit, DVC retries the stage


def _derive(params: Params, workspace: Workspace, questions: pd.DataFrame,
            out: Path) -> pd.DataFrame:
    """IPMs, checked covering arrays and the derived queries of the run's questions."""
    c = params.consistency
    ipms = [IPM.from_json(obj) for obj in cp.ipms_task(
        list(zip(questions["question_id"], questions["question"])), c.max_values,
        params.models.spacy, params.models.offline, str(workspace.nltk_data))]
    futures = [cp.covering_task.submit(ipm.question_id, ipm.levels(), c.strength, params.seed,
                                       c.generator, c.generator_binary) for ipm in ipms]
    arrays = [future.result() for future in futures]
    cp.write_models(ipms, arrays, out)
    return cp.derive_queries(questions, ipms, arrays, c.prompt_prefix, c.prompt_suffix,
                             c.prompt_join)


def _provenance(params: Params, workspace: Workspace, source: str, url: str,
                runs: list[dict], commit: str) -> dict:
    models = []
    for run in runs:
        record = cp.model_record(url, run["model_key"])
        models.append(f"{record['model_id']} @ {record.get('revision')} "
                      f"({record.get('source')}, {record.get('gguf_file') or '-'}, "
                      f"{record.get('dtype')}, {record.get('backend')}, model key "
                      f"{run['model_key']}, max_new_tokens "
                      f"{record.get('max_new_tokens', record.get('max_tokens'))}"
                      + _endpoint_note(record, run) + ")")
    return {
        "seed": params.seed, "profile": params.profile,
        "parameters (consistency)": params.consistency.model_dump_json(),
        "spaCy / offline": f"{params.models.spacy} / {params.models.offline}",
        "questions (sha256)": f"{Path(source).name}={io.sha256_file(source)[:16]}",
        "models": "; ".join(models),
        "oracle version": oracle_version(params.consistency.oracle),
        "metric definitions": definitions(params.consistency.recall_definition,
                                          params.consistency.consistency_definition),
        "database": redact(url).replace(str(workspace.root.resolve()), "<root>"),
        "code": commit,
        "substitutes": SUBSTITUTES,
    }


def _endpoint_note(record: dict, run: dict) -> str:
    """Where an HTTP model answered: base URL, digest, system fingerprints seen this run."""
    if not record.get("base_url"):
        return ""
    note = f", endpoint {record['base_url']}"
    if record.get("digest"):
        note += f", digest {record['digest']}"
    if run.get("system_fingerprints"):
        note += f", system_fingerprint {'/'.join(run['system_fingerprints'])}"
    return note


def _publish(results: pd.DataFrame, questions: pd.DataFrame, table: pd.DataFrame,
             reports: Path, provenance: dict, consistency_definition: str) -> None:
    publish_table("kommkonllm-summary", table,
                  "KomMKonLLM: per model accuracy, precision/recall/F1 (class true), "
                  "consistency and undefined rate, with 95% bootstrap CIs over questions",
                  reports, provenance=provenance,
                  notes=f"Definitions: {provenance['metric definitions']}.\n\n{SUBSTITUTES}")
    publish_table("kommkonllm-questions",
                  report.question_table(results, questions, consistency_definition),
                  "KomMKonLLM: per model and question (original = answer to row 0)",
                  reports, provenance=provenance,
                  notes=f"Definitions: {CONSISTENCY_DEFINITIONS[consistency_definition]}.")
    table4 = report.table4(results)
    publish_table("kommkonllm-table4", table4,
                  "KomMKonLLM Table 4: derived questions × models (parsed answers; row 0 is "
                  "the original question)", reports, provenance=provenance)
    for question_id, rows in table4.groupby("question_id", sort=True):
        publish_table(f"kommkonllm-table4-{cp.slug(question_id)}"[:120],
                      rows.drop(columns="question_id"),
                      f"KomMKonLLM Table 4 for {question_id}")  # artifact only
    io.write_csv(reports / "results.csv", report.export(results))
    if "f1" in table:
        report.chart(table, reports / "kommkonllm-figure.png",
                     "KomMKonLLM: per model, 95% bootstrap CIs")
    io.write_text(reports / "provenance.json",
                  json.dumps(provenance, indent=2, sort_keys=True, default=str) + "\n")
