"""Task cache keys from everything a task reads, by default.

Prefect's ``INPUTS`` policy hashes a ``Path`` by its string and ``TASK_SOURCE`` sees only the
task's own source, so neither notices a changed file or a changed helper. ``ContentInputs``
keys a task run on:

- every argument (opt-out with ``exclude``): ``Path`` values, and ``str`` values of
  parameters annotated ``Path`` (``Path | None``, ``list[Path]``), by file or folder content;
  pydantic models by their JSON dump; DataFrames and arrays by their data; containers
  recursively; other objects by their ``cache_token()``, else a ``TypeError``;
- model ids in parameters annotated ``model_id(kind, resolve=...)`` by the registry's
  resolved revision, so new weights under the same id are a miss;
- the code: the task's source, the same-module functions and constants it uses, and every
  project module (``tasks.*``, ``flows.*``) it reaches, by their syntax tree without
  docstrings (``normalised_code``), so an edited comment, docstring or layout is a hit;
- a ``version`` string.

Runs holding the same key are serialised with a file lock beside the run's results
(``lingtest.tasks.core.cache_locks``: a shared folder serialises every worker that mounts it), so two workers
never compute one key. ``task`` is Prefect's decorator with this policy and
``persist_result=True`` as defaults; ``cache_policy=NO_CACHE`` opts out.
"""
from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import importlib
import sys
import types
import typing
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Callable

import numpy as np
from prefect import task as prefect_task
from prefect.cache_policies import NO_CACHE, CachePolicy
from prefect.transactions import IsolationLevel
from pydantic import BaseModel

from lingtest.tasks.core.cache_locks import ResultStorageLocks
from lingtest.tasks.core.imports import (PROJECT_PACKAGES, imported_closure, module_file, parse_source,
                                project_modules)
from lingtest.tasks.core.io import sha256_file
from lingtest.tasks.core.paths import PACKAGE_ROOT

__all__ = ["ContentInputs", "ModelRef", "model_id", "NO_CACHE", "task", "hash_path"]


# --------------------------------------------------------------------------- files

