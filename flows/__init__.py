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
