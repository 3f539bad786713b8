"""Scheduled reruns: a flow that asks DVC to reproduce stages, so DVC still decides *whether*.

``lingtest serve`` registers it as a deployment (cron or interval) on the ``lingtest ui``
server. Each tick is named by its stages and tick time (``repro-all-20261127-030000``); when
``dvc status`` shows a change it runs ``dvc exp run`` under that name as the DVC experiment
(tag ``exp:<name>``, and in the ``dvc-metrics`` artifact), else it records no experiment
(state *Unchanged*); after a rerun it pushes the outputs to the project's default DVC remote
when one is configured. A tick that lands while a run of this project's stages is active, or that
was scheduled before the service started, ends *Skipped* (Cancelled) at once. A failed rerun
puts the working tree back as it was and alerts the webhook (``runtime.notify_url`` /
``serve --notify``); so do the regression rules (``runtime.alerts``).
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
from prefect import flow, task
from prefect.exceptions import CancelledRun
from prefect.logging import get_run_logger
from prefect.states import Cancelled, Completed

from lingtest.tasks.core.artifacts import publish_table
from lingtest.tasks.core.paths import root_marked

SERVE_SINCE = "LINGTEST_SERVE_SINCE"  # set by `lingtest serve`: ticks before it are stale


class _SkippedIsNoError(logging.Filter):
    """Prefect's engine logs a flow run that ends Cancelled as an ERROR, "Engine execution
    exited with unexpected exception", with a 40-line traceback; a skipped tick is the
    overlap policy at work, so that record is dropped (the run's own line says why)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, CancelledRun)


logging.getLogger("prefect.flow_runs").addFilter(_SkippedIsNoError())


def tool_env(experiment: str | None = None) -> dict[str, str]:
    """The environment of DVC and the stage commands it runs: the running interpreter's bin
    folder first on PATH (a service's PATH may hold no venv, and dvc.yaml's commands call
    ``lingtest`` and ``python`` by name), the mark that they run under this rerun and the
    name of its DVC experiment (the stage runs' ``exp:`` tag)."""
    from lingtest.tasks.core.run_lock import EXPERIMENT, INSIDE_REPRO
    from lingtest.tasks.core.runtime import interpreter_first

    env = {**os.environ, "PATH": interpreter_first(os.environ.get("PATH", "")),
           INSIDE_REPRO: str(os.getpid())}
    if experiment:
        env[EXPERIMENT] = experiment
    return env


def dvc_command(*args: str) -> list[str]:
    """DVC from the interpreter that runs lingtest: a served flow's PATH may not hold the venv."""
    return [sys.executable, "-m", "dvc", *args]


def _run(command: list[str], root: str, check: bool = False,
         experiment: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=root, capture_output=True, text=True,
                          env=tool_env(experiment), check=check)


def run_identity(root: str, stages: list[str] | None = None) -> dict[str, str]:
    """Parameter hash (of the parameters the reproduced stages read; all stages when none),
    commit, profile and seed of the checkout, as ``lingtest run`` tags them."""
    from lingtest.flows.registry import STAGES
    from lingtest.flows.stage import stage_params_hash
    from lingtest.flows.registry import load_params
    from lingtest.tasks.core.runtime import git_commit

    params = load_params(Path(root))
    read = [s for s in (stages or STAGES) if s in STAGES] or list(STAGES)
    return {"params": stage_params_hash(params, *read), "commit": git_commit(Path(root)),
            "profile": params.profile, "seed": str(params.seed)}


def tick_name(stages: list[str] | None, tick: dt.datetime) -> str:
    """``repro-<stages or all>-<UTC tick time>``: the flow run's and the experiment's name
    (a valid git ref, as DVC needs)."""
    label = "-".join(stages) if stages else "all"
    return f"repro-{label}-{tick.astimezone(dt.timezone.utc):%Y%m%d-%H%M%S}"


def _tick_time() -> dt.datetime:
    from prefect.runtime import flow_run

    return flow_run.scheduled_start_time or dt.datetime.now(dt.timezone.utc)


def _run_name() -> str:
    from prefect.runtime import flow_run

    return tick_name(flow_run.parameters.get("stages"), _tick_time())


def _tag_this_run(tags: list[str]) -> None:
    """Add tags to this flow run (a deployment's tags are fixed at serve time)."""
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    with get_client(sync_client=True) as client:
        current = client.read_flow_run(flow_run.id)
        client.update_flow_run(flow_run.id, tags=sorted(set(current.tags) | set(tags)))


def _stale(tick: dt.datetime) -> str | None:
    """Why a tick is stale: scheduled before the service that runs it started."""
    since = os.environ.get(SERVE_SINCE)
    if since and tick < dt.datetime.fromisoformat(since) - dt.timedelta(seconds=1):
        return (f"stale tick scheduled at {tick.isoformat(timespec='seconds')}, before this "
                f"service started ({since}); not run")
    return None


def dvc_stages(root: str) -> list[str]:
    """The stage names of the project's dvc.yaml (their locks say a stage is running)."""
    import yaml

    try:
        return list(yaml.safe_load((Path(root) / "dvc.yaml").read_text())["stages"])
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return []


def uses_git(root: str) -> bool:
    """Whether DVC keeps the project in git: ``dvc exp`` experiments and the tree's snapshot
    need it; a ``dvc init --no-scm`` project reruns with plain ``dvc repro``. A folder DVC
    cannot run in at all (no DVC project; one that expects git where there is none: every
    ``dvc status`` fails) is refused with the fix."""
    from dvc.exceptions import NotDvcRepoError
    from dvc.repo import Repo
    from dvc.scm import NoSCM, SCMError

    from lingtest.tasks.core.errors import LingtestError

    try:
        with Repo(root) as repo:
            return not isinstance(repo.scm, NoSCM)
    except NotDvcRepoError:
        raise LingtestError(f"{root} is no DVC project; fix: `dvc init` there (`dvc init "
                            "--no-scm` without git)") from None
    except SCMError:
        raise LingtestError(f"{root} is a DVC project that expects git but is no git "
                            "repository; fix: `git init` and commit it, or `dvc config "
                            "core.no_scm true` to rerun without git (no experiments)") from None


@task(name="dvc-status")
def dvc_changed(root: str, stages: list[str]) -> bool:
    """Whether ``dvc status`` (the stages and what they depend on) shows anything to rerun."""
    result = _run(dvc_command("status", "--json", *(["--with-deps", *stages] if stages else [])),
                  root)
    if result.returncode != 0:
        raise RuntimeError(f"dvc status failed ({result.returncode}): {result.stderr[-2000:]}")
    return bool(json.loads(result.stdout or "{}"))


def _git(root: str, *args: str, check: bool = True) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                          check=check).stdout


