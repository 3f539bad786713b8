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

# Stages whose costly steps pay as worker processes, not threads: ``runtime.task_runner: auto``
# runs these on a local Dask cluster. S²LCT's expansion shares spaCy and a language model (not
# thread-safe); COSTELLO's embedding shards, nearest-neighbour searches and classifier banks
# hold the GIL or one torch generator; KomMKonLLM's local LLM answers behind one lock per
# process (2 workers: 110.4 s against 138.2 s on threads). Each gives the thread runner's
# tables byte for byte (tests/test_*: on two Dask workers); benchmarks/dask_workers.py times
# them. Not here: the debugging loop (adaptive-debug), whose fine-tunings on 2 workers took
# 896.9 s against 782.9 s on threads (two trainings side by side contend for the 2 cores'
# memory bandwidth).
PROCESS_STAGES: tuple[str, ...] = ("contrastive", "capabilities", "consistency")


def stage_method(stage: str):
    """The ``Method`` class behind a stage's flow (None for the data and training stages)."""
    import importlib

    module, _, name = STAGES[stage].partition(":")
    return getattr(getattr(importlib.import_module(module), name), "method_class", None)
