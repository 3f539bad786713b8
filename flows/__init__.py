"""Prefect flows: composition only (which tasks, in which order, with what fan-out).

``STAGES`` maps each DVC stage name to the import path of its flow; ``flows.stage.run_stage``
runs one with the run's name, tags, seed and task runner. The parameters a stage reads are its
``params:`` list in dvc.yaml, read from there (``flows.stage.stage_params``), not copied here.
"""

STAGES: dict[str, str] = {
    "data": "flows.data:data_flow",
    "contrastive": "flows.contrastive:contrastive_flow",
    "train-sentiment": "flows.train_sentiment:train_sentiment_flow",
    "capabilities": "flows.capabilities:capabilities_flow",
    "consistency": "flows.consistency:consistency_flow",
    "adaptive": "flows.adaptive:adaptive_flow",
    "adaptive-debug": "flows.adaptive_debug:adaptive_debug_flow",
    "repair": "flows.repair:repair_flow",
}

# Stages whose expensive tasks are CPU-bound Python and torch sharing libraries that are not
# thread-safe (spaCy), so a second core pays only as a second process: ``runtime.task_runner:
# auto`` runs these on a local Dask cluster (benchmarks/dask_workers.py measures each side).
PROCESS_STAGES: tuple[str, ...] = ("capabilities",)
