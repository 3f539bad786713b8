"""lingtest from Python: test a model — a spec or a live object — in a notebook or a script.

    import lingtest
    result = lingtest.test(my_pipeline, methods=["capabilities"], profile="quick")
    result.failures("capabilities", capability="LC4")

``test`` runs what ``lingtest test`` runs (the command line calls it), ``run`` one pipeline
stage as ``lingtest run``, ``load`` reads a finished run back. docs/python-api.md walks
through it.
"""
from pathlib import Path as _Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lingtest.api import load, run, test
    from lingtest.result import TestResult

__all__ = ["TestResult", "load", "run", "test"]

# In a source checkout the folders tasks/ and flows/ beside this package are lingtest.tasks
# and lingtest.flows (pyproject.toml's package-dir; an installed wheel holds them inside it),
# so a copy of the project run from its own folder imports its own code.
_CHECKOUT = _Path(__file__).resolve().parent.parent
if not (_Path(__file__).parent / "tasks").exists() and all(
        (_CHECKOUT / folder / "__init__.py").is_file() for folder in ("tasks", "flows")):
    __path__.append(str(_CHECKOUT))


def __getattr__(name: str):
    """The API on first use: every module of the package imports this one (a stage's task
    in a Dask worker too), and none of them needs the API; a task's cache key then does not
    change with it."""
    if name in ("test", "run", "load"):
        from lingtest import api

        return getattr(api, name)
    if name == "TestResult":
        from lingtest.result import TestResult

        return TestResult
    raise AttributeError(f"module 'lingtest' has no attribute {name!r}")
