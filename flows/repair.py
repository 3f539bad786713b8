"""The ``repair`` stage (COSTELLO §5.4): composition only. Select the triples at the repair's
setting and split them by seed sentence → fine-tune the encoder on the training split
(``tasks.training.embedding_repair``) → re-test the repaired weights through the contrastive
method (and the original through the same call, so both models' downstream classifiers
train on the same rows) → diff by case id → Table 3, fix rates on training and held-out triples, ground-truth
precision and downstream accuracy (``tasks/repair``)."""
from __future__ import annotations

import time
from pathlib import Path

from prefect import flow

from tasks.core.config import Params
from tasks.core.paths import Workspace
from tasks.core.publish import publish
from tasks.repair import report, stage


@flow(name="repair", log_prints=True)
def repair_flow(params: Params, root: str) -> dict:
    """Repair the tested encoder and re-test it (COSTELLO §5.4)."""
    workspace = Workspace(Path(root))
    model_id, suite, labelled = stage.select_triples(params, workspace)
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
    both = report.joined(labelled, after)
    diff = stage.diff_by_case(labelled, before, after)
    stage.save_interim(workspace, both, after, diff, facts)
    publish(report.make_report(params, workspace, facts, both, diff, acc_before, acc_after),
            workspace)
    rates = report.fix_rates(both, params.repair.bootstrap, params.seed)
    return {"model": model_id, "repaired": facts["repaired_revision"],
            "fix_rate": dict(zip(rates["split"], rates["fix rate %"])),
            "seconds": {"train": facts["train_seconds"], "retest": facts["retest_seconds"]}}
