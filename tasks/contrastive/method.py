"""COSTELLO (contrastive testing of embedding models) as a ``Method``: the ``contrastive``
stage's suite, its per-model runs and its report (Table 1, Table 2, Figure 6, thresholds,
downstream classifiers, violation list).

A unit is one model: its embeddings, thresholds (nearest-neighbour distances over whole
dictionaries), downstream classifier banks, ground truth and verdicts of the triples.
Result rows follow the case/result contract (``tasks/core/schema.py``): ``output`` is the raw
output (JSON of d_pos and d_neg), ``score`` the margin d_pos − d_neg, and a row is one
triple × model × (distance, dictionary, rule, threshold kind).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from lingtest.tasks.contrastive import costello_json, report, thresholds
from lingtest.tasks.contrastive import classifier_tasks, embedding_tasks, suite_tasks, validation
from lingtest.tasks.contrastive.classifiers import spec_table
from lingtest.tasks.contrastive.suite import table1
from lingtest.tasks.core import io
from lingtest.tasks.core.method import Method, Preparation, Unit, UnitResult, by_model
from lingtest.tasks.core.publish import Figure, Report, provenance, slug
from lingtest.tasks.core.schema import Contract
from lingtest.tasks.core.validate import param_path
from lingtest.tasks.models.embedding_endpoints import endpoint_settings, is_endpoint
from lingtest.tasks.models.model_spec import ModelRef, parse_model, parse_models

SUBSTITUTES = ("Substitutes: the paper's 42 hub encoders → the packaged all-MiniLM-L6-v2 "
               "(default profile); the paper's SST/MRPC downstream classifiers → 14 MLPs "
               "trained here on the tested model's embeddings.")
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
FIGURE6 = "contrastive-figure6"  # the folder of Figure 6: <model>.png and the data it plots
EXACT_LENGTH_KEY = "exact-length passes"


def substitutes(infos: list[dict], n_classifiers: int) -> str:
    """What stood in for the paper's models and classifiers in this run: the models that ran
    other than the paper's 42 (name, spec, form, revision, pooling or "own encode"), the
    paper's models pooled otherwise than its code's pooler, and the classifier count as run.
    The default run (the packaged MiniLM, 14 classifiers) keeps its sentence."""
    from lingtest.tasks.core.config import papers_models

    default = [(i["model_id"], i.get("source")) for i in infos] == [(MINILM, "package")]
    if default and n_classifiers == 14:
        return SUBSTITUTES
    papers = set(papers_models("contrastive.encoders"))  # COSTELLO's 42
    own = [i for i in infos if i.get("spec", i["model_id"]) in papers
           and i.get("form", "hub") == "hub"]
    named = []
    if default:
        named.append("the paper's 42 hub encoders → the packaged all-MiniLM-L6-v2 (default "
                     "profile)")
    elif len(own) < len(infos):
        named.append("the paper's 42 hub encoders → " + "; ".join(
            f"{i['model_id']} ({i.get('form', 'hub')} `{i.get('spec', i['model_id'])}`, "
            f"{i['revision']}, {i['pooling']})" for i in infos if i not in own))
    pooled = [i["model_id"] for i in own if i.get("cls_for_pooler")]
    if pooled:
        named.append("the random pooler the paper's code pools through where a checkpoint "
                     "has no pooler weights → [CLS] (" + ", ".join(pooled) + ")")
    named.append(f"the paper's SST/MRPC downstream classifiers → {n_classifiers} MLPs "
                 "trained here on the tested model's embeddings")
    return "Substitutes: " + "; ".join(named) + "."
def relations_note(suite: pd.DataFrame) -> str:
    """The relations the run tested, with their triples (and an imported suite's own
    relation names): what ran, whatever ``contrastive.relations`` lists."""
    parts = []
    for relation, group in suite.groupby("relation", sort=False):
        names = {json.loads(p).get("relation") for p in group["provenance"]} - {relation, None}
        named = f" ({', '.join(sorted(names))})" if names else ""
        parts.append(f"{relation}{named}: {len(group)}")
    return "; ".join(parts)


OVERLAP_KEY = "seeds among the classifiers' training sentences (per relation)"
DOWNSTREAM_TABLES = ("sst", "mrpc")  # the downstream classifiers' training and test data


def _logger() -> logging.Logger:
    """The Prefect run's logger inside a flow or task; a plain one in ``retest`` outside."""
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("lingtest.contrastive")


