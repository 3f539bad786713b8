"""A user's own classifiers through the methods that test classifiers: a lexicon scorer
written here as a ``python:`` model (with its own label names, read through a label map),
a Hugging Face folder built here with ``bad``/``good`` and 5-star labels, through the
``capabilities`` and ``adaptive`` stages; reports and metrics keyed by display name."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lingtest.flows.stage import run_stage
from lingtest.flows.registry import load_params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.sentiment import LABELS2, LABELS3, load_sentiment_model
from projects import SMALLEST_CAPABILITIES

LEXICON = '''"""Counts opinion words: a lexicon model with no weights."""
import numpy as np

POSITIVE = {"good", "great", "love", "best", "fun", "wonderful", "excellent", "enjoy"}
NEGATIVE = {"bad", "worst", "boring", "awful", "hate", "dull", "terrible", "mess"}


class WordCount:
    labels = ["bad", "good"]

    def predict_proba(self, texts):
        rows = []
        for text in texts:
            words = [w.strip(".,!?") for w in text.lower().split()]
            score = sum(w in POSITIVE for w in words) - sum(w in NEGATIVE for w in words)
            p = 1 / (1 + np.exp(-2.0 * score))
            rows.append([1 - p, p])
        return np.array(rows)
'''
SPEC = "python:inputs/models/lexicon.py:WordCount#name=lexicon"
LABEL_MAP = "models.label_map={lexicon: {bad: neg, good: pos}}"
SMALL = [*SMALLEST_CAPABILITIES, "adaptive.bootstrap=100"]


def lexicon_probability(text: str) -> float:
    """P(good) as the module computes it, written out again."""
    words = [w.strip(".,!?") for w in text.lower().split()]
    pos = {"good", "great", "love", "best", "fun", "wonderful", "excellent", "enjoy"}
    neg = {"bad", "worst", "boring", "awful", "hate", "dull", "terrible", "mess"}
    score = sum(w in pos for w in words) - sum(w in neg for w in words)
    return float(1 / (1 + np.exp(-2.0 * score)))


@pytest.fixture(scope="module")
def own_runs(data_project):
    """capabilities and adaptive on the lexicon model and VADER (no trained MiniLM)."""
    workspace, overrides = data_project
    module = workspace.root / "inputs" / "models" / "lexicon.py"
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(LEXICON, encoding="utf-8")
    sets = overrides + SMALL + [f"capabilities.models=['{SPEC}', vader]",
                                f"adaptive.models=['{SPEC}', vader]", LABEL_MAP]
    params = load_params(workspace.root, sets)
    run_stage("capabilities", params, workspace)
    run_stage("adaptive", params, workspace)
    return workspace, params, overrides


def _keys(tree: dict) -> list[str]:
    return [k for k, v in tree.items() for k in [k, *(_keys(v) if isinstance(v, dict) else [])]]


@pytest.mark.slow
def test_capabilities_names_the_lexicon_model_everywhere(own_runs) -> None:
    workspace = own_runs[0]
    results = pd.read_parquet(workspace.interim / "capabilities" / "results.parquet")
    assert list(dict.fromkeys(results["model_id"])) == ["lexicon", "vader"]
    mine = results[results["model_id"] == "lexicon"]
    assert mine["revision"].str.fullmatch(r"python@sha256:[0-9a-f]{16}").all()
    # the label map read "good" as pos: p_pos is the module's own P(good)
    expected = [round(lexicon_probability(t), 6) for t in mine["text"]]
    assert mine["p_pos"].tolist() == pytest.approx(expected, abs=1e-6)
    reports = workspace.reports / "capabilities"
    names = sorted(p.name for p in reports.iterdir())
    assert "capabilities-table3-lexicon.md" in names and "capabilities-table3-vader.md" in names
    root = str(workspace.root)
    assert not [n for n in names if root.strip("/").replace("/", "-") in n or "python" in n]
    metrics = json.loads((reports / "metrics.json").read_text())
    assert "lexicon" in metrics and all("/" not in k and root not in k for k in _keys(metrics))
    provenance = json.loads((reports / "provenance.json").read_text())
    assert "lexicon @ python@sha256:" in provenance["models"]
    assert "(python:inputs/models/lexicon.py:WordCount)" in provenance["models"]
    # VADER stands in for the paper's models; the user's model is no substitute
    assert "vader (the VADER lexicon and rules)" in provenance["substitutes"]
    assert "minilm" not in provenance["substitutes"].lower()
    checklist = pd.read_csv(reports / "capabilities-checklist.csv")
    assert any("lexicon" in c for c in checklist.columns)


@pytest.mark.slow
def test_adaptive_scores_the_tree_with_the_lexicon_model(own_runs) -> None:
    workspace = own_runs[0]
    reports = workspace.reports / "adaptive"
    table = pd.read_csv(reports / "adaptive-models.csv")
    assert {"lexicon", "vader"} <= set(table.columns)
    metrics = json.loads((reports / "metrics.json").read_text())
    assert 0 <= metrics["lexicon"]["fail_%"] <= 100
    provenance = json.loads((reports / "provenance.json").read_text())
    assert "lexicon (python@sha256:" in provenance["models"]


@pytest.mark.slow
def test_editing_the_module_is_a_new_revision_and_a_cache_miss(own_runs) -> None:
    """The revision is the module file's hash; every cached task that takes the model keys
    on it (``cache_token``), so an edit is a miss and an unchanged file a hit."""
    from types import SimpleNamespace

    from lingtest.tasks.capabilities import model_tasks

    workspace = own_runs[0]
    module = workspace.root / "inputs" / "models" / "lexicon.py"

    def task_key() -> tuple[str, str]:
        model = load_sentiment_model(SPEC, root=workspace.root,
                                     label_maps={"lexicon": {"bad": "neg", "good": "pos"}})
        inputs = {"model": model, "train_texts": ["a fine film"], "pass_tokens": None}
        policy = model_tasks.neuron_bounds.cache_policy
        return model.revision, policy.compute_key(SimpleNamespace(task=model_tasks.neuron_bounds),
                                                  inputs, {})

    first = task_key()
    assert task_key() == first  # unchanged file: the same revision and key
    original = module.read_text(encoding="utf-8")
    try:
        module.write_text(original.replace("-2.0 * score", "-3.0 * score"), encoding="utf-8")
        edited = task_key()
        assert edited[0] != first[0] and edited[1] != first[1]
        model = load_sentiment_model(SPEC, root=workspace.root,
                                     label_maps={"lexicon": {"bad": "neg", "good": "pos"}})
        assert model.predict_proba(["a good film"])[0, 1] == pytest.approx(
            1 / (1 + np.exp(-3.0)))  # the edited code runs in this process
    finally:
        module.write_text(original, encoding="utf-8")


# ------------------------------------------------------------------ user code that breaks

BROKEN = '''import numpy as np
labels = None

def nan_row(texts):
    return np.array([[np.nan, 1.0] if "boom" in t else [0.5, 0.5] for t in texts])
nan_row.labels = ["negative", "positive"]

def raises(texts):
    if any("boom" in t for t in texts):
        raise KeyError("no entry")
    return np.tile([0.5, 0.5], (len(texts), 1))
raises.labels = ["negative", "positive"]

def silent(texts):
    return np.array([[np.nan, np.nan] if "???" in t else [0.2, 0.8] for t in texts])
silent.labels = ["negative", "positive"]

def wrong_shape(texts):
    return np.tile([0.5, 0.5], (len(texts) + 1, 1))
wrong_shape.labels = ["negative", "positive"]

def logits(texts):
    return np.tile([2.0, -1.0], (len(texts), 1))
logits.labels = ["negative", "positive"]
'''


@pytest.mark.parametrize("attr, message", [
    ("nan_row", r"NaN or infinite probabilities for 1 of 3 texts, first 'it goes boom'"),
    ("raises", r"raised KeyError: 'no entry' on the text 'it goes boom'"),
    ("wrong_shape", r"returned shape \(4, 2\) for 3 texts; expected \(3, 2\)"),
    ("logits", r"outside \[0, 1\] or a row not summing to 1 .*first 'fine'"),
])
def test_bad_user_output_is_one_clear_error(tmp_path, attr, message) -> None:
    (tmp_path / "broken.py").write_text(BROKEN, encoding="utf-8")
    model = load_sentiment_model(f"python:broken.py:{attr}", root=tmp_path)
    with pytest.raises(LingtestError, match=rf"model `{attr}` \(python:broken.py:{attr}\).*"
                                            + message):
        model.predict(["fine", "it goes boom", "also fine"])


def test_a_row_all_nan_is_no_answer_and_undefined(tmp_path) -> None:
    """A user's model that gives a text no answer (its row all NaN) gets an ``undefined``
    verdict for it, never a label; a row only partly NaN stays an error (above)."""
    import pandas as pd

    from lingtest.tasks.capabilities.model_tasks import run_suite

    (tmp_path / "broken.py").write_text(BROKEN, encoding="utf-8")
    model = load_sentiment_model("python:broken.py:silent", root=tmp_path)
    assert model.predict(["fine", "??? what", "good"]) == ["pos", "undefined", "pos"]
    suite = pd.DataFrame({"case_id": ["a", "b"], "capability": "LC1", "kind": "seed",
                          "parent_case_id": None, "text": ["fine", "??? what"],
                          "expectation": "pos"})
    rows = run_suite.fn(model, suite)
    assert rows["verdict"].tolist() == ["pass", "undefined"]
    assert np.isnan(rows.loc[1, "score"])


# ------------------------------------------------------------------ Hugging Face folders

@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory) -> dict[str, Path]:
    """Two sequence classifiers saved locally from the packaged MiniLM: labels bad/good and
    five star ratings (untrained heads, seeded: real forward passes, arbitrary scores)."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    from lingtest.tasks.models.registry import resolve

    base = resolve("sentence-transformers/all-MiniLM-L6-v2", "encoder").require().path
    out = {}
    for name, labels in {"badgood": ["bad", "good"],
                         "stars": ["1 star", "2 stars", "3 stars", "4 stars", "5 stars"]}.items():
        torch.manual_seed(0)
        model = BertForSequenceClassification.from_pretrained(
            base, num_labels=len(labels), id2label=dict(enumerate(labels)),
            label2id={label: i for i, label in enumerate(labels)})
        folder = tmp_path_factory.mktemp("hf") / f"my-{name}"
        model.save_pretrained(folder)
        AutoTokenizer.from_pretrained(base).save_pretrained(folder)
        out[name] = folder
    return out