@lru_cache(maxsize=4096)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    return sha256_file(path)


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, memoised by (path, mtime, size)."""
    stat = path.stat()
    return _file_digest(str(path), stat.st_mtime_ns, stat.st_size)


def hash_path(path: str | os.PathLike) -> str:
    """sha256 over a file's bytes, or over a folder's relative names and file hashes."""
    path = Path(path)
    if path.is_file():
        return file_digest(path)
    if path.is_dir():
        digest = hashlib.sha256()
        for item in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(str(item.relative_to(path)).encode())
            digest.update(file_digest(item).encode())
        return digest.hexdigest()
    return "missing"


# --------------------------------------------------------------------------- models

@dataclass(frozen=True)
class ModelRef:
    """Marks a ``str`` parameter holding a model id: the key gets its resolved revision.

    ``resolve`` is ``lingtest.tasks.models.registry.resolve`` (passed in, so that stages without
    models do not depend on the registry's code); ``kinds`` are tried in order (a fill model
    may be a causal or a masked LM) and the first kind the registry accepts decides."""

    kinds: tuple[str, ...]
    resolve: Callable[..., Any]

    def revision(self, model: str, offline: bool) -> list:
        """[kind, source, revision, gguf file] of the id as the registry resolves it now."""
        from lingtest.tasks.core.errors import LingtestError

        errors = []
        for kind in self.kinds:
            try:
                res = self.resolve(model, kind, offline=offline)
            except LingtestError as exc:
                errors.append(str(exc))
                continue
            return [kind, res.source, res.revision, res.gguf_file]
        raise LingtestError(f"model `{model}`: {'; '.join(errors)}")


def model_id(*kinds: str, resolve: Callable[..., Any]) -> Any:
    """The annotation of a ``str`` parameter naming a model of ``kinds``:
    ``SpacyModel = model_id("spacy", resolve=registry.resolve)``."""
    return Annotated[str, ModelRef(kinds, resolve)]


# --------------------------------------------------------------------------- values

def _annotation_types(annotation: Any) -> list:
    """Every type an annotation names (through Optional/Union, list[...], Annotated)."""
    if isinstance(annotation, (list, tuple)):  # Callable[[args], result]
        return [t for arg in annotation for t in _annotation_types(arg)]
    found = [annotation]
    for arg in typing.get_args(annotation):
        found += _annotation_types(arg)
    return found


def _model_ref(annotation: Any) -> ModelRef | None:
    for ann in _annotation_types(annotation):
        for meta in getattr(ann, "__metadata__", ()):
            if isinstance(meta, ModelRef):
                return meta
    return None


class Unhashable(TypeError):
    """A value the policy cannot key on (raised with the argument's name added)."""


def _json_cell(value: Any) -> Any:
    """Object cells of a DataFrame (token lists, arrays, dicts) as canonical JSON text."""
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    return json.dumps(canonical(value), sort_keys=True)


def _frame_digest(frame: Any) -> str:
    import pandas as pd

    digest = hashlib.sha256()
    digest.update(json.dumps([[str(c), str(t)] for c, t in frame.dtypes.items()]).encode())
    digest.update(json.dumps([str(i) for i in frame.index.names]).encode())
    columns = {}
    for i, (_, column) in enumerate(frame.items()):
        if column.dtype == object:
            column = column.map(_json_cell).astype(str)
        columns[i] = column.to_numpy()
    cleaned = pd.DataFrame(columns, index=frame.index) if len(frame.columns) else frame
    digest.update(pd.util.hash_pandas_object(cleaned, index=True).to_numpy().tobytes())
    return digest.hexdigest()


def canonical(value: Any, as_path: bool = False) -> Any:
    """A JSON-able stand-in that changes whenever ``value``'s content does.

    ``as_path``: ``str`` values name files (the parameter is annotated ``Path``)."""
    import pandas as pd

    if isinstance(value, os.PathLike) or (as_path and isinstance(value, str)):
        return {"path-content": hash_path(value)}
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, BaseModel):
        return {type(value).__qualname__: value.model_dump(mode="json")}
    if isinstance(value, pd.DataFrame):
        return {"frame": _frame_digest(value)}
    if isinstance(value, pd.Series):
        return {"series": _frame_digest(value.to_frame())}
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        if data.dtype == object:
            return {"object-array": [canonical(v) for v in data.ravel().tolist()],
                    "shape": list(data.shape)}
        return {"array": f"{data.dtype.str}{list(data.shape)}",
                "sha256": hashlib.sha256(data.tobytes()).hexdigest()}
    if isinstance(value, dict):
        items = [[canonical(k), canonical(v, as_path)] for k, v in value.items()]
        return {"dict": sorted(items, key=lambda kv: json.dumps(kv[0], sort_keys=True))}
    if isinstance(value, (list, tuple)):
        return [canonical(v, as_path) for v in value]
    if isinstance(value, (set, frozenset)):
        return {"set": sorted(json.dumps(canonical(v), sort_keys=True) for v in value)}
    token = getattr(value, "cache_token", None)
    if callable(token):
        return {"cache_token": canonical(token())}
    raise Unhashable(f"a {type(value).__module__}.{type(value).__qualname__}")


# --------------------------------------------------------------------------- code

@lru_cache(maxsize=256)
def _top_level(path: str, mtime_ns: int, size: int) -> dict[str, str]:
    """Source of each top-level function, class and assigned name of a module file."""
    text = Path(path).read_text(encoding="utf-8")
    found: dict[str, str] = {}
    for node in parse_source(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        else:
            continue
        for name in names:
            found[name] = found.get(name, "") + normalised_code(node)
    return found


_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def normalised_code(tree: ast.AST) -> str:
    """``tree``'s code without what does not run: ``ast.dump`` of a copy with the docstrings
    removed (comments, blank lines and line positions are not in a dump)."""
    import copy

    tree = copy.deepcopy(tree)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, _DOCUMENTED) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


