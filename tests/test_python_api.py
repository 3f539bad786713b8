"""``import lingtest``: docs/python-api.md's walk-through run in a fresh Jupyter kernel; a live
scikit-learn pipeline tested in one call, its failures read back as DataFrames and HTML, an
unchanged object a cache hit and a refitted one a miss (in this process and in another), an
object that cannot be pickled run on threads under the revision of its source."""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from projects import SMALLEST_CAPABILITIES, fewer_rows

pytestmark = pytest.mark.slow

SMALL = SMALLEST_CAPABILITIES


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


# The quick profile of the walk-through's project: the capability the page names, with the
# quick profile's suite sizes, and VADER alone as the pipeline's model (its baseline)
NOTEBOOK_QUICK = {"capabilities": ["LC4"], "models": ["vader"], "pcfg_heldout": 10,
                  "checklist_max_examples": 3, "coverage_sizes": [4], "coverage_repeats": 1,
                  "bootstrap": 100}

# The walk-through's section of the page: each ```python block in it is one notebook cell.
PAGE = PACKAGE_ROOT / "docs" / "python-api.md"
WALK_THROUGH = "## A walk-through in a notebook"


def walk_through_cells(page: Path = PAGE) -> list[str]:
    """The code cells of the page's walk-through, in order, as written."""
    section = page.read_text(encoding="utf-8").split(WALK_THROUGH, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.S | re.M)


def cell_html(cell) -> str:
    return "".join(out.get("data", {}).get("text/html", "") for out in cell.outputs)


def cell_text(cell) -> str:
    return "".join(out.get("text", "") or out.get("data", {}).get("text/plain", "")
                   for out in cell.outputs)


