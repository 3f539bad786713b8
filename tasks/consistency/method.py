"""KomMKonLLM (combinatorial consistency testing of LLMs) as a ``Method``: the
``consistency`` stage's suite (questions → IPMs → covering arrays → derived prompts), one
unit per LLM (its pending prompts answered in batches, saved to the result store), and the
report (per-model summary, per-question table, Table 4, chart, results.csv, metrics).

The suite is ``queries.parquet`` (one case per covering-array row; ``contract.py`` adds the
contract columns). Answers live in the result database (SQLite file, or PostgreSQL by URL):
``running`` records the run's questions and queries and closes the run record as completed
or failed; ``collect`` runs the oracle over new answers and reads the run's result rows back.
The database URL is derived where it is used, never held by the method or passed to a task
whose parameters Prefect stores: it may carry a password.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import pandas as pd

from lingtest.tasks.consistency import answering, contract, covering, guide_import, report
from lingtest.tasks.consistency import run_settings, store_tasks, suite_tasks
from lingtest.tasks.consistency.ipm import IPM
from lingtest.tasks.consistency.metrics import CONSISTENCY_DEFINITIONS, definitions
from lingtest.tasks.consistency.oracle import oracle_version
from lingtest.tasks.consistency.store import redact
from lingtest.tasks.core import io
from lingtest.tasks.core.config import Params
from lingtest.tasks.core.method import Method, Preparation, Unit, UnitResult, by_model
from lingtest.tasks.core.paths import Workspace, root_marked
from lingtest.tasks.core.publish import Figure, Report, provenance
from lingtest.tasks.core.runtime import git_commit
from lingtest.tasks.core.schema import Contract
from lingtest.tasks.models.llm import DEFAULT_LOCAL_MODEL, parse_llm
from lingtest.tasks.models.model_spec import ModelRef, unique_names

SUBSTITUTES = ("Substitute: the guide's LLMs → the packaged SmolLM2-135M-Instruct (Q4_1 GGUF, "
               "de-quantised to float32, greedy decoding on CPU) in the {profile} profile.")
LLMS_KEY = "consistency.llms"
GUIDE_GENERATOR = "guide import"  # the provenance generator of imported ca-N.csv arrays


class ConsistencyMethod(Method):
    """The ``consistency`` stage (KomMKonLLM): questions → IPMs → covering arrays → derived
    prompts → per LLM: pending prompts answered in batches → oracle → per-model and
    per-question summaries, Table 4, bar charts, results.csv and DVC metrics.

    Models are named by their display name (``ModelRef.name``: ``#name=``, ``models.names``
    or a short default) in units, Prefect task names, result rows, report tables and metric
    keys; the store keys answers by the spec (``answering.store_key``) so a rename re-asks
    nothing, and the provenance names spec, endpoint, key variable and revision.

    One unit per LLM, whatever ``runtime.shards`` says (``units``). Under a process runner
    (Dask) the flow first spreads the calls ``preparation`` declares for each model's
    pending prompts: one ``register-model`` task records the model (so no two tasks race on
    the store's model table), then one ``answer-pending`` task per run of whole batches
    (``answering.batch_runs``: each prompt shares the batch one pass would give it —
    padding in a batch changes a local model's float32 logits, hence its greedy answers —
    so the answers stay identical), and the unit finds nothing pending. Under threads the
    unit answers in one pass: the workers would only queue behind the model's lock.
    ``run_unit`` answers every pending prompt of its model, so under ``retest`` a later
    shard finds nothing pending and ``collect`` reads each model once.
    """

    stage = "consistency"
    contract = Contract(method="consistency", group="question_id", texts=("prompt",))

    def __init__(self, params: Params, workspace: Workspace):
        super().__init__(params, workspace)
        self.run_id: int | None = None  # the store's open run record, while ``running``
        self.last_run_id: int | None = None  # the latest one (the summary names it)
        self.answered: dict[str, dict] = {}  # per model, what ``preparation``'s calls sent
        self._refs: list[ModelRef] | None = None

    @property
    def suite_path(self) -> Path:
        return self.interim / "queries.parquet"

    @property
    def questions_path(self) -> Path:
        return self.interim / "questions.parquet"

    def _url(self) -> str:
        return run_settings.database_url(self.params.consistency, self.workspace)

    # ------------------------------------------------------------------ suite

    def questions_source(self) -> str:
        """The file the questions (and their labels) come from, for the provenance."""
        c = self.params.consistency
        if c.import_dir:
            return str(guide_import.labels_file(
                guide_import.guide_folder(c.import_dir, self.workspace.root)))
        return run_settings.questions_input(c, self.workspace)

    def check_inputs(self) -> None:
        """Before the suite is rewritten: the questions exist, and the answer database is
        not damaged (a run started without ``lingtest run``'s validation too)."""
        from lingtest.tasks.consistency.store import check_sqlite

        if not self.params.consistency.import_dir:
            run_settings.questions_input(self.params.consistency, self.workspace)
        check_sqlite(self._url(), self.workspace.root)

    def build_suite(self) -> pd.DataFrame:
        """Questions (written to ``questions.parquet``), then either the guide's imported
        arrays (``consistency.import_dir``) or IPMs and checked covering arrays (written to
        ``ipm/`` and ``ca/``), then one case per covering-array row."""
        params, c = self.params, self.params.consistency
        if c.import_dir:  # the guide's own ca-N.csv + synonyms-N.txt: exactly its questions
            questions, queries = suite_tasks.import_guide(c, self.workspace, self.interim)
            generator = GUIDE_GENERATOR
        else:
            questions = suite_tasks.select_questions(self.questions_source(), bool(c.questions),
                                            c.n_questions, params.seed)
            queries = self._derive(questions)
            generator = c.generator
        io.write_parquet(self.questions_path, questions)
        return contract.suite_cases(queries, questions, generator=generator,
                                    ipm="guide import" if c.import_dir else c.ipm,
                                    strength=c.strength, max_values=c.max_values,
                                    seed=params.seed)

    def _derive(self, questions: pd.DataFrame) -> pd.DataFrame:
        """IPMs, checked covering arrays (one task each, submitted) and the derived queries."""
        params, c = self.params, self.params.consistency
        ipms = [IPM.from_json(obj) for obj in suite_tasks.ipms_task(
            list(zip(questions["question_id"], questions["question"])), c.max_values,
            params.models.spacy, params.models.offline, self.workspace.nltk_data, c.ipm)]
        for ipm in ipms:  # before any is generated: one too large would run for hours
            covering.check_size(ipm.levels(), c.strength, c.max_tuples,
                                "consistency.max_tuples", "consistency.strength",
                                f"question {ipm.question_id}'s covering array")
        futures = [suite_tasks.covering_task.submit(ipm.question_id, ipm.levels(), c.strength,
                                           params.seed, c.generator, c.generator_binary)
                   for ipm in ipms]
        arrays = [future.result() for future in futures]
        suite_tasks.write_models(ipms, arrays, self.interim)
        return suite_tasks.derive_queries(questions, ipms, arrays, c.prompt_prefix,
                                          c.prompt_suffix, c.prompt_join)

    def refs(self) -> list[ModelRef]:
        """``consistency.llms`` parsed (``models.names`` applied), two models never sharing
        a display name."""
        if self._refs is None:
            self._refs = unique_names(
                [parse_llm(spec, LLMS_KEY, self.params.models.names, self.workspace.root)
                 for spec in self.params.consistency.llms], LLMS_KEY)
        return self._refs

    def ref(self, model_id: str) -> ModelRef:
        """The model a unit names: a configured display name or spec, else any LLM spec
        (``retest`` of a model outside ``consistency.llms``)."""
        for ref in self.refs():
            if model_id in (ref.name, ref.spec, ref.bare):
                return ref
        return parse_llm(model_id, LLMS_KEY, self.params.models.names, self.workspace.root)

    def model_ids(self) -> list[str]:
        return [ref.name for ref in self.refs()]

    def units(self, suite: pd.DataFrame) -> list[Unit]:
        """One unit per LLM, whatever ``runtime.shards`` says (see the class docstring)."""
        return [Unit(name) for name in self.model_ids()]

    # ------------------------------------------------------------------ runs

    @contextlib.contextmanager
    def running(self, suite: pd.DataFrame) -> Iterator[int]:
        """Record the run's questions and queries and open a run record; close it as
        ``completed``, or ``failed`` when anything inside raised."""
        params = self.params
        url = self._url()
        run_params = {"seed": params.seed, "profile": params.profile,
                      "consistency": params.consistency.model_dump(mode="json"),
                      "models": params.models.model_dump()}
        run_id = store_tasks.record_queries(url, str(self.questions_path), str(self.suite_path),
                                   run_params, params.seed, git_commit(self.workspace.root))
        self.run_id = self.last_run_id = run_id
        try:
            yield run_id
        except BaseException:
            store_tasks.finish_run(url, run_id, "failed")
            raise
        finally:
            self.run_id = None  # answers sent later belong to another run record
        store_tasks.finish_run(url, run_id, "completed")

    def _answering(self, ref: ModelRef) -> tuple[str, dict, dict, str]:
        """The database URL, LLM settings, prompt settings and identity of ``ref``."""
        settings = run_settings.llm_settings(self.params)
        prompts = run_settings.prompt_settings(self.params.consistency)
        return self._url(), settings, prompts, answering.identity(
            ref, settings, prompts, self.workspace.root)

    def _extras(self, ref: ModelRef, done: dict) -> dict:
        """A unit's extras: the store's spec, the display name, its answering counts."""
        return {"spec": answering.store_key(ref), "name": ref.name, "key_env": ref.key_env,
                **done}

    def preparation(self, suite: pd.DataFrame) -> Preparation:
        """Every model's pending prompts, in runs of whole batches, one call each (after a
        one-call phase registering a model the store does not know); what they sent is kept
        in ``answered`` for the units (the class docstring says why only under a process
        runner)."""
        queries, calls, root = str(self.suite_path), [], str(self.workspace.root)
        self.answered = {}
        for ref in self.refs():
            url, settings, prompts, ident = self._answering(ref)
            state = answering.check_model(url, ref, ident, queries)
            if state["pending"] == 0:
                continue
            key, ids = state["model_key"], state["pending_ids"]
            if key is None:
                (key,) = yield [(answering.register_model,
                                 (url, ref, root, ident, settings, prompts))]
                ids = answering.pending_ids(url, key, queries)
            parts = answering.batch_runs(ids, answering.answer_chunk(settings, ref),
                                         2 * self.params.runtime.max_workers)
            calls += [(ref, (url, ref, root, ident, settings, prompts, queries, self.run_id,
                             part)) for part in parts]
        done = yield [(answering.answer_pending, args) for _, args in calls]
        for (ref, _), part in zip(calls, done):
            into = self.answered.setdefault(ref.name, {**part, "sent": 0, "errors": 0,
                                                       "system_fingerprints": []})
            into["sent"] += part["sent"]
            into["errors"] += part["errors"]
            into["system_fingerprints"] = sorted({*into["system_fingerprints"],
                                                  *part["system_fingerprints"]})

    def run_unit(self, suite: pd.DataFrame, unit: Unit) -> UnitResult:
        """Send one LLM the run's prompts it has not answered yet (``preparation``'s calls
        sent them under a process runner). The model is not loaded when the database already
        answers every prompt; outside ``running`` (``retest``) a run record is opened for
        the prompts that are sent. Extras: ``spec``, ``model_key``, ``sent``, ``errors``,
        ``total``, ``system_fingerprints``."""
        logger = answering.run_logger()  # outside a flow (retest): a plain one
        ref, queries = self.ref(unit.model_id), str(self.suite_path)
        if ref.name in self.answered:  # preparation's calls sent them (failed ones: a rerun)
            return UnitResult(unit, None, self._extras(ref, self.answered[ref.name]))
        url, settings, prompts, ident = self._answering(ref)
        state = answering.check_model(url, ref, ident, queries)
        if state["model_key"] is not None and state["pending"] == 0:
            logger.info("%s (model key %d): all %d prompts already answered; not loading it",
                        ref.name, state["model_key"], state["total"])
            done = {"model_key": state["model_key"], "sent": 0, "errors": 0,
                    "total": state["total"], "system_fingerprints": []}
            return UnitResult(unit, None, self._extras(ref, done))
        if self.run_id is None:
            with self.running(suite):
                return self.run_unit(suite, unit)
        logger.info("%s: %d of %d prompts pending", ref.name, state["pending"], state["total"])
        done = answering.answer_pending(url, ref, str(self.workspace.root), ident, settings,
                                        prompts, queries, self.run_id)
        return UnitResult(unit, None, self._extras(ref, done))

    def collect(self, suite: pd.DataFrame, runs: list[UnitResult]) -> pd.DataFrame:
        """The oracle over every answer it has not read, then one contract row per model ×
        covering-array row of this suite, read back from the database."""
        c = self.params.consistency
        url = self._url()
        self.answered = {}  # this run's; a later ``retest`` asks the database again
        keys = list(dict.fromkeys(int(run.extra["model_key"]) for run in runs))
        names = {int(run.extra["model_key"]): run.extra["name"] for run in runs}
        store_tasks.judge(url, c.oracle)
        results = store_tasks.collect_results(url, keys, str(self.suite_path), c.oracle)
        results["model_id"] = results["model_key"].map(names)  # display names, not specs
        revisions = {key: contract.revision(store_tasks.model_record(url, key)) for key in keys}
        return contract.contract_results(results, suite, revisions)

    @staticmethod
    def _per_model(runs: list[UnitResult]) -> list[dict]:
        """Each model's first unit's extras (its answering counts), in unit order."""
        return [model_runs[0].extra for model_runs in by_model(runs).values()]

    # ------------------------------------------------------------------ report

    def report(self, suite: pd.DataFrame, results: pd.DataFrame,
               runs: list[UnitResult]) -> Report:
        params, c = self.params, self.params.consistency
        url = self._url()
        models = self._per_model(runs)
        table = report.summary(results, c.bootstrap, params.seed, c.recall_definition,
                               c.consistency_definition, c.zero_division,
                               c.min_answered_share)
        source = self.questions_source()
        metric_definitions = definitions(c.recall_definition, c.consistency_definition,
                                         c.zero_division)
        records = [store_tasks.model_record(url, m["model_key"]) for m in models]
        out = Report(
            self.stage, substitutes=SUBSTITUTES.format(profile=params.profile)
            if any(map(packaged_smollm2, records)) else "",
            metrics=report.metrics_json(table, {m["name"]: m["total"] for m in models},
                                        c.recall_definition, c.consistency_definition),
            provenance=provenance(
                params, self.workspace, "consistency",
                models=[report.model_line(record, m, m.get("key_env"))
                        for record, m in zip(records, models)],
                **{"spaCy / offline": f"{params.models.spacy} / {params.models.offline}",
                   "questions (sha256)": f"{Path(source).name}="
                                         f"{io.sha256_file(source)[:16]}",
                   "oracle version": f"{c.oracle} {oracle_version(c.oracle)}",
                   "metric definitions": metric_definitions,
                   "database": redact(url)}))  # publish writes the root as <root>
        out.add("consistency-definitions",
                report.side_by_side(table, c.recall_definition, c.consistency_definition),
                "KomMKonLLM: per model, the guide's metric definitions beside lingtest's "
                "stricter ones, with the rows answered true/false of those asked",
                notes=report.flag_note(table, c.min_answered_share))
        out.add("consistency-summary", table,
                "KomMKonLLM: per model accuracy, precision/recall/F1 (class true), "
                "consistency, undefined rate and consistent non-answering, with 95% "
                "bootstrap CIs over questions; the other definitions' recall, F1 and "
                "consistency last",
                notes=f"Definitions: {metric_definitions}. "
                      f"{report.flag_note(table, c.min_answered_share)}")
        questions = pd.read_parquet(self.questions_path)
        out.frames["queries.csv"], out.frames["test_runs.csv"] = report.guide_export(
            results, questions, c.strength)
        out.add("consistency-questions",
                report.question_table(results, questions, c.consistency_definition),
                "KomMKonLLM: per model and question (original = answer to row 0)",
                notes=f"Definitions: {CONSISTENCY_DEFINITIONS[c.consistency_definition]}.")
        out.add("consistency-table4", report.table4(results),
                "KomMKonLLM Table 4: derived questions × models (parsed answers; row 0 is "
                "the original question; one artifact for every question: filter by "
                "question_id)")
        out.frames["results.csv"] = report.export(results)
        if "f1" in table:
            out.figures["consistency-figure.png"] = Figure(
                lambda path: report.chart(table, path, "KomMKonLLM: per model, 95% bootstrap "
                                                       "CIs"), report.chart_data(table))
        return out

    def summary(self, suite: pd.DataFrame, results: pd.DataFrame,
                runs: list[UnitResult]) -> dict:
        """The run's counts (also ``data/consistency/last-run.json``); with ``errors`` (failed
        LLM calls) the flow fails the stage: a non-zero exit, so DVC reruns it and only the
        failed prompts are sent again."""
        models = self._per_model(runs)
        sent = {m["name"]: m["sent"] for m in models}
        out = {"run_id": self.last_run_id,
               "questions": len(pd.read_parquet(self.questions_path, columns=["question_id"])),
               "array_rows": len(suite),
               "prompts": int(suite[["store_id", "prompt"]].drop_duplicates().shape[0]),
               "sent": int(sum(sent.values())), "sent_by_model": sent,
               "errors": int(sum(m["errors"] for m in models)),
               "database": redact(self._url())}
        # the file DVC tracks names the database as on every machine (<root>/...)
        io.write_json(self.workspace.state / "consistency" / "last-run.json",
                      root_marked(out, self.workspace.root))
        return out


def packaged_smollm2(record: dict) -> bool:
    """Whether a model record is the packaged SmolLM2 (the stage's substitute), whatever
    spec named it: only then do the reports name the substitute."""
    return record.get("source") == "package" and record.get("model_id") == DEFAULT_LOCAL_MODEL
