"""AdaTest's checks before a run: the tracked trees and the debugging experiment's topics
and label corrections parse, and the models under test resolve."""
from __future__ import annotations

from tasks.core.config import Params
from tasks.core.errors import LingtestError
from tasks.core.paths import Workspace
from tasks.core.plugin_spec import ModelEntry
from tasks.core.validate import param_path, read_param_file


def tested_models(params: Params) -> list[ModelEntry]:
    """The ``adaptive`` stage's models under test (any classifier or scored model)."""
    return [ModelEntry("adaptive.models", m, "tested model") for m in params.adaptive.models]


def debugged_model(params: Params) -> list[ModelEntry]:
    """The classifier the debugging experiment fine-tunes."""
    return [ModelEntry("adaptive.debug.model", params.adaptive.debug.model,
                       "trainable classifier")]


def check_tree(key: str, tree: str, workspace: Workspace) -> None:
    """An AdaTest tree parameter's file parses (one the data stage writes: run it first)."""
    from tasks.adaptive.tree import read_tree

    path = param_path(tree, workspace.root)
    if not path.exists() and path.is_relative_to(workspace.raw):
        raise LingtestError(f"{key}: {path} does not exist yet; fix: lingtest run data (it "
                            "imports the mirror's trees) or make run")
    read_param_file(key, read_tree, path)


def check_trees(params: Params, workspace: Workspace) -> None:
    for tree in params.adaptive.trees:
        check_tree("adaptive.trees", tree, workspace)


def check_debug(params: Params, workspace: Workspace) -> None:
    """The debugging experiment's topics name CheckList MFT tests a binary model can learn
    (when the data stage has written the suite) and its label corrections parse."""
    d = params.adaptive.debug
    if set(d.conditions) - {"adatest-tree"} and not d.topics:
        raise LingtestError("adaptive.debug.topics: empty; the adatest and checklist-data "
                            "conditions fix CheckList topics; fix: name at least one CheckList "
                            "MFT test (e.g. 'used to, but now')")
    suite = workspace.processed / "checklist_suite.parquet"
    if d.topics and suite.is_file():
        import pandas as pd

        from tasks.adaptive.checklist_topics import learnable_topics
        known = learnable_topics(pd.read_parquet(suite))
        unknown = [t for t in d.topics if t not in known]
        if unknown:
            raise LingtestError(f"adaptive.debug.topics: {unknown} are no CheckList MFT test "
                                f"with a negative or positive label; fix: pick from {known}")
    if "adatest-tree" in d.conditions:  # the tree it trains on
        check_tree("adaptive.debug.tree" if d.tree else "adaptive.trees",
                   d.tree or params.adaptive.trees[0], workspace)
    if "adatest-tree" in d.conditions and d.corrections is not None:
        from tasks.adaptive.corrections import read_corrections
        read_param_file("adaptive.debug.corrections", read_corrections,
                        param_path(d.corrections, workspace.root))
