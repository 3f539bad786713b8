"""What every fine-tuning in the project needs: a fixed torch thread count for the call (a
fixed count keeps training reproducible) and a model folder that appears whole or not at all."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lingtest.tasks.core.io import staged_dir


@contextmanager
def torch_threads(threads: int | None) -> Iterator[int]:
    """Cap torch's intra-op threads for the block (``None``: leave them); yields the count."""
    import torch

    saved = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(saved)


def write_model_dir(out_dir: Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(folder)`` on a staging folder beside ``out_dir`` and swap it in whole;
    files are made world-readable (outputs are shared; the weight writers make private files)."""
    out_dir = Path(out_dir)
    with staged_dir(out_dir) as stage:
        write(stage)
        for path in [stage, *stage.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return out_dir
