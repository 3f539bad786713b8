"""How the coverage report presents its figures: text-length distributions beside the
coverage numbers, and the BoundCov / SActCov curve (the paper's Figure 4)."""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from lingtest.tasks.capabilities.coverage import CURVE_COLUMNS
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.io import atomic_path

LENGTH_COLUMNS = ["suite", "texts", "mean", "std", "min", "p25", "median", "p75", "max"]


def length_summary(texts_by_suite: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """Length in whitespace tokens per suite: count, mean, spread and quartiles, so a coverage
    difference can be read against a length difference (longer texts move more neurons)."""
    rows = []
    for suite, texts in texts_by_suite.items():
        lengths = np.array([len(str(t).split()) for t in texts], dtype=float)
        if len(lengths) == 0:
            rows.append((suite, 0, *[np.nan] * 7))
            continue
        q = np.percentile(lengths, [0, 25, 50, 75, 100])
        rows.append((suite, len(lengths), lengths.mean(), lengths.std(ddof=0), *q))
    return pd.DataFrame(rows, columns=LENGTH_COLUMNS).round(2)


FIGURE4_SUITES = ("S²LCT", "CheckList")
FIGURE4_LINES = [f"{suite} {metric}" for metric in ("boundcov", "sactcov")
                 for suite in FIGURE4_SUITES]


def coverage_data(curve: pd.DataFrame) -> pd.DataFrame:
    """What Figure 4 plots, wide: one row per suite size, BoundCov and SActCov (%) of each
    suite (``FIGURE4_LINES``; blank: that suite has no sample of that size)."""
    out = pd.DataFrame({"size": sorted(curve["size"].unique())})
    for suite in FIGURE4_SUITES:
        part = curve[curve["suite"] == suite].set_index("size").reindex(out["size"])
        for metric in ("boundcov", "sactcov"):
            out[f"{suite} {metric}"] = (100 * part[metric].to_numpy(dtype=float)).round(4)
    return out[["size", *FIGURE4_LINES]]


def plot_coverage_curve(curve: pd.DataFrame, path: str | os.PathLike,
                        title: str = "") -> None:
    """BoundCov and SActCov against suite size, one line per suite (the paper's Figure 4)."""
    missing = set(CURVE_COLUMNS) - set(curve.columns)
    if missing:
        raise LingtestError(f"coverage curve lacks columns {sorted(missing)}")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # a bare Figure on the Agg canvas: no pyplot state, no display needed
    figure = Figure(figsize=(9, 3.6))
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, 2, sharex=True)
    for axis, metric, label in ((axes[0], "boundcov", "BoundCov"),
                                (axes[1], "sactcov", "SActCov")):
        for suite, group in curve.groupby("suite", sort=False):
            group = group.sort_values("size")
            axis.plot(group["size"], 100 * group[metric], marker="o", label=str(suite))
        axis.set_xlabel("number of test cases")
        axis.set_ylabel(f"{label} (%)")
        axis.grid(alpha=0.3)
    axes[1].legend()
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    suffix = os.path.splitext(os.fspath(path))[1].lstrip(".") or "png"
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format=suffix, dpi=150)


def coverage_lengths(suites: dict[str, list[str]], pairs: dict) -> pd.DataFrame:
    """Length distributions of both whole suites, then of each LC and its CheckList test."""
    named = dict(suites)
    for lc, (test, ours, theirs) in pairs.items():
        named[f"{lc} (S²LCT)"] = ours
        named[f"{lc}: {test} (CheckList)"] = theirs
    return length_summary(named)
