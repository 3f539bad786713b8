"""lingtest from Python: test a model — a spec or a live object — in a notebook or a script.

    import lingtest
    result = lingtest.test(my_pipeline, methods=["capabilities"], profile="quick")
    result.failures("capabilities", capability="LC4")

``test`` runs what ``lingtest test`` runs (the command line calls it), ``run`` one pipeline
stage as ``lingtest run``, ``load`` reads a finished run back. docs/python-api.md walks
through it.
"""
from lingtest.api import load, run, test

__all__ = ["TestResult", "load", "run", "test"]


def __getattr__(name: str):
    """``TestResult`` on first use: ``lingtest run``, a stage's command, imports this package
    and needs none of the result's DataFrames."""
    if name == "TestResult":
        from lingtest.result import TestResult

        return TestResult
    raise AttributeError(f"module 'lingtest' has no attribute {name!r}")
