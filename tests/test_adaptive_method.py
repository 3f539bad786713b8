"""The adaptive re-scoring Method through the shared flow composition, in a temp workspace."""
from __future__ import annotations

import json

import numpy as np
from pathlib import Path

import pandas as pd
import pytest

from lingtest.flows.method import compose
from lingtest.tasks.adaptive.cases import CONTRACT
from lingtest.tasks.adaptive.method import AdaptiveMethod
from lingtest.tasks.adaptive.tree import read_tree
from lingtest.flows.registry import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.schema import check_results
from lingtest.tasks.models.sentiment import VaderModel

HOTEL = "imdb_hotel_conversion.csv"


def run(params: Params, workspace: Workspace) -> dict:
    """``compose(AdaptiveMethod(...))`` inside a flow run (the stage flow ``method_flow`` makes)."""
    from prefect import flow

    return flow(name="adaptive-test")(lambda: compose(AdaptiveMethod(params, workspace)))()


def latest_table(key: str) -> pd.DataFrame:
    """The rows of the newest table artifact ``key`` (this test process's Prefect server)."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    with get_client(sync_client=True) as client:
        [artifact] = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])),
            sort=ArtifactSort.CREATED_DESC, limit=1)
    data = artifact.data
    return pd.DataFrame(json.loads(data) if isinstance(data, str) else data)


def _params(mirror, models, **extra) -> Params:
    return Params(adaptive={"trees": [str(mirror / "adatest" / HOTEL)], "models": models,
                            "bootstrap": 200, **extra})


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory) -> str:
    """A randomly initialised one-layer BERT classifier in a folder (a second real model)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from lingtest.tasks.models import registry

    folder = tmp_path_factory.mktemp("tiny-classifier")
    minilm = registry.resolve("sentence-transformers/all-MiniLM-L6-v2", "encoder").require()
    config = BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, num_labels=2,
                        id2label={0: "NEGATIVE", 1: "POSITIVE"},
                        label2id={"NEGATIVE": 0, "POSITIVE": 1})
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(minilm.path).save_pretrained(folder)
    return str(folder)


def test_one_model_report_by_hand(mirror, tmp_path, prefect_harness):
    workspace = Workspace(tmp_path)
    summary = run(_params(mirror, ["vader"]), workspace)
    assert summary["cases"] == 190 and summary["results"] == 190
    results = check_results(pd.read_parquet(tmp_path / "data/interim/adaptive/results.parquet"),
                            CONTRACT)
    assert set(results["model_id"]) == {"vader"}

    # /Price by hand: a pass row expects its output, a fail row the other class
    tree = read_tree(mirror / "adatest" / HOTEL).frame
    price = tree[(tree["topic"] == "/Price") & tree["label"].isin(["pass", "fail"])]
    expected = [o if lab == "pass" else {"pos": "neg", "neg": "pos"}[o]
                for o, lab in zip(price["output"], price["label"])]
    answers = VaderModel().predict(list(price["input"]))
    fails = sum(a != e for a, e in zip(answers, expected))
    assert (len(price), fails) == (35, 24)  # VADER misses 24 of the 35 price tests
    rates = pd.read_csv(tmp_path / "reports/adaptive/adaptive-topics.csv")
    row = rates[(rates["topic"] == "/Price") & (rates["model_id"] == "vader")].iloc[0]
    assert (row["n"], row["fail"]) == (len(price), fails)
    assert row["fail %"] == pytest.approx(100 * fails / len(price))
    assert row["low %"] <= row["fail %"] <= row["high %"]

    diff = latest_table("adaptive-diff")
    assert diff.iloc[0][["added", "unchanged"]].tolist() == [190, 0]  # first run
    assert not (tmp_path / "reports/adaptive/adaptive-diff.csv").exists()  # history: no file
    scored = read_tree(tmp_path / "data/interim/adaptive/trees" / HOTEL)
    assert "vader score" in scored.frame.columns
    metrics = json.loads((tmp_path / "reports/adaptive/metrics.json").read_text())
    assert metrics["all"]["cases"] == 190 and set(metrics["vader"]) == {"fail_%"}
    assert metrics["vader"]["fail_%"] == pytest.approx(
        100 * results["verdict"].eq("fail").sum() / results["verdict"].isin(["pass", "fail"]).sum())


