"""Live Python objects (a fitted scikit-learn pipeline, a ``transformers.pipeline``, a
function) as ``python:`` models, so they take the same route as a model written in a file:
the same kind inference, checks, caching and provenance.

Why a file: every method loads its models from specs, in its own process on a Dask worker as
on a thread. An object is pickled (cloudpickle: a class or lambda defined in a notebook
travels by value) into ``runs/.objects/<name>.pkl`` beside a two-line module
``<name>.py`` that unpickles it and states a digest of its state; the spec is
``python:runs/.objects/<name>.py:model#name=<name>``. The module's bytes change exactly
when the state does, so an unchanged object is a cache hit and a refitted one a miss (an
equal refit, in this process or another, a hit), and the revision says ``object@sha1:…``
(its state, ``state_revision``). An object that cannot be pickled stays
in this process (``registered``); its revision is then the sha256 of its class's or
function's source (``object-source@sha256:…``), and the run goes on threads, since a Dask
worker could not reach it.
"""
from __future__ import annotations

import hashlib
import inspect
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lingtest.flows.own_plan import RUNS
from lingtest.tasks.core import io
from lingtest.tasks.core.errors import LingtestError

OBJECTS = Path(RUNS) / ".objects"  # under the project root; runs/ is git-ignored
_IN_PROCESS: dict[str, Any] = {}  # key → an object that could not be pickled
_LOCK = threading.Lock()


@dataclass(frozen=True)
class LiveModel:
    """A live object as the spec lingtest runs, and what its revision was taken from."""

    name: str
    spec: str
    revision: str
    pickled: bool
    why_not: str = ""  # why it could not be pickled (it runs on threads)


def registered(key: str) -> Any:
    """The unpicklable object registered under ``key`` in this process (its module's
    ``model``); elsewhere (a Dask worker, a later kernel) one error saying why."""
    try:
        return _IN_PROCESS[key]
    except KeyError:
        raise LingtestError(f"the live object {key} lives in the Python process that called "
                            "lingtest.test and could not be pickled, so this process cannot "
                            "reach it; fix: run on threads (runtime.task_runner=threads), "
                            "or make the object picklable") from None


def display_name(obj: Any) -> str:
    """A name for an object the user did not name: a transformers pipeline's model, a
    scikit-learn pipeline's steps, a function's or class's name."""
    model = getattr(obj, "model", None)
    hub = getattr(getattr(model, "config", None), "_name_or_path", None)
    steps = getattr(obj, "steps", None)
    if isinstance(hub, str) and hub:
        name = Path(hub).name
    elif isinstance(steps, list) and all(isinstance(s, tuple) and s for s in steps):
        name = "-".join(str(step[0]) for step in steps)
    elif inspect.isfunction(obj) or inspect.ismethod(obj):
        name = obj.__name__
    else:
        name = type(obj).__name__
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.").lower() or "model"


def as_spec(obj: Any, name: str, root: Path) -> LiveModel:
    """Write ``obj`` (adapted: ``lingtest.adapters``) as a python: model named ``name``
    under ``root``'s ``runs/.objects`` and return its spec."""
    import cloudpickle

    from lingtest.adapters import adapt

    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        raise LingtestError(f"lingtest.test: model name {name!r}: letters, digits, '_', '.' "
                            "and '-' only (it names files and report rows)")
    obj = adapt(obj)
    folder = root / OBJECTS
    try:
        state = cloudpickle.dumps(obj)
    except Exception as exc:  # any object's own __reduce__ may raise anything
        return _in_process(obj, name, folder, f"{type(exc).__name__}: {exc}")
    pickle_file = folder / f"{name}.pkl"
    if not pickle_file.is_file() or pickle_file.read_bytes() != state:
        with io.atomic_path(pickle_file) as staged:
            staged.write_bytes(state)
    revision = state_revision(obj, state)
    _write_module(folder / f"{name}.py", name, obj, revision,
                  "import pickle\nfrom pathlib import Path\n\n"
                  f"model = pickle.loads(Path(__file__).with_name({pickle_file.name!r})"
                  ".read_bytes())\n")
    return LiveModel(name, _spec(name), revision, pickled=True)


# State entries that hold a memory address, so differ in every process for an equal object:
# scikit-learn's text vectorizers keep ``id(self.stop_words)`` to notice a changed list.
ADDRESS_ATTRIBUTES = frozenset({"_stop_words_id"})


def state_revision(obj: Any, state: bytes) -> str:
    """The object's revision from its state: joblib's hash where it can take the object (it
    pickles sets and dicts in sorted order, which a plain pickle does not), leaving out
    ``ADDRESS_ATTRIBUTES``, so an equal object refitted in another process has the same
    revision; else the sha256 of the cloudpickled ``state`` (a lambda, a notebook's class)."""
    try:
        return f"object@sha1:{_state_hasher().hash(obj)[:16]}"
    except Exception:  # pickle's by-reference rule: what only cloudpickle can take
        return f"object@sha256:{hashlib.sha256(state).hexdigest()[:16]}"


def _state_hasher():
    """joblib's numpy-aware hasher, blind to ``ADDRESS_ATTRIBUTES`` in an object's state."""
    from joblib.hashing import NumpyHasher

    class StateHasher(NumpyHasher):
        def save_reduce(self, func, args, state=None, *rest, **kwargs):
            if isinstance(state, dict) and not ADDRESS_ATTRIBUTES.isdisjoint(state):
                state = {k: v for k, v in state.items() if k not in ADDRESS_ATTRIBUTES}
            return super().save_reduce(func, args, state, *rest, **kwargs)

    return StateHasher(hash_name="sha1")


def _in_process(obj: Any, name: str, folder: Path, why: str) -> LiveModel:
    source = _source_digest(obj)
    revision = f"object-source@sha256:{source[:16]}"
    key = f"{name}@{source[:16]}"
    with _LOCK:
        _IN_PROCESS[key] = obj
    _write_module(folder / f"{name}.py", name, obj, revision,
                  f"from lingtest.live import registered\n\nmodel = registered({key!r})\n")
    return LiveModel(name, _spec(name), revision, pickled=False, why_not=why)


def _source_digest(obj: Any) -> str:
    """sha256 of the source of the object's function or class: what identifies an object
    whose state cannot be pickled. An object without findable source is refused: it would
    have no revision, so a changed object could be taken for the cached one."""
    target = obj if inspect.isfunction(obj) or inspect.ismethod(obj) else type(obj)
    try:
        source = inspect.getsource(target)
    except (OSError, TypeError) as exc:
        raise LingtestError(f"lingtest.test: {type(obj).__name__} can neither be pickled nor "
                            f"its source found ({exc}), so it has no revision to cache its "
                            "answers under; fix: make it picklable, or put it in a .py file "
                            "and name it as python:file.py:ATTR") from None
    return hashlib.sha256(source.encode()).hexdigest()


def _write_module(path: Path, name: str, obj: Any, revision: str, body: str) -> None:
    text = (f'"""lingtest.test\'s live object `{name}` ({type(obj).__module__}.'
            f'{type(obj).__qualname__}): written for each call, read by every process that '
            f'loads it."""\n__lingtest_revision__ = {revision!r}\n{body}')
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        io.write_text(path, text)


def _spec(name: str) -> str:
    return f"python:{(OBJECTS / name).as_posix()}.py:model#name={name}"
