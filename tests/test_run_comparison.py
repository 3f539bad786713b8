"""Run comparison: a table artifact's description carries its provenance and the commit."""
from __future__ import annotations

from lingtest.tasks.core.artifacts import artifact_description


def test_description_carries_provenance_and_commit():
    text = artifact_description("T", "some notes", {"seed": 7, "params": "abc123"})
    assert "**T**" in text and "some notes" in text
    assert "**seed**: `7`" in text and "**params**: `abc123`" in text
    assert "**commit**:" in text


def test_description_keeps_a_given_commit():
    text = artifact_description("T", "", {"code": "deadbeef"})
    assert "**code**: `deadbeef`" in text and "**commit**" not in text


def test_stage_params_are_dvc_yamls():
    from lingtest.flows.registry import STAGES
    from lingtest.flows.stage import stage_params

    assert stage_params("consistency") == ("seed", "profile", "models.offline",
                                           "models.lm_engine", "models.lm_precision",
                                           "models.names", "models.spacy", "consistency")
    assert all(stage_params(stage) for stage in STAGES)


def test_params_tag_ignores_sections_the_stage_does_not_read():
    from pathlib import Path

    from lingtest.flows.stage import stage_params_hash
    from lingtest.flows.registry import load_params

    params = load_params(Path(__file__).resolve().parents[1])
    other = params.model_copy(update={"consistency": params.consistency.model_copy(
        update={"bootstrap": params.consistency.bootstrap + 1})})
    assert stage_params_hash(params, "data") == stage_params_hash(other, "data")
    assert stage_params_hash(params, "consistency") != stage_params_hash(other, "consistency")


def test_contrastive_headline_metrics():
    import pandas as pd

    from lingtest.tasks.contrastive.report import headline_metrics

    rows = []
    for kind in ("mu-sigma", "min"):
        for relation, verdict, a in (("synonym", "fail", True), ("synonym", "pass", True),
                                     ("antonym", "pass", True)):
            rows.append({"model_id": "m", "distance": "l2", "threshold_kind": kind,
                         "dictionary": "vocab", "threshold": 0.5, "relation": relation,
                         "verdict": verdict, "gt_a": a, "gt_b": a, "rule": "paper"})
    try:
        metrics = headline_metrics(pd.DataFrame(rows))
    except KeyError as exc:  # the results frame needs more columns than this sketch
        raise AssertionError(f"results columns: {exc}")
    assert metrics["setting"] == "l2 mu-sigma vocab"
    assert metrics["m"]["synonym.N_V"] == 1
    assert metrics["m"]["antonym.N_V"] == 0
    assert "antonym.P_A" not in metrics["m"]  # no violation, no precision: left out