def test_two_models_cross_table_and_diff_with_the_previous_run(mirror, tmp_path,
                                                               tiny_classifier,
                                                               prefect_harness):
    workspace = Workspace(tmp_path)
    run(_params(mirror, ["vader"]), workspace)
    params = _params(mirror, ["vader", tiny_classifier]).model_copy()
    params.runtime.shards = 2
    summary = run(params, workspace)
    assert summary["results"] == 380
    cross = pd.read_csv(tmp_path / "reports/adaptive/adaptive-models.csv")
    # a folder is named by its folder's name, never its path (``models.names`` can rename it)
    assert list(cross.columns) == ["tree", "topic", "vader", Path(tiny_classifier).name]
    assert len(cross) == 7 and set(cross["topic"]) == {"/", "/Rooms", "/Price", "/Location",
                                                       "/Service", "/Facilities/Restaurant",
                                                       "/Facilities/Pool"}  # "/": one root test
    rates = pd.read_csv(tmp_path / "reports/adaptive/adaptive-topics.csv")
    by_topic = rates.set_index(["topic", "model_id"])["fail %"]
    assert np.allclose(cross.set_index("topic")["vader"],
                       by_topic.xs("vader", level="model_id").loc[cross["topic"]])
    diff = latest_table("adaptive-diff").set_index("model_id")
    assert diff.loc["vader", "unchanged"] == 190 and diff.loc["vader", "added"] == 0
    assert diff.loc[Path(tiny_classifier).name, "added"] == 190  # new model: all cases new


def test_tables_do_not_change_with_shards(mirror, tmp_path, tiny_classifier,
                                           prefect_harness):
    """``runtime.shards`` only cuts the work: the bootstrap intervals resample each topic's
    rows in case order, so every table and the re-scored tree are the unsharded run's."""
    from projects import changed_tables, report_tables

    runs = []
    for shards in (1, 3):
        workspace = Workspace(tmp_path / f"shards-{shards}")
        workspace.root.mkdir()
        params = _params(mirror, ["vader", tiny_classifier])
        params.runtime.shards = shards
        run(params, workspace)
        tree = (workspace.interim / "adaptive" / "trees" / HOTEL).read_bytes()
        runs.append((report_tables(workspace, "adaptive"), tree))
    (whole, whole_tree), (sharded, sharded_tree) = runs
    assert "adaptive-topics.csv" in whole and whole_tree == sharded_tree
    assert changed_tables(whole, sharded) == []


def test_bad_band_names_the_key():
    with pytest.raises(ValueError, match="neutral_band"):
        Params(adaptive={"neutral_band": [0.7, 0.2]})


def test_missing_tree_names_the_key(tmp_path):
    params = Params(adaptive={"trees": ["data/raw/adatest/none.csv"], "models": ["vader"]})
    with pytest.raises(LingtestError, match="adaptive.trees: no test tree at .*none.csv"):
        AdaptiveMethod(params, Workspace(tmp_path)).check_inputs()


def test_trees_grown_under_inputs_adaptive_are_rescored(mirror, tmp_path):
    """A tree `lingtest adapt` grew in inputs/adaptive/ joins adaptive.trees (once)."""
    import shutil

    grown = tmp_path / "inputs" / "adaptive"
    grown.mkdir(parents=True)
    shutil.copy(mirror / "adatest" / HOTEL, grown / "hotel.csv")
    listed = str(grown / "hotel.csv")
    params = Params(adaptive={"trees": [str(mirror / "adatest" / HOTEL), listed]})
    paths = AdaptiveMethod(params, Workspace(tmp_path)).tree_paths()
    assert [p.name for p in paths] == [HOTEL, "hotel.csv"]
    params = Params(adaptive={"trees": [str(mirror / "adatest" / HOTEL)]})
    assert [p.name for p in AdaptiveMethod(params, Workspace(tmp_path)).tree_paths()] == [
        HOTEL, "hotel.csv"]
