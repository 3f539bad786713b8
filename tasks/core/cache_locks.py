"""Where the cache-key locks live, and how a lock left by a dead run is broken.

The locks live beside the running flow's task results, so every worker that reaches the
result storage takes the same lock (``lingtest.tasks.core.caching``'s policy holds a key under
SERIALIZABLE isolation with these locks).

Prefect's ``FileSystemLockManager`` writes ``{"holder": <uuid>, "expiration": null}``: a run
killed while holding a key (SIGTERM, kill -9) leaves a lock no one releases, and the next run
waits on it forever, silently. Here a lock also names its owner (host, pid and the process's
start time, so a reused pid is not taken for the holder): a lock whose owner on this host is
gone is removed at once, one whose owner is on another host once its file has not been
refreshed for ``REMOTE_STALE_S`` (a holder refreshes its locks every ``HEARTBEAT_S``), and a
lock without an owner (an older lingtest, or plain Prefect) once it is ``REMOTE_STALE_S``
old. A run that waits on a live lock says so once, naming the lock file and its holder.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import anyio
from prefect.locking.filesystem import FileSystemLockManager
from prefect.logging.loggers import get_logger

HEARTBEAT_S = 30.0  # a holder refreshes its lock files this often ...
REMOTE_STALE_S = 600.0  # ... so one unrefreshed this long (other host, or no owner) is stale
WAIT_NOTICE_S = 1.0  # a wait longer than this is announced (and again every 5 minutes)
_HOST = socket.gethostname()

logger = get_logger("lingtest.cache_locks")


def _local_folder(storage: Any) -> Path | None:
    """The folder of a Prefect result storage block on a file system, else None (a URL)."""
    from prefect.filesystems import LocalFileSystem

    if isinstance(storage, LocalFileSystem) and storage.basepath:
        return Path(storage.basepath.removeprefix("file://"))
    return None


def lock_folder() -> Path:
    """``cache-locks`` in the running flow's result storage when it is a folder
    (``runtime.result_storage``, reached by every worker), else in Prefect's local result
    folder (``.prefect/storage``: ``lingtest.tasks.core.runtime``), which holds on one machine only."""
    from prefect.context import FlowRunContext, TaskRunContext
    from prefect.settings import get_current_settings

    for context in (TaskRunContext.get(), FlowRunContext.get()):
        store = getattr(context, "result_store", None)
        folder = _local_folder(getattr(store, "result_storage", None))
        if folder is not None:
            return folder / "cache-locks"
    return Path(get_current_settings().results.local_storage_path) / "cache-locks"


# --------------------------------------------------------------------------- owners

def _start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch); None when there is none."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return None
    except psutil.AccessDenied:  # alive, but not ours to inspect
        return -1.0


def _owner() -> dict[str, Any]:
    return {"host": _HOST, "pid": os.getpid(), "started": _start_time(os.getpid())}


def _owner_alive(owner: dict[str, Any]) -> bool:
    """Whether the process that took a lock on this host still runs (same pid, same start)."""
    started = _start_time(int(owner.get("pid", -1)))
    if started is None:
        return False
    recorded = owner.get("started")
    return started < 0 or recorded is None or abs(started - float(recorded)) < 1.0


def describe(info: dict[str, Any]) -> str:
    """Who holds a lock, for the messages."""
    owner = info.get("owner") or {}
    if not owner:
        return (f"a holder that does not name itself (an older lingtest or plain Prefect; "
                f"removed once {REMOTE_STALE_S / 60:.0f} min old)")
    started = float(owner.get("started") or 0)
    since = (f", started {dt.datetime.fromtimestamp(started, dt.timezone.utc):%Y-%m-%d %H:%M:%S}"
             f" UTC" if started > 0 else "")
    where = "" if owner.get("host") == _HOST else (
        f"; another machine: removed once not refreshed for {REMOTE_STALE_S / 60:.0f} min")
    return f"pid {owner.get('pid')} on host {owner.get('host')}{since}{where}"


# --------------------------------------------------------------------------- heartbeat

_held: set[Path] = set()
_held_guard = threading.Lock()
_beating: threading.Thread | None = None


def _beat() -> None:
    while True:
        time.sleep(HEARTBEAT_S)
        with _held_guard:
            paths = list(_held)
        for path in paths:
            with contextlib.suppress(OSError):
                os.utime(path)


def _hold(path: Path) -> None:
    """Keep ``path`` fresh while this process holds it (other hosts read its age)."""
    global _beating
    with _held_guard:
        _held.add(path)
        if _beating is None or not _beating.is_alive():
            _beating = threading.Thread(target=_beat, name="lingtest-lock-heartbeat",
                                        daemon=True)
            _beating.start()


def _drop(path: Path) -> None:
    with _held_guard:
        _held.discard(path)


@contextlib.contextmanager
def _breaking(folder: Path) -> Iterator[None]:
    """Serialise breakers: re-reading and removing a stale lock is one step, so a lock
    taken right after a break is never removed by a second breaker."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no guard
        yield
        return
    with open(folder / ".break.guard", "a+b") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(guard, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- the manager

class ResultStorageLocks(FileSystemLockManager):
    """Prefect's file locks, in the folder ``lock_folder`` gives when a lock is taken: tasks
    travel pickled to Dask workers, where a folder fixed at import would be the submitter's.
    Each lock names its owner; a dead owner's lock is broken (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike | None = None) -> None:
        self._locks = {}
        self._folder = Path(folder) if folder is not None else None

    @property
    def lock_files_directory(self) -> Path:
        return (self._folder or lock_folder()).expanduser().resolve()

    def _lock_path_for_key(self, key: str) -> Path:
        return self.lock_files_directory.joinpath(key).with_suffix(".lock")

    # ---- reading

    def _read(self, key: str) -> dict[str, Any] | None:
        """The lock file's record, ``{}`` when it cannot be read, None when there is none."""
        path = self._lock_path_for_key(key)
        try:
            raw = path.read_bytes()
            stamp = path.stat().st_mtime
        except FileNotFoundError:
            return None
        try:
            info = json.loads(raw)
            info = info if isinstance(info, dict) else {}
        except ValueError:
            info = {}
        info["path"], info["mtime"] = path, stamp
        return info

    def _stale(self, info: dict[str, Any]) -> str | None:
        """Why the lock ``info`` no longer holds, or None while it does."""
        expiration = info.get("expiration")
        if expiration:
            with contextlib.suppress(ValueError, TypeError):
                when = dt.datetime.fromisoformat(str(expiration))
                if when.tzinfo is None:
                    when = when.replace(tzinfo=dt.timezone.utc)
                if when < dt.datetime.now(dt.timezone.utc):
                    return "its expiration passed"
        owner = info.get("owner") or {}
        age = time.time() - info["mtime"]
        if owner.get("host") == _HOST:
            return None if _owner_alive(owner) else "its holder no longer runs"
        if age > REMOTE_STALE_S:
            return f"it was not refreshed for {age / 60:.0f} min"
        return None

    def _get_lock_info(self, key: str, use_cache: bool = True) -> dict[str, Any] | None:
        info = self._read(key)
        if info is None or self._stale(info):
            return None
        self._locks[key] = info
        return info

    async def _aget_lock_info(self, key: str, use_cache: bool = True) -> dict[str, Any] | None:
        return self._get_lock_info(key, use_cache)

    def is_locked(self, key: str, use_cache: bool = False) -> bool:
        info = self._read(key)
        if info is None:
            return False
        reason = self._stale(info)
        if reason is None:
            return True
        self._break(key, info, reason)
        return False

    def is_lock_holder(self, key: str, holder: str) -> bool:
        info = self._get_lock_info(key)
        return info is not None and info.get("holder") == holder

    def _break(self, key: str, info: dict[str, Any], reason: str) -> None:
        """Remove a stale lock, unless it changed hands since it was read."""
        path = info["path"]
        with _breaking(path.parent):
            current = self._read(key)
            if current is None or current.get("holder") != info.get("holder") \
                    or self._stale(current) is None:
                return
            path.unlink(missing_ok=True)
        self._locks.pop(key, None)
        logger.warning("cache lock %s: removed, %s (held by %s); the task runs here", path,
                       reason, describe(info))

    # ---- taking and releasing

    def acquire_lock(self, key: str, holder: str, acquire_timeout: float | None = None,
                     hold_timeout: float | None = None) -> bool:
        """Take the lock (waiting up to ``acquire_timeout``); the file appears whole."""
        folder = self.lock_files_directory
        folder.mkdir(parents=True, exist_ok=True)
        path = self._lock_path_for_key(key)
        deadline = None if acquire_timeout is None else time.monotonic() + acquire_timeout
        expiration = (None if hold_timeout is None else
                      dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=hold_timeout))
        record = json.dumps({"holder": holder,
                             "expiration": expiration.isoformat() if expiration else None,
                             "owner": _owner()}).encode()
        draft = folder / f".{path.name}.{uuid.uuid4().hex}"
        draft.write_bytes(record)
        try:
            while True:
                try:
                    os.link(draft, path)  # atomic, and fails when the lock exists
                    break
                except FileExistsError:
                    if self.is_lock_holder(key, holder):
                        break
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    if not self.wait_for_lock(key, left):
                        return False
        finally:
            draft.unlink(missing_ok=True)
        self._locks[key] = {"holder": holder, "expiration": expiration, "path": path}
        _hold(path)
        return True

    async def aacquire_lock(self, key: str, holder: str, acquire_timeout: float | None = None,
                            hold_timeout: float | None = None) -> bool:
        return await anyio.to_thread.run_sync(
            lambda: self.acquire_lock(key, holder, acquire_timeout, hold_timeout))

    def release_lock(self, key: str, holder: str) -> None:
        path = self._lock_path_for_key(key)
        info = self._read(key)
        if info is None:
            raise ValueError(f"No lock for transaction with key {key}")
        if info.get("holder") != holder:
            raise ValueError(f"No lock held by {holder} for transaction with key {key}")
        path.unlink(missing_ok=True)
        self._locks.pop(key, None)
        _drop(path)

    # ---- waiting

    def wait_for_lock(self, key: str, timeout: float | None = None) -> bool:
        """Wait until the lock is free (or ``timeout`` passes); a wait longer than
        ``WAIT_NOTICE_S`` is announced once, naming the lock and its holder."""
        start = time.monotonic()
        told = None
        while self.is_locked(key):
            waited = time.monotonic() - start
            if timeout is not None and waited >= timeout:
                return False
            if waited >= WAIT_NOTICE_S and (told is None or waited - told >= 300):
                self._announce(key, waited)
                told = waited
            time.sleep(0.1)
        return True

    async def await_for_lock(self, key: str, timeout: float | None = None) -> bool:
        return await anyio.to_thread.run_sync(lambda: self.wait_for_lock(key, timeout))

    def _announce(self, key: str, waited: float) -> None:
        info = self._read(key)
        if info is None:
            return
        message = (f"waiting for cache lock {info['path']} ({waited:.0f} s so far): held by "
                   f"{describe(info)}, which is computing the same task; the lock goes when "
                   f"that run ends, and is removed if it dies (stop this run to give up)")
        from prefect.exceptions import MissingContextError
        from prefect.logging import get_run_logger

        try:
            get_run_logger().warning(message)
        except MissingContextError:
            logger.warning(message)
