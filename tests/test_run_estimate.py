"""``lingtest plan`` (flows/run_estimate.py): the models a run downloads and their sizes, the
model calls it counts as the stages' own code makes them, and one clear error for bad input.
A fixed calibration stands in for this CPU's measured rates, so no test times the CPU."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
from bad_input_harness import assert_one_clear_error, project  # noqa: F401 - a fixture
from standin_hub import paper_model_ids

from lingtest.flows.cpu_calibration import Calibration
from lingtest.flows.run_estimate import make_plan, selected_stages
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace

RATES = Calibration(encode=5e10, train=4e10, generate=4e10, search_l1=2e9, search_dot=5e10,
                    banks=3e10, machine="fixed for tests", measured="never")
MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture
def bare_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """The tracked parameters and profiles, no data stage run, an empty Hugging Face cache."""
    import huggingface_hub.constants

    shutil.copy(PACKAGE_ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(PACKAGE_ROOT / "params", tmp_path / "params")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("LINGTEST_ROOT", str(tmp_path))
    return Workspace(tmp_path)


def plan_of(workspace: Workspace, profile: str | None, overrides=(), stages=None):
    from lingtest.flows.registry import load_params

    params = load_params(workspace.root, list(overrides), profile)
    return make_plan(params, workspace, selected_stages(stages), RATES)


def test_the_paper_plan_downloads_every_hub_model_it_names_with_a_size(bare_project):
    plan = plan_of(bare_project, "paper")
    rows = {row.target: row for row in plan.models}
    for spec in paper_model_ids():
        if spec in ("bert-base-uncased", "roberta-base") and spec not in rows:
            continue  # models.encoders: no stage loads it when contrastive.encoders is set
        row = rows[spec]
        assert row.parameters and row.parameters > 1e6, spec
        if row.where == "packaged":  # SmolLM2: the package carries it
            continue
        assert row.where == "to download", (spec, row.where)
        bytes_per_parameter = row.download_bytes / row.parameters
        assert bytes_per_parameter in (2, 4), spec  # float32, unless stored in 16 bits
    totals = plan.totals()
    assert totals["downloads"] == len({r.model for r in plan.models if r.where == "to download"})
    assert 15 < totals["download_gb"] < 30 and not totals["downloads_of_unknown_size"]
    # no data stage yet: the counts say what to run first, once
    assert not totals["complete"]
    assert plan.notes[0].startswith("the counts of model calls need the data stage's outputs")
    assert "fix: lingtest run data" in plan.notes[0]


def test_the_default_plan_downloads_nothing(bare_project):
    plan = plan_of(bare_project, None)
    assert not [r for r in plan.models if r.where == "to download"]
    assert plan.totals()["download_gb"] == 0
    where = {r.model: r.where for r in plan.models}
    assert where[MINILM] == "packaged"
    assert where["lingtest/minilm-sst2"] == "built by train-sentiment"


def test_sizes_are_the_published_ones_and_downloads_four_bytes_a_weight():
    from lingtest.flows.model_sizes import architecture_size, model_size

    bert = model_size("textattack/bert-base-uncased-SST-2")
    assert (bert.parameters, bert.download_bytes) == (109_482_240, 4 * 109_482_240)
    assert architecture_size("albert-base-v2").parameters == 11_683_584
    # ALBERT shares one layer's weights among its 12: a token passes through them 12 times
    assert architecture_size("albert-base-v2").compute > 7 * architecture_size(
        "albert-base-v2").parameters
    assert model_size("google/flan-t5-base").parameters == 247_577_856  # its head is untied
    assert model_size("nobody/unknown-model") is None


def test_every_hub_id_has_the_architecture_family_its_standin_has():
    """The sizes table and the stand-in hub (tests/standin_hub.py) read each id alike: the
    same architecture family, and a cased BERT vocabulary where the stand-in has one."""
    from standin_hub import STANDINS

    from lingtest.flows.model_sizes import ARCHITECTURES, HUB_ARCHITECTURE

    config = {"bert": "BertConfig", "distilbert": "DistilBertConfig", "albert": "AlbertConfig",
              "roberta": "RobertaConfig", "electra": "ElectraConfig", "llama": "LlamaConfig",
              "t5": "T5Config"}
    for model_id, standin in STANDINS.items():
        name = HUB_ARCHITECTURE[model_id]
        assert ARCHITECTURES[name].config == config[standin.family], model_id
        assert (name == "bert-base-cased") == (standin.family == "bert" and standin.cased), \
            model_id


def tiny_contrastive(workspace: Workspace, table) -> list[str]:
    """A small project for the contrastive stage: SST and MRPC, and a suite of 3 CR1
    triples as the stage stores it (built with this project's parameters)."""
    processed = workspace.processed
    processed.mkdir(parents=True)
    for name in ("sst", "mrpc"):
        table(name).to_parquet(processed / f"{name}.parquet", index=False)
    overrides = ["contrastive.relations=[CR1]", "contrastive.sst_split=dev",
                 "contrastive.max_seeds=2", "contrastive.classifier_max_train=40",
                 "contrastive.classifier_max_test=10", "contrastive.dictionary_max_words=50",
                 "repair.classifier_max_train=20", "repair.classifier_max_test=10"]
    parameters = {"seed": 42, "max_seeds": 2, "sst_split": "dev", "cr1_triples": "word",
                  "synonym_scope": "text", "synonym_probability": 0.5,
                  "contrast_split": "all", "mrpc_split": "validation"}
    provenance = json.dumps({"generator": "lingtest.contrastive.suite", "relation": "CR1",
                             "parameters": parameters})
    triples = [("a good film .", "a fine film .", "a bad film ."),
               ("a good film .", "a good movie .", "a good flick ."),
               ("the plot is dull .", "the plot is boring .", "the plot is lively .")]
    suite = pd.DataFrame([{"case_id": str(i), "relation": "CR1", "seed": s, "positive": p,
                           "negative": n, "provenance": provenance}
                          for i, (s, p, n) in enumerate(triples)])
    (workspace.interim / "contrastive").mkdir(parents=True)
    suite.to_parquet(workspace.interim / "contrastive" / "suite.parquet", index=False)
    return overrides


def test_the_contrastive_counts_are_what_the_stage_embeds_searches_and_trains(bare_project,
                                                                              table):
    from lingtest.flows.registry import load_params
    from lingtest.tasks.contrastive import classifier_tasks, embedding_tasks, thresholds, validation
    from lingtest.tasks.models.encoders import load_encoder

    overrides = tiny_contrastive(bare_project, table)
    plan = plan_of(bare_project, None, overrides, ["contrastive", "repair"])
    work = {(w.stage, w.what): w for w in plan.work}
    # the stage's own code: ContrastiveMethod._embedding_inputs, then embed's _to_embed
    params = load_params(bare_project.root, overrides, None)
    c = params.contrastive
    suite = pd.read_parquet(bare_project.interim / "contrastive" / "suite.parquet")
    tables = {n: pd.read_parquet(bare_project.processed / f"{n}.parquet") for n in ("sst", "mrpc")}
    data = classifier_tasks.classifier_data(tables, c, params.seed,
                                            tuple(classifier_tasks.needed_kinds(suite)))
    texts = validation.needed_texts(suite, data, [], c.paraphrase_features)
    extra = {"dataset": thresholds.dictionary_from_dataset(suite["seed"].drop_duplicates())}
    words, everything = embedding_tasks._to_embed(load_encoder(MINILM), texts, c, params.seed,
                                                  extra)
    embed = work[("contrastive", "embed texts")]
    assert (embed.calls, embed.bound) == (len(everything), "exact")
    assert work[("contrastive", "nearest neighbours l1, vocab dictionary")].calls == \
        len(words["vocab"]) == 50
    assert work[("contrastive", "nearest neighbours l2, dataset dictionary")].calls == \
        len(words["dataset"])
    assert ("contrastive", "nearest neighbours l1, dataset dictionary") not in work  # L2 only
    bank = work[("contrastive", "classifier bank (sentiment)")]
    assert (bank.calls, "× 40 rows" in bank.basis) == (14, True)
    # repair, by hand: 3 triples, 60 % trained on (1 of 4 per micro-batch, ≤ 12 per epoch)
    p = params.repair
    steps = p.epochs * min(p.max_steps_per_epoch, math.ceil(round(3 * 0.6) / 4))
    assert work[("repair", "fine-tune on violated and benign triples")].calls == steps == 2
    assert work[("repair", "count violated triples after each epoch")].calls == \
        3 * round(3 * p.validation) * (p.epochs + 1)
    assert work[("repair", "re-test the repaired model: classifier bank (sentiment)")].basis \
        .endswith("× 20 rows (90 % trained on, 10 % pick the epoch)")
    # times: FLOPs over the rates, and a GPU's share of the same FLOPs
    assert embed.cpu_seconds == pytest.approx(embed.flops / RATES.encode)
    assert embed.gpu_seconds == pytest.approx(embed.flops / 10e12)


def test_train_sentiment_counts_its_steps_and_test_sentences(bare_project, table):
    bare_project.processed.mkdir(parents=True)
    table("sst").to_parquet(bare_project.processed / "sst.parquet", index=False)
    plan = plan_of(bare_project, None, ["capabilities.train_sentiment.epochs=2",
                                        "capabilities.train_sentiment.max_train=100",
                                        "capabilities.train_sentiment.max_test=30"],
                   ["train-sentiment"])
    steps, scored = plan.work
    assert (steps.calls, steps.unit, scored.calls) == (2 * math.ceil(100 / 32), "steps", 30)


def test_the_plan_as_json_from_the_command_line(project, monkeypatch, capsys):  # noqa: F811
    """`lingtest plan --json` on a project with the adaptive stage's tree: the stored rates
    (``load_or_measure``) and a GPU of 30 TFLOP/s; the tree's tests scored by each model."""
    from bad_input_harness import lingtest
    from lingtest.flows import cpu_calibration

    monkeypatch.setattr(cpu_calibration, "load_or_measure", lambda *a, **k: RATES)
    status, output, _ = lingtest(["plan", "--stages", "adaptive", "--json", "--gpu-tflops",
                                  "30"], monkeypatch, capsys)
    assert status == 0, output
    plan = json.loads(output)
    assert (plan["profile"], plan["stages"], plan["rule"]["gpu_tflops"]) == (
        "default", ["adaptive"], 30.0)
    scored = {w["model"]: w for w in plan["work"]}
    assert set(scored) == {"lingtest/minilm-sst2", "vader"}
    assert scored["vader"]["calls"] == scored["lingtest/minilm-sst2"]["calls"] > 100
    assert scored["vader"]["cpu_seconds"] == 0  # a lexicon: no network to run
    assert plan["totals"]["downloads"] == 0


@pytest.mark.parametrize(("argv", "needle"), [
    (["plan", "--stages", "contrastive,nope"], "unknown stage `nope`; stages: data, contrastive"),
    (["plan", "--set", "contrastive.nope=1"], "unknown key `contrastive.nope`"),
    (["plan", "--gpu-tflops", "0"], "--gpu-tflops 0.0: give the GPU's sustained TFLOP/s"),
    (["plan", "--profile", "nope"], "profile `nope`: "),
])
def test_bad_input_is_one_clear_error(argv, needle, project, monkeypatch, capsys):  # noqa: F811
    assert_one_clear_error(argv, {}, needle, project, monkeypatch, capsys)