def test_a_folder_with_its_own_labels_needs_a_label_map(hf_folders) -> None:
    folder = hf_folders["badgood"]
    with pytest.raises(LingtestError, match=r"labels \['bad', 'good'\].*models.label_map"):
        load_sentiment_model(str(folder))
    model = load_sentiment_model(str(folder), label_maps={"my-badgood": {"bad": "neg",
                                                                         "good": "pos"}})
    assert (model.model_id, model.labels) == ("my-badgood", LABELS2)
    assert model.parameters()["spec"] == str(folder)
    assert model.revision.startswith("local@sha256:")
    probs = model.predict_proba(["a good film", "a bad film"])
    assert probs.shape == (2, 2) and np.allclose(probs.sum(axis=1), 1)


def test_a_five_star_model_is_read_through_its_map(hf_folders) -> None:
    """1–2 stars are neg, 3 neutral, 4–5 pos: the mapped probabilities are the sums of the
    model's own softmax over its five labels."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    folder = hf_folders["stars"]
    label_map = {"1 star": "neg", "2 stars": "neg", "3 stars": "neutral", "4 stars": "pos",
                 "5 stars": "pos"}
    model = load_sentiment_model(f"{folder}#name=five-star", label_maps={"five-star": label_map})
    assert (model.model_id, model.labels) == ("five-star", LABELS3)
    texts = ["The plot was thin.", "A joy from start to finish!"]
    mapped = model.predict_proba(texts)
    raw_model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.inference_mode():
        own = [torch.softmax(raw_model(**tokenizer(t, return_tensors="pt")).logits, -1)[0]
               for t in texts]
    for row, probs in zip(mapped, own):
        sums = [probs[:2].sum(), probs[2], probs[3:].sum()]
        assert row == pytest.approx([float(s) for s in sums], abs=1e-5)
    assert model.predict(texts) == [LABELS3[int(np.argmax(r))] for r in mapped]


def test_names_never_carry_a_path(hf_folders, tmp_path) -> None:
    from lingtest.tasks.models.model_spec import parse_model

    ref = parse_model(str(hf_folders["badgood"]))
    assert ref.name == "my-badgood" and os.sep not in ref.name
    assert parse_model("python:/some/where/my_lexicon.py:score").name == "score"
    assert parse_model("predictions:/tmp/x/scores-v2.csv").name == "scores-v2"
    assert parse_model("openai:my-smol@http://127.0.0.1:8001/v1").name == "my-smol"
    assert parse_model("vader").name == "vader"  # built-in and hub ids keep their form
    named = parse_model("python:a.py:f", names={"python:a.py:f": "mine"})
    assert named.name == "mine"
    assert parse_model("python:a.py:f#name=own", names={"python:a.py:f": "mine"}).name == "own"


# ------------------------------------------------------------------ lingtest test

SHOUTY = '''"""Reads exclamation marks as enthusiasm: a second user model."""
import numpy as np

labels = ["negative", "positive"]


def predict_proba(texts):
    p = np.array([0.9 if "!" in t else 0.4 for t in texts])
    return np.column_stack([1 - p, p])
'''


def _tree_state(folder: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_lingtest_test_puts_a_new_model_beside_the_stored_baseline(own_runs, monkeypatch,
                                                                   capsys) -> None:
    """``lingtest test`` on a module-level python: model: its reports under runs/<name>/,
    the pipeline's reports and interim results untouched, the stored models beside it
    without being rerun, per-case changes, and a gate's exit status."""
    import sys

    from lingtest.flows import cli

    workspace = own_runs[0]
    module = workspace.root / "inputs" / "models" / "shouty.py"
    module.write_text(SHOUTY, encoding="utf-8")
    pipeline = {top: _tree_state(workspace.root / top) for top in ("reports", "data/interim")}
    sets = [arg for s in [*own_runs[2], *SMALL] for arg in ("--set", s)]
    monkeypatch.setenv("LINGTEST_ROOT", str(workspace.root))
    monkeypatch.chdir(workspace.root)
    argv = ["lingtest", "test", "python:inputs/models/shouty.py:predict_proba#name=shouty",
            "--methods", "capabilities,adaptive", "--max-fail", "0", *sets]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    output = capsys.readouterr()
    assert exit_.value.code == 1, output.err[-2000:]  # --max-fail 0: the gate fails
    assert "gate failed: capabilities: shouty fails" in output.err
    assert {top: _tree_state(workspace.root / top)
            for top in ("reports", "data/interim")} == pipeline  # the pipeline's untouched
    run = workspace.root / "runs" / "shouty"
    assert (run / "reports" / "capabilities" / "capabilities-table3-shouty.md").is_file()
    side = pd.read_csv(run / "reports" / "capabilities-vs-baseline" /
                       "shouty-capabilities-side-by-side.csv")
    # the stored models of the pipeline's run are the baseline: read, not rerun
    assert list(side.columns[-3:]) == ["shouty fail %", "lexicon fail %", "vader fail %"]
    assert not (run / "baseline").exists()
    stored = pd.read_parquet(workspace.interim / "capabilities" / "results.parquet")
    vader = stored[stored["model_id"] == "vader"]
    overall = side[side["capability"] == "all"].iloc[0]
    assert overall["vader fail %"] == pytest.approx(
        round(100 * vader["verdict"].eq("fail").mean(), 2))
    mine = pd.read_parquet(run / "interim" / "capabilities" / "results.parquet")
    assert set(mine["model_id"]) == {"shouty"}
    changes = pd.read_csv(run / "reports" / "capabilities-vs-baseline" /
                          "shouty-capabilities-changes.csv")
    against = changes.set_index("against").loc["vader"]
    merged = mine.merge(vader, on="case_id", suffixes=("_mine", "_base"))
    fixed = int(((merged["verdict_base"] != "pass") & (merged["verdict_mine"] == "pass")).sum())
    broken = int(((merged["verdict_base"] == "pass") & (merged["verdict_mine"] != "pass")).sum())
    assert (against["fixed"], against["broken"]) == (fixed, broken)
    adaptive = pd.read_csv(run / "reports" / "adaptive-vs-baseline" /
                           "shouty-adaptive-side-by-side.csv")
    assert "shouty fail %" in adaptive.columns and (adaptive["topic"] == "all").any()


