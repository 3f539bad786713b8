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
import re
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:  # the readers below serve `lingtest params` too: no pandas import there
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


# ------------------------------------------------------------------ reading users' files
# Every file a user names (a suite, a dictionary, questions, a tree, a CSV of responses, a
# parameter file) is read through these: a named pipe, a device such as /dev/zero or a folder
# is refused by its type before it is opened (a read would hang, or never end), a file above
# the size limit is refused naming the limit and how to raise it, and JSON/YAML nested too
# deep for Python's parser or holding a number it cannot convert is one error naming the file.

MAX_INPUT_ENV = "LINGTEST_MAX_INPUT_MB"
DEFAULT_MAX_INPUT_MB = 256

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def max_input_bytes() -> int:
    """The size limit of one input file: ``$LINGTEST_MAX_INPUT_MB`` MB (default 256)."""
    from lingtest.tasks.core.errors import LingtestError

    raw = os.environ.get(MAX_INPUT_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_INPUT_MB << 20
    try:
        megabytes = float(raw)
        if not 0 < megabytes < 1 << 30:
            raise ValueError
    except ValueError:
        raise LingtestError(f"{MAX_INPUT_ENV}={raw!r}: expected a number of megabytes > 0 "
                            f"(default {DEFAULT_MAX_INPUT_MB})") from None
    return int(megabytes * (1 << 20))


def check_input_file(path: str | os.PathLike, fix: str = "") -> Path:
    """``path`` when it is a regular file within the size limit; otherwise one
    InputFormatError naming the file, what it is, and the fix (``fix``: what the file
    should be). Symlinks are followed (a link to /dev/zero is a device)."""
    from lingtest.tasks.core.errors import InputFormatError

    path = Path(path)
    try:
        mode = os.stat(path)
    except FileNotFoundError:
        raise InputFormatError(path, None, "no such file",
                               fix or "check the path (relative paths start at the project "
                               "root)") from None
    except OSError as exc:
        raise InputFormatError(path, None, f"cannot read it ({exc.strerror})",
                               fix or "check the path and its permissions") from None
    for test, kind in _KINDS:
        if test(mode.st_mode):
            raise InputFormatError(path, None, f"is {kind}, not a regular file",
                                   "give the path of the file itself" +
                                   (f"; {fix}" if fix else ""))
    limit = max_input_bytes()
    if mode.st_size > limit:
        raise InputFormatError(path, None, f"is {mode.st_size / (1 << 20):.3g} MB, above the "
                               f"{limit / (1 << 20):.3g} MB limit for an input file",
                               f"give a smaller file, or raise the limit with "
                               f"{MAX_INPUT_ENV}=<MB>")
    return path


def read_input_bytes(path: str | os.PathLike, fix: str = "") -> bytes:
    """A user's file, whole: regular, within the size limit (``check_input_file``)."""
    path = check_input_file(path, fix)
    limit = max_input_bytes()
    with open(path, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew after the check
        check_input_file(path, fix)
    return data


def read_input_text(path: str | os.PathLike, fix: str = "save the file as UTF-8") -> str:
    """A user's text file; bytes that are not UTF-8 are an error naming the line."""
    from lingtest.tasks.core.errors import InputFormatError

    data = read_input_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputFormatError(path, line, f"not UTF-8 text (byte {data[exc.start]:#04x})",
                               fix) from None


def parse_json(text: str, path: str | os.PathLike, fix: str = "", line: int | None = None):
    """``text`` (a file's, or its JSONL line ``line``) decoded; malformed JSON, nesting
    deeper than Python's parser reaches and numbers it cannot convert are one
    InputFormatError naming the file and line."""
    from lingtest.tasks.core.errors import InputFormatError

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        where = line if line is not None else exc.lineno
        column = f" (column {exc.colno})" if line is None else ""
        raise InputFormatError(path, where, f"not valid JSON: {exc.msg}{column}", fix) from None
    except RecursionError:
        problem = (f"JSON nested deeper than Python's parser reaches (about "
                   f"{sys.getrecursionlimit()} levels)")
    except (ValueError, OverflowError) as exc:  # an integer beyond Python's digit limit
        limit = sys.get_int_max_str_digits() if "digits" in str(exc) else None
        problem = (f"an integer of more than {limit:,} digits, beyond Python's limit"
                   if limit else f"a number JSON cannot hold ({str(exc)[:80]})")
    raise InputFormatError(path, line, problem, fix)


def read_input_json(path: str | os.PathLike, fix: str = ""):
    """A user's JSON file, decoded (``read_input_text`` then ``parse_json``)."""
    return parse_json(read_input_text(path, fix or "save the file as UTF-8"), path, fix)


def check_output_folder(target: Path, what: str, root: Path | None = None) -> None:
    """The folder of a file about to be written exists, or lies inside the project (``root``),
    where lingtest makes the folders it needs; elsewhere a missing folder is likelier a typo
    than a wish, so it is one error instead of a silent ``mkdir -p``."""
    from lingtest.tasks.core.errors import LingtestError

    parent = Path(os.path.abspath(target)).parent
    if parent.is_dir():
        return
    if parent.exists():
        raise LingtestError(f"{what}: {parent} is not a folder; fix: a path in a folder")
    if root is not None and parent.is_relative_to(Path(os.path.abspath(root))):
        return
    raise LingtestError(f"{what}: the folder {parent} does not exist; fix: mkdir -p {parent} "
                        "first, or write inside the project")


def unwritable(folder: Path) -> str | None:
    """Why files cannot be made in ``folder`` (made first when missing), or None: tried with
    a temporary file in the nearest folder that exists (permissions alone miss /proc, a
    read-only mount, or a root who may write anywhere else). Nothing is left behind."""
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        return f"{existing} is not a folder"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        return f"{existing} is not writable ({exc.strerror or exc})"
    return None


def _unique_key_loader():
    """``yaml.SafeLoader`` refusing a key written twice in one mapping (PyYAML keeps the
    last silently: a duplicated setting would quietly win or lose)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_yaml_int(self, node):
            """YAML 1.1 reads ``010`` as 8 and ``1:30`` as 90; both are refused."""
            text = str(self.construct_scalar(node)).replace("_", "")
            if re.fullmatch(r"[-+]?0[0-7]+", text) or ":" in text:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{text} would be read as a base-8 or base-60 number; write "
                    "it in decimal without leading zeros, or quote it as text", node.start_mark)
            return super().construct_yaml_int(node)

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: the base class names it
                    break
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark,
                        f"the key {key!r} appears twice (keep one)", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)

    UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", UniqueKeyLoader.construct_yaml_int)
    return UniqueKeyLoader


def load_yaml_value(text: str):
    """One YAML value (a ``--set`` right-hand side) as parameter files are read."""
    import yaml

    return yaml.load(text, Loader=_unique_key_loader())


def parse_yaml(text: str, path: str | os.PathLike, fix: str = "", load=None):
    """``text`` through ``load`` (a safe load refusing duplicate keys; ``yaml.compose`` for
    the nodes); a syntax error or a repeated key names the line, nesting beyond Python's
    parser is one error too."""
    import yaml

    from lingtest.tasks.core.errors import InputFormatError

    try:
        return (load or (lambda t: yaml.load(t, Loader=_unique_key_loader())))(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputFormatError(path, mark.line + 1 if mark else None,
                               f"not valid YAML: {problem}", fix) from None
    except RecursionError:
        raise InputFormatError(path, None, "YAML nested deeper than Python's parser reaches "
                               f"(about {sys.getrecursionlimit()} levels)",
                               "nest it less deeply") from None
