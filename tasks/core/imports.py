"""The project-import graph: which project modules a module imports, transitively.

``tests/test_dvc_deps.py`` derives each DVC stage's code dependencies from it, and task cache
keys (``lingtest.tasks.core.caching``) hash the code a task can reach with it. Imports inside function
bodies count too (the CLI imports flows lazily), except in the CLI and the Python API, whose
commands are not part of a stage. Parsed files are memoised by (path, mtime, size).
"""
from __future__ import annotations

import ast
import threading
from functools import lru_cache
from pathlib import Path

from lingtest.tasks.core.paths import PACKAGE_ROOT

PROJECT_PACKAGES = ("lingtest",)
# modules whose lazy imports are not followed: the command line and the Python API, whose
# functions but one (``run``, a stage's command) are not part of a stage, and the package
# itself, which every module imports (its lazy attributes are the notebook's API)
TOP_LEVEL_ONLY = ("lingtest", "lingtest.flows.cli", "lingtest.api")
# The installed package's subpackages that live in the repository's top-level folders
# (pyproject.toml's package-dir): lingtest.tasks is tasks/, lingtest.flows is flows/.
FOLDERS = {"lingtest.tasks": "tasks", "lingtest.flows": "flows"}


_AST_LOCK = threading.Lock()


def parse_source(text: str) -> ast.Module:
    """``ast.parse`` one thread at a time: CPython 3.11 can raise a spurious "AST constructor
    recursion depth mismatch" SystemError when threads parse at once (python/cpython#106905);
    two tasks computing cache keys together then lost their keys and went unpersisted."""
    with _AST_LOCK:
        return ast.parse(text)


def module_file(module: str, root: Path = PACKAGE_ROOT) -> Path | None:
    """The source file of a dotted module name under ``root`` (module or package), if any."""
    parts = module.split(".")
    folder = FOLDERS.get(".".join(parts[:2]))
    base = Path(root).joinpath(*([folder] + parts[2:] if folder else parts))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=1024)
def _imported_names(path: str, mtime_ns: int, size: int, top_level_only: bool) -> frozenset[str]:
    tree = parse_source(Path(path).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body if top_level_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def project_modules(name: str, root: Path = PACKAGE_ROOT,
                    packages: tuple[str, ...] = PROJECT_PACKAGES) -> set[str]:
    """The project modules that importing ``name`` runs: a.b.c runs a and a.b too."""
    parts = name.split(".")
    if parts[0] not in packages:
        return set()
    return {".".join(parts[:end]) for end in range(1, len(parts) + 1)
            if module_file(".".join(parts[:end]), root)}


def imported(module: str, root: Path = PACKAGE_ROOT,
             packages: tuple[str, ...] = PROJECT_PACKAGES) -> set[str]:
    """Project modules ``module`` imports anywhere in its body, with their packages."""
    path = module_file(module, root)
    if path is None:
        return set()
    stat = path.stat()
    names = _imported_names(str(path), stat.st_mtime_ns, stat.st_size,
                            module in TOP_LEVEL_ONLY)
    found: set[str] = set()
    for name in names:
        found |= project_modules(name, root, packages)
    return found


def imported_closure(roots: list[str] | set[str], root: Path = PACKAGE_ROOT,
                     packages: tuple[str, ...] = PROJECT_PACKAGES) -> set[str]:
    """``roots`` and every project module they import, transitively."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(imported(module, root, packages) - seen)
    return seen