@lru_cache(maxsize=1024)
def _module_digest(path: str, mtime_ns: int, size: int) -> str:
    text = Path(path).read_text(encoding="utf-8")
    try:
        code = normalised_code(parse_source(text))
    except SyntaxError:  # keyed by its bytes; importing it fails anyway
        code = text
    return hashlib.sha256(code.encode()).hexdigest()


def module_digest(path: Path) -> str:
    """sha256 of a module's normalised code (``normalised_code``), memoised by (path, mtime,
    size)."""
    stat = path.stat()
    return _module_digest(str(path), stat.st_mtime_ns, stat.st_size)


def _code_names(code: types.CodeType) -> set[str]:
    """Global and attribute names a code object (and the code nested in it) uses."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


@dataclass(frozen=True)
class CodeReach:
    """What a function's result can depend on in code: same-module definitions it uses
    (their source) and the project modules it reaches (root modules of their imports)."""

    sources: tuple[tuple[str, str], ...]
    modules: tuple[str, ...]


def code_reach(fn: Callable, root: Path = PACKAGE_ROOT,
               packages: tuple[str, ...] = PROJECT_PACKAGES) -> CodeReach:
    """Walk ``fn``'s names: a project module, or a function, class or value imported from one,
    makes that module (and its imports) part of the code; a function or constant defined in
    ``fn``'s own module contributes its source and, for functions, its own names."""
    home = sys.modules[fn.__module__]
    home_file = module_file(fn.__module__, root)
    stat = home_file.stat() if home_file else None
    definitions = (_top_level(str(home_file), stat.st_mtime_ns, stat.st_size) if home_file
                   else {fn.__name__: inspect.getsource(fn)})  # a function outside the project
    sources: dict[str, str] = {}
    roots: set[str] = set()
    todo: list[tuple[str, set[str]]] = [(fn.__name__, _code_names(fn.__code__))]
    while todo:
        name, names = todo.pop()
        if name in sources:
            continue
        sources[name] = definitions.get(name, "")
        for used in sorted(names):
            roots |= project_modules(used, root, packages)  # lazy `import lingtest.tasks.x.y`
            if used not in vars(home):
                continue
            value = vars(home)[used]
            origin = value.__name__ if isinstance(value, types.ModuleType) else getattr(
                value, "__module__", None)
            if used in definitions:  # defined in fn's module: its source, then its names
                code = getattr(getattr(value, "fn", value), "__code__", None)  # task: its fn
                more = _code_names(code) if code else _assigned_names(definitions[used])
                todo.append((used, more))
            elif isinstance(origin, str):
                roots |= project_modules(origin, root, packages)
            else:
                roots |= _imported_from(home_file, used, root, packages)
    closure = imported_closure(roots - {fn.__module__}, root, packages)
    return CodeReach(tuple(sorted(sources.items())), tuple(sorted(closure)))


def _assigned_names(source: str) -> set[str]:
    try:
        return {n.id for n in ast.walk(parse_source(source)) if isinstance(n, ast.Name)}
    except SyntaxError:
        return set()


