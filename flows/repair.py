"""The ``repair`` stage (COSTELLO §5.4): composition only. For each model of ``repair.models``
in turn: select its triples at the repair's setting and split them by seed sentence →
fine-tune it on the training split (``lingtest.tasks.training.embedding_repair``) → re-test the
repaired weights through the contrastive method (and the original through the same call, so
both models' downstream classifiers train on the same rows) → diff by case id. Then one
report over all models: Table 3 and fix rates per model plus, with several models, their
mean; ground-truth precision and downstream accuracy (``tasks/repair``)."""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
from prefect import flow

from lingtest.flows.registry import Params
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.publish import publish
from lingtest.tasks.repair import report, stage


def repair_one(params: Params, workspace: Workspace, model_id: str) -> dict:
    """Train, re-test and diff one model; its tables carry a ``model`` column."""
    _, suite, labelled = stage.select_triples(params, workspace, model_id)
    facts = stage.train_repair(params, workspace, model_id, labelled)
    folder = stage.model_dir(workspace, model_id)
    started = time.perf_counter()
    before, acc_before = stage.retest(params, workspace, suite, model_id, facts["pooling"],
                                      "original")
    after, acc_after = stage.retest(params, workspace, suite, str(folder), facts["pooling"],
                                    "repaired")
    facts["retest_seconds"] = round(time.perf_counter() - started, 1)
    facts["repaired_path"] = str(folder.relative_to(workspace.root))
    after = after.assign(model_id=facts["repaired_path"])
    labelled = stage.with_ground_truth(labelled, before)
    return {"facts": facts, "after": after,
            "both": report.joined(labelled, after).assign(model=model_id),
            "diff": stage.diff_by_case(labelled, before, after).assign(model=model_id),
            "acc_before": acc_before.assign(model=model_id),
            "acc_after": acc_after.assign(model=model_id)}


@flow(name="repair", log_prints=True)
def repair_flow(params: Params, root: str) -> dict:
    """Repair each chosen encoder and re-test it (COSTELLO §5.4)."""
    workspace = Workspace(Path(root))
    runs = [repair_one(params, workspace, model_id)
            for model_id in stage.models_to_repair(params, workspace)]
    facts = [run["facts"] for run in runs]
    tables = {key: pd.concat([run[key] for run in runs], ignore_index=True)
              for key in ("after", "both", "diff", "acc_before", "acc_after")}
    stage.save_interim(workspace, tables["both"], tables["after"], tables["diff"], facts)
    publish(report.make_report(params, workspace, facts, tables["both"], tables["diff"],
                               tables["acc_before"], tables["acc_after"]), workspace)
    rates = report.fix_rates(tables["both"], params.repair.bootstrap, params.seed)
    return {"models": [one["model_id"] for one in facts],
            "repaired": {one["model_id"]: one["repaired_revision"] for one in facts},
            "fix_rate": {model: dict(zip(part["split"], part["fix rate %"]))
                         for model, part in rates.groupby("model", sort=False)},
            "seconds": {one["model_id"]: {"train": one["train_seconds"],
                                          "retest": one["retest_seconds"]} for one in facts}}
