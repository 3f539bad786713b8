"""``--profile paper`` end to end, every stage it affects, on the stand-in hub.

Why: params/paper.yaml (the papers' 45 hub models, benepar, BERT fill-in, SentiWordNet, the
code's rules) had never run anywhere; the hub cannot be reached here. ``standin_hub`` gives
every hub id a tiny random model in the Hugging Face cache (``HF_HUB_OFFLINE=1``), so the
project takes its real online path (``models.offline: false``); ``standin_nltk_data`` gives
benepar_en3 and SentiWordNet. The overrides below shrink sizes only (seeds, triples,
questions, epochs, examples, resamples; and SST's rows, after the data stage): every
model, rule and table layout is the profile's. docs/reproducing.md lists what this run found.

What the profile changes, per dvc.yaml's params: data (``profile``), contrastive and repair
(``contrastive``, ``repair``, ``models``), capabilities, consistency, and through
``models.offline`` train-sentiment, adaptive and adaptive-debug.
"""
from __future__ import annotations

import json
import shutil
import time

import pandas as pd
import pytest

from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.core.publish import slug
from tests.projects import fewer_rows
from tests.standin_hub import (  # noqa: F401 - fixtures
    STANDINS, T5_ID, standin_hub, standin_hub_files, standin_nltk_data)

pytestmark = pytest.mark.slow

# Sizes only. capabilities: two of the 10 capabilities (the counts of each; 3 trials for the
# ASE'22 layout stay); consistency: two of the guide's questions (``QUESTIONS``).
SMALL = {
    "contrastive": ["contrastive.max_seeds=2", "contrastive.dictionary_max_words=50",
                    "contrastive.n_classifiers=5", "contrastive.classifier_epochs=1",
                    "contrastive.classifier_max_train=60", "contrastive.classifier_max_test=20"],
    "repair": ["repair.epochs=1", "repair.max_steps_per_epoch=1", "repair.accumulation=1",
               "repair.selection_max_triples=10", "repair.classifier_max_train=60",
               "repair.classifier_max_test=20", "repair.bootstrap=100"],
    "capabilities": ["capabilities.capabilities=[LC2,LC9]", "capabilities.seeds_per_lc=2",
                     "capabilities.max_masks_per_seed=2", "capabilities.fill_candidates=4",
                     "capabilities.pcfg_heldout=10", "capabilities.checklist_max_examples=3",
                     "capabilities.coverage_sizes=[4,8]", "capabilities.coverage_repeats=2",
                     "capabilities.coverage_max_train=64", "capabilities.bootstrap=200"],
    "train-sentiment": ["capabilities.train_sentiment.max_train=96",
                        "capabilities.train_sentiment.max_test=64"],
    "consistency": ["consistency.questions=inputs/paper-questions.jsonl",
                    "consistency.max_new_tokens=8", "consistency.bootstrap=200"],
    "adaptive": ["adaptive.bootstrap=200"],
    "adaptive-debug": ["adaptive.debug.topics=[\"used to, but now\"]", "adaptive.debug.rounds=1",
                       "adaptive.debug.prompts=1", "adaptive.debug.completions=4",
                       "adaptive.debug.checklist_examples=2", "adaptive.debug.checklist_n=8",
                       "adaptive.debug.epochs=1", "adaptive.debug.eval_max=8",
                       "adaptive.debug.bootstrap=200"],
}
# Each stage after the stages whose outputs it reads (dvc.yaml's deps).
NEEDS = {"contrastive": ["data"], "repair": ["contrastive"], "capabilities": ["data"],
         "consistency": ["data"], "train-sentiment": ["data"], "adaptive": ["train-sentiment"],
         "adaptive-debug": ["train-sentiment"]}
QUESTIONS = 2  # the guide's shortest questions


