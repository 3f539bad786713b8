"""Raw asset resolution: mirror first, online next, else one error naming every missing asset."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from lingtest.tasks.core.assets import ASSETS, import_raw_assets
from lingtest.tasks.core.config import DataParams
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace


def partial_mirror(mirror: Path, target: Path, assets: list[str]) -> Path:
    for name in assets:
        for rel in ASSETS[name].files:
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(mirror / rel, target / rel)
    return target


def test_import_copies_files_and_writes_manifest(mirror: Path, tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "project")
    params = DataParams(mirror=str(mirror), online=False, assets=["kommkonllm", "mrpc"])
    manifest = import_raw_assets(params, workspace)
    assert list(manifest["path"]) == ["kommkonllm/public_questions.jsonl", "mrpc/mrpc_train.json",
                                      "mrpc/mrpc_validation.json", "mrpc/mrpc_test.json"]
    sums = dict(line.split()[::-1] for line in (mirror / "SHA256SUMS").read_text().splitlines())
    assert all(sums[row.path] == row.sha256 for row in manifest.itertuples())
    on_disk = pd.read_csv(workspace.manifest, sep="\t")
    assert on_disk.columns.tolist() == ["path", "sha256", "bytes", "asset", "source"]
    assert (workspace.raw / "mrpc/mrpc_test.json").stat().st_size == on_disk["bytes"].iloc[3]
    assert on_disk["source"].str.startswith("mirror:").all()


def test_importing_a_subset_keeps_the_other_assets(mirror: Path, tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "project")
    import_raw_assets(DataParams(mirror=str(mirror), online=False,
                                 assets=["kommkonllm", "mrpc"]), workspace)
    before = pd.read_csv(workspace.manifest, sep="\t")
    manifest = import_raw_assets(DataParams(mirror=str(mirror), online=False,
                                            assets=["kommkonllm"]), workspace)
    assert sorted(manifest["asset"].unique()) == ["kommkonllm", "mrpc"]
    after = pd.read_csv(workspace.manifest, sep="\t")
    key = ["path", "sha256", "bytes", "asset", "source"]
    assert after.sort_values("path")[key].values.tolist() == \
        before.sort_values("path")[key].values.tolist()
    assert all((workspace.raw / rel).is_file() for rel in after["path"])


@pytest.mark.parametrize("online", [False, True])
def test_missing_assets_are_all_named_and_nothing_is_written(
        mirror: Path, tmp_path: Path, online: bool) -> None:
    workspace = Workspace(tmp_path / "project")
    half = partial_mirror(mirror, tmp_path / "half", ["mrpc"])
    params = DataParams(mirror=str(half), online=online, timeout_s=5,
                        assets=["mrpc", "sst", "boolq", "checklist"])
    with pytest.raises(LingtestError) as error:
        import_raw_assets(params, workspace)
    message = str(error.value)
    for name in ("sst", "boolq", "checklist"):
        assert f"- {name}:" in message
    assert "- mrpc:" not in message
    assert "sst/trees/train.txt" in message and "LINGTEST_MIRROR" in message
    assert ("online fetch from" in message) == online
    assert ("online fetching is off" in message) != online
    assert not workspace.raw.exists()
    assert not any(p.name.startswith(".raw-") for p in workspace.data.iterdir())


def test_damaged_mirror_copy_is_refused(mirror: Path, tmp_path: Path) -> None:
    copy = partial_mirror(mirror, tmp_path / "copy", ["kommkonllm"])
    shutil.copy(mirror / "SHA256SUMS", copy / "SHA256SUMS")
    (copy / "kommkonllm/public_questions.jsonl").write_text("{}\n")
    params = DataParams(mirror=str(copy), online=False, assets=["kommkonllm"])
    with pytest.raises(LingtestError, match="sha256 differs"):
        import_raw_assets(params, Workspace(tmp_path / "project"))
