"""A stage on a local Dask cluster of 1 and 2 workers, against the thread runner (baseline).

Each side runs the stage cold in a fresh temporary project: its own ``runtime.result_storage``
folder, so no cache record of another side is seen; every side reports to one temporary
Prefect server started first (so no side pays its start); sides alternate over ``--rounds``
and the table gives each side's best round. The default stage is ``data`` (a cached
task per table, ~25 s); ``--stage adaptive`` re-scores the hotel tree (VADER, 2 shards);
``--stage contrastive`` runs COSTELLO on MiniLM (30 seeds per relation, 5,000 vocabulary
words; on Dask the embedding, searches and banks spread before the unit); ``--stage capabilities`` builds and runs an S²LCT suite of 10 seeds per capability on VADER
(expansion is one task per capability: ``Method.fan_out``); ``--stage consistency``
answers the default 30 questions' prompts with SmolLM2 (on Dask: runs of whole batches, one
task each; response ids, which follow the order the workers save in, are left out of the
comparison), in projects whose ``data/`` comes from one untimed data-stage run.
Then the worker start-up: a local cluster of 2 workers and one trivial task per worker, with
the Prefect API shared with the workers (``lingtest.tasks.core.runtime.api_for_workers``) and without
one (each worker then starts a temporary server of its own).

Run: ``LINGTEST_MIRROR=... .venv/bin/python benchmarks/dask_workers.py`` (~5 min on 2 cores).
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="bench-dask-prefect-"))
for key, value in {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                   "TOKENIZERS_PARALLELISM": "false", "PREFECT_LOGGING_LEVEL": "WARNING",
                   "HF_HUB_OFFLINE": "1", "DASK_LOGGING__DISTRIBUTED": "error"}.items():
    os.environ.setdefault(key, value)
os.environ.pop("PREFECT_API_URL", None)

SIDES = {"threads (baseline, 2 threads)": ["runtime.task_runner=threads", "runtime.max_workers=2"],
         "dask, 1 worker": ["runtime.task_runner=dask", "runtime.max_workers=1"],
         "dask, 2 workers": ["runtime.task_runner=dask", "runtime.max_workers=2"]}


def stage_overrides(stage: str, mirror: Path) -> list[str]:
    if stage == "data":
        return [f"data.mirror={mirror}", "data.online=false"]
    if stage == "contrastive":  # MiniLM, 30 seeds per relation, a 5,000-word vocabulary
        return [f"data.mirror={mirror}", "contrastive.max_seeds=30",
                "contrastive.dictionary_max_words=5000", "contrastive.classifier_epochs=5",
                "contrastive.classifier_max_train=2000", "contrastive.classifier_max_test=500"]
    if stage == "capabilities":  # VADER (no training stage needed), 10 seeds per capability
        return [f"data.mirror={mirror}", "capabilities.models=[vader]",
                "capabilities.seeds_per_lc=10", "capabilities.checklist_max_examples=50",
                "capabilities.bootstrap=200"]
    if stage == "consistency":  # the default questions, SmolLM2
        return [f"data.mirror={mirror}"]
    return [f"adaptive.trees=[{mirror / 'adatest' / 'imdb_hotel_conversion.csv'}]",
            "adaptive.models=[vader]", "runtime.shards=2"]


def prepared_data(stage: str, mirror: Path, work: Path) -> Path | None:
    """A ``data/`` folder the stage reads (the data stage run once, not timed), or None."""
    if stage in ("data", "adaptive"):
        return None
    from lingtest.flows.stage import run_stage
    from lingtest.flows.registry import load_params
    from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace

    root = work / "data-template"
    root.mkdir()
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    run_stage("data", load_params(root, [*stage_overrides("data", mirror),
                                         f"runtime.result_storage={root / 'results'}"]),
              Workspace(root))
    return root / "data"


def run_side(stage: str, overrides: list[str], work: Path,
             data: Path | None = None) -> tuple[float, dict[str, bytes]]:
    """Seconds of one cold run, and its output files (tables and report CSVs) by path."""
    from lingtest.flows.stage import run_stage
    from lingtest.flows.registry import load_params
    from lingtest.tasks.core.paths import PACKAGE_ROOT, Workspace

    root = Path(tempfile.mkdtemp(prefix="project-", dir=work))
    shutil.copy(PACKAGE_ROOT / "params.yaml", root / "params.yaml")
    if data is not None:
        shutil.copytree(data, root / "data")
    params = load_params(root, [*overrides, f"runtime.result_storage={root / 'results'}"])
    start = time.monotonic()
    run_stage(stage, params, Workspace(root))
    seconds = time.monotonic() - start
    files = [*(root / "data" / "processed").glob("*.parquet"), *(root / "reports").rglob("*.csv"),
             *(root / "data" / "interim" / stage).glob("*.parquet")]
    return seconds, {str(p.relative_to(root)): comparable(p) for p in sorted(files)}


def comparable(path: Path) -> bytes:
    """The file's bytes; a table's without ``response_id`` (consistency numbers responses in
    the order they are saved, which the workers decide)."""
    if path.suffix == ".parquet":
        import pandas as pd

        table = pd.read_parquet(path)
        if "response_id" in table:
            return table.drop(columns="response_id").to_csv(index=False).encode()
    return path.read_bytes()


def worker_start_up(shared_api: bool) -> tuple[float, float]:
    """(cluster start, first task on each of 2 workers) seconds, with or without the API."""
    import contextlib

    from prefect import flow, task
    from prefect_dask import DaskTaskRunner

    from lingtest.tasks.core.config import RuntimeParams
    from lingtest.tasks.core.runtime import api_for_workers

    @task
    def where(i: int) -> int:
        return os.getpid()

    timings: dict[str, float] = {}

    @flow(task_runner=DaskTaskRunner(cluster_kwargs={"n_workers": 2, "threads_per_worker": 1}))
    def probe() -> set[int]:
        from prefect.context import FlowRunContext

        start = time.monotonic()
        FlowRunContext.get().task_runner.client.wait_for_workers(2)
        timings["cluster"] = time.monotonic() - start
        start = time.monotonic()
        pids = {future.result() for future in [where.submit(i) for i in range(2)]}
        timings["tasks"] = time.monotonic() - start
        return pids

    api = (api_for_workers(RuntimeParams(task_runner="dask")) if shared_api
           else contextlib.nullcontext())
    with api:
        probe()
    return timings["cluster"], timings["tasks"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stage", choices=["data", "adaptive", "capabilities", "contrastive",
                                                "consistency"], default="data")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-start-up", action="store_true", help="skip the worker start-up")
    args = parser.parse_args()

    from lingtest.tasks.core.paths import PACKAGE_ROOT, default_mirror

    mirror = default_mirror(PACKAGE_ROOT)
    if mirror is None:
        sys.exit("set LINGTEST_MIRROR to the raw-data mirror")
    import torch

    print(f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}, "
          f"stage {args.stage}, cold cache per side")
    from lingtest.tasks.core.config import RuntimeParams
    from lingtest.tasks.core.runtime import api_for_workers

    work = Path(tempfile.mkdtemp(prefix="bench-dask-"))
    best: dict[str, float] = {}
    outputs: dict[str, dict[str, bytes]] = {}
    with api_for_workers(RuntimeParams(task_runner="dask")):
        data = prepared_data(args.stage, mirror, work)
        for round_ in range(args.rounds):
            for side, overrides in SIDES.items():
                seconds, outputs[side] = run_side(
                    args.stage, [*stage_overrides(args.stage, mirror), *overrides], work, data)
                best[side] = min(seconds, best.get(side, seconds))
                print(f"  round {round_ + 1}, {side}: {seconds:.1f} s", flush=True)
    rows = list(best.items())
    baseline = rows[0][1]
    print(f"\n| side (best of {args.rounds}) | seconds | baseline / side |\n|---|---:|---:|")
    for side, seconds in rows:
        print(f"| {side} | {seconds:.1f} | ×{baseline / seconds:.2f} |")
    first = outputs[rows[0][0]]
    same = all(found == first for found in outputs.values())
    print(f"\nidentical tables and report CSVs on every side: {same} ({len(first)} files)")
    if not args.no_start_up:
        print("\n| 2 local workers | cluster start, s | first task on each worker, s |\n"
              "|---|---:|---:|")
        for shared in (True, False):
            cluster, tasks = worker_start_up(shared)
            label = ("API shared with the workers" if shared
                     else "no API URL: a temporary server per worker")
            print(f"| {label} | {cluster:.1f} | {tasks:.1f} |", flush=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
