"""Checks before a COSTELLO run starts: a classifier bank too small for its Wilcoxon test,
and models that need a Hugging Face hub the machine cannot reach (the paper profile)."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from scipy.stats import wilcoxon

from lingtest.flows.registry import load_params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace
from lingtest.tasks.contrastive.params import smallest_signed_rank_n
from lingtest.flows.validation import hub_notice, validate_inputs


@pytest.mark.parametrize("alpha, expected", [(0.05, 5), (0.01, 7), (0.1, 4), (0.001, 10)])
def test_smallest_bank_is_where_scipys_wilcoxon_can_reach_alpha(alpha, expected):
    n = smallest_signed_rank_n(alpha)
    assert n == expected

    def best_p(k):  # all k differences positive and distinct: the smallest p there is
        return wilcoxon(np.arange(1.0, k + 1), alternative="greater", zero_method="wilcox",
                        correction=False, method="auto").pvalue
    assert best_p(n) < alpha <= best_p(n - 1)


def test_a_bank_below_it_is_refused_naming_the_key():
    with pytest.raises(LingtestError, match=r"contrastive.n_classifiers 2: .* can never reach "
                                            r"p < contrastive.alpha 0.05 .* to 5 or more"):
        load_params(PACKAGE_ROOT, ["contrastive.n_classifiers=2"])
    assert load_params(PACKAGE_ROOT, ["contrastive.n_classifiers=5"]).contrastive.n_classifiers == 5
    assert load_params(PACKAGE_ROOT, ["contrastive.n_classifiers=2", "contrastive.alpha=0.3"]
                       ).contrastive.n_classifiers == 2  # 0.5**2 < 0.3: the test can reject


def test_paper_profile_offline_says_which_models_need_the_hub(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # what an offline machine is told
    workspace = Workspace(PACKAGE_ROOT)
    paper = load_params(PACKAGE_ROOT, [], "paper")
    with pytest.raises(LingtestError) as refused:  # they cannot load: refused before a run
        validate_inputs("contrastive", paper, workspace)
    notice = str(refused.value)
    assert "\n" not in notice
    assert notice.startswith("offline: 42 model(s) load only from the Hugging Face hub, which "
                             "this machine cannot reach (HF_HUB_OFFLINE is set)")
    for model in paper.contrastive.encoders:
        assert model in notice
    assert "contrastive.encoders: " in notice and "fix: the default profile" in notice
    assert validate_inputs("contrastive", load_params(PACKAGE_ROOT), workspace) is None
    rows = [{"key": "contrastive.encoders", "id": "bert-base-uncased", "source": "hub"}]
    assert hub_notice(rows, reachable=lambda: (True, "https://huggingface.co")) is None


def test_lingtest_validate_refuses_in_one_line_and_runs_nothing(monkeypatch, capsys):
    from lingtest.flows import cli

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(PACKAGE_ROOT)
    monkeypatch.setattr(sys, "argv", ["lingtest", "validate", "contrastive", "--profile",
                                      "paper"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out.strip() == ""
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("lingtest: error: offline: 42 model(s)")


def test_a_python_encoder_without_vocabulary_needs_no_dictionary_for_zero(tmp_path):
    """Without a vocabulary θ needs contrastive.dictionary_file, except when only θ = 0 is
    asked for, which searches no dictionary."""
    (tmp_path / "params.yaml").write_bytes((PACKAGE_ROOT / "params.yaml").read_bytes())
    (tmp_path / "enc.py").write_text("import numpy as np\n"
                                     "def embed(texts):\n    return np.ones((len(texts), 4))\n")
    workspace = Workspace(tmp_path)
    sets = ["contrastive.encoders=[python:enc.py:embed]"]
    with pytest.raises(LingtestError, match="contrastive.dictionary_file"):
        validate_inputs("contrastive", load_params(tmp_path, sets), workspace)
    zero = load_params(tmp_path, [*sets, "contrastive.thresholds=[zero]"])
    assert validate_inputs("contrastive", zero, workspace) is None