@pytest.mark.slow
def test_a_run_on_another_suite_reruns_the_baseline_on_it(own_runs, monkeypatch,
                                                          capsys) -> None:
    """Another seed builds another suite, which the stored rows answer only in part: the
    pipeline's models run on this run's suite (under runs/<name>/baseline/), so the
    comparison counts every case; a stored model that params.yaml does not list cannot be
    rerun, and the table says it was left out."""
    import sys

    from lingtest.flows import cli

    workspace = own_runs[0]
    module = workspace.root / "inputs" / "models" / "shouty.py"
    module.write_text(SHOUTY, encoding="utf-8")
    pipeline = {top: _tree_state(workspace.root / top) for top in ("reports", "data/interim")}
    sets = [arg for s in [*own_runs[2], *SMALL, "seed=7"] for arg in ("--set", s)]
    monkeypatch.setenv("LINGTEST_ROOT", str(workspace.root))
    monkeypatch.chdir(workspace.root)
    monkeypatch.setattr(sys, "argv", ["lingtest", "test", "python:inputs/models/shouty.py:"
                                      "predict_proba#name=shouty7", "--methods",
                                      "capabilities", *sets])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    output = capsys.readouterr()
    assert exit_.value.code == 0, output.err[-2000:]
    assert {top: _tree_state(workspace.root / top)
            for top in ("reports", "data/interim")} == pipeline  # the pipeline's untouched
    run = workspace.root / "runs" / "shouty7"
    mine = pd.read_parquet(run / "interim" / "capabilities" / "results.parquet")
    stored = pd.read_parquet(workspace.interim / "capabilities" / "results.parquet")
    answered = len(set(mine["case_id"]) & set(stored.loc[stored["model_id"] == "vader",
                                                         "case_id"]))
    assert answered < mine["case_id"].nunique()  # another suite: the stored rows fall short
    assert ("this run's seed differs from the stored results' (another suite, or other "
            "verdicts on the same cases)") in " ".join(output.err.split())
    here = pd.read_parquet(run / "baseline" / "interim" / "capabilities" / "results.parquet")
    assert set(here["model_id"]) == {"vader"}  # lexicon: not in params.yaml, left out
    assert set(here["case_id"]) == set(mine["case_id"])
    report = run / "reports" / "capabilities-vs-baseline"
    side = pd.read_csv(report / "shouty7-capabilities-side-by-side.csv")
    assert list(side.columns[-2:]) == ["shouty7 fail %", "vader fail %"]
    overall = side[side["capability"] == "all"].iloc[0]
    assert overall["cases"] == mine["case_id"].nunique()
    assert overall["vader fail %"] == pytest.approx(
        round(100 * here["verdict"].eq("fail").mean(), 2))
    text = (report / "shouty7-capabilities-side-by-side.md").read_text()
    assert "Baseline models run here on this run's suite" in text
    assert "lexicon left out (not among params.yaml's capabilities models" in text
    provenance = json.loads((report / "provenance.json").read_text())
    assert "vader @ vaderSentiment" in provenance["models"]
    assert "(baseline: run here on this run's suite)" in provenance["models"]


