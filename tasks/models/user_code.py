"""Models written as Python code (``python:MODULE:ATTR``, ``python:path/file.py:ATTR``).

A user's lexicon scorer, sklearn pipeline, spaCy text classifier or REST client takes part in
every method through a small protocol (classifier: ``predict_proba``; encoder: ``encode``;
LLM or generator: ``generate``) instead of a subclass of lingtest's own classes. This module
finds the object and names its **revision**: the sha256 of the module file's bytes (or what
the module's ``__lingtest_revision__`` states: a live object's pickled state) plus the
object's optional ``revision`` attribute, so editing the module is a cache miss while an
unchanged one is a hit. A file is imported under a name that carries its content hash, so a
process that imports an edited file gets the new code; every loading process (a Dask worker
included) imports it itself, so nothing of the user's is pickled between processes.
"""
from __future__ import annotations

import hashlib
import importlib
import sys
import threading
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.models.model_spec import ModelRef

_IMPORT_LOCK = threading.Lock()
_IMPORTED: dict[str, bytes] = {}  # module name → the source bytes it was imported from


@dataclass(frozen=True)
class UserObject:
    """The object a ``python:`` spec names (a class is instantiated), and its provenance."""

    ref: ModelRef
    obj: Any
    revision: str
    file: str | None
    module: Any = None  # where ATTR was found: module-level settings (e.g. ``labels``)

    def fail(self, what: str) -> LingtestError:
        return LingtestError(f"model `{self.ref.name}` ({self.ref.bare}): {what}")


def module_file(ref: ModelRef, root: Path | None) -> Path | None:
    """The file a file-form spec names (relative: under ``root``), or None for a module name."""
    module = ref.module_and_attr[0]
    if not ref.is_file_module:
        return None
    path = Path(module).expanduser()
    return path if path.is_absolute() or root is None else root / path


def _import_file(ref: ModelRef, path: Path) -> tuple[Any, bytes]:
    from lingtest.tasks.core.io import read_input_bytes

    if not path.exists():
        raise LingtestError(f"model `{ref.bare}`: {path} does not exist; fix: the path of a "
                            f".py file (relative paths start at the project root)")
    source = read_input_bytes(path, "the path of a .py file")
    name = f"lingtest_user_{hashlib.sha256(str(path.resolve()).encode() + source).hexdigest()[:16]}"
    with _IMPORT_LOCK:
        if name in sys.modules:
            return sys.modules[name], source
        # compiled from the bytes just hashed (no race with an edit, no __pycache__ written
        # beside the user's file)
        module = types.ModuleType(name)
        module.__file__ = str(path)
        sys.modules[name] = module
        try:
            exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - the user's model
        except (Exception, SystemExit) as exc:  # the user's code: any error, or an exit
            del sys.modules[name]
            raise LingtestError(f"model `{ref.bare}`: importing {path} failed: "
                                f"{type(exc).__name__}: {exc}") from exc
    return module, source


def _import_module(ref: ModelRef, module_name: str, root: Path | None) -> tuple[Any, bytes]:
    if root is not None and str(root) not in sys.path:
        sys.path.append(str(root))
    try:
        with _IMPORT_LOCK:
            module = importlib.import_module(module_name)
            source = _source(module)
            if _IMPORTED.setdefault(module_name, source) != source:  # edited since imported
                module = importlib.reload(module)  # a long-lived worker runs the new code
                _IMPORTED[module_name] = source
    except (Exception, SystemExit) as exc:  # an exit at import is the module's error too
        raise LingtestError(f"model `{ref.bare}`: cannot import module `{module_name}` "
                            f"({type(exc).__name__}: {exc}); fix: install it, or name its file "
                            f"as python:path/to/file.py:ATTR") from exc
    return module, source


def _source(module: Any) -> bytes:
    file = getattr(module, "__file__", None)
    return Path(file).read_bytes() if file and Path(file).is_file() else b""


def load_user_object(ref: ModelRef, root: Path | None = None,
                     instantiate: bool = True) -> UserObject:
    """Import the spec's module, take ATTR (a dotted path inside it) and instantiate it when
    it is a class (with no arguments; ``instantiate=False``: a check that must not run an
    ``__init__`` that may load weights)."""
    if ref.form != "python":
        raise LingtestError(f"model `{ref.spec}` is not a python: spec")
    module_name, attr = ref.module_and_attr
    path = module_file(ref, root)
    module, source = (_import_file(ref, path) if path is not None
                      else _import_module(ref, module_name, root))
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in vars(module) if not n.startswith("_"))[:12]
            raise LingtestError(f"model `{ref.bare}`: `{module_name}` has no attribute "
                                f"`{attr}`; it defines: {', '.join(public) or 'nothing'}; "
                                f"fix: name one of them after the last `:`")
        obj = getattr(obj, part)
    if isinstance(obj, type) and instantiate:
        try:
            obj = obj()
        except Exception as exc:
            raise LingtestError(f"model `{ref.bare}`: `{attr}()` failed: "
                                f"{type(exc).__name__}: {exc} (a class is instantiated with "
                                f"no arguments; give an instance or a function instead)") from exc
    revision = f"python@sha256:{hashlib.sha256(source).hexdigest()[:16]}"
    # a live object's module (lingtest.live) states what identifies the object itself
    revision = getattr(module, "__lingtest_revision__", revision)
    own = getattr(obj, "revision", None)
    if own is not None and not callable(own) and not isinstance(own, property):
        revision += f"+{own}"
    return UserObject(ref, obj, revision, str(path) if path is not None else module_name,
                      module)


def batch_protocol(user: UserObject, method: str) -> bool:
    """Whether the object is called with a whole list (``obj.method(items)``): it has the
    method, or it is a function *named* after it (``python:llm.py:generate``). Any other
    function is called per item (an LLM's ``prompt -> str``)."""
    attr = user.ref.module_and_attr[1].rsplit(".", 1)[-1]
    return callable(getattr(user.obj, method, None)) or (attr == method and callable(user.obj))


def protocol_method(user: UserObject, method: str) -> Any:
    """``obj.method`` when the object has it, else the object itself when it is callable."""
    fn = getattr(user.obj, method, None)
    if callable(fn):
        return fn
    if callable(user.obj):
        return user.obj
    raise user.fail(f"{type(user.obj).__name__} has no `{method}` method and is not callable; "
                    f"fix: give a function, or an object with {method}(texts)")
