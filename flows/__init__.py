"""Prefect flows: composition only (which tasks, in which order, with what fan-out).

``STAGES`` maps each DVC stage name to the import path of its flow; ``flows.stage.run_stage``
runs one with the run's name, tags, seed and task runner.
"""

STAGES: dict[str, str] = {
    "data": "flows.data:data_flow",
    "contrastive": "flows.contrastive:contrastive_flow",
    "train-sentiment": "flows.train_sentiment:train_sentiment_flow",
    "capabilities": "flows.capabilities:capabilities_flow",
    "consistency": "flows.consistency:consistency_flow",
}

# The parameters each stage reads: its `params:` list in dvc.yaml (tests/test_run_comparison.py
# checks they are equal); the run's `params:` tag hashes only these.
STAGE_PARAMS: dict[str, tuple[str, ...]] = {
    "data": ("profile", "data"),
    "contrastive": ("seed", "profile", "models", "contrastive"),
    "train-sentiment": ("seed", "profile", "models.offline", "runtime.threads",
                        "capabilities.train_sentiment"),
    "capabilities": ("seed", "profile", "models.offline", "models.spacy", "runtime.threads",
                     "capabilities"),
    "consistency": ("seed", "profile", "models.offline", "models.spacy", "consistency"),
}