def test_the_stored_baseline_stands_only_beside_a_run_of_its_own_settings(own_runs) -> None:
    """Settings that change verdicts on the same cases (a θ dictionary, a band) are read
    from the stored report's provenance; the model lists and how answers are fetched are
    not verdicts."""
    from lingtest.flows.own_models import NOT_VERDICTS, settings_differ

    workspace, _, overrides = own_runs
    root = workspace.root

    def differ(*extra: str) -> list[str]:
        params = load_params(root, [*overrides, *SMALL, LABEL_MAP, *extra])
        return settings_differ("capabilities", params, root,
                               exclude=("models", *NOT_VERDICTS))

    assert differ() == []
    assert differ("capabilities.models=[vader]", "consistency.concurrency=9") == []
    assert differ("capabilities.neutral_band=[0.4, 0.6]", "seed=3") == [
        "seed", "capabilities.neutral_band"]


# ------------------------------------------------------------------ predictions files

SCORER = '''"""Scores exported texts with the lexicon, as a user's own pipeline would."""
import sys

import pandas as pd

sys.path.insert(0, sys.argv[3])
from lexicon import WordCount

texts = pd.read_csv(sys.argv[1])
probs = WordCount().predict_proba(texts["text"].tolist())
pd.DataFrame({"text_id": texts["text_id"], "bad": probs[:, 0], "good": probs[:, 1]}).to_csv(
    sys.argv[2], index=False)
'''


