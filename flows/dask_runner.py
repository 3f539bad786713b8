"""The Dask task runner of a run: prefect-dask's, with timeouts a busy machine meets and a
close that cannot fail a run whose flow has already finished."""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import dask.config
from distributed import Nanny
from prefect_dask import DaskTaskRunner

# A loaded machine (load ≈ 4 on 2 cores) delays every process: the scheduler's loop in the
# flow's process, the workers' heartbeats, the kernel tearing down a worker with a model in
# memory. Dask's defaults assume an idle host; on a busy one they remove live workers ("Received
# heartbeat from unregistered worker") and raise TimeoutError while the cluster closes.
BUSY_MACHINE = {
    "distributed.comm.timeouts.connect": "120s",  # default 30 s; the client's close waits 2×
    "distributed.comm.timeouts.tcp": "120s",  # default 30 s: a silent peer is declared dead
    "distributed.scheduler.worker-ttl": "15 minutes",  # default 5: a worker missing heartbeats
    "distributed.deploy.lost-worker-timeout": "60s",  # default 15 s: before a lost worker is closed
}
# Dask's nanny starts each worker with MALLOC_TRIM_THRESHOLD_=65536 (and leaves it in this
# process's environment for every later child). Any set threshold turns off glibc's dynamic
# mmap threshold, so each large buffer (a forward pass's activations, a decoding step's) is
# mapped and unmapped again: 32 consistency answers on a worker took 104 s with it, 56 s of
# them in the kernel, and 47 s without (benchmarks/bench_worker_malloc.py). None unsets it.
WORKER_ENVIRON = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
CLOSE_TIMEOUT_S = 90.0  # the whole close, after which the run goes on without it


class PatientNanny(Nanny):
    """A local worker's nanny whose close survives a worker slow to die. Dask waits 4 s for
    the worker to stop, kills it, waits 5 s more for the kernel to reap it and then raises
    TimeoutError: on a loaded machine, a killed worker holding a model takes longer, and that
    error failed the whole close. The worker is killed either way; the nanny is closed."""

    async def close(self, timeout: float = 5, reason: str = "nanny-close"):
        try:
            return await super().close(timeout=timeout, reason=reason)
        except asyncio.TimeoutError:
            logging.getLogger("distributed.nanny").warning(
                "Worker process of %s killed but not yet reaped after %g s; closing anyway",
                self.address_safe, timeout)
            return "OK"


class BoundedDaskTaskRunner(DaskTaskRunner):
    """prefect-dask's runner under ``BUSY_MACHINE`` timeouts, whose close is bounded by
    ``close_timeout_s`` and never raises: the flow's state is set before the runner closes, so
    an error there would fail a completed run and stop the next stage. A close that fails or
    overruns is one warning line, and the local cluster's worker processes are killed."""

    def __init__(self, *args: Any, close_timeout_s: float = CLOSE_TIMEOUT_S, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.close_timeout_s = close_timeout_s
        self._config = None

    def duplicate(self) -> "BoundedDaskTaskRunner":
        copy = super().duplicate()
        copy.close_timeout_s = self.close_timeout_s
        return copy

    def __enter__(self) -> "BoundedDaskTaskRunner":
        # set before the cluster starts: each nanny hands its worker the config of that moment
        self._config = dask.config.set({**BUSY_MACHINE, **WORKER_ENVIRON})
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        from prefect.logging import get_logger

        workers = self._worker_processes()
        errors: list[BaseException] = []

        def close() -> None:
            try:
                self._exit_stack.__exit__(*exc)
            except BaseException as error:  # noqa: BLE001 - reported below, in one line
                errors.append(error)
            finally:
                _closing.discard(closer)

        _one_line_records_while_closing()
        closer = threading.Thread(target=close, name="lingtest-dask-close", daemon=True)
        _closing.add(closer)
        closer.start()
        closer.join(self.close_timeout_s)
        problem = (f"not closed after {self.close_timeout_s:g} s" if closer.is_alive() else
                   f"{type(errors[0]).__name__}: {_first_line(errors[0])}" if errors else None)
        if problem:
            killed = _kill(workers)
            get_logger("lingtest").warning(
                "the Dask cluster did not close cleanly (%s); the run's result stands%s",
                problem, f", its {killed} worker process(es) were killed" if killed else "")
        self._config.__exit__(None, None, None)
        super(DaskTaskRunner, self).__exit__(*exc)  # the base runner's; the stack is closed

    def _worker_processes(self) -> list[tuple[Any, Any]]:
        """The local cluster's nannies and their worker processes (none for a remote
        cluster): what a failed close may leave running."""
        import psutil

        found = []
        for nanny in getattr(self._cluster, "workers", {}).values():
            pid = getattr(nanny, "pid", None)
            if not pid:  # psutil.Process(None) would be this very process
                continue
            try:
                found.append((nanny, psutil.Process(pid)))
            except psutil.Error:
                pass
        return found


def _kill(workers: list[tuple[Any, Any]]) -> int:
    """Kill the worker processes still alive, their nannies told first not to restart them
    (psutil refuses a pid reused since); how many were killed."""
    import psutil

    killed = 0
    for nanny, process in workers:
        if hasattr(nanny, "close_gracefully") and nanny.status.name == "running":
            nanny.close_gracefully(reason="lingtest-close-timeout")
        try:
            process.kill()
            killed += 1
        except psutil.Error:
            pass
    return killed


_closing: set[threading.Thread] = set()  # closes under way (one may outlive its bound)


def _one_line_records_while_closing() -> None:
    """While a cluster closes, a record of Dask's loggers carries its exception as one line,
    not a traceback: a client reconnecting to a scheduler that is gone, a worker killed while
    it stopped, are what a close looks like on a busy machine, and their stacks buried the
    run's own result (a record factory, installed once, as lingtest.tasks.core.errors does)."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "_lingtest_dask_close", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        error = record.exc_info[1] if record.exc_info else None
        if _closing and error is not None and record.name.startswith("distributed"):
            said = record.getMessage().strip()
            record.msg = f"{said + ' ' if said else ''}({type(error).__name__}: " \
                         f"{_first_line(error)})"
            record.args, record.exc_info, record.exc_text = (), None, None
        return record

    factory._lingtest_dask_close = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or ["(no message)"])[0][:200]
