"""S²LCT's checks before a run: the specification files parse and its models resolve
(without loading weights)."""
from __future__ import annotations

from lingtest.tasks.core.config import Params
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.plugin_spec import ModelEntry


def configured_models(params: Params) -> list[ModelEntry]:
    """The classifiers under test, the fill model that proposes words, and spaCy."""
    c = params.capabilities
    return [*(ModelEntry("capabilities.models", m, "classifier") for m in c.models),
            ModelEntry("capabilities.fill_model", c.fill_model, "fill"),
            ModelEntry("models.spacy", params.models.spacy, "spacy")]


def check_inputs(params: Params, workspace: Workspace) -> None:
    """The capability specifications parse, and the downloads the settings name are here."""
    from lingtest.tasks.capabilities.specs import BUILTIN_SPECS, load_specs

    c = params.capabilities
    load_specs(workspace.root / c.specs_dir if c.specs_dir else BUILTIN_SPECS, c.capabilities)
    check_assets(params, workspace)


def check_assets(params: Params, workspace: Workspace) -> None:
    """benepar's model (``parser: benepar``) and SentiWordNet (``word_sentiment:
    sentiwordnet``) are installed: a second's check, where the stage would meet them only
    after loading its models and tagging the treebank."""
    c = params.capabilities
    if c.parser == "benepar":
        from lingtest.tasks.capabilities.grammar import require_benepar
        require_benepar()
    if c.word_sentiment == "sentiwordnet":
        from lingtest.tasks.capabilities.search import require_sentiwordnet
        require_sentiwordnet(workspace.nltk_data)


def check_fill_model(key: str, model_id: str, params: Params, workspace: Workspace,
                     row: dict) -> dict:
    """A masked LM (BERT, the paper's) or a causal LM (the offline substitute)."""
    from lingtest.tasks.capabilities.fill import fill_kind
    from lingtest.tasks.models.checks import check_configured

    return check_configured(key, model_id, fill_kind(model_id), params.models, workspace.root)
