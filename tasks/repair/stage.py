"""The ``repair`` stage's tasks (COSTELLO §5.4): pick the triples, fine-tune the encoder
(``lingtest.tasks.training.embedding_repair``), re-test the repaired weights through the contrastive
method (new revision = hash of the repaired weights, θ re-derived, the 14 downstream
classifiers retrained on its embeddings) and diff the verdicts by case id.

Several models (``repair.models``) are repaired one after the other, each from its own
triples. Outputs: one repaired model folder per model, ``data/models/repair/<slug>``, and
``data/interim/repair`` (``triples.parquet``: each model's triples with split and verdicts
before and after; ``results.parquet``: the re-tests' contract rows; ``diff.parquet``;
``repair.json``: each model's facts), every table with a ``model`` column.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from lingtest.tasks.contrastive.distances import pair_distances
from lingtest.tasks.contrastive.method import ContrastiveMethod
from lingtest.tasks.core import io
from lingtest.tasks.core.caching import NO_CACHE, task
from lingtest.tasks.core.config import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.method import Unit
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.publish import slug
from lingtest.tasks.core.schema import compare_results
from lingtest.tasks.repair.params import REPAIR_ALL
from lingtest.tasks.models.any_encoder import as_ref
from lingtest.tasks.models.model_spec import ModelRef, parse_model, parse_models
from lingtest.tasks.repair import triples as tr


def encoder_refs(params: Params, root: Path | None = None) -> dict[str, ModelRef]:
    """The contrastive stage's models by display name (what its results call them)."""
    c = params.contrastive
    key = "contrastive.encoders" if c.encoders else "models.encoders"
    return {ref.name: ref for ref in parse_models(list(c.encoders or params.models.encoders),
                                                  key, params.models.names, root)}


def ref_of(params: Params, model: str, root: Path | None = None) -> ModelRef:
    """A tested model's spec from its display name (or a spec given as is)."""
    refs = encoder_refs(params, root)
    return refs.get(model) or as_ref(model, "repair.models", params.models.names, root)


def _as_tested(params: Params, model: str, tested: list[str]) -> str:
    """``model`` as the results name it: itself when tested, else its spec's display name."""
    if model in tested:
        return model
    try:
        return parse_model(model, "repair.models", params.models.names).name
    except LingtestError:
        return model


def models_under_repair(params: Params, tested: list[str]) -> list[str]:
    """``repair.models`` checked against ``tested`` (the contrastive stage's models by display
    name, in its order): ``[all]`` is every one of them, null the first model the stage was
    told to test; specs are read as their display names; one error names every model it did
    not test."""
    chosen = params.repair.models
    if chosen is None:
        chosen = [(params.contrastive.encoders or params.models.encoders)[0]]
    elif chosen == [REPAIR_ALL]:
        chosen = list(tested)
    chosen = [_as_tested(params, m, tested) for m in chosen]
    check_tested(chosen, tested)
    folders = [slug(m) for m in chosen]
    clash = sorted({m for m, f in zip(chosen, folders) if folders.count(f) > 1})
    if clash:
        raise LingtestError(f"repair.models: {', '.join(clash)} would share one folder "
                            "data/models/repair/<slug>; fix: keep one of them")
    return chosen


def check_tested(chosen: list[str], tested: list[str]) -> None:
    absent = [m for m in chosen if m not in tested]
    if absent:
        raise LingtestError(
            f"repair.models: {', '.join(f'`{m}`' for m in absent)} not among the encoders the "
            f"contrastive stage tested ({', '.join(tested) or 'none'}); fix: name only those "
            f"(or [{REPAIR_ALL}]), or add the id to contrastive.encoders and rerun the "
            "contrastive stage first")


def tested_models(results: pd.DataFrame) -> list[str]:
    """The model ids of the contrastive stage's results, in the order it tested them."""
    return list(dict.fromkeys(results["model_id"]))


def model_dir(workspace: Workspace, model_id: str) -> Path:
    return workspace.data / "models" / "repair" / slug(model_id)


def interim(workspace: Workspace) -> Path:
    return workspace.interim / "repair"


def contrastive_inputs(workspace: Workspace) -> tuple[pd.DataFrame, pd.DataFrame]:
    folder = workspace.interim / "contrastive"
    paths = [folder / "suite.parquet", folder / "results.parquet"]
    absent = [str(p) for p in paths if not p.is_file()]
    if absent:
        raise LingtestError(f"repair: missing {', '.join(absent)}; fix: run `lingtest run "
                            "contrastive` (or `dvc repro contrastive`) first")
    return pd.read_parquet(paths[0]), pd.read_parquet(paths[1])


def check_models_repairable(params: Params, models: list[str], root: Path | None = None
                            ) -> None:
    """Each chosen model must be one lingtest's repair can fine-tune
    (``any_encoder.check_repairable``: not a python: encoder, not a sentence-transformers
    model run through its own encode): one error naming ``repair.models`` and the reason."""
    from lingtest.tasks.models.any_encoder import check_repairable

    for model in models:
        check_repairable(ref_of(params, model, root), params.models.offline, root)


