"""What every ``lingtest`` command shares, the plug-ins' own commands included: the
``--set`` and ``--profile`` options and the parameters they give."""
from __future__ import annotations

from lingtest.tasks.core.paths import Workspace

SET_HELP = "Override a parameter, e.g. --set seed=7 --set data.online=false (repeatable)."
PROFILE_HELP = "Merge params/<profile>.yaml over params.yaml (e.g. paper)."


def current_params(overrides: list[str] | None, profile: str | None):
    """The current project's parameters after the profile and the ``--set`` overrides."""
    from lingtest.flows.registry import load_params

    return load_params(Workspace.current().root, overrides or [], profile)
