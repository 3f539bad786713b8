"""A run asked to stop (SIGTERM from a service manager, `kill`, a scheduler; Ctrl-C) stops
sending work: the loops that send prompts to a model check ``check()`` before each prompt or
batch, so a paid API is not asked the rest of a stage's prompts after the signal, while the
answers in flight are still stored. The flow (the composition layer) calls ``request()`` when
Prefect turns the signal into an exception in the flow's thread; without it, Prefect's
shutdown waits for the task threads, which would send every remaining prompt first.

Only the flow's process is told; Dask worker processes are stopped by their nanny."""
from __future__ import annotations

import logging
import threading

from lingtest.tasks.core.errors import LingtestError

_STOP = threading.Event()
log = logging.getLogger("lingtest")


class Stopped(LingtestError):
    """Raised by a sending loop once a stop was requested."""


def request(reason: str) -> None:
    """Ask every sending loop of this process to stop at its next check."""
    if not _STOP.is_set():
        _STOP.set()
        log.warning("%s: no further prompts are sent; answers in flight are stored", reason)


def requested() -> bool:
    return _STOP.is_set()


def check(what: str) -> None:
    """Raise ``Stopped`` naming what was left unsent, once a stop was requested."""
    if _STOP.is_set():
        raise Stopped(f"stopped by a signal before {what}; what was answered is stored, a "
                      f"rerun sends the rest")