@task(name="models-to-repair", cache_policy=NO_CACHE)
def models_to_repair(params: Params, workspace: Workspace) -> list[str]:
    """``repair.models`` resolved and checked before any model is trained."""
    chosen = models_under_repair(params, tested_models(contrastive_inputs(workspace)[1]))
    check_models_repairable(params, chosen, workspace.root)
    return chosen


@task(name="select-triples", task_run_name="select-triples-{model_id}", cache_policy=NO_CACHE)
def select_triples(params: Params, workspace: Workspace, model_id: str | None = None
                   ) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """The model (default: the first of ``repair.models``), the suite, and the model's
    triples labelled with verdict, θ and split."""
    suite, results = contrastive_inputs(workspace)
    tested = tested_models(results)
    model_id = model_id or models_under_repair(params, tested)[0]
    check_tested([model_id], tested)
    rows = tr.setting_rows(results, model_id, params.repair)
    return model_id, suite, tr.label_triples(suite, rows, params.repair, params.seed)


def load_tested_encoder(params: Params, model_id: str, root: Path | None = None):
    """The encoder as the contrastive stage tested it (its pooling and length overrides);
    ``model_id``: its display name or spec. Refuses a model repair cannot train."""
    from lingtest.tasks.models.any_encoder import check_repairable, load_any_encoder

    c = params.contrastive
    ref = ref_of(params, model_id, root)
    check_repairable(ref, params.models.offline, root)
    encoder = load_any_encoder(ref, offline=params.models.offline,
                               device=params.runtime.device, pooling=c.pooling,
                               max_length=c.max_length, pass_tokens=params.runtime.pass_tokens,
                               **params.runtime.encoder_path(), root=root)
    if not encoder.exact_length:  # online, a hub model's modules are known only now
        raise LingtestError(f"repair.models: `{ref.bare}` ({ref.name}) runs its own encode "
                            f"({encoder.form_text()}); lingtest's repair trains Transformer + "
                            f"Pooling (+ Normalize) only; fix: remove it from repair.models")
    return encoder


def margins(embed, frame: pd.DataFrame, distance: str) -> np.ndarray:
    """d(s, s⁺) − d(s, s⁻) of each triple of ``frame`` under ``embed(texts)``."""
    e = embed([t for trip in tr.triples_of(frame) for t in trip])
    e = np.asarray(e, dtype=np.float64).reshape(len(frame), 3, -1)
    return pair_distances(e[:, 0], e[:, 1], distance) - pair_distances(e[:, 0], e[:, 2], distance)


def train(params: Params, workspace: Workspace, model_id: str, labelled: pd.DataFrame,
          out_dir: Path) -> dict:
    """Fine-tune ``model_id`` on the training split; write the kept epoch's weights to
    ``out_dir``; return the run's facts (θ, sizes, epochs, revision of the repaired weights)."""
    from lingtest.tasks.contrastive.embedding import EmbeddingStore, embed_texts
    from lingtest.tasks.models.registry import PLAIN_HF_POOLING, checkpoint_pooling, resolve
    from lingtest.tasks.training.embedding_repair import repair_encoder, save_repaired

    p = params.repair
    encoder = load_tested_encoder(params, model_id, workspace.root)
    train_part = labelled[labelled["split"] == "train"]
    buggy = train_part[train_part["verdict"] == "fail"]
    benign = train_part[train_part["verdict"] == "pass"]
    theta = float(labelled["threshold"].iloc[0])
    store = EmbeddingStore.for_encoder(workspace.data / "cache" / "embeddings", encoder)
    flat = [t for trip in tr.triples_of(benign) for t in trip]
    targets = embed_texts(encoder, flat, store, params.contrastive.batch_size)
    targets = targets.reshape(len(benign), 3, -1)
    chosen = tr.selection_frame(labelled, p, params.seed)

    def count(embed) -> int:
        return int(tr.still_violated(margins(embed, chosen, p.distance), theta,
                                     p.count_rule).sum())

    started = time.perf_counter()
    outcome = repair_encoder(encoder, tr.triples_of(buggy), tr.triples_of(benign), targets,
                             theta, p, params.seed, count, threads=params.runtime.threads)
    seconds = time.perf_counter() - started
    save_repaired(encoder, out_dir)
    for sub in [out_dir, *out_dir.rglob("*")]:  # write_model_dir leaves sub-folders 0644
        sub.chmod(0o755 if sub.is_dir() else 0o644)
    saved = resolve(str(out_dir), "encoder")
    # a plain HF folder's pooling is decided from its weights as they load
    pooling = checkpoint_pooling(out_dir) if saved.pooling == PLAIN_HF_POOLING else saved.pooling
    if pooling != encoder.pooling:
        raise LingtestError(f"repair: the saved model pools `{pooling}`, the tested one "
                            f"`{encoder.pooling}`; its folder lacks the pooling files")
    return {"model_id": model_id, "revision": encoder.revision, "pooling": encoder.pooling,
            "repaired_revision": saved.revision, "theta": theta,
            "setting": f"{p.distance} {p.threshold} {p.dictionary}",
            "train_buggy": len(buggy), "train_benign": len(benign),
            "selection_split": p.selection, "selection_triples": len(chosen),
            "before_selection_violations": outcome.before_violations,
            "best_epoch": outcome.best_epoch, "epochs": outcome.epoch_table(),
            "train_seconds": round(seconds, 1)}


