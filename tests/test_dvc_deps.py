"""dvc.yaml's dependencies derived from the code: every project module a stage's command
imports (transitively, lazy imports included), the parameter profiles, the raw WordNet
when the stage reads it, and the user-input folder are dependencies of that stage; a new
import without a matching dependency fails here."""
from __future__ import annotations

import pytest
import yaml

from flows import STAGES
from tasks.core.imports import imported_closure, module_file as _module_file
from tasks.core.paths import PACKAGE_ROOT

# What the stage's command (`lingtest run <stage>`: cli.run) runs besides the flow itself; the
# CLI's other commands' lazy imports are not part of a stage.
COMMAND_MODULES = ("tasks.core.cli", "tasks.core.config", "tasks.core.runtime", "flows.stage")
WORDNET = "data/raw/nltk_data/corpora/wordnet.zip"
USER_INPUTS = "inputs"  # user files (dictionary, questions, guide folders, specs) live here
READS_USER_FILES = {"contrastive", "capabilities", "consistency"}


def _deps() -> dict[str, list[str]]:
    stages = yaml.safe_load((PACKAGE_ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    return {name: [str(d) for d in stage.get("deps", [])] for name, stage in stages.items()}


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == dep or path.startswith(dep.rstrip("/") + "/") for dep in deps)


def stage_modules(stage: str) -> set[str]:
    return imported_closure([STAGES[stage].split(":")[0], *COMMAND_MODULES])


def test_every_flow_is_a_stage():
    assert set(_deps()) == set(STAGES)


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_depends_on_every_module_it_imports(stage):
    deps = _deps()[stage]
    files = {str(_module_file(m).relative_to(PACKAGE_ROOT)) for m in stage_modules(stage)}
    missing = sorted(f for f in files if not _covered(f, deps))
    assert not missing, (f"dvc.yaml: stage {stage} imports {missing} but does not depend on "
                         "them: add the file or its folder to its deps")


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_stage_depends_on_profiles_wordnet_and_user_inputs(stage):
    deps = _deps()[stage]
    assert _covered("params/paper.yaml", deps), f"dvc.yaml: {stage} must depend on params/"
    if "tasks.text.wordnet" in stage_modules(stage):
        assert _covered(WORDNET, deps), f"dvc.yaml: {stage} reads WordNet: add {WORDNET}"
    if stage in READS_USER_FILES:
        assert USER_INPUTS in deps, f"dvc.yaml: {stage} reads user files: add {USER_INPUTS}"


def test_closure_follows_lazy_imports():
    """The walk sees imports inside functions (the CLI imports flows lazily)."""
    assert "tasks.core.flow_runs" in imported_closure(["flows.stage"])
    assert "tasks.core.io" in imported_closure(["flows.data"])


def test_byte_code_caches_are_no_dependency() -> None:
    """Folder deps (tasks/core, ...) must not hash __pycache__: importing a module would make
    every stage look changed to DVC."""
    import subprocess
    import sys

    for path in ("tasks/core/__pycache__/config.cpython-311.pyc", "flows/stage.pyc"):
        done = subprocess.run([sys.executable, "-m", "dvc", "check-ignore", path],
                              cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{path} is not ignored by .dvcignore"
