"""Reading the files parameters name, for the checks before a run: a parameter's path as the
flows resolve it, and a reader's errors as one line naming the parameter.

Each plug-in's ``check`` (``tasks/<method>/checks.py``) uses these; ``lingtest.flows.validation``
runs the checks of a stage before Prefect starts, so bad input costs one line and no
written output. They read with the same readers the flows use, so the checks cannot drift.
"""
from __future__ import annotations

from pathlib import Path

from lingtest.tasks.core.errors import LingtestError


def param_path(value: str, root: Path) -> Path:
    """A parameter's path: as given when absolute (``~`` expanded), else under the root."""
    given = Path(value).expanduser()
    return given if given.is_absolute() else root / given


def keyed(key: str, error: LingtestError) -> LingtestError:
    """The reader's message, prefixed by the parameter that named the file."""
    return LingtestError(f"{key}: {error}")


def read_param_file(key: str, reader, path: Path):
    """``reader(path)``; its errors as one line naming ``key``."""
    if not path.exists():
        raise LingtestError(f"{key}: {path} does not exist (fix the path in params.yaml or "
                            f"--set {key}=...; relative paths start at the project root)")
    try:
        return reader(path)
    except LingtestError as error:
        raise (error if str(error).startswith(key) else keyed(key, error)) from None
    except UnicodeDecodeError as exc:
        from lingtest.tasks.core.errors import read_utf8
        if path.is_file():  # name the line when the whole file is the culprit
            try:
                read_utf8(path)
            except LingtestError as error:
                raise keyed(key, error) from None
        raise LingtestError(f"{key}: {path}: not UTF-8 text ({exc})") from None
    except RecursionError:  # a reader's own parsing, nested beyond Python's stack
        raise LingtestError(f"{key}: {path}: nested deeper than Python's parser reaches; fix: "
                            "a flatter file") from None
    except (OSError, ValueError, OverflowError) as exc:  # a reader's unforeseen case
        raise LingtestError(f"{key}: {path}: cannot read it ({type(exc).__name__}: "
                            f"{exc})") from None