def contract_rows(results: pd.DataFrame) -> pd.DataFrame:
    """``validation.validate``'s rows with the contract's columns: ``method``, ``output`` (the
    raw output, JSON of d_pos and d_neg, floats exactly) and ``score`` (the margin)."""
    out = results.copy()
    out.insert(1, "method", "contrastive")
    output = [json.dumps({"d_pos": float(p), "d_neg": float(n)})
              for p, n in zip(results["d_pos"].to_numpy(), results["d_neg"].to_numpy())]
    out.insert(out.columns.get_loc("d_neg") + 1, "output", output)
    out.insert(out.columns.get_loc("margin") + 1, "score", out["margin"].astype(float))
    return out


def bank_path(interim: Path, model_id: str, kind: str) -> Path:
    """Where a model's trained classifier bank of one downstream task is saved."""
    return interim / "classifiers" / f"{model_id.replace('/', '__')}-{kind}.pt"


class ContrastiveMethod(Method):
    """The ``contrastive`` stage (COSTELLO): suite → per model embeddings, thresholds,
    downstream classifiers and ground truth → Table 1, Table 2, Figure 6 and the violation
    list.

    ``runtime.shards`` does not split this method: one unit per model (``units``). Every
    triple of a model needs the same preparation — the embeddings of the dictionaries and
    of the classifiers' data, θ from nearest neighbours over whole dictionaries, the trained
    classifier banks — which is nearly all of the work, while a triple's own share (two
    distances and a Wilcoxon test) is a few vectorised operations; a shard would redo (or
    wait on the cache for) the preparation. ``run_unit`` still honours a unit's shard, so
    ``retest`` gives the same rows under any ``runtime.shards``.
    """

    stage = "contrastive"
    contract = Contract(method="contrastive", group="relation",
                        texts=("seed", "positive", "negative"),
                        result_keys=("distance", "dictionary", "rule", "threshold_kind"))

    # ------------------------------------------------------------------ suite

    def suite_inputs(self) -> list[str]:
        return suite_tasks.suite_inputs(self.params.contrastive, self.workspace)

    def user_dictionary(self) -> list[str] | None:
        """``dictionary_file``'s words (a user dictionary for θ), or None."""
        path = self.params.contrastive.dictionary_file
        if not path:
            return None
        return thresholds.read_dictionary(param_path(path, self.workspace.root))

    def check_inputs(self) -> None:
        """The suite's inputs, the user dictionary and every model (``check_contrastive_
        encoder``: one error naming a bad spec and its fix) before any model loads."""
        from lingtest.tasks.models.any_encoder import check_contrastive_encoder

        self.suite_inputs()
        self.user_dictionary()  # a bad word list fails before any model loads
        c = self.params.contrastive
        for ref in self.refs():
            check_contrastive_encoder(ref, self.params.models.offline, self.workspace.root,
                                      c.dictionary_file, c.pooling,
                                      thresholds.needs_dictionaries(c.thresholds),
                                      self.encoders_key)

    def build_suite(self) -> pd.DataFrame:
        params = self.params
        return suite_tasks.build_suite(self.suite_inputs(), suite_tasks.settings_of(params),
                                       params.seed, str(self.workspace.nltk_data),
                                       params.models.spacy, params.models.offline)

    @property
    def encoders_key(self) -> str:
        return "contrastive.encoders" if self.params.contrastive.encoders else "models.encoders"

    def refs(self) -> list[ModelRef]:
        """The models under test as parsed specs (``models.names`` gives display names)."""
        return parse_models(list(self.params.contrastive.encoders or self.params.models.encoders),
                            self.encoders_key, self.params.models.names, self.workspace.root)

    def ref_for(self, model: str) -> ModelRef:
        """A configured model by display name or spec; any other spec (a re-test's repaired
        folder) parsed on its own."""
        for ref in self.refs():
            if model in (ref.name, ref.spec, ref.bare):
                return ref
        return parse_model(model, self.encoders_key, self.params.models.names,
                           self.workspace.root)

    def model_ids(self) -> list[str]:
        """The display names of the models under test (what results and reports carry)."""
        return [ref.name for ref in self.refs()]

    def units(self, suite: pd.DataFrame) -> list[Unit]:
        """One unit per model, whatever ``runtime.shards`` says (see the class docstring)."""
        return [Unit(model_id) for model_id in self.model_ids()]

    # ------------------------------------------------------------------ one model

    @property
    def store_root(self) -> str:
        return str(self.workspace.data / "cache" / "embeddings")

    def _embedding_inputs(self, suite: pd.DataFrame) -> tuple[dict, list[str], dict]:
        """The downstream classifiers' data, every text a model embeds (triples and that
        data) and the extra θ dictionaries (dataset words, a user dictionary)."""
        c = self.params.contrastive
        tables = {name: pd.read_parquet(self.workspace.processed / f"{name}.parquet")
                  for name in DOWNSTREAM_TABLES}
        data = classifier_tasks.classifier_data(tables, c, self.params.seed,
                                                tuple(classifier_tasks.needed_kinds(suite)))
        extra: dict[str, list[str]] = {}
        if thresholds.needs_dictionaries(c.thresholds):  # θ = 0 alone needs no dictionary
            extra["dataset"] = thresholds.dictionary_from_dataset(
                suite["seed"].drop_duplicates())
            user = self.user_dictionary()
            if user is not None:
                extra["user"] = user
        return data, validation.needed_texts(suite, data, [], c.paraphrase_features), extra

    def preparation(self, suite: pd.DataFrame) -> Preparation:
        """The units' costly steps in two phases: every model's missing embeddings, one call
        per worker (some store shards each); then its nearest-neighbour searches and
        classifier banks side by side (cached tasks: the units find their results cached and
        the embeddings stored). An embedding service has no share here: its unit embeds
        (its own concurrency) and so counts every request of the run."""
        params, (data, texts, extra) = self.params, self._embedding_inputs(suite)
        run = (params.models.offline, params.runtime.device, params.contrastive, params.seed,
               extra, params.runtime.pass_tokens, params.runtime.encoder_precision,
               params.runtime.encoder_backend)
        root = str(self.workspace.root)
        yield [(embedding_tasks.embed_store_shards, call) for ref in self.refs()
               for call in embedding_tasks.shard_calls(ref, texts, self.store_root, *run,
                                          groups=params.runtime.max_workers, root=root)]
        steps = []
        for ref in self.refs():
            if is_endpoint(ref):  # a service's unit embeds, counts its requests and searches
                continue
            info, embedded = embedding_tasks.embed(ref, texts, self.store_root, *run, root=root)
            steps += [(validation.nearest_neighbour_distances, args)
                      for args in self._nearest_neighbour_calls(info, embedded)]
            steps += [(classifier_tasks.train_classifiers, args)
                      for args in self._classifier_calls(data, embedded)]
        yield steps

    def run_unit(self, suite: pd.DataFrame, unit: Unit) -> UnitResult:
        """Prepare ``unit.model_id`` on the whole suite (embeddings, θ, classifier banks),
        then validate the unit's triples. Extras: ``info`` (the model's facts), the
        ``thresholds`` and classifier ``accuracy`` rows, the ``banks``."""
        params, c = self.params, self.params.contrastive
        mode = c.paraphrase_features
        data, texts, extra = self._embedding_inputs(suite)
        overlap = validation.training_overlap(suite, data)
        if overlap:
            _logger().warning(
                "suite seeds that are training sentences of the downstream classifiers (their "
                "ground truth is judged on seen data), per relation: %s", overlap)
        info, embedded = embedding_tasks.embed(self.ref_for(unit.model_id), texts, self.store_root,
                                  params.models.offline, params.runtime.device, c, params.seed,
                                  extra, params.runtime.pass_tokens,
                                  **params.runtime.encoder_path(),
                                  root=str(self.workspace.root),
                                  http=endpoint_settings(params))
        thetas, nn_rows = self._thresholds(info, embedded)
        banks = {args[0]: classifier_tasks.train_classifiers(*args)
                 for args in self._classifier_calls(data, embedded)}
        cases = unit.take(suite)
        truth = validation.triple_truth(cases, embedded, banks, c.alpha, mode)
        results = contract_rows(validation.validate(cases, embedded, info, c, thetas, truth))
        accuracy = pd.concat([spec_table(bank).assign(model_id=info["model_id"], task=kind)
                              for kind, bank in banks.items()], ignore_index=True)
        info["training_overlap"] = overlap
        return UnitResult(unit, results, {"info": info, "thresholds": pd.DataFrame(nn_rows),
                                          "accuracy": accuracy, "banks": banks})

    def _nearest_neighbour_calls(self, info: dict, embedded) -> list[tuple]:
        """``nearest_neighbour_distances``'s arguments per (distance, dictionary)."""
        c = self.params.contrastive
        return [(embedded(words), metric, name, c.block_size) for metric in c.distances
                for name, words in info["dictionaries"].items()
                if name != "dataset" or metric == "l2"]  # the paper: dataset words for L2 only

    def _classifier_calls(self, data: dict, embedded) -> list[tuple]:
        """``train_classifiers``'s arguments per downstream task the suite needs."""
        c, mode = self.params.contrastive, self.params.contrastive.paraphrase_features
        features = classifier_tasks.features
        return [(kind, features(kind, split["train"], embedded, mode), split["train_y"],
                 features(kind, split["test"], embedded, mode), split["test_y"],
                 c.n_classifiers, c.classifier_epochs, self.params.seed)
                for kind, split in data.items()]

    def _thresholds(self, info: dict, embedded) -> tuple[dict, list[dict]]:
        """θ per (distance, dictionary) and kind, and the thresholds table's rows."""
        c = self.params.contrastive
        thetas, rows = {}, []
        if not info["dictionaries"]:  # only θ = 0 asked for: nothing embedded or searched
            return {(metric, "vocab"): {"zero": 0.0} for metric in c.distances}, rows
        for vectors, metric, name, block_size in self._nearest_neighbour_calls(info, embedded):
            nn = validation.nearest_neighbour_distances(vectors, metric, name, block_size)
            nn = thresholds.rule_distances(nn, metric, c.threshold_rule)
            kinds = [k for k in c.thresholds if name == "vocab" or k != "zero"]
            thetas[(metric, name)] = thresholds.thresholds(nn, kinds, c.threshold_rule)
            rows.append({"model_id": info["model_id"], "distance": metric, "dictionary": name,
                         "words": len(vectors),
                         **thresholds.nearest_neighbour_summary(nn, thetas[(metric, name)])})
        return thetas, rows

    # ------------------------------------------------------------------ report

    @staticmethod
    def _per_model(runs: list[UnitResult]) -> list[UnitResult]:
        """Each model's first unit, which carries its per-model by-products."""
        return [model_runs[0] for model_runs in by_model(runs).values()]

    def save_interim(self, suite: pd.DataFrame, results: pd.DataFrame,
                     runs: list[UnitResult]) -> pd.DataFrame:
        """The stage's other interim outputs: the suite in COSTELLO's JSON layout, the
        classifier banks and every setting's violation list (returned)."""
        costello_json.write_costello_suite(suite, self.interim / "suite.json")
        for run in self._per_model(runs):
            for kind, bank in run.extra["banks"].items():
                bank.save(bank_path(self.interim, run.unit.model_id, kind))
        violations = report.violation_list(results, suite)
        io.write_parquet(self.interim / "violations.parquet", violations)
        return violations

    def report(self, suite: pd.DataFrame, results: pd.DataFrame,
               runs: list[UnitResult]) -> Report:
        violations = self.save_interim(suite, results, runs)
        models = self._per_model(runs)
        infos = [run.extra["info"] for run in models]
        tables = {info["model_id"]: report.table2(results, info["model_id"]) for info in infos}
        out = Report(self.stage, metrics=report.headline_metrics(results, tables),
                     substitutes=substitutes(infos, self._classifiers_used(models)),
                     provenance=provenance(
                         self.params, self.workspace, "contrastive", inputs=self.suite_inputs(),
                         models=[i.get("describe") or
                                 f"{i['model_id']} @ {i['revision']} ({i['pooling']})"
                                 for i in infos],
                         **{"relations in the suite": relations_note(suite)},
                         **self._encoder_notes(infos),
                         **{OVERLAP_KEY: "; ".join(f"{i['model_id']}: "
                                                   f"{i['training_overlap'] or 'none'}"
                                                   for i in infos)}))
        out.add("contrastive-table1", table1(suite),
                "COSTELLO Table 1: triples per contrastive relation")
        if any("endpoint" in i for i in infos):  # only runs with an embedding service
            out.add("contrastive-endpoints", report.endpoint_usage(infos),
                    "Embedding services: what this run asked (requests, input tokens) and "
                    "what the embedding store served")
        accuracy = pd.concat([run.extra["accuracy"] for run in models], ignore_index=True)
        out.add("contrastive-classifiers", report.classifier_summary(accuracy),
                "Downstream classifiers: test accuracy (SST-2 sentiment, MRPC paraphrase)")
        searched = pd.concat([run.extra["thresholds"] for run in models])
        if searched.empty:
            searched = pd.DataFrame({"note": ["only θ = 0 asked for (contrastive.thresholds): "
                                              "no dictionary embedded or searched"]})
        out.add("contrastive-thresholds", searched,
                "Adaptive thresholds: nearest-neighbour distances of dictionary words")
        out.add_per_model("contrastive-table2", tables,
                          "COSTELLO Table 2 for {model}: violations (N_V) and precision "
                          "(P_A, P_B, %) per distance and threshold")
        for model_id, table in tables.items():
            out.figures[f"{FIGURE6}/{slug(model_id)}.png"] = Figure(
                lambda path, table=table, model_id=model_id: report.precision_figure(
                    table, path, f"{model_id}: precision against threshold"),
                report.precision_data(table))
        if results["model_id"].nunique() > 1:
            out.add("contrastive-table2-mean", report.table2(results),
                    "COSTELLO Table 2, all models: each N_V, P_A and P_B is the mean over "
                    "models of the per-model figure (as the paper); N_M: models with at "
                    "least one violation of that relation")
        out.add("contrastive-violations", report.headline_violations(violations),
                "Violations at L2, θ = μ−σ (vocabulary dictionary), largest margin first; "
                "every setting's list: data/interim/contrastive/violations.parquet")
        return out

    def _classifiers_used(self, models: list[UnitResult]) -> int:
        """The classifier count the banks were trained with (the report states what ran)."""
        used = {bank.n_classifiers for run in models for bank in run.extra["banks"].values()}
        return used.pop() if len(used) == 1 else self.params.contrastive.n_classifiers

    @staticmethod
    def _encoder_notes(infos: list[dict]) -> dict[str, str]:
        """Provenance lines only a run with other encoders than lingtest's own needs (so the
        default reports stay as they were): which models ran without exact-length passes,
        an embedding service's endpoint, revision and requests, and a ``vocab`` dictionary
        not taken from a tokenizer."""
        notes = {}
        own = [i for i in infos if not i.get("exact_length", True)]
        if own:
            notes[EXACT_LENGTH_KEY] = "; ".join(
                f"{i['model_id']}: not applied ({i['pooling']}: a vector may depend on its "
                f"batch's company in the last bits)" for i in own)
        served = [i for i in infos if "endpoint" in i]
        if served:
            notes["embedding services"] = "; ".join(
                f"{i['model_id']}: {i['endpoint']['endpoint']}, revision "
                f"{i['endpoint']['revision']} (stated by the server), "
                f"{report.usage_text(i['endpoint'])}" for i in served)
        odd = [i for i in infos if i.get("vocabulary", "the model's tokenizer")
               not in ("the model's tokenizer", None)]
        if odd:
            notes["vocab dictionary"] = "; ".join(f"{i['model_id']}: {i['vocabulary']}"
                                                  for i in odd)
        return notes

    def summary(self, suite: pd.DataFrame, results: pd.DataFrame,
                runs: list[UnitResult]) -> dict:
        infos = [run.extra["info"] for run in self._per_model(runs)]
        out = {"triples": len(suite), "violations": int(results["verdict"].eq("fail").sum()),
               "embedded_now": {info["model_id"]: info["embedded_now"] for info in infos}}
        if any("endpoint" in info for info in infos):
            out["endpoint_requests"] = {info["model_id"]: info["endpoint"]["requests"]
                                        for info in infos if "endpoint" in info}
        return out

