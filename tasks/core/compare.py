"""Two runs of a stage side by side: what changed in the parameters, the headline metrics
and the verdicts, case by case.

A run is read from what DVC and git record of it (``Snapshot``): the stage's contract rows
(``data/interim/<stage>/results.parquet``, from the DVC cache), its parameters (the report's
``provenance.json``) and its metrics (``reports/<stage>/metrics.json``, declared under
``dvc.yaml``'s top-level ``metrics:``). A revision is a
git revision, a DVC experiment name, a Prefect flow-run id (its ``commit:`` tag) or
``workspace`` (the files on disk: the run that just finished). Every stage run publishes
its comparison with the stage's previous run in the same project (``previous_run``, read
before the run writes) as a Prefect artifact (``lingtest.flows.method``); ``lingtest compare A B``
prints it for any two runs.

The per-case diff is ``schema.compare_results`` keyed by the method's result index (case,
model and the settings that tell rows apart); the top changes list the broken cases first,
then the fixed ones, each with its score before and after.
"""
from __future__ import annotations

import io as _io
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
import yaml

from lingtest.tasks.core.errors import LingtestError
from lingtest.tasks.core.run_lock import EXPERIMENT
from lingtest.tasks.core.schema import change_counts, compare_results

WORKSPACE = "workspace"
TOP_CHANGES = 10


@dataclass
class Snapshot:
    """One run of one stage as recorded at ``label``."""

    label: str
    params: dict[str, object]
    metrics: dict[str, float]
    results: pd.DataFrame | None


@dataclass
class Comparison:
    stage: str
    before: str
    after: str
    params: list[str]            # "key: old → new"
    metrics: pd.DataFrame        # metric, before, after, delta
    counts: dict[str, int] | None
    top: pd.DataFrame            # the most telling per-case changes


def flatten(value: object, prefix: str = "") -> dict[str, object]:
    """Nested dicts as ``a.b.c`` keys (lists kept as values)."""
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, inner in value.items():
            out.update(flatten(inner, f"{prefix}{key}." if prefix or key else ""))
        return out
    return {prefix.rstrip("."): value}


def stage_files(root: Path, stage: str) -> tuple[str | None, list[str]]:
    """(the stage's results file, its metrics files), relative to ``root``, from dvc.yaml:
    the metrics files are the top-level ``metrics:`` entries inside ``reports/<stage>/``."""
    try:
        spec = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))
        stage_spec = spec["stages"][stage]
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        raise LingtestError(f"{root / 'dvc.yaml'} has no stage {stage!r}; stages: see "
                            "`dvc stage list`") from None
    outs = [next(iter(o)) if isinstance(o, dict) else o for o in stage_spec.get("outs", [])]
    interim = [o for o in outs if o.startswith("data/interim/")]
    results = f"{interim[0]}/results.parquet" if interim else None
    declared = [next(iter(m)) if isinstance(m, dict) else m for m in spec.get("metrics") or []]
    metrics = [m for m in declared if m.startswith(f"reports/{stage}/")]
    return results, metrics


def on_disk(workspace) -> Callable[[str], Path]:
    """Where a workspace keeps a project path (``lingtest test`` writes to its outputs)."""
    def locate(path: str) -> Path:
        for prefix, folder in (("data/interim/", workspace.interim),
                               ("reports/", workspace.reports)):
            if path.startswith(prefix):
                return folder / path[len(prefix):]
        return workspace.root / path
    return locate


def _read(root: Path, path: str, rev: str | None,
          locate: Callable[[str], Path] | None = None) -> bytes | None:
    """A file's bytes at ``rev`` (DVC-tracked or git-tracked; None: not recorded there);
    ``rev`` None: on disk (``locate``: where)."""
    if rev is None:
        file = locate(path) if locate else root / path
        return file.read_bytes() if file.is_file() else None
    import dvc.api

    try:
        with dvc.api.open(path, repo=str(root), rev=rev, mode="rb") as handle:
            return handle.read()
    except Exception:  # not tracked at rev, not in the cache, no git: nothing recorded
        return None