KEEP_UNTRACKED_BYTES = 50 * 2**20  # untracked files copied aside before a rerun, each at most


def tree_snapshot(root: str, keep: Path) -> tuple[str, str, set[str]] | None:
    """The tree before a rerun: tracked files as a ``git stash create`` commit (HEAD when
    nothing is modified; it exits 1 when only timestamps changed, which also means nothing),
    the index as a tree (``dvc exp run`` unstages what was staged), and untracked files copied
    into ``keep`` (DVC deletes a stage's outputs before its command runs, and an output never
    committed has no other copy). None outside a git checkout."""
    try:
        ref = _git(root, "-c", "user.name=lingtest", "-c", "user.email=lingtest@localhost",
                   "stash", "create", check=False).strip() or "HEAD"
        index = _git(root, "write-tree", check=False).strip()  # empty: unmerged entries
        untracked = set(_git(root, "ls-files", "--others", "--exclude-standard").splitlines())
    except (OSError, subprocess.CalledProcessError):
        return None
    for rel in untracked:
        source = Path(root) / rel
        if source.is_file() and source.stat().st_size <= KEEP_UNTRACKED_BYTES:
            (keep / rel).parent.mkdir(parents=True, exist_ok=True)
            (keep / rel).write_bytes(source.read_bytes())
    return ref, index, untracked


