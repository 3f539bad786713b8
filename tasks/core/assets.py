"""Raw assets: the catalogue, where each comes from, and their import into ``data/raw``.

Resolution order: the mirror folder (``data.mirror``, ``$LINGTEST_MIRROR``, else
``../shared/mirror``), then the canonical online source, else one error naming every
missing asset and where to put it. Nothing is written unless every asset resolves: files
are staged in a temporary folder that replaces ``data/raw`` whole.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from lingtest.tasks.core import fetch, io
from lingtest.tasks.core.config import DataParams
from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.paths import Workspace, default_mirror

Fetcher = Callable[[Path, float], None]
# The MANIFEST names a mirror copy by this label plus the asset's canonical source, never by
# the mirror's location: a clone with the mirror elsewhere records the same bytes (and DVC
# the same hashes).
MIRROR_SOURCE = "mirror"


@dataclass(frozen=True)
class Asset:
    """One raw asset: its files (mirror layout), canonical source and online fetcher."""

    name: str
    files: tuple[str, ...]
    source: str
    fetcher: Fetcher | None


ASSETS: dict[str, Asset] = {a.name: a for a in (
    Asset("sst", tuple(f"sst/trees/{s}.txt" for s in ("train", "dev", "test")),
          fetch.SST_URL, fetch.fetch_sst),
    Asset("mrpc", tuple(f"mrpc/mrpc_{s}.json" for s in ("train", "validation", "test")),
          "huggingface.co/datasets/nyu-mll/glue (mrpc)", fetch.fetch_mrpc),
    Asset("boolq", ("boolq/validation.json",),
          "huggingface.co/datasets/google/boolq", fetch.fetch_boolq),
    Asset("kommkonllm", ("kommkonllm/public_questions.jsonl",),
          fetch.KOMMKONLLM_URL, fetch.fetch_kommkonllm),
    Asset("contrast_sets", tuple(f"contrast_sets/imdb/{s}_{k}.tsv" for s in ("dev", "test")
                                 for k in ("original", "contrast")),
          fetch.CONTRAST_URL, fetch.fetch_contrast_sets),
    *(Asset(name, (f"nltk_data/corpora/{name}.zip",), f"nltk.download({name!r})",
            fetch.nltk_fetcher(name))
      for name in ("treebank", "wordnet", "opinion_lexicon", "names", "movie_reviews")),
    Asset("checklist", ("checklist/basic.json", "checklist/names.json",
                        "checklist/sentiment_suite.json.gz"),
          fetch.CHECKLIST_URL, None),
    Asset("adatest", ("adatest/imdb_hotel_conversion.csv", "adatest/abstract_capabilities.csv"),
          "github.com/microsoft/adaptive-testing (notebooks/, test_trees/)", None),
)}


def mirror_folder(params: DataParams, workspace: Workspace) -> Path | None:
    if params.mirror:
        folder = Path(params.mirror)
        return folder if folder.is_absolute() else (workspace.root / folder).resolve()
    return default_mirror(workspace.root)


def _mirror_sums(mirror: Path) -> dict[str, str]:
    sums = mirror / "SHA256SUMS"
    if not sums.is_file():
        return {}
    pairs = (line.split(None, 1) for line in sums.read_text().splitlines() if line.strip())
    return {name.strip().lstrip("*"): digest for digest, name in pairs}


def _stage_from_mirror(asset: Asset, mirror: Path, stage: Path, sums: dict[str, str]) -> str:
    for rel in asset.files:
        src = mirror / rel
        expected = sums.get(rel)
        if expected and io.sha256_file(src) != expected:
            raise LingtestError(
                f"{src}: sha256 differs from {mirror / 'SHA256SUMS'}; the mirror copy is "
                "damaged: copy the file again from its source")
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, stage / rel)
    return f"{MIRROR_SOURCE}:{asset.source}"


def import_raw_assets(params: DataParams, workspace: Workspace) -> pd.DataFrame:
    """Copy (or fetch) every configured asset into ``data/raw``; return the MANIFEST rows."""
    mirror = mirror_folder(params, workspace)
    sums = _mirror_sums(mirror) if mirror else {}
    stage = io.staging_dir(workspace.raw)
    sources: dict[str, str] = {}
    missing: list[str] = []
    try:
        for name in params.assets:
            asset = ASSETS[name]
            if mirror and all((mirror / rel).is_file() for rel in asset.files):
                sources[name] = _stage_from_mirror(asset, mirror, stage, sums)
                continue
            reason = _why_not_in_mirror(asset, mirror)
            if params.online and asset.fetcher is not None:
                try:
                    asset.fetcher(stage, params.timeout_s)
                    sources[name] = asset.source
                    continue
                except Exception as exc:  # any network/format failure: report, go on
                    reason += f"; online fetch from {asset.source} failed: {_short(exc)}"
            elif asset.fetcher is None:
                reason += "; it has no online source (derived file)"
            else:
                reason += "; online fetching is off (data.online: false)"
            missing.append(f"- {name}: {reason}. Put {', '.join(asset.files)} under "
                           f"{mirror or '<mirror>'} or point LINGTEST_MIRROR at a folder "
                           "holding them")
        if missing:
            raise LingtestError("missing raw assets:\n" + "\n".join(missing))
        rows = [{"path": rel, "sha256": io.sha256_file(stage / rel),
                 "bytes": (stage / rel).stat().st_size, "asset": name, "source": sources[name]}
                for name in params.assets for rel in ASSETS[name].files]
        manifest = pd.DataFrame(rows, columns=["path", "sha256", "bytes", "asset", "source"])
        manifest = pd.concat([manifest, _carry_over(workspace, stage, set(params.assets))],
                             ignore_index=True)
        manifest.to_csv(stage / "MANIFEST.tsv", sep="\t", index=False)
        io.replace_dir(stage, workspace.raw)
        return manifest
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


def _carry_over(workspace: Workspace, stage: Path, listed: set[str]) -> pd.DataFrame:
    """The current ``data/raw`` assets that ``data.assets`` does not list, linked (or copied)
    into ``stage`` with their MANIFEST rows: importing a subset never deletes the others."""
    columns = ["path", "sha256", "bytes", "asset", "source"]
    try:
        old = pd.read_csv(workspace.manifest, sep="\t", dtype=str, keep_default_na=False)
    except (OSError, ValueError):
        old = pd.DataFrame(columns=columns)
    if not set(columns) <= set(old.columns):  # no manifest, or not ours: nothing to keep
        return pd.DataFrame(columns=columns)
    keep = old[~old["asset"].isin(listed) & old["asset"].isin(list(ASSETS))]
    keep = keep[keep["path"].map(lambda rel: (workspace.raw / rel).is_file()).astype(bool)]
    for rel in keep["path"]:
        target = stage / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(workspace.raw / rel, target)
        except OSError:
            shutil.copy2(workspace.raw / rel, target)
    return keep[columns].astype({"bytes": int})


def _why_not_in_mirror(asset: Asset, mirror: Path | None) -> str:
    if mirror is None:
        return "no mirror folder (LINGTEST_MIRROR unset and no ../shared/mirror)"
    absent = [rel for rel in asset.files if not (mirror / rel).is_file()]
    return f"not in the mirror {mirror} ({', '.join(absent)} absent)"


def _short(exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text[:200]


def read_manifest(workspace: Workspace) -> pd.DataFrame:
    if not workspace.manifest.is_file():
        raise LingtestError(f"{workspace.manifest} is missing: run `lingtest run data` first")
    return pd.read_csv(workspace.manifest, sep="\t")