@task(name="train-repair", task_run_name="train-repair-{model_id}", cache_policy=NO_CACHE)
def train_repair(params: Params, workspace: Workspace, model_id: str,
                 labelled: pd.DataFrame) -> dict:
    return train(params, workspace, model_id, labelled, model_dir(workspace, model_id))


def retest_params(params: Params, model: str, pooling: str) -> Params:
    """The contrastive parameters for a re-test: ``model`` as the one model, the repair's
    distance and θ kind only, the tested pooling pinned, the repair's classifier caps."""
    p, c = params.repair, params.contrastive
    update = {"encoders": [model], "distances": [p.distance], "thresholds": [p.threshold],
              "pooling": pooling}
    if p.classifier_max_train is not None:
        update["classifier_max_train"] = p.classifier_max_train
    if p.classifier_max_test is not None:
        update["classifier_max_test"] = p.classifier_max_test
    return params.model_copy(update={"contrastive": c.model_copy(update=update)})


@task(name="retest", task_run_name="retest-{label}", cache_policy=NO_CACHE)
def retest(params: Params, workspace: Workspace, suite: pd.DataFrame, model: str,
           pooling: str, label: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``model`` (the original id, or the repaired folder) through the contrastive method:
    its rows at the repair's setting and its freshly trained classifiers' accuracy rows.
    Both models go through this same call, so their classifiers see the same rows."""
    spec = ref_of(params, model, workspace.root).spec if model in encoder_refs(
        params, workspace.root) else model  # a tested model by its spec, a folder as is
    method = ContrastiveMethod(retest_params(params, spec, pooling), workspace)
    run = method.run_unit(suite, Unit(method.ref_for(spec).name))
    p = params.repair
    rows = run.results[(run.results["dictionary"] == p.dictionary)
                       & (run.results["threshold_kind"] == p.threshold)].reset_index(drop=True)
    return rows, run.extra["accuracy"]


def with_ground_truth(labelled: pd.DataFrame, before: pd.DataFrame) -> pd.DataFrame:
    """The labelled triples with GT_A / GT_B from the original model's re-test (classifiers
    trained on the same rows as the repaired model's); its verdicts must match the stage's."""
    merged = labelled.drop(columns=["gt_a", "gt_b"]).merge(
        before[["case_id", "verdict", "gt_a", "gt_b"]], on="case_id", how="left",
        suffixes=("", "_retest"), validate="1:1")
    differ = int((merged["verdict"] != merged["verdict_retest"]).sum())
    if differ:
        raise LingtestError(f"repair: re-testing the original model changes {differ} verdicts "
                            "of the contrastive stage's results; rerun the contrastive stage")
    return merged.drop(columns=["verdict_retest"])


def save_interim(workspace: Workspace, both: pd.DataFrame, after: pd.DataFrame,
                 diff: pd.DataFrame, facts: list[dict]) -> None:
    """The tables of every repaired model (a ``model`` column tells them apart) and each
    model's facts without timings, so a rerun leaves ``repair.json`` byte-identical."""
    folder = interim(workspace)
    folder.mkdir(parents=True, exist_ok=True)
    io.write_parquet(folder / "triples.parquet", both)
    io.write_parquet(folder / "results.parquet", after)
    io.write_parquet(folder / "diff.parquet", diff)
    stable = [without_timings(one) for one in facts]
    io.write_text(folder / "repair.json", json.dumps({"models": stable}, indent=2,
                                                     sort_keys=True, default=str) + "\n")


def without_timings(facts: dict) -> dict:
    """One model's facts without this machine's seconds (the flow's result and log keep
    them): what goes into DVC outputs, so an unchanged rerun writes the same bytes."""
    kept = {k: v for k, v in facts.items() if k not in ("train_seconds", "retest_seconds")}
    kept["epochs"] = [{k: v for k, v in e.items() if k != "seconds"} for e in facts["epochs"]]
    return kept


def diff_by_case(labelled: pd.DataFrame, before_rows: pd.DataFrame,
                 after: pd.DataFrame) -> pd.DataFrame:
    """``compare_results`` of the original and repaired verdicts, with split and relation."""
    diff = compare_results(before_rows, after)
    return diff.merge(labelled[["case_id", "split", "relation"]], on="case_id", how="left")
