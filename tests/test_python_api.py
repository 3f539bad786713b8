"""``import lingtest``: a live scikit-learn pipeline tested in one call, its failures read back
as DataFrames and HTML, an unchanged object a cache hit and a refitted one a miss, an object
that cannot be pickled run on threads under the revision of its source."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.core.errors import LingtestError

pytestmark = pytest.mark.slow

# the smallest capabilities run that still builds, expands and scores a suite (one capability)
SMALL = ["capabilities.capabilities=[LC2]", "capabilities.seeds_per_lc=2",
         "capabilities.max_masks_per_seed=2", "capabilities.fill_candidates=3",
         "capabilities.pcfg_heldout=10", "capabilities.checklist_max_examples=3",
         "capabilities.coverage_sizes=[4]", "capabilities.coverage_repeats=1",
         "capabilities.bootstrap=100"]


class Logged:
    """A fitted pipeline that gets sentiment backwards (its columns swapped: failures to
    read) and writes each call's size to ``log``: what reaches the model."""

    def __init__(self, pipeline, log: Path):
        self.pipeline, self.log = pipeline, str(log)
        self.classes_ = pipeline.classes_

    def predict_proba(self, texts):
        with open(self.log, "a", encoding="utf-8") as out:
            out.write(f"{len(texts)}\n")
        return self.pipeline.predict_proba(texts)[:, ::-1]


class Locked(Logged):
    """The same, holding a lock: no pickle takes it, so it stays in the calling process."""

    def __init__(self, pipeline, log: Path):
        super().__init__(pipeline, log)
        self.lock = threading.Lock()


def fitted(sst: pd.DataFrame, rows: int):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    train = sst[(sst["split"] == "train") & sst["label2"].notna()].head(rows)
    return make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(train["text"],
                                                                       train["label2"])


def calls(log: Path) -> int:
    return len(log.read_text().split()) if log.is_file() else 0


@pytest.fixture(scope="module")
def project(data_project):
    workspace, overrides = data_project
    sst = pd.read_parquet(workspace.processed / "sst.parquet")
    return workspace.root, [*overrides, *SMALL], sst


@pytest.fixture(scope="module")
def first(project):
    import lingtest

    root, sets, sst = project
    log = root / "svm-calls.txt"
    said: list[str] = []
    model = Logged(fitted(sst, 400), log)
    result = lingtest.test({"svm": model}, methods=["capabilities"], sets=sets, project=root,
                           name="live", echo=said.append)
    return result, model, log, said


def test_a_live_pipeline_is_tested_and_its_failures_read_back(first, project) -> None:
    import lingtest

    result, _, log, said = first
    root = project[0]
    assert calls(log) > 0
    assert (result.name, result.models, result.methods) == ("live", ["svm"], ["capabilities"])
    assert said[0].startswith("lingtest test: svm: a live Logged, identified by its state, "
                              "object@sha1:")
    rows = pd.read_parquet(result.folder / "interim" / "capabilities" / "results.parquet")
    assert set(rows["model_id"]) == {"svm"}
    assert rows["revision"].str.fullmatch(r"object@sha1:[0-9a-f]{16}").all()

    failures = result.failures("capabilities")
    assert len(failures) == (rows["verdict"] == "fail").sum() > 0
    assert set(failures["capability"]) == {"LC2"} and failures["text"].str.len().min() > 0
    assert (failures["output"] != failures["expectation"]).all()
    assert result.failures("capabilities", capability="LC2").equals(failures)
    with pytest.raises(LingtestError, match="has no capability 'LC9' .* it has: LC2"):
        result.failures("capabilities", capability="LC9")
    summary = result.summary()
    assert summary.to_dict("records")[0]["fail %"] == pytest.approx(
        100 * (rows["verdict"] == "fail").sum() / rows["verdict"].isin(["pass", "fail"]).sum(),
        abs=0.01)
    cell = result._repr_html_()
    assert "<h3>lingtest: live</h3>" in cell and failures["text"].iloc[0][:30] in cell
    assert "capabilities: worst failing cases" in cell

    again = lingtest.load("live", project=root)
    assert again.summary().equals(summary) and again.failures("capabilities").equals(failures)
    assert json.loads((result.folder / "run.json").read_text())["models"] == ["svm"]


def test_the_same_object_again_is_a_cache_hit_and_a_refitted_one_a_miss(first, project) -> None:
    import lingtest

    result, model, log, _ = first
    root, sets, sst = project
    rows = result.folder / "interim" / "capabilities" / "results.parquet"
    revision = pd.read_parquet(rows)["revision"].iloc[0]
    before = calls(log)
    lingtest.test({"svm": model}, methods=["capabilities"], sets=sets, project=root,
                  name="live", echo=None)
    assert calls(log) == before  # nothing asked of the model: its rows came from the cache

    assert pd.read_parquet(rows)["revision"].iloc[0] == revision

    refitted = Logged(fitted(sst, 300), log)
    lingtest.test({"svm": refitted}, methods=["capabilities"], sets=sets, project=root,
                  name="live", echo=None)
    assert calls(log) > before
    assert pd.read_parquet(rows)["revision"].iloc[0] != revision


def test_an_object_that_cannot_be_pickled_runs_on_threads(project, tmp_path) -> None:
    import lingtest

    root, sets, sst = project
    log = tmp_path / "calls.txt"
    said: list[str] = []
    result = lingtest.test({"locked": Locked(fitted(sst, 400), log)}, methods=["capabilities"],
                           sets=[*sets, "runtime.task_runner=dask"], project=root,
                           name="locked", echo=said.append)
    assert calls(log) > 0
    note = next(line for line in said if "locked: a live Locked" in line)
    assert "identified by its source, object-source@sha256:" in note
    assert "cannot be pickled (TypeError: cannot pickle '_thread.lock' object)" in note
    assert "so the run goes on threads in this process, not on Dask workers" in note
    assert result.notes == [note.removeprefix("lingtest test: ")]
    assert lingtest.load("locked", project=root).notes == result.notes
    # asked for Dask, it ran: a Dask worker could not have reached the object (``registered``)
    from lingtest.live import registered

    key = result.folder.parent / ".objects" / "locked.py"
    assert "from lingtest.live import registered" in key.read_text()
    with pytest.raises(LingtestError, match="lives in the Python process that called "
                                            "lingtest.test and could not be pickled"):
        registered("locked@0000")


def test_a_transformers_classification_pipeline_answers_every_label(tmp_path) -> None:
    """A text-classification pipeline's scores, one column per label in id2label's order."""
    from transformers import (BertConfig, BertForSequenceClassification, BertTokenizerFast,
                              pipeline)

    from lingtest.adapters import PipelineClassifier, adapt

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "fine",
                                "film", "dull"]) + "\n")
    config = BertConfig(vocab_size=9, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        id2label={0: "negative", 1: "positive"},
                        label2id={"negative": 0, "positive": 1})
    model = BertForSequenceClassification(config).eval()  # as from_pretrained gives it
    classify = pipeline("text-classification", model=model,
                        tokenizer=BertTokenizerFast(vocab_file=str(vocab)))
    adapted = adapt(classify)
    assert isinstance(adapted, PipelineClassifier) and adapted.labels == ["negative", "positive"]
    probs = adapted.predict_proba(["a fine film", "dull"])
    assert probs.shape == (2, 2) and np.allclose(probs.sum(axis=1), 1)
    top = classify(["a fine film"])[0]
    assert probs[0, adapted.labels.index(top["label"])] == pytest.approx(top["score"])
