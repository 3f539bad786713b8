"""A download the settings name and this machine lacks is one error naming it, met before the
capabilities stage checks or loads a model or tags a sentence (``checks.check_assets``): in
``lingtest run``'s check before the run, and in the flow's own check (a deployment)."""
from __future__ import annotations

import pytest

from lingtest.tasks.core.errors import LingtestError


@pytest.mark.parametrize("settings, message", [
    (["capabilities.parser=benepar", "capabilities.word_sentiment=sentiwordnet"],
     r"parser=benepar: the model `benepar_en3` is not installed; fix: python -c "
     r"\"import benepar; benepar.download\('benepar_en3'\)\", or set capabilities.parser=pcfg"),
    (["capabilities.word_sentiment=sentiwordnet"],
     r"SentiWordNet is missing: .*nltk_data/corpora/sentiwordnet does not exist .* fix: "
     r"python -m nltk.downloader -d .*nltk_data sentiwordnet, or set "
     r"capabilities.word_sentiment: lexicon"),
])
def test_a_missing_asset_stops_the_check_before_any_model_loads(data_project, settings, message,
                                                                monkeypatch):
    from lingtest.flows.registry import load_params
    from lingtest.flows.validation import validate_inputs
    from lingtest.tasks.capabilities.method import CapabilitiesMethod

    import nltk

    workspace, overrides = data_project
    assert not (workspace.nltk_data / "corpora" / "sentiwordnet").exists()
    # nltk's search path as a fresh process has it: another test's stand-ins may be on it
    monkeypatch.setattr(nltk.data, "path", [str(workspace.nltk_data)])

    def no_model(self, model_id):
        raise AssertionError(f"{model_id} loaded before the assets were checked")

    monkeypatch.setattr(CapabilitiesMethod, "load_model", no_model)
    params = load_params(workspace.root, [*overrides, *settings])
    with pytest.raises(LingtestError, match=message):
        validate_inputs("capabilities", params, workspace)  # before its model checks
    with pytest.raises(LingtestError, match=message):
        CapabilitiesMethod(params, workspace).check_inputs()
