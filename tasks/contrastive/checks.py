"""COSTELLO's checks before a run: the suite and dictionary files parse, and an encoder
under test can load (without loading its weights)."""
from __future__ import annotations

from lingtest.tasks.core.config import Params
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.plugin_spec import ModelEntry
from lingtest.tasks.core.validate import param_path, read_param_file


def configured_models(params: Params) -> list[ModelEntry]:
    """The encoders under test: ``contrastive.encoders``, else the shared ``models.encoders``;
    and spaCy, which parses the seeds."""
    key = "contrastive.encoders" if params.contrastive.encoders is not None else "models.encoders"
    specs = params.contrastive.encoders or params.models.encoders
    return [*(ModelEntry(key, spec, "encoder") for spec in specs),
            ModelEntry("models.spacy", params.models.spacy, "spacy")]


def check_inputs(params: Params, workspace: Workspace) -> None:
    c = params.contrastive
    if c.suite:
        from lingtest.tasks.contrastive.costello_json import read_costello_suite, select_imported
        path = param_path(c.suite, workspace.root)
        select_imported(read_param_file("contrastive.suite", read_costello_suite, path),
                        c.relations, c.max_seeds, params.seed, path)
    if c.dictionary_file:
        from lingtest.tasks.contrastive.thresholds import read_dictionary
        read_param_file("contrastive.dictionary_file", read_dictionary,
                        param_path(c.dictionary_file, workspace.root))


def check_encoder(key: str, model_id: str, params: Params, workspace: Workspace,
                  row: dict) -> dict:
    """An encoder COSTELLO can test with the stage's pooling and dictionaries."""
    from lingtest.tasks.contrastive.thresholds import needs_dictionaries
    from lingtest.tasks.models.any_encoder import check_contrastive_encoder
    from lingtest.tasks.models.model_spec import parse_model

    c = params.contrastive
    ref = parse_model(model_id, key, params.models.names, workspace.root)
    return {**row, **check_contrastive_encoder(ref, params.models.offline, workspace.root,
                                               c.dictionary_file, c.pooling,
                                               needs_dictionaries(c.thresholds), key)}