@pytest.fixture(scope="module")
def notebook(project, tmp_path_factory):
    """The walk-through's cells executed, unchanged, in a new Jupyter kernel in a copy of the
    data project where the capabilities stage has run (as after `make run`), whose quick
    profile is ``NOTEBOOK_QUICK``, whose params.yaml holds the test's data settings and whose
    CheckList suite is four of its tests (``fewer_rows``: SmolLM2 answers each text). The
    kernel shares this process's Prefect API and result storage."""
    import nbformat
    import yaml
    from nbclient import NotebookClient
    from prefect.settings import get_current_settings

    import lingtest

    root, sets, _ = project
    folder = tmp_path_factory.mktemp("notebook") / "project"
    shutil.copytree(root, folder, ignore=shutil.ignore_patterns(".prefect", "runs"))
    fewer_rows(Workspace(folder), sst_per_split=None)  # four CheckList tests for SmolLM2
    params = yaml.safe_load((folder / "params.yaml").read_text())
    for setting in sets:
        key, value = setting.split("=", 1)
        section, name = key.split(".")
        if section != "capabilities":  # the data settings, for both the stage and the kernel
            params[section][name] = yaml.safe_load(value)
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    quick = yaml.safe_load((PACKAGE_ROOT / "params" / "quick.yaml").read_text())
    quick["capabilities"].update(NOTEBOOK_QUICK)
    (folder / "params").mkdir()
    (folder / "params" / "quick.yaml").write_text(yaml.safe_dump(quick, sort_keys=False))
    # what `make run` leaves for the walk-through: the pipeline's capabilities results
    lingtest.run("capabilities", profile="quick", project=folder, echo=None)

    cells = walk_through_cells()
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    current = get_current_settings()
    env = {**os.environ, "PREFECT_API_URL": str(current.api.url),
           "PREFECT_HOME": str(current.home),
           "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(current.results.local_storage_path)}
    NotebookClient(book, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute(env=env)
    nbformat.write(book, tmp_path_factory.getbasetemp() / "python-api.ipynb")
    return book, folder


def cell(book, starts: str):
    """The walk-through's cell whose code starts with ``starts``."""
    return next(c for c in book.cells if c.source.startswith(starts))


def test_the_walk_through_runs_in_a_fresh_kernel_and_shows_the_failures(notebook) -> None:
    import lingtest

    book, folder = notebook
    result = lingtest.load("tfidf-lr", project=folder)
    assert (result.models, result.methods) == (["tfidf-lr"], ["capabilities"])
    failures = result.failures("capabilities", capability="LC4")
    assert len(failures) > 0 and set(failures["capability"]) == {"LC4"}
    worst = html.escape(failures["text"].iloc[0], quote=False)  # whole in the result's own cell
    start = html.escape(failures["text"].iloc[0][:40], quote=False)  # pandas cuts a frame's cell

    shown = cell_html(cell(book, "import lingtest"))  # the three lines' cell
    assert "<h3>lingtest: tfidf-lr</h3>" in shown and worst in shown
    assert "capabilities: worst failing cases" in shown
    summary = cell_html(cell(book, "result.summary()"))
    assert result.baselines == {"capabilities": ["vader"]}
    assert "<td>tfidf-lr</td>" in summary and "<td>vader</td>" in summary
    assert start in cell_html(cell(book, "result.failures("))
    table = cell_html(cell(book, "result.table("))
    assert "LC4" in table and "tfidf-lr" in table and "vader" in table
    assert cell_text(cell(book, "again = ")).strip().endswith("True")
    assert start in cell_html(cell(book, "lingtest.load("))


def test_the_walk_through_s_transformers_pipeline_is_a_prompted_classifier(notebook) -> None:
    """SmolLM2 as a text-generation pipeline object: an LLM, asked for each case's sentiment
    through the default prompt, its label word read, under its state's revision."""
    import lingtest

    book, folder = notebook
    smol = lingtest.load("smollm2-pipeline", project=folder)
    assert (smol.models, smol.baselines) == (["smollm2-pipeline"], {"capabilities": ["vader"]})
    assert smol.notes[0].startswith("smollm2-pipeline: a live TextGenerationPipeline, "
                                    "identified by its state, object@sha1:")
    rows = pd.read_parquet(smol.folder / "interim" / "capabilities" / "results.parquet")
    assert set(rows["model_id"]) == {"smollm2-pipeline"}
    assert rows["revision"].str.fullmatch(r"object@sha1:[0-9a-f]{16}").all()
    decided = rows[rows["verdict"].isin(["pass", "fail"])]
    assert len(decided) > 0
    assert set(decided[["p_neg", "p_neutral", "p_pos"]].to_numpy().ravel()) <= {0.0, 1.0}
    line = json.loads((smol.folder / "reports" / "capabilities" / "provenance.json")
                      .read_text())["LLM classifier smollm2-pipeline"]
    assert line.startswith("python: LLM python:runs/.objects/smollm2-pipeline.py:model @ "
                           "object@sha1:")
    assert "probabilities: parsed answer (probability 1); no label named: undefined" in line
    shown = cell(book, "smol = lingtest.test(")
    assert "lingtest test: smollm2-pipeline is an LLM (from its generate() method); tested " \
        "under capabilities: a sentiment classifier (prompted)" in cell_text(shown)


def test_the_walk_through_s_second_call_asks_the_model_nothing(notebook) -> None:
    """The same object again: its answers (the suite's and CheckList's) are Prefect cache
    hits, not computed."""
    from prefect import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

    names = ["run-suite-tfidf-lr", "run-checklist-tfidf-lr"]
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            task_run_filter=TaskRunFilter(name=TaskRunFilterName(any_=names)))
    for name in names:
        states = [r.state_name for r in sorted(runs, key=lambda r: r.expected_start_time)
                  if r.name == name]
        assert states == ["Completed", "Cached"], name


# The walk-through's pipeline fitted in a new interpreter: its revision, and that of one
# fitted on other rows. (Not in the test's own process, whose math libraries may run on other
# thread counts, so that the same fit differs in its last bits: another state, rightly.)
REFIT = """
import sys
import cloudpickle
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from lingtest.live import state_revision

sst = pd.read_parquet(sys.argv[1])
train = sst[(sst.split == "train") & sst.label2.notna()]
for rows in (train, train.head(500)):
    clf = make_pipeline(TfidfVectorizer(), LogisticRegression(max_iter=1000))
    clf.fit(rows.text, rows.label2)
    print(state_revision(clf, cloudpickle.dumps(clf)))
"""


def test_an_equal_refit_in_another_process_has_the_kernel_s_revision(notebook) -> None:
    """The walk-through's pipeline fitted again in another process (the same data and code)
    has the revision the kernel's run stored, though its TfidfVectorizer keeps a memory
    address; one fitted on other rows has another."""
    _, folder = notebook
    stored = pd.read_parquet(folder / "runs" / "tfidf-lr" / "interim" / "capabilities"
                             / "results.parquet")["revision"].unique()
    done = subprocess.run([sys.executable, "-c", REFIT,
                           str(folder / "data" / "processed" / "sst.parquet")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    equal, other = done.stdout.split()
    assert list(stored) == [equal] and other != equal


def test_the_run_s_report_html_holds_its_tables_figures_and_failures(notebook) -> None:
    from report_checks import check_report, check_summary

    _, folder = notebook
    run = folder / "runs" / "tfidf-lr"
    check_report(run)
    check_summary(run)
    written = (run / "report.html").read_bytes()  # by lingtest.test, in the kernel
    again = subprocess.run([str(Path(sys.executable).with_name("lingtest")), "report",
                            "tfidf-lr"], cwd=folder, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == str(run / "report.html")
    assert (run / "report.html").read_bytes() == written


def test_chromium_shows_the_cell_and_the_report_from_files(notebook, tmp_path) -> None:
    """The result's cell as Jupyter got it, and report.html, open in headless Chromium from
    file:// URLs (no server) and show the run, its baseline and its worst failing case;
    their screenshots are left in ``tmp_path``."""
    import asyncio

    import lingtest
    from browser import RENDER_WAIT_S, read_pages, start_chromium, stop_chromium

    book, folder = notebook
    result = lingtest.load("tfidf-lr", project=folder)
    worst = result.failures("capabilities")["text"].iloc[0]
    (shown,) = [out.data["text/html"] for out in cell(book, "import lingtest").outputs
                if out.output_type == "execute_result"]
    page = tmp_path / "cell.html"
    page.write_text(f"<!doctype html><meta charset=utf-8><body>{shown}</body>",
                    encoding="utf-8")
    expected = ["lingtest: tfidf-lr", "vader", worst]
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    chromium, websocket_url = start_chromium(profile)
    try:
        asyncio.run(asyncio.wait_for(read_pages(
            websocket_url, [(page.as_uri(), expected),
                            ((result.folder / "report.html").as_uri(), expected)],
            {0: tmp_path / "cell.png", 1: tmp_path / "report.png"}), timeout=3 * RENDER_WAIT_S))
    finally:
        stop_chromium(chromium)
    for shot in (tmp_path / "cell.png", tmp_path / "report.png"):
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


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


def test_the_same_object_again_is_a_cache_hit_and_a_refitted_one_a_miss(
        first, project, monkeypatch) -> None:
    """...and a report.html that cannot be written (here: a disk full) is one line, not a
    failed run: the results are complete."""
    import lingtest
    import lingtest.report

    result, model, log, _ = first
    root, sets, sst = project
    rows = result.folder / "interim" / "capabilities" / "results.parquet"
    revision = pd.read_parquet(rows)["revision"].iloc[0]
    before = calls(log)

    def disk_full(_result):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(lingtest.report, "write_report", disk_full)
    said: list[str] = []
    again = lingtest.test({"svm": model}, methods=["capabilities"], sets=sets, project=root,
                          name="live", echo=said.append)
    assert calls(log) == before  # nothing asked of the model: its rows came from the cache
    assert said[-1] == ("lingtest test: report.html not written (OSError: [Errno 28] No space "
                        "left on device); the run's results are complete; fix the cause and "
                        "run: lingtest report live")
    assert again.summary().equals(result.summary())
    monkeypatch.undo()

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