@pytest.mark.slow
def test_predictions_file_round_trip(own_runs, monkeypatch, capsys, tmp_path) -> None:
    """export-suite → a separate script scores the texts → predictions:PATH through the
    capabilities stage gives the python: model's very verdicts; a missing text is refused
    with the count and the first texts."""
    import subprocess
    import sys

    from lingtest.flows import cli

    workspace, _, overrides = own_runs
    monkeypatch.setenv("LINGTEST_ROOT", str(workspace.root))
    monkeypatch.chdir(workspace.root)
    exported = tmp_path / "texts.csv"
    sets = [arg for s in [*overrides, *SMALL, LABEL_MAP] for arg in ("--set", s)]
    monkeypatch.setattr(sys, "argv", ["lingtest", "export-suite", "capabilities", "--output",
                                      str(exported), *sets])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 0
    assert f"texts to {exported}" in capsys.readouterr().out
    texts = pd.read_csv(exported)
    suite = pd.read_parquet(workspace.interim / "capabilities" / "suite.parquet")
    assert set(suite["text"]) <= set(texts["text"]) and texts["text_id"].is_unique
    assert len(texts) > len(set(suite["text"]))  # the CheckList sample's texts too
    scores = tmp_path / "scores.csv"
    script = tmp_path / "score.py"
    script.write_text(SCORER, encoding="utf-8")
    subprocess.run([sys.executable, str(script), str(exported), str(scores),
                    str(workspace.root / "inputs" / "models")], check=True, timeout=120)
    spec = f"predictions:{scores}#name=scored"
    label_map = {"scored": {"bad": "neg", "good": "pos"}}
    model = load_sentiment_model(spec, label_maps=label_map)
    assert model.revision.startswith("predictions@sha256:")
    lexicon = load_sentiment_model(SPEC, root=workspace.root,
                                   label_maps={"lexicon": {"bad": "neg", "good": "pos"}})
    sample = texts["text"].tolist()[:50]
    assert model.predict(sample) == lexicon.predict(sample)
    run = workspace.root / "runs" / "scored"
    params = load_params(workspace.root, [*overrides, *SMALL,
                                          f"capabilities.models=['{spec}']",
                                          "models.label_map={scored: {bad: neg, good: pos}}"])
    from lingtest.tasks.core.paths import Workspace
    run_stage("capabilities", params, Workspace(workspace.root, run))
    mine = pd.read_parquet(run / "interim" / "capabilities" / "results.parquet")
    stored = pd.read_parquet(workspace.interim / "capabilities" / "results.parquet")
    theirs = stored[stored["model_id"] == "lexicon"].set_index("case_id")["verdict"]
    assert mine.set_index("case_id")["verdict"].to_dict() == theirs.to_dict()
    pd.read_csv(scores).iloc[3:].to_csv(scores, index=False)  # three texts lose their score
    with pytest.raises(LingtestError, match=r"3 of \d+ texts have no score, first '"):
        load_sentiment_model(spec, label_maps=label_map).predict(texts["text"].tolist())


