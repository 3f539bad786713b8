"""Atomic file writes: every output appears whole or not at all.

A stage that fails half-way must never leave a table that a later stage (or DVC) would
take for a finished one, so every writer goes to a temporary file beside the target and
renames it into place.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
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