def recorded_output(root: Path, path: str) -> bytes | None:
    """``path`` as the workspace's ``dvc.lock`` records it (the last run DVC recorded here,
    committed or an experiment), from the DVC cache; None when not recorded or not cached."""
    try:
        lock = yaml.safe_load((root / "dvc.lock").read_text(encoding="utf-8")) or {}
        from dvc.repo import Repo

        cache = Repo(str(root)).cache.local
        for stage in (lock.get("stages") or {}).values():
            for out in stage.get("outs") or []:
                prefix = out["path"].rstrip("/") + "/"
                if out["path"] == path:
                    return Path(cache.oid_to_path(out["md5"])).read_bytes()
                if path.startswith(prefix) and str(out.get("md5", "")).endswith(".dir"):
                    entries = json.loads(Path(cache.oid_to_path(out["md5"])).read_bytes())
                    relpath = path[len(prefix):]
                    md5 = next((e["md5"] for e in entries if e["relpath"] == relpath), None)
                    return Path(cache.oid_to_path(md5)).read_bytes() if md5 else None
    except Exception:  # noqa: BLE001 - no DVC project, a damaged lock or cache: not recorded
        return None
    return None


def previous_run(workspace, stage: str) -> Snapshot | None:
    """The stage's previous run in this project, read before a new run writes: its reports
    on disk (replaced only by a run that succeeded) and its results on disk, or, when DVC
    removed them before running the stage, as the workspace's ``dvc.lock`` records them
    (so a scheduled experiment compares with the one before it, not with ``HEAD``). None
    when the project's ``dvc.yaml`` has no such stage (nothing to compare)."""
    locate = on_disk(workspace)

    def read(path: str) -> bytes | None:
        found = _read(workspace.root, path, None, locate)
        return found if found is not None else recorded_output(workspace.root, path)
    try:
        return _snapshot(workspace.root, stage, "previous run", read)
    except LingtestError:
        return None


def snapshot(root: Path, stage: str, rev: str | None, label: str | None = None,
             locate: Callable[[str], Path] | None = None) -> Snapshot:
    """The stage's run recorded at git revision ``rev`` (None: the files on disk)."""
    return _snapshot(root, stage, label or (rev or WORKSPACE),
                     lambda path: _read(root, path, rev, locate))


def _snapshot(root: Path, stage: str, label: str,
              read: Callable[[str], bytes | None]) -> Snapshot:
    results_file, metrics_files = stage_files(root, stage)
    params: dict[str, object] = {}
    raw = read(f"reports/{stage}/provenance.json")
    if raw:
        provenance = json.loads(raw)
        for key, value in provenance.items():
            if key.startswith("parameters ("):
                section = key[len("parameters ("):-1]
                params.update(flatten(json.loads(value), f"{section}."))
            elif key in ("seed", "profile"):
                params[key] = value
    metrics: dict[str, float] = {}
    for path in metrics_files:
        raw = read(path)
        prefix = f"{Path(path).name}:" if len(metrics_files) > 1 else ""
        if raw:
            for key, value in flatten(json.loads(raw)).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    metrics[f"{prefix}{key}"] = float(value)
    results = None
    if results_file:
        raw = read(results_file)
        results = pd.read_parquet(_io.BytesIO(raw)) if raw else None
    return Snapshot(label, params, metrics, results)