class PaperProject:
    """A project whose stages run under ``--profile paper`` on demand, each once, after the
    stages it needs; as ``lingtest run`` does, each stage's inputs are checked first."""

    def __init__(self, workspace: Workspace, mirror, nltk_data):
        self.workspace, self.nltk_data = workspace, nltk_data
        self.base = [f"data.mirror={mirror}", "data.online=false", "runtime.task_runner=threads"]
        self.summaries: dict[str, object] = {}
        self.seconds: dict[str, float] = {}

    def params(self):
        from lingtest.flows.registry import load_params

        return load_params(self.workspace.root,
                           self.base + [o for small in SMALL.values() for o in small], "paper")

    def run(self, stage: str):
        from lingtest.flows.stage import run_stage
        from lingtest.flows.validation import check_display_names, validate_inputs

        if stage not in self.summaries:
            for needed in NEEDS.get(stage, []):
                self.run(needed)
            params = self.params()
            started = time.perf_counter()
            check_display_names(params)
            validate_inputs(stage, params, self.workspace)
            self.summaries[stage] = run_stage(stage, params, self.workspace)
            self.seconds[stage] = round(time.perf_counter() - started, 1)
            if stage == "data":
                self._after_data()
        return self.summaries[stage]

    def _after_data(self) -> None:
        """What a user adds by hand for the profile: SentiWordNet where the capabilities
        stage's error says (data/raw/nltk_data), and a short questions file. And a size:
        SST's first 600 sentences a split (spaCy tags all of it for the searches)."""
        fewer_rows(self.workspace, sst_per_split=600, checklist_tests=None)
        corpora = self.workspace.raw / "nltk_data" / "corpora"
        shutil.copytree(self.nltk_data / "corpora" / "sentiwordnet", corpora / "sentiwordnet")
        questions = pd.read_parquet(self.workspace.processed / "questions.parquet")
        guide = questions[questions["source"] == "kommkonllm"]
        shortest = guide.loc[guide["question"].str.len().sort_values(kind="stable").index]
        lines = [json.dumps({"question": q, "answer": bool(a), "passage": p})
                 for q, a, p in shortest.head(QUESTIONS)[["question", "answer", "passage"]]
                 .itertuples(index=False)]
        (self.workspace.root / "inputs").mkdir(exist_ok=True)
        (self.workspace.root / "inputs" / "paper-questions.jsonl").write_text(
            "\n".join(lines) + "\n", encoding="utf-8")

    def reports(self, stage: str):
        return self.workspace.reports / stage

    def provenance(self, stage: str) -> dict:
        return json.loads((self.reports(stage) / "provenance.json").read_text())


@pytest.fixture(scope="module")
def paper(standin_hub, standin_nltk_data, mirror, prefect_harness, tmp_path_factory):
    """A fresh project with params.yaml and the profiles (params/); benepar_en3 on nltk's
    path, where ``benepar.download`` puts it; nltk's path restored afterwards (a stage puts
    the project's nltk_data first on it)."""
    import nltk

    root = tmp_path_factory.mktemp("paper-profile")
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    shutil.copytree(PACKAGE_ROOT / "params", root / "params")
    project = PaperProject(Workspace(root), mirror, standin_nltk_data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nltk.data, "path", [*nltk.data.path, str(standin_nltk_data)])
        yield project
    print("stage seconds:", project.seconds)


def stage_says_paper(paper: PaperProject, stage: str) -> dict:
    provenance = paper.provenance(stage)
    assert provenance["profile"] == "paper", stage
    return provenance


def commits_named(standin_hub, text: str, ids) -> None:
    """Each id appears in ``text`` with its stand-in's fake commit."""
    missing = [m for m in ids if f"{m} @ {standin_hub.commit(m)}" not in text]
    assert not missing, missing


def test_data_stage_is_the_profiles(paper):
    """The profile leaves the data section as it is: the run imports the mirror's assets."""
    from lingtest.flows.registry import load_params

    paper.run("data")
    default = load_params(paper.workspace.root, paper.base)
    assert paper.params().data == default.data
    stage_says_paper(paper, "data")


def test_contrastive_table2_over_all_42_encoders_with_the_code_rule(paper, standin_hub):
    """COSTELLO's 42 models, each with its Table 2 and Figure 6, the mean Table 2 beside the
    paper's averages (shown only for rows computed with the code's rule), every model's
    revision the stand-in's commit."""
    paper.run("contrastive")
    encoders = paper.params().contrastive.encoders
    assert len(encoders) == 42
    reports = paper.reports("contrastive")
    results = pd.read_parquet(paper.workspace.interim / "contrastive" / "results.parquet")
    assert set(results["model_id"]) == set(encoders)
    assert set(results["rule"]) == {"paper"}
    for model_id in encoders:
        table = pd.read_csv(reports / f"contrastive-table2-{slug(model_id)}.csv")
        assert {"l1", "l2", "cos"} <= set(table["distance"]), model_id
        assert (reports / "contrastive-figure6" / f"{slug(model_id)}.png").is_file()
        assert results.loc[results["model_id"] == model_id, "revision"].unique().tolist() == \
            [standin_hub.commit(model_id)]
    mean = pd.read_csv(reports / "contrastive-table2-mean.csv")
    l2_zero = mean[(mean["distance"] == "l2") & (mean["threshold"] == "0")
                   & (mean["dictionary"] == "vocab")]
    assert l2_zero["paper avg P_A"].tolist() == [51.22]
    assert (mean[[c for c in mean if c.endswith("N_M")]] <= 42).all().all()
    metrics = json.loads((reports / "metrics.json").read_text())
    assert set(metrics) - {"setting", "all"} == set(encoders)
    provenance = stage_says_paper(paper, "contrastive")
    commits_named(standin_hub, provenance["models"], encoders)
    # the paper's own models are no substitutes; RoBERTa checkpoints without pooler weights
    # pool [CLS] where the paper's code pools through a random pooler
    substitutes = provenance["substitutes"]
    assert "hub encoders →" not in substitutes and "5 MLPs" in substitutes
    roberta = sorted(m for m in encoders if STANDINS[m].family == "roberta")
    assert f"→ [CLS] ({', '.join(roberta)})" in substitutes


