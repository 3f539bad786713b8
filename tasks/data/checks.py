"""The data stage's check before a run: every listed asset can be imported."""
from __future__ import annotations

from lingtest.tasks.core.config import Params
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace


def check_inputs(params: Params, workspace: Workspace) -> None:
    """Every listed asset is in the mirror or fetchable (a subset keeps the others:
    ``assets._carry_over``)."""
    from lingtest.tasks.core.assets import ASSETS, _why_not_in_mirror, mirror_folder

    d = params.data
    if d.mirror and not mirror_folder(d, workspace).is_dir():
        raise LingtestError(f"data.mirror: {mirror_folder(d, workspace)} is not a folder (set "
                            f"data.mirror to the raw-asset mirror, or null for $LINGTEST_MIRROR)")
    mirror = mirror_folder(d, workspace)
    missing = [f"{name} ({_why_not_in_mirror(ASSETS[name], mirror)})" for name in d.assets
               if not (mirror and all((mirror / r).is_file() for r in ASSETS[name].files))
               and not (d.online and ASSETS[name].fetcher is not None)]
    if missing:
        raise LingtestError(f"data.assets: cannot import {'; '.join(missing)}; fix: put the "
                            f"files in the mirror, point LINGTEST_MIRROR at it, or set "
                            f"data.online: true")