def _short(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "…"


def compare(stage: str, before: Snapshot, after: Snapshot,
            keys: list[str] | None = None) -> Comparison:
    """``before`` against ``after`` (see the module docstring)."""
    params = [f"{k}: {_short(before.params.get(k, '—'))} → {_short(after.params.get(k, '—'))}"
              for k in sorted(set(before.params) | set(after.params))
              if before.params.get(k) != after.params.get(k)]
    names = sorted(set(before.metrics) | set(after.metrics))
    metrics = pd.DataFrame({"metric": names,
                            "before": [before.metrics.get(n) for n in names],
                            "after": [after.metrics.get(n) for n in names]})
    metrics["delta"] = metrics["after"] - metrics["before"]
    metrics = metrics[metrics["delta"].fillna(1.0) != 0].reset_index(drop=True)
    counts, top = None, pd.DataFrame()
    if before.results is not None and after.results is not None:
        keys = keys or ["case_id", "model_id"]
        diff = compare_results(before.results, after.results, keys)
        counts = change_counts(diff)
        scores = [frame.set_index(keys)["score"] if "score" in frame.columns else None
                  for frame in (before.results, after.results)]
        moved = diff[diff["change"].isin(["broken", "fixed"])].copy()
        if scores[0] is not None and scores[1] is not None:
            index = pd.MultiIndex.from_frame(moved[keys]) if len(keys) > 1 else moved[keys[0]]
            moved["score_before"] = scores[0].reindex(index).to_numpy()
            moved["score_after"] = scores[1].reindex(index).to_numpy()
        moved["order"] = (moved["change"] != "broken").astype(int)
        top = moved.sort_values(["order", *keys]).drop(columns="order").head(TOP_CHANGES)
    return Comparison(stage, before.label, after.label, params, metrics, counts,
                      top.reset_index(drop=True))


def comparison_markdown(c: Comparison) -> str:
    """The comparison as the artifact and ``lingtest compare --markdown`` show it."""
    lines = [f"# {c.stage}: {c.before} → {c.after}", "", "## Parameters", ""]
    lines += [f"- `{line}`" for line in c.params] or ["- unchanged"]
    lines += ["", "## Headline metrics", ""]
    lines += [c.metrics.to_markdown(index=False, floatfmt=".4g") if len(c.metrics)
              else "unchanged"]
    lines += ["", "## Cases", ""]
    if c.counts is None:
        lines.append("no per-case results recorded for one of the runs")
    else:
        lines.append(", ".join(f"{name} {n}" for name, n in c.counts.items()))
        if len(c.top):
            lines += ["", f"Top changes (broken first, at most {TOP_CHANGES}):", "",
                      c.top.to_markdown(index=False, floatfmt=".3g")]
    return "\n".join(lines) + "\n"


def resolve_rev(root: Path, name: str) -> str | None:
    """A git revision for ``name``: ``workspace`` → None; a Prefect flow-run id → its
    ``commit:`` tag; a DVC experiment name → its ref; else ``name`` if git knows it."""
    if name == WORKSPACE:
        return None
    if _is_uuid(name):
        return _run_commit(name)
    refs = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/exps"],
                          cwd=root, capture_output=True, text=True).stdout.split()
    for ref in refs:
        if ref.rsplit("/", 1)[-1] == name:
            return ref
    known = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
                           cwd=root, capture_output=True, text=True)
    if known.returncode != 0:
        raise LingtestError(f"lingtest compare: {name!r} is no git revision, DVC experiment "
                            "(`dvc exp list`) or Prefect flow-run id; or say `workspace`")
    return name


def _is_uuid(text: str) -> bool:
    import uuid

    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def _run_commit(run_id: str) -> str:
    from prefect.client.orchestration import get_client

    from prefect.exceptions import ObjectNotFound

    try:
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(run_id)
    except ObjectNotFound:
        raise LingtestError(f"lingtest compare: no flow run {run_id} on the Prefect server "
                            "this project uses; fix: copy the id from the UI of the server "
                            "that ran it (`lingtest ui`), or compare git revisions") from None
    for tag in run.tags:  # a scheduled experiment's own ref first, else its commit
        if tag.startswith("exp:"):
            return resolve_rev(Path.cwd(), tag.split(":", 1)[1])
    for tag in run.tags:
        if tag.startswith("commit:"):
            commit = tag.split(":", 1)[1]
            if commit.endswith("-dirty") or commit == "nogit":
                raise LingtestError(f"flow run {run_id} ran on uncommitted code ({commit}); "
                                    "its outputs were not recorded: compare git revisions")
            return commit
    raise LingtestError(f"flow run {run_id} has no commit: tag; compare git revisions instead")


def publish_comparison(stage: str, workspace, keys: list[str], before: Snapshot | None,
                       log=None) -> str | None:
    """After a stage run: its outputs against ``before`` (``previous_run``, taken as the run
    started) as the ``<stage>-comparison`` Markdown artifact (and the text); a comparison
    that cannot be made is one warning, never a failed run. Under a scheduled rerun the
    artifact names its DVC experiment."""
    import os

    experiment = os.environ.get(EXPERIMENT)
    label = f"this run (experiment {experiment})" if experiment else "this run"
    try:
        if before is None:
            raise LingtestError(f"{workspace.root / 'dvc.yaml'} has no stage {stage!r}")
        text = comparison_markdown(compare(
            stage, before, snapshot(workspace.root, stage, None, label, on_disk(workspace)),
            keys))
    except Exception as exc:  # the run's own outputs are written: only the diff is lost
        if log is not None:
            log.warning("%s: no comparison with the previous run (%s: %s)", stage,
                        type(exc).__name__, exc)
        return None
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(markdown=text, key=f"{stage}-comparison",
                             description=f"{stage}: {label} against the previous run in this "
                                         "project")
    return text