def restore_tree(root: str, snapshot: tuple[str, str, set[str]], keep: Path) -> list[str]:
    """Put back what a failed ``dvc exp run`` / ``dvc repro`` changed: tracked files, the
    index, untracked files it deleted or changed, new untracked
    files removed, then the DVC-cached outputs of the restored ``dvc.lock``. The paths it put
    back."""
    ref, index, untracked = snapshot
    changed = [p for p in _git(root, "diff", "--name-only", ref).splitlines() if p]
    if changed:
        _git(root, "restore", f"--source={ref}", "--worktree", "--", *changed)
    if index:
        _git(root, "read-tree", index)
    now = set(_git(root, "ls-files", "--others", "--exclude-standard").splitlines())
    for rel in now - untracked:
        (Path(root) / rel).unlink(missing_ok=True)
    kept = [p.relative_to(keep).as_posix() for p in keep.rglob("*") if p.is_file()]
    for rel in kept:
        target = Path(root) / rel
        saved = (keep / rel).read_bytes()
        if not target.is_file() or target.read_bytes() != saved:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(saved)
            changed.append(rel)
    _run(dvc_command("checkout", "--force", "--quiet"), root)
    return sorted(set(changed) | (now - untracked))


@task(name="dvc-repro")
def dvc_repro(root: str, stages: list[str], experiment: bool, name: str,
              git: bool = True) -> str:
    """``dvc exp run -n <name>`` (an experiment ``dvc exp show`` lists) or plain ``dvc repro``;
    on failure the working tree is put back as it was (with ``git``: a no-git project has no
    snapshot, and git would act on an enclosing checkout). No retry: a failing stage fails
    the same way again, and a collision is a skipped tick, not a failure."""
    import tempfile

    command = (dvc_command("exp", "run", "--name", name, *stages) if experiment
               else dvc_command("repro", *stages))
    logger = get_run_logger()
    with tempfile.TemporaryDirectory(prefix="lingtest-tree-") as keep:
        snapshot = tree_snapshot(root, Path(keep)) if git else None
        result = _run(command, root, experiment=name if experiment else None)
        logger.info("%s\n%s", " ".join(command[2:]), result.stdout[-4000:])
        if result.returncode != 0 and snapshot is not None:
            try:
                restored = restore_tree(root, snapshot, Path(keep))
                logger.warning("working tree put back as before the rerun (%d path(s): %s)",
                               len(restored), ", ".join(restored[:10]))
            except (OSError, subprocess.CalledProcessError) as error:  # the rerun's error wins
                logger.error("could not put the working tree back: %s %s", error,
                             getattr(error, "stderr", "") or "")
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command[2:])} failed ({result.returncode}): "
                           f"{result.stderr[-2000:]}")
    return result.stdout


def default_remote(root: str) -> str | None:
    """The project's default DVC remote (``dvc remote add -d``), or None."""
    result = _run(dvc_command("remote", "default"), root)
    return result.stdout.strip() or None if result.returncode == 0 else None


@task(name="dvc-push")
def dvc_push(root: str, remote: str) -> str:
    """Push the rerun's cached outputs, so a new host or colleague ``dvc pull``s them instead
    of recomputing; a failed push fails the run (and alerts): the remote would be stale."""
    result = _run(dvc_command("push", "--remote", remote), root)
    get_run_logger().info("dvc push --remote %s\n%s", remote, result.stdout[-2000:])
    if result.returncode != 0:
        raise RuntimeError(f"dvc push --remote {remote} failed ({result.returncode}): "
                           f"{result.stderr[-2000:]}")
    return result.stdout