def test_repair_on_the_papers_10_models(paper, standin_hub):
    """COSTELLO §5.4's 10 models repaired and re-tested, none reported as a substitute."""
    paper.run("repair")
    models = paper.params().repair.models
    assert len(models) == 10
    reports = paper.reports("repair")
    epochs = pd.read_csv(reports / "repair-epochs.csv")
    assert epochs["model"].drop_duplicates().tolist() == models
    table3 = pd.read_csv(reports / "repair-table3.csv")
    assert {"paper: mean over 10 models", "mean over 10 models"} <= set(table3["model"])
    accuracy = pd.read_csv(reports / "repair-accuracy.csv")
    assert set(accuracy["model"]) >= set(models)
    for model_id in models:
        folder = paper.workspace.data / "models" / "repair" / slug(model_id)
        assert (folder / "model.safetensors").is_file(), model_id
    provenance = stage_says_paper(paper, "repair")
    commits_named(standin_hub, provenance["models"], models)
    substitutes = provenance["substitutes"]
    assert "MiniLM" not in substitutes and "repaired hub encoders" not in substitutes
    assert "5 MLPs" in substitutes  # the classifiers as run (n_classifiers shrunk)


def test_capabilities_with_benepar_bert_fill_sentiwordnet_and_both_layouts(paper, standin_hub):
    """S²LCT's assets (benepar, BERT fill-in, SentiWordNet) and its three SST-2 models, ALiCT's
    Table 3 and the ASE'22 layout over 3 trials per model; nothing substituted."""
    paper.run("capabilities")
    params = paper.params().capabilities
    assert (params.parser, params.word_sentiment, params.trials) == ("benepar", "sentiwordnet", 3)
    reports = paper.reports("capabilities")
    for model_id in params.models:
        table3 = pd.read_csv(reports / f"capabilities-table3-{slug(model_id)}.csv")
        assert table3["capability"].tolist() == ["LC2", "LC9"]
        ase22 = pd.read_csv(reports / f"capabilities-ase22-{slug(model_id)}.csv")
        assert ase22["capability"].tolist() == ["LC2", "LC9"]
        assert set(ase22["trials"]) == {3}
    suite = pd.read_json(paper.workspace.interim / "capabilities" / "suite.jsonl", lines=True)
    assert (suite["parent_case_id"] != "").any()  # BERT's fill-ins on benepar's parses
    provenance = stage_says_paper(paper, "capabilities")
    commits_named(standin_hub, provenance["models"], params.models)
    commits_named(standin_hub, provenance["fill model"], [params.fill_model])
    assert provenance["parser"].startswith("benepar benepar_en3 @ sha256:")
    assert "substitutes" not in provenance or not provenance["substitutes"]


def test_consistency_asks_the_t5_backend_and_smollm2(paper, standin_hub):
    """KomMKonLLM's T5 (seq2seq:) answers every prompt beside SmolLM2, under its commit."""
    summary = paper.run("consistency")
    assert summary["questions"] == QUESTIONS and summary["errors"] == 0
    reports = paper.reports("consistency")
    results = pd.read_csv(reports / "results.csv")
    t5 = results[results["model_id"] == T5_ID]
    assert len(t5) == summary["prompts"] and t5["error"].isna().all()
    assert set(t5["revision"]) == {standin_hub.commit(T5_ID)}
    assert t5["raw_text"].notna().all()
    assert set(results["model_id"]) == {T5_ID, "HuggingFaceTB/SmolLM2-135M-Instruct"}
    summary_table = pd.read_csv(reports / "consistency-summary.csv")
    assert set(summary_table["model_id"]) == set(results["model_id"])
    provenance = stage_says_paper(paper, "consistency")
    assert f"seq2seq:{T5_ID} @ {standin_hub.commit(T5_ID)}" in provenance["models"]
    assert "in the paper profile" in provenance["substitutes"]


@pytest.mark.parametrize("stage", ["train-sentiment", "adaptive", "adaptive-debug"])
def test_stages_the_profile_changes_only_by_going_online(paper, stage):
    """models.offline: false is all the profile changes for these (their models are
    packaged or trained here): each runs online and its reports say the profile."""
    paper.run(stage)
    assert not paper.params().models.offline
    assert (paper.reports(stage) / "metrics.json").is_file()
    stage_says_paper(paper, stage)
    if stage == "train-sentiment":  # the paper's classifiers are tested themselves here
        table = (paper.reports(stage) / "train-sentiment-minilm-sst2.md").read_text()
        assert "No substitute: the capabilities stage tests textattack/bert-base-uncased-SST-2" \
            in table and "the paper's SST-2 fine-tuned BERT" not in table
