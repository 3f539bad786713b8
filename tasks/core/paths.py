"""Where things live: the project root, the mirror, the data folders, Prefect's home.

Every path is derived from one project root so that tests (and users) can run a stage
into any folder: ``Workspace(root)`` holds them all.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
ROOT_MARK = "<root>"  # the project root as every report writes it


def find_project_root(start: Path | None = None) -> Path:
    """The nearest folder upward from ``start`` (default: cwd) holding ``params.yaml``.

    ``LINGTEST_ROOT`` overrides the search; without a hit the source checkout is used.
    """
    if os.environ.get("LINGTEST_ROOT"):
        return Path(os.environ["LINGTEST_ROOT"]).resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "params.yaml").is_file():
            return folder
    return PACKAGE_ROOT


@dataclass(frozen=True)
class Workspace:
    """The folders of one project checkout (or of a test's temporary copy). With
    ``outputs`` set (``lingtest test``), a stage writes its interim files, run state and
    reports there and leaves the pipeline's tracked ``data/interim`` and ``reports`` alone;
    it still reads the processed tables and shares the caches and trained models."""

    root: Path
    outputs: Path | None = None

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def raw(self) -> Path:
        return self.data / "raw"

    @property
    def interim(self) -> Path:
        return self.outputs / "interim" if self.outputs else self.data / "interim"

    @property
    def state(self) -> Path:
        """Where a stage keeps what it writes beside its outputs (consistency's last run)."""
        return self.outputs / "state" if self.outputs else self.data

    @property
    def processed(self) -> Path:
        return self.data / "processed"

    @property
    def reports(self) -> Path:
        return self.outputs / "reports" if self.outputs else self.root / "reports"

    @property
    def nltk_data(self) -> Path:
        return self.raw / "nltk_data"

    @property
    def prefect_home(self) -> Path:
        return self.root / ".prefect"

    @property
    def manifest(self) -> Path:
        return self.raw / "MANIFEST.tsv"

    def shown(self, path: Path) -> str:
        """``path`` as a message shows it: relative to the project when inside it."""
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    @classmethod
    def current(cls) -> "Workspace":
        return cls(find_project_root())


def root_marked(value: Any, root: Path) -> Any:
    """``value`` (text, or a dict / list of them: a report's provenance) with the project
    root written as ``<root>``, so a report names paths inside the project the same on every
    machine and checkout; paths outside it stay as they are."""
    names = {str(root), str(Path(root).resolve())} - {"/", ""}
    if not names:
        return value
    pattern = re.compile("(?:" + "|".join(map(re.escape, sorted(names, key=len, reverse=True)))
                         + r")(?![\w.-])")  # the root itself, not a sibling /x/root-2

    def mark(item: Any) -> Any:
        if isinstance(item, str):
            return pattern.sub(ROOT_MARK, item)
        if isinstance(item, dict):
            return {key: mark(inner) for key, inner in item.items()}
        if isinstance(item, (list, tuple)):
            return type(item)(mark(inner) for inner in item)
        return item

    return mark(value)


def default_mirror(root: Path) -> Path | None:
    """``$LINGTEST_MIRROR``, else ``../shared/mirror`` beside the project, else None."""
    env = os.environ.get("LINGTEST_MIRROR")
    if env:
        return Path(env).expanduser().resolve()
    candidate = (root / ".." / "shared" / "mirror").resolve()
    return candidate if candidate.is_dir() else None
