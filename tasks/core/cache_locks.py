"""Where the cache-key locks live: beside the running flow's task results, so every worker
that reaches the result storage takes the same lock (``tasks.core.caching``'s policy holds a
key under SERIALIZABLE isolation with these locks)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect.locking.filesystem import FileSystemLockManager


def _local_folder(storage: Any) -> Path | None:
    """The folder of a Prefect result storage block on a file system, else None (a URL)."""
    from prefect.filesystems import LocalFileSystem

    if isinstance(storage, LocalFileSystem) and storage.basepath:
        return Path(storage.basepath.removeprefix("file://"))
    return None


def lock_folder() -> Path:
    """``cache-locks`` in the running flow's result storage when it is a folder
    (``runtime.result_storage``, reached by every worker), else in Prefect's local result
    folder (``.prefect/storage``: ``tasks.core.runtime``), which holds on one machine only."""
    from prefect.context import FlowRunContext, TaskRunContext
    from prefect.settings import get_current_settings

    for context in (TaskRunContext.get(), FlowRunContext.get()):
        store = getattr(context, "result_store", None)
        folder = _local_folder(getattr(store, "result_storage", None))
        if folder is not None:
            return folder / "cache-locks"
    return Path(get_current_settings().results.local_storage_path) / "cache-locks"


class ResultStorageLocks(FileSystemLockManager):
    """Prefect's file locks, in the folder ``lock_folder`` gives when a lock is taken: tasks
    travel pickled to Dask workers, where a folder fixed at import would be the submitter's."""

    def __init__(self) -> None:
        self._locks = {}

    @property
    def lock_files_directory(self) -> Path:
        return lock_folder().expanduser().resolve()
