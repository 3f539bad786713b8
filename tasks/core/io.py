"""Atomic file and folder writes: every output appears whole or not at all.

A stage that fails half-way must never leave a table that a later stage (or DVC) would
take for a finished one, so every writer goes to a temporary file beside the target and
renames it into place. Folders (``data/raw``, ``data/processed``, ``reports/<stage>``) are
filled in a staging sibling and swapped in by renames only (``replace_dir``), so a SIGKILL
at any moment leaves the previous or the new copy; ``recover_dir`` at the next start puts
the previous copy back if the kill fell between the two renames and deletes leftovers.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` on success."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp makes 0600; outputs are shared files
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


STAGING, OLD = "staging", "old"  # leftover folders: .<name>.staging-*, .<name>.old-*


def _siblings(target: Path, kind: str) -> list[Path]:
    """``target``'s leftover ``.<name>.<kind>-*`` folders, oldest first."""
    if not target.parent.is_dir():
        return []
    found = target.parent.glob(f".{target.name}.{kind}-*")
    return sorted((p for p in found if p.is_dir()), key=lambda p: p.stat().st_mtime)


def recover_dir(target: str | os.PathLike) -> None:
    """Undo what a killed swap left beside ``target``.

    If ``target`` is missing while a moved-aside copy exists, the kill fell between the two
    renames of ``replace_dir``: the newest moved-aside copy (the previous one) goes back.
    Every other staging or moved-aside folder is deleted.
    """
    target = Path(target)
    old = _siblings(target, OLD)
    if not target.exists() and old:
        os.rename(old.pop(), target)
    # .raw-*, .processed-*: staging folders of earlier versions
    legacy = [p for p in target.parent.glob(f".{target.name}-*") if p.is_dir()]
    for leftover in old + _siblings(target, STAGING) + legacy:
        shutil.rmtree(leftover, ignore_errors=True)


def staging_dir(target: str | os.PathLike) -> Path:
    """A fresh, empty staging folder beside ``target`` (after cleaning up old ones)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    recover_dir(target)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.{STAGING}-", dir=target.parent))


def replace_dir(staged: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Swap the complete folder ``staged`` in for ``target`` by renames only.

    The old copy is moved aside, the new one moved in, then the old one deleted: never
    rmtree-then-rename, so there is no moment without a whole copy on disk.
    """
    staged, target = Path(staged), Path(target)
    os.chmod(staged, 0o777 & ~_UMASK)  # mkdtemp makes 0700
    aside = None
    if target.exists():
        aside = target.parent / f".{target.name}.{OLD}-{os.getpid()}-{time.time_ns()}"
        os.rename(target, aside)
    os.rename(staged, target)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return target


@contextlib.contextmanager
def staged_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield a staging folder for ``target``; swap it in on success, drop it on error."""
    stage = staging_dir(target)
    try:
        yield stage
        replace_dir(stage, target)
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


@contextlib.contextmanager
def held_flock(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created if missing), waited for: processes that
    would write one thing take turns; the kernel drops it when its holder dies."""
    import fcntl

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_parquet(path: str | os.PathLike, df: pd.DataFrame) -> Path:
    """Write ``df`` without its index; identical frames give identical bytes.

    Columns are merged into one chunk first: a frame built by ``concat`` and its pickled
    copy hold the same values in different chunks, which would change the file's bytes.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False).combine_chunks()
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def write_csv(path: str | os.PathLike, df: pd.DataFrame) -> Path:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)
    return Path(path)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
