"""dvc.yaml's dependencies derived from the code: every project module a stage's command
imports (transitively, lazy imports included), the parameter profiles, the raw WordNet
when the stage reads it, and the user-input folder are dependencies of that stage; a new
import without a matching dependency fails here."""
from __future__ import annotations

import os

import pytest
import yaml

from projects import copy_code
from lingtest.flows.registry import STAGES, stage_modules as stage_roots
from lingtest.tasks.core.imports import imported_closure, module_file as _module_file
from lingtest.tasks.core.paths import PACKAGE_ROOT

# What the stage's command (`lingtest run <stage>`: cli.run, lingtest.api.run) runs besides the
# flow itself; the CLI's and the API's other commands' lazy imports are not part of a stage.
COMMAND_MODULES = ("lingtest.flows.cli", "lingtest.api", "lingtest.flows.registry", "lingtest.tasks.core.config",
                   "lingtest.tasks.core.runtime", "lingtest.flows.stage")
WORDNET = "data/raw/nltk_data/corpora/wordnet.zip"
USER_INPUTS = "inputs"  # user files (dictionary, questions, specs, trees, models) live here
READS_USER_FILES = {"contrastive", "capabilities", "consistency", "adaptive", "adaptive-debug",
                    "repair"}  # every stage that loads a model under test reads inputs/models
# The parameters that name, rename or relabel a stage's models.
MODEL_PARAMS = {"capabilities": ("models.names", "models.label_map"),
                "adaptive": ("models.names", "models.label_map"),
                "adaptive-debug": ("models.names", "models.label_map"),
                "consistency": ("models.names",), "repair": ("models.names",)}


