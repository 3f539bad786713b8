"""Task cache keys from what actually determines a result.

Prefect's ``INPUTS`` policy hashes a ``Path`` by its string and ``TASK_SOURCE`` misses helper
code, so neither notices a changed file or a changed helper. ``ContentKey`` hashes the
contents of the files named by path arguments, the values of the other arguments that
matter, the source of the modules that compute the result, and an explicit version.
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect.cache_policies import CachePolicy
from pydantic import BaseModel

from tasks.core.io import sha256_file


def hash_path(path: Path) -> str:
    """sha256 over a file's bytes, or over a folder's relative names and file hashes."""
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    if path.is_dir():
        digest = hashlib.sha256()
        for item in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(str(item.relative_to(path)).encode())
            digest.update(sha256_file(item).encode())
        return digest.hexdigest()
    return "missing"


def hash_value(value: Any) -> str:
    """Stable hash of parameters: pydantic models and JSON-able values."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def hash_modules(modules: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    for name in modules:
        digest.update(inspect.getsource(importlib.import_module(name)).encode())
    return digest.hexdigest()


@dataclass
class ContentKey(CachePolicy):
    """Cache key = file contents + chosen argument values + module sources + version.

    ``files`` name path arguments; ``data_files`` are fixed files the code reads (lexicons
    shipped in the package); ``modules`` are the modules whose source computes the result.
    """

    files: tuple[str, ...] = ()
    values: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    data_files: tuple[str, ...] = ()
    version: str = "1"

    def compute_key(self, task_ctx: Any, inputs: dict[str, Any],
                    flow_parameters: dict[str, Any], **kwargs: Any) -> str | None:
        parts = [task_ctx.task.name if task_ctx else "", self.version, hash_modules(self.modules)]
        for name in self.files:
            value = inputs.get(name)
            paths = value if isinstance(value, (list, tuple)) else [value]
            parts += [hash_path(Path(p)) for p in paths if p is not None]
        parts += [hash_path(Path(p)) for p in self.data_files]
        parts += [hash_value(inputs.get(name)) for name in self.values]
        return hashlib.sha256("|".join(parts).encode()).hexdigest()
