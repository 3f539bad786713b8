"""Prefect flows: composition only (which tasks, in which order, with what fan-out).

``lingtest.flows.registry`` lists the stages from the plug-ins (``tasks/<package>/plugin.py``);
``lingtest.flows.stage.run_stage`` runs one with the run's name, tags, seed and task runner. A method
stage's flow is ``lingtest.flows.method.method_flow`` of its ``Method``; the data, training and repair
stages have their own flows here. The parameters a stage reads are its ``params:`` list in
dvc.yaml, read from there (``lingtest.flows.stage.stage_params``), not copied here.
"""