def _imported_from(path: Path | None, name: str, root: Path,
                   packages: tuple[str, ...]) -> set[str]:
    """The project module a value (a dict, a constant) named ``name`` was imported from."""
    if path is None:
        return set()
    for node in ast.walk(parse_source(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if any((alias.asname or alias.name) == name for alias in node.names):
                return project_modules(node.module, root, packages)
    return set()


def code_digest(reach: CodeReach, root: Path = PACKAGE_ROOT) -> str:
    digest = hashlib.sha256()
    for name, source in reach.sources:
        digest.update(f"{name}\x1f{source}\x1e".encode())
    for module in reach.modules:
        digest.update(f"{module}\x1f{module_digest(module_file(module, root))}\x1e".encode())
    return digest.hexdigest()


def type_hints(fn: Callable) -> dict[str, Any]:
    """``fn``'s resolved annotations, in its module's namespace: a task's function reaches a
    Dask worker pickled by value (its module attribute is the Task, not the function), with
    only the globals its body uses, so ``numpy`` in an annotation would be undefined there."""
    try:
        namespace = vars(importlib.import_module(fn.__module__))
    except ImportError:
        namespace = None
    return typing.get_type_hints(fn, globalns=namespace, include_extras=True)


# --------------------------------------------------------------------------- the policy

@dataclass
class ContentInputs(CachePolicy):
    """Cache key = every argument's content (bar ``exclude``) + model revisions + the code
    the task reaches + ``version``; SERIALIZABLE with a file lock manager by default."""

    exclude: tuple[str, ...] = ()
    version: str = "1"
    data_files: tuple[str, ...] = ()  # package data the code reads (not .py files)
    code_root: Path = PACKAGE_ROOT
    packages: tuple[str, ...] = PROJECT_PACKAGES

    def __post_init__(self) -> None:
        if self.isolation_level is None:
            self.isolation_level = IsolationLevel.SERIALIZABLE
        if self.lock_manager is None:
            self.lock_manager = ResultStorageLocks()

    def compute_key(self, task_ctx: Any, inputs: dict[str, Any],
                    flow_parameters: dict[str, Any], **kwargs: Any) -> str | None:
        return content_key(task_ctx.task.fn, inputs, name=task_ctx.task.name,
                           exclude=self.exclude, version=self.version,
                           data_files=self.data_files, code_root=self.code_root,
                           packages=self.packages)


def content_key(fn: Callable, inputs: dict[str, Any], *, name: str | None = None,
                exclude: tuple[str, ...] = (), version: str = "1",
                data_files: tuple[str, ...] = (), code_root: Path = PACKAGE_ROOT,
                packages: tuple[str, ...] = PROJECT_PACKAGES) -> str:
    """The key of calling ``fn`` with ``inputs``: every argument's content (bar ``exclude``;
    a ``Path`` parameter by its file's bytes, a ``model_id`` one with its resolved revision),
    the code ``fn`` reaches, ``data_files`` and ``version``. ``ContentInputs`` keys tasks
    with it; a result kept outside Prefect (the trained sentiment model) uses it directly."""
    name = name or fn.__name__
    hints = type_hints(fn)
    unknown = sorted(set(exclude) - set(inputs) - set(hints))
    if unknown:
        raise TypeError(f"task `{name}`: exclude names no parameter: {unknown}")
    offline = bool(inputs.get("offline", True))
    arguments = {}
    for arg in sorted(inputs):
        if arg in exclude:
            continue
        annotation = hints.get(arg)
        value = inputs[arg]
        try:
            arguments[arg] = canonical(value, as_path=Path in _annotation_types(annotation))
        except Unhashable as exc:
            raise TypeError(
                f"task `{name}`: cannot key the cache on argument `{arg}` ({exc}); "
                f"fix: give its type a cache_token() method returning what determines "
                f"it, or leave it out with cached task(exclude=('{arg}',))") from None
        ref = _model_ref(annotation)
        if ref is not None and value is not None:
            arguments[f"{arg} revision"] = ref.revision(value, offline)
    key = {"task": f"{fn.__module__}.{fn.__qualname__}", "version": version,
           "code": code_digest(code_reach(fn, code_root, packages), code_root),
           "data_files": [hash_path(p) for p in data_files], "arguments": arguments}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def task(fn: Callable | None = None, *, exclude: tuple[str, ...] = (), version: str = "1",
         data_files: tuple[str | os.PathLike, ...] = (), **kwargs: Any):
    """Prefect's ``@task`` with ``ContentInputs(exclude, version, data_files)`` and persisted
    results as defaults; ``cache_policy=NO_CACHE`` (or any other policy) replaces them."""
    if "cache_policy" not in kwargs:
        kwargs["cache_policy"] = ContentInputs(exclude=tuple(exclude), version=version,
                                               data_files=tuple(map(str, data_files)))
        kwargs.setdefault("persist_result", True)
    elif exclude or data_files or version != "1":
        raise TypeError("task(): exclude, version and data_files configure the default "
                        "policy; they do not apply with an explicit cache_policy")
    return prefect_task(fn, **kwargs) if fn is not None else prefect_task(**kwargs)

