"""AdaTest's checks before a run: the tracked trees and the debugging experiment's topics
and label corrections parse, and the models under test resolve."""
from __future__ import annotations

from lingtest.tasks.core.config import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.plugin_spec import ModelEntry
from lingtest.tasks.core.validate import param_path, read_param_file


def tested_models(params: Params) -> list[ModelEntry]:
    """The ``adaptive`` stage's models under test (any classifier or scored model)."""
    return [ModelEntry("adaptive.models", m, "tested model") for m in params.adaptive.models]


def debugged_model(params: Params) -> list[ModelEntry]:
    """The classifier the debugging experiment fine-tunes, and the LM that suggests its
    tests when the adatest condition runs."""
    entries = [ModelEntry("adaptive.debug.model", params.adaptive.debug.model,
                          "trainable classifier")]
    if "adatest" in params.adaptive.debug.conditions:
        entries.append(ModelEntry("models.causal_lm", params.models.causal_lm, "causal_lm"))
    return entries


def check_tree(key: str, tree: str, workspace: Workspace):
    """An AdaTest tree parameter's file parses (one the data stage writes: run it first);
    the tree."""
    from lingtest.tasks.adaptive.tree import read_tree

    path = param_path(tree, workspace.root)
    if not path.exists() and path.is_relative_to(workspace.raw):
        raise LingtestError(f"{key}: {path} does not exist yet; fix: lingtest run data (it "
                            "imports the mirror's trees) or make run")
    return read_param_file(key, read_tree, path)


def check_trees(params: Params, workspace: Workspace) -> None:
    """The trees parse, and ``adaptive.binary_labels`` are labels their tests output (labels
    they never output would silently turn every binary expectation into 'should not')."""
    outputs: set[str] = set()
    for tree in params.adaptive.trees:
        outputs |= set(check_tree("adaptive.trees", tree, workspace).tests["output"])
    labels = params.adaptive.binary_labels
    if labels is not None and outputs and not set(labels) & outputs:
        shown = ", ".join(sorted(outputs)[:8]) + (" …" if len(outputs) > 8 else "")
        raise LingtestError(f"adaptive.binary_labels {list(labels)}: no test of "
                            f"adaptive.trees outputs either label (they output: {shown}); "
                            "fix: the trees' two labels, e.g. [neg, pos], or null")


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

        from lingtest.tasks.adaptive.checklist_topics import learnable_topics
        known = learnable_topics(pd.read_parquet(suite))
        unknown = [t for t in d.topics if t not in known]
        if unknown:
            raise LingtestError(f"adaptive.debug.topics: {unknown} are no CheckList MFT test "
                                f"with a negative or positive label; fix: pick from {known}")
    if "adatest-tree" in d.conditions:  # the tree it trains on, and its chosen topics
        tree = check_tree("adaptive.debug.tree" if d.tree else "adaptive.trees",
                          d.tree or params.adaptive.trees[0], workspace)
        topics = set(tree.tests["topic"])
        unknown = [t for t in (w.rstrip("/") for w in d.tree_topics)
                   if not any(s == t or s.startswith(t + "/") for s in topics)]
        if unknown:
            named = sorted(t for t in topics if t)
            shown = ", ".join(named[:10]) + (" …" if len(named) > 10 else "")
            raise LingtestError(f"adaptive.debug.tree_topics: {unknown} hold no test in "
                                f"{tree.source}; fix: pick topics of the tree ({shown})")
    if "adatest-tree" in d.conditions and d.corrections is not None:
        from lingtest.tasks.adaptive.corrections import read_corrections
        read_param_file("adaptive.debug.corrections", read_corrections,
                        param_path(d.corrections, workspace.root))
