"""``lingtest serve`` as a service: a clean environment, no stale or queued ticks, a clear end.

- The interpreter's bin folder goes first on PATH, so the stage commands DVC runs (``lingtest
  run …``, ``python …``) resolve under a service manager's bare PATH.
- A project without git (``dvc init --no-scm``) cannot hold ``dvc exp`` experiments: each tick
  runs plain ``dvc repro``, said once at start; a folder DVC cannot run in is refused at start.
- The deployment's concurrency limit is 1 with Prefect's ``CANCEL_NEW`` collision strategy: a
  tick landing while the previous one runs is Cancelled at once, never queued.
- At start, runs the deployment left from before (Scheduled, Late, Pending, waiting for a
  slot) are cancelled as stale ticks (due ones) or deleted (future ones); a run still RUNNING
  for a dead process is marked Crashed. At stop (Ctrl-C, SIGTERM) the deployment is paused and
  the same clean-up runs, so a stopped service leaves no Pending, Scheduled or queued run.
- The exit status is 1 when the service's last finished tick failed or crashed (so a service
  manager shows it), else 0; the last line counts the ticks completed, unchanged, skipped and
  failed.
"""
from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass

from lingtest.tasks.core.paths import Workspace

FINISHED_BAD = ("FAILED", "CRASHED")


def _deployment_id(client, name: str):
    from prefect.exceptions import ObjectNotFound

    try:
        return client.read_deployment_by_name(f"repro/{name}").id
    except ObjectNotFound:
        return None


def _runs(client, deployment_id, states: list | None = None) -> list:
    from prefect.client.schemas.filters import (DeploymentFilter, DeploymentFilterId,
                                                FlowRunFilter, FlowRunFilterState,
                                                FlowRunFilterStateType)

    run_filter = FlowRunFilter(state=FlowRunFilterState(
        type=FlowRunFilterStateType(any_=states))) if states else None
    return client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
        flow_run_filter=run_filter, limit=200)


