"""Parameters: loading, profiles, overrides and the errors users see."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lingtest.flows.registry import load_params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    shutil.copy(PACKAGE_ROOT / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(PACKAGE_ROOT / "params", tmp_path / "params")
    return tmp_path


def test_defaults_load_offline_on_two_cores(project: Path) -> None:
    params = load_params(project)
    assert params.seed == 42 and params.profile == "default"
    assert params.models.offline is True and params.runtime.threads == 1
    assert "sst" in params.data.assets


def test_override_parses_yaml_values(project: Path) -> None:
    params = load_params(project, ["seed=7", "data.online=false", "models.encoders=[a, b]"])
    assert params.seed == 7 and params.data.online is False
    assert params.models.encoders == ["a", "b"]


def test_unknown_key_names_the_key_and_allowed_keys(project: Path) -> None:
    with pytest.raises(LingtestError) as error:
        load_params(project, ["data.nope=1"])
    message = str(error.value)
    assert "`data.nope`" in message and "online" in message and "mirror" in message


def test_bad_literal_names_the_allowed_values(project: Path) -> None:
    with pytest.raises(LingtestError) as error:
        load_params(project, ["runtime.device=tpu"])
    assert "runtime.device" in str(error.value) and "'cuda'" in str(error.value)


def test_bad_type_in_file_names_the_key(project: Path) -> None:
    text = (project / "params.yaml").read_text().replace("seed: 42", "seed: many")
    (project / "params.yaml").write_text(text)
    with pytest.raises(LingtestError, match=r"`seed`.*many"):
        load_params(project)


def test_invalid_yaml_names_file_and_line(project: Path) -> None:
    (project / "params.yaml").write_text("seed: 1\ndata: [unclosed\n")
    with pytest.raises(LingtestError, match=r"params\.yaml:\d+: not valid YAML"):
        load_params(project)


def test_paper_profile_merges_over_defaults(project: Path) -> None:
    params = load_params(project, profile="paper")
    assert params.profile == "paper" and params.models.offline is False
    assert params.runtime.threads == 1  # untouched sections keep their defaults
    assert load_params(project, ["profile=paper"]).models.offline is False


def test_unknown_profile_lists_known_ones(project: Path) -> None:
    with pytest.raises(LingtestError, match=r"profile `nope`.*paper"):
        load_params(project, profile="nope")


def test_section_hash_follows_values(project: Path) -> None:
    a, b = load_params(project), load_params(project, ["seed=7"])
    assert a.section_hash("data") == b.section_hash("data")
    assert a.section_hash() != b.section_hash()


def test_cli_params_reports_one_clear_error() -> None:
    result = subprocess.run([sys.executable, "-m", "lingtest.flows.cli", "params", "--set", "data.nope=1"],
                            cwd=PACKAGE_ROOT, capture_output=True, text=True)
    assert result.returncode == 2
    assert "data.nope" in result.stderr and "Traceback" not in result.stderr


def test_cli_params_prints_effective_values() -> None:
    result = subprocess.run([sys.executable, "-m", "lingtest.flows.cli", "params", "--set", "seed=9"],
                            cwd=PACKAGE_ROOT, capture_output=True, text=True, check=True)
    assert "seed: 9" in result.stdout and "encoders:" in result.stdout


def test_pass_tokens_below_one_names_the_key(project: Path) -> None:
    assert load_params(project).runtime.pass_tokens == 256
    assert load_params(project, ["runtime.pass_tokens=64"]).runtime.pass_tokens == 64
    with pytest.raises(LingtestError, match=r"runtime\.pass_tokens"):
        load_params(project, ["runtime.pass_tokens=0"])