def test_an_edited_importable_module_is_reloaded(tmp_path, monkeypatch) -> None:
    """python:MODULE:ATTR: a process that imported the module before (a long-lived Dask
    worker) runs the edited code, under the new revision."""
    package = tmp_path / "own_pkg_reload"
    package.mkdir()
    module = package / "scorer.py"
    module.write_text("import numpy as np\nlabels = ['negative', 'positive']\n"
                      "def f(t):\n    return np.tile([0.2, 0.8], (len(t), 1))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = load_sentiment_model("python:own_pkg_reload.scorer:f")
    module.write_text(module.read_text().replace("[0.2, 0.8]", "[0.7, 0.3]"))
    second = load_sentiment_model("python:own_pkg_reload.scorer:f")
    assert first.revision != second.revision
    assert second.predict_proba(["x"]).tolist() == [[0.7, 0.3]]


def test_kinds_are_told_from_the_protocol_or_the_function_name(tmp_path) -> None:
    from lingtest.tasks.models.checks import infer_kind
    from lingtest.tasks.models.model_spec import parse_model

    (tmp_path / "m.py").write_text(
        "def generate(prompts):\n    return ['yes' for _ in prompts]\n"
        "def encode(texts):\n    return [[0.0]] * len(texts)\n"
        "def score(texts):\n    return None\n"
        "class Clf:\n    labels = ['neg', 'pos']\n    def predict_proba(self, t):\n"
        "        return [[0.5, 0.5]] * len(t)\n", encoding="utf-8")
    kinds = {attr: infer_kind(parse_model(f"python:m.py:{attr}", root=tmp_path), tmp_path)[0]
             for attr in ("generate", "encode", "Clf")}
    assert kinds == {"generate": "llm", "encode": "encoder", "Clf": "classifier"}
    with pytest.raises(LingtestError, match="cannot tell whether"):
        infer_kind(parse_model("python:m.py:score", root=tmp_path), tmp_path)


def test_label_map_keys_may_be_numbers() -> None:
    """scikit-learn's classes_ are often 0/1: YAML reads {0: neg} with number keys."""
    from lingtest.flows.registry import Params

    params = Params(models={"label_map": {"m": {0: "neg", 1: "pos"}}})
    assert params.models.label_map == {"m": {"0": "neg", "1": "pos"}}


@pytest.mark.slow
def test_a_python_model_runs_on_dask_workers_as_on_threads(own_runs, tmp_path,
                                                          dask_cluster) -> None:
    """Each worker process imports the module file itself: the adaptive stage on two Dask
    workers give the lexicon model the same rows as the thread run."""
    from projects import dask_overrides
    from lingtest.tasks.core.paths import Workspace

    workspace, _, overrides = own_runs
    params = load_params(workspace.root, [*overrides, *SMALL, LABEL_MAP,
                                          f"adaptive.models=['{SPEC}']",
                                          *dask_overrides(tmp_path / "results", dask_cluster),
                                          "runtime.shards=2"])
    elsewhere = Workspace(workspace.root, workspace.root / "runs" / "dask-check")
    run_stage("adaptive", params, elsewhere)
    on_dask = pd.read_parquet(elsewhere.interim / "adaptive" / "results.parquet")
    on_threads = pd.read_parquet(workspace.interim / "adaptive" / "results.parquet")
    on_threads = on_threads[on_threads["model_id"] == "lexicon"]
    columns = ["case_id", "output", "verdict", "score", "revision"]
    pd.testing.assert_frame_equal(
        on_dask[columns].sort_values("case_id").reset_index(drop=True),
        on_threads[columns].sort_values("case_id").reset_index(drop=True))