def _paths(field: str) -> dict[str, list[str]]:
    """Per dvc.yaml stage, the paths listed under ``field`` (deps or outs; an out with
    options is a one-key mapping)."""
    stages = yaml.safe_load((PACKAGE_ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    return {name: [str(next(iter(p))) if isinstance(p, dict) else str(p)
                   for p in stage.get(field, [])] for name, stage in stages.items()}


def _deps() -> dict[str, list[str]]:
    return _paths("deps")


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == dep or path.startswith(dep.rstrip("/") + "/") for dep in deps)


def stage_modules(stage: str) -> set[str]:
    return imported_closure([*stage_roots(stage), *COMMAND_MODULES])


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
    if "lingtest.tasks.text.wordnet" in stage_modules(stage):
        assert _covered(WORDNET, deps), f"dvc.yaml: {stage} reads WordNet: add {WORDNET}"
    if stage in READS_USER_FILES:
        assert USER_INPUTS in deps, f"dvc.yaml: {stage} reads user files: add {USER_INPUTS}"


@pytest.mark.parametrize("stage", sorted(MODEL_PARAMS))
def test_stage_depends_on_the_parameters_that_name_its_models(stage):
    from lingtest.flows.stage import stage_params

    assert set(MODEL_PARAMS[stage]) <= set(stage_params(stage)), (
        f"dvc.yaml: {stage} must list {MODEL_PARAMS[stage]} under params")


def test_editing_a_user_model_under_inputs_makes_its_stages_stale(tmp_path) -> None:
    """A model module under inputs/models is a dependency: with dvc.yaml's own stage
    entries, `dvc status` is clean after `dvc commit` and names the changed inputs after
    the module is edited."""
    import shutil
    import subprocess
    import sys

    root = tmp_path / "project"
    stages = yaml.safe_load((PACKAGE_ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    chosen = {name: stages[name] for name in ("adaptive", "capabilities")}
    copy_code(root)  # the stages' code dependencies, as DVC hashes them
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    for stage in chosen.values():  # the data the stages read, and their outputs, as stand-ins
        for entry in [*stage["deps"], *[next(iter(o)) if isinstance(o, dict) else o
                                        for o in [*stage["outs"], *stage.get("metrics", [])]]]:
            path = root / entry
            if not path.exists():
                if path.suffix:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text("{}")
                else:
                    path.mkdir(parents=True)
                    (path / "placeholder").write_text("stand-in")
    module = root / "inputs" / "models" / "lexicon.py"
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text("labels = ['negative', 'positive']\n")
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": chosen}))
    env = {"DVC_NO_ANALYTICS": "1", "PATH": os.environ.get("PATH", "")}

    def dvc(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout

    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    dvc("init", "-q")
    dvc("commit", "-f", "-q", "adaptive", "capabilities")
    assert "up to date" in dvc("status").lower()
    module.write_text("labels = ['negative', 'positive']\nrevision = 2\n")
    status = dvc("status")
    assert "adaptive:" in status and "capabilities:" in status and "modified:" in status
    assert "inputs" in status


def test_closure_follows_lazy_imports():
    """The walk sees imports inside functions (the CLI imports flows lazily)."""
    assert "lingtest.tasks.core.flow_runs" in imported_closure(["lingtest.flows.stage"])
    assert "lingtest.tasks.core.io" in imported_closure(["lingtest.flows.data"])


def test_byte_code_caches_are_no_dependency() -> None:
    """Folder deps (tasks/core, ...) must not hash __pycache__: importing a module would make
    every stage look changed to DVC."""
    import subprocess
    import sys

    for path in ("tasks/core/__pycache__/config.cpython-311.pyc", "flows/stage.pyc"):
        done = subprocess.run([sys.executable, "-m", "dvc", "check-ignore", path],
                              cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{path} is not ignored by .dvcignore"


def test_core_imports_nothing_above_it() -> None:
    """tasks/core knows no method, no model library and no flow: every project module it
    imports, at the top or inside a function, is in tasks/core (the plug-ins and the
    registry build on it, never the other way)."""
    import ast

    above = []
    for path in sorted((PACKAGE_ROOT / "tasks" / "core").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            above += [f"{path.name}:{node.lineno} {name}" for name in names
                      if name.split(".")[0] in ("tasks", "flows", "lingtest")
                      and not name.startswith("lingtest.tasks.core")]
    assert not above, f"tasks/core imports above itself: {above}"


def test_every_stage_comes_from_a_plugin_with_its_own_section() -> None:
    """The registry's stages are dvc.yaml's; each plug-in's section is a top-level
    parameter and its stages' sections reach a parameter section."""
    from lingtest.flows.registry import PLUGINS, Params, load_params, plugin_of, stage_spec

    assert list(_deps()) == list(STAGES)
    assert {p.name for p in PLUGINS} == {"data", "contrastive", "capabilities", "consistency",
                                         "adaptive", "repair"}
    params = load_params(PACKAGE_ROOT)
    for plugin in PLUGINS:
        if plugin.section:
            assert plugin.section in Params.model_fields, plugin.name
    for stage in STAGES:
        assert plugin_of(stage).name in {p.name for p in PLUGINS}
        assert params.section(stage_spec(stage).section) is not None, stage


# the KomMKonLLM guide's own file names (its tools read them), kept as the guide has them
GUIDE_EXPORTS = {"queries.csv", "results.csv", "test_runs.csv"}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_stage_has_one_name_in_its_reports(stage) -> None:
    """Every report file a stage writes starts with the stage's name (the plug-in's, the
    parameter section's and the contract's), not a paper's: one name per method."""
    folder = PACKAGE_ROOT / "reports" / stage
    names = [p.name for p in folder.iterdir()]
    assert names, f"reports/{stage} is empty"
    other = [n for n in names if not n.startswith(f"{stage}-")
             and n not in ("metrics.json", "provenance.json", *GUIDE_EXPORTS)]
    assert not other, f"reports/{stage}: {other} do not start with `{stage}-`"


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_method_stage_contract_is_named_after_the_stage(stage) -> None:
    from lingtest.flows.registry import stage_method

    method = stage_method(stage)
    if method is not None:
        assert method.stage == stage and method.contract.method == stage


def _outs() -> dict[str, list[str]]:
    return _paths("outs")


def _make_lists(prefix: str) -> list[list[str]]:
    """The Makefile's stage lists whose variable names start with ``prefix``."""
    lines = (PACKAGE_ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    return [line.split(":=", 1)[1].split() for line in lines if line.startswith(prefix)]


def test_make_runs_arms_that_cover_every_stage_and_read_nothing_of_each_other() -> None:
    """`make run`'s arms run side by side after `data`, each stage by stage in its order
    (`dvc repro -s`: no upstream check), then AFTER_ARMS: together with `data` they are
    every stage, a stage comes after every stage of its arm it reads, and no stage of one
    arm reads (transitively) an output of a stage of the other."""
    deps, outs = _deps(), _outs()
    upstream = {stage: {other for other in outs if other != stage and any(
        _covered(dep, outs[other]) or any(_covered(out, [dep]) for out in outs[other])
        for dep in deps[stage])} for stage in deps}

    def ancestors(stage: str) -> set[str]:
        found, todo = set(), [stage]
        while todo:
            for parent in upstream[todo.pop()] - found:
                found.add(parent)
                todo.append(parent)
        return found

    arms, [after] = _make_lists("ARM_"), _make_lists("AFTER_ARMS")
    first, second = map(set, arms)
    assert len(arms) == 2 and not first & second and not (first | second) & set(after)
    assert {"data"} | first | second | set(after) == set(deps)
    assert ancestors("capabilities") == {"data", "train-sentiment"}  # the reading works
    for arm, other in ((arms[0], second), (arms[1], first)):
        for at, stage in enumerate(arm):
            assert not ancestors(stage) & other, (stage, ancestors(stage) & other)
            assert ancestors(stage) & set(arm) <= set(arm[:at]), (stage, arm)
