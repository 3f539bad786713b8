"""Pooling names (``mean+norm``): read by the encoders and checked with the parameters, so
this module imports no torch."""
from __future__ import annotations

from lingtest.tasks.core.errors import LingtestError

POOLING_MODES = ("cls", "pooler", "mean", "max", "mean_sqrt_len", "lasttoken", "weightedmean")


def parse_pooling(pooling: str) -> tuple[str, bool]:
    """"mean+norm" → ("mean", True)."""
    mode, _, suffix = pooling.partition("+")
    if mode not in POOLING_MODES or suffix not in ("", "norm"):
        raise LingtestError(f"pooling `{pooling}`: expected one of {', '.join(POOLING_MODES)}, "
                            f"optionally with +norm (L2-normalised)")
    return mode, suffix == "norm"