@task(name="dvc-metrics")
def dvc_metrics(root: str) -> pd.DataFrame:
    """``dvc metrics show`` as rows: file, ``<model>.<metric>`` (``setting`` too), value."""
    from lingtest.tasks.core.compare import flatten

    shown = _run(dvc_command("metrics", "show", "--json"), root, check=True).stdout
    rows = []
    for _, files in (json.loads(shown or "{}") or {}).items():
        for path, content in (files.get("data") or {}).items():
            for key, value in flatten(content.get("data") or {}).items():
                rows.append({"file": path, "metric": key, "value": value})
    return pd.DataFrame(rows, columns=["file", "metric", "value"])


def _failure_alert(flow, flow_run, state) -> None:
    """on_failure / on_crashed: the webhook of the project's parameters (or ``--notify``)."""
    from lingtest.tasks.core import alerts
    from lingtest.flows.registry import load_params

    try:
        url = load_params(Path(flow_run.parameters["root"])).runtime.notify_url
    except Exception:  # noqa: BLE001 - broken parameters must not silence the alert
        url = None
    try:  # a crash's hook runs in the service, whose copy of the run predates its tick name
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            flow_run = client.read_flow_run(flow_run.id)
    except Exception:  # noqa: BLE001 - the older copy still names the run
        pass
    alerts.send(alerts.webhook(url), alerts.failure_text("scheduled", flow_run, state))


@flow(name="repro", flow_run_name=_run_name, log_prints=True,
      on_failure=[_failure_alert], on_crashed=[_failure_alert])
def repro_flow(root: str, stages: list[str] | None = None, experiment: bool = True,
               push: bool = True):
    from prefect.runtime import flow_run

    from lingtest.tasks.core import alerts
    from lingtest.flows.registry import load_params
    from lingtest.tasks.core.flow_runs import process_tag
    from lingtest.tasks.core.paths import Workspace
    from lingtest.tasks.core.run_lock import REPRO, StageBusy, busy, hold

    logger = get_run_logger()
    stale = _stale(_tick_time())
    if stale:
        logger.info(stale)
        return Cancelled(name="Skipped", message=stale)
    workspace, stages = Workspace(Path(root)), list(stages or [])
    held = busy(workspace, stages or dvc_stages(root))
    try:
        if held:
            raise StageBusy(*held)
        with hold(workspace, REPRO):
            name = flow_run.name
            identity = run_identity(root, stages)
            _tag_this_run(["stage:repro", *(f"{k}:{v}" for k, v in identity.items()),
                           process_tag()])
            git = uses_git(root)  # no git: no experiment (`lingtest serve` said so at start)
            if not dvc_changed(root, stages):
                message = "nothing changed (dvc status is clean): no experiment recorded"
                logger.info(message)
                return Completed(name="Unchanged", message=message)
            experiment = experiment and git
            if experiment:
                _tag_this_run([f"exp:{name}"])
            params = load_params(Path(root))
            before = alerts.snapshot_results(params.runtime.alerts, Path(root),
                                             stages or dvc_stages(root))
            output = dvc_repro(root, stages, experiment, name, git)
            remote = default_remote(root) if push else None
            if remote:
                dvc_push(root, remote)
            provenance = {**identity, **({"experiment": name} if experiment else {}),
                          **({"pushed to": remote} if remote else {})}
            provenance = root_marked(provenance, Path(root))  # a remote inside the project
            publish_table("dvc-metrics", dvc_metrics(root),
                          "DVC metrics after the scheduled rerun",
                          Path(root) / "reports" / "schedule", provenance=provenance,
                          notes=", ".join(f"{key} {value}" for key, value in provenance.items()))
            fired = alerts.regressions(params.runtime.alerts, Path(root), before)
            if fired:
                logger.warning("regression alert: %s", "; ".join(fired))
                _tag_this_run(["alert:regression"])
                alerts.send(alerts.webhook(params.runtime.notify_url),
                            f"lingtest: scheduled rerun {name} regression: " + "; ".join(fired))
            return output
    except StageBusy as error:
        message = f"skipped: {error}"
        logger.info(message)
        return Cancelled(name="Skipped", message=message)
