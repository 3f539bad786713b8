"""The repair stage's check before a run: each encoder to repair is one the contrastive
stage tests and one lingtest can fine-tune."""
from __future__ import annotations

from lingtest.tasks.core.config import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace
from lingtest.tasks.core.plugin_spec import ModelEntry
from lingtest.tasks.repair.params import REPAIR_ALL


def configured_models(params: Params) -> list[ModelEntry]:
    """``repair.models`` (null: the first encoder the contrastive stage tests)."""
    first = (params.contrastive.encoders or params.models.encoders)[0]
    return [ModelEntry("repair.models", m, "repair") for m in params.repair.models or [first]]


def check_repair_model(key: str, model_id: str, params: Params, workspace: Workspace,
                       row: dict) -> dict:
    """``all``, or an encoder the contrastive stage is told to test (by display name or
    spec), that lingtest can fine-tune."""
    from lingtest.tasks.models.any_encoder import check_repairable
    from lingtest.tasks.models.model_spec import parse_models

    specs = params.contrastive.encoders or params.models.encoders
    refs = parse_models(specs, "contrastive.encoders", params.models.names, workspace.root)
    if model_id == REPAIR_ALL:
        for ref in refs:
            check_repairable(ref, params.models.offline, workspace.root)
        return {**row, "source": "contrastive", "reason": "every encoder tested"}
    match = [ref for ref in refs if model_id in (ref.name, ref.bare, ref.spec)]
    if not match:
        raise LingtestError(
            f"`{model_id}` is not among the encoders the contrastive stage tests "
            f"({', '.join(ref.name for ref in refs)}); fix: name one of those, or [{REPAIR_ALL}]")
    check_repairable(match[0], params.models.offline, workspace.root)
    return {**row, "name": match[0].name, "source": "contrastive", "path": match[0].bare}