def clear_waiting_runs(name: str, reason: str) -> dict[str, int]:
    """Cancel (as *Skipped*, with ``reason``) the deployment's runs that are due but did not
    start, and delete its future scheduled ones. Counts of each."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelled

    counts = {"cancelled": 0, "deleted": 0}
    now = dt.datetime.now(dt.timezone.utc)
    with get_client(sync_client=True) as client:
        deployment_id = _deployment_id(client, name)
        if deployment_id is None:
            return counts
        for run in _runs(client, deployment_id, [StateType.SCHEDULED, StateType.PENDING]):
            due = run.expected_start_time is None or run.expected_start_time <= now
            if due or run.state_type == StateType.PENDING:
                client.set_flow_run_state(run.id, Cancelled(name="Skipped", message=reason),
                                          force=True)
                counts["cancelled"] += 1
            else:
                client.delete_flow_run(run.id)
                counts["deleted"] += 1
    return counts


def pause(name: str) -> None:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        deployment_id = _deployment_id(client, name)
        if deployment_id is not None:
            client.pause_deployment(deployment_id)


@dataclass
class Tally:
    """The ticks of one service run, by outcome, and the last finished one."""

    completed: int = 0
    unchanged: int = 0
    skipped: int = 0
    failed: int = 0
    last: object = None

    @property
    def last_failed(self) -> bool:
        return self.last is not None and self.last.state_type.value in FINISHED_BAD

    def line(self, name: str) -> str:
        text = (f"stopped serving repro/{name}: {self.completed} tick(s) completed, "
                f"{self.unchanged} unchanged, {self.skipped} skipped, {self.failed} failed")
        if self.last_failed:
            from lingtest.tasks.core.alerts import error_line

            text += (f"; the last run {self.last.name} {self.last.state_name}: "
                     f"{error_line(self.last.state.message if self.last.state else '')}")
        return text


def tally(name: str, since: dt.datetime) -> Tally:
    """Outcomes of the deployment's runs scheduled since ``since`` (this service's ticks)."""
    from prefect.client.orchestration import get_client

    counted = Tally()
    with get_client(sync_client=True) as client:
        deployment_id = _deployment_id(client, name)
        runs = [] if deployment_id is None else _runs(client, deployment_id)
    mine = [r for r in runs if r.expected_start_time and r.expected_start_time >= since
            and r.state is not None and r.state.is_final()]
    for run in mine:
        kind = run.state_type.value
        if kind in FINISHED_BAD:
            bucket = "failed"
        elif kind == "CANCELLED":
            bucket = "skipped"
        elif run.state_name == "Unchanged":
            bucket = "unchanged"
        else:
            bucket = "completed"
        setattr(counted, bucket, getattr(counted, bucket) + 1)
    ended = [r for r in mine if r.end_time is not None and r.state_type.value != "CANCELLED"]
    counted.last = max(ended, key=lambda r: r.end_time, default=None)
    return counted


def serve_schedule(workspace: Workspace, schedule: dict, stages: list[str], experiment: bool,
                   push: bool, name: str, echo) -> int:
    """Serve the rerun deployment until Ctrl-C or SIGTERM; the exit status (see module doc)."""
    import asyncio
    import signal

    from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
    from prefect.runner import Runner

    from lingtest.flows.repro import SERVE_SINCE, repro_flow, uses_git
    from lingtest.tasks.core.flow_runs import mark_orphaned_runs_crashed
    from lingtest.tasks.core.runtime import interpreter_first

    import faulthandler

    if not uses_git(str(workspace.root)):  # refuses a folder DVC cannot run in
        if experiment:
            echo(f"{workspace.root} is no git repository (dvc init --no-scm): no DVC "
                 "experiments without git, so each tick runs plain `dvc repro`")
        experiment = False

    # `kill -USR1 <pid>`: every thread's stack to the service's log (a stop that hangs)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    since = dt.datetime.now(dt.timezone.utc)
    # inherited by the flow-run processes, DVC and the stage commands it starts
    os.environ["PATH"] = interpreter_first(os.environ.get("PATH", ""))
    os.environ[SERVE_SINCE] = since.isoformat()
    os.environ["LINGTEST_ROOT"] = str(workspace.root)
    stale = clear_waiting_runs(name, f"stale tick: scheduled before the service started at "
                                     f"{since.isoformat(timespec='seconds')}; not run")
    crashed = mark_orphaned_runs_crashed("stage:repro")
    if stale["cancelled"] or crashed:
        echo(f"before serving: {stale['cancelled']} stale tick(s) cancelled, "
             f"{len(crashed)} orphaned run(s) marked Crashed")
    deployment = repro_flow.to_deployment(
        name=name, tags=["stage:repro"], **schedule,
        concurrency_limit=ConcurrencyLimitConfig(
            limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW),
        parameters={"root": str(workspace.root), "stages": stages, "experiment": experiment,
                    "push": push})
    runner = Runner(pause_on_shutdown=True)
    runner.add_deployment(deployment)
    # Prefect's own SIGTERM handler calls sys.exit(0) from whatever the loop runs (seen: a
    # flow run's submission crashed by it, and the service serving on); SIGTERM is made
    # Ctrl-C instead, which asyncio turns into a clean cancellation of the runner.
    runner.handle_sigterm = lambda *_: os.kill(os.getpid(), signal.SIGINT)

    async def serve_until_signal() -> None:
        # While Prefect runs a cancelled tick's hooks it swaps in its own SIGTERM handler,
        # and a SIGTERM landing then was swallowed (the service served on: seen under load).
        # asyncio reads every signal from its wakeup fd whichever Python handler is set, so
        # this registration stops the service in any case.
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM,
                                                      asyncio.current_task().cancel)
        await runner.start()

    try:
        asyncio.run(serve_until_signal())
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    pause(name)
    clear_waiting_runs(name, "the service stopped before this tick")
    mark_orphaned_runs_crashed("stage:repro")
    counted = tally(name, since)
    echo(counted.line(name))
    return 1 if counted.last_failed else 0
