"""Cold and warm time of every pipeline stage, in a throw-away project.

The default pipeline's stages (``dvc.yaml`` order, or ``--stages``) run through
``lingtest run <stage>`` in a temporary project: this checkout's ``params.yaml`` and
``inputs/``, empty ``data/``, a fresh Prefect home, task-result storage and model-copy cache
(``LINGTEST_CACHE``), so nothing computed before is reused. Each stage then runs a second time
(warm: every cached task hits, the flows still write their reports). The table gives both
times per stage, the totals and the warm/cold ratio; the figures the issue quoted for the code
before the speed work (cold ``make run`` 58 min on 2 cores) are printed beside them as the
earlier measurement, not re-measured here.

``--baseline KEY=VALUE`` (repeatable) measures a baseline in the same run: a second throw-away
project with those overrides runs each stage cold just before the measured side does, under
the same load, and the table adds its cold time and the ratio (e.g. ``--baseline
models.lm_engine=transformers`` for the code before the CTranslate2 engine).

Run: ``.venv/bin/python benchmarks/cold_run.py [--stages data contrastive] [--set KEY=VALUE]
[--baseline KEY=VALUE] [--keep]``;
needs the mirror (``LINGTEST_MIRROR``). A full cold run takes about an hour on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EARLIER_COLD_MIN = {"capabilities": 35, "contrastive": 11, "total": 58}  # issue text, 2 cores


def stage_names() -> list[str]:
    return list(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"])


def make_project(folder: Path) -> dict:
    shutil.copy(ROOT / "params.yaml", folder / "params.yaml")
    shutil.copytree(ROOT / "inputs", folder / "inputs")
    (folder / "data").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(LINGTEST_ROOT=str(folder), LINGTEST_CACHE=str(folder / "cache"),
               PREFECT_HOME=str(folder / ".prefect"), HF_HUB_OFFLINE="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    return env


def run_stage(stage: str, folder: Path, env: dict, log, overrides: list[str]) -> float:
    began = time.perf_counter()
    sets = [arg for item in overrides for arg in ("--set", item)]
    done = subprocess.run(["lingtest", "run", stage, *sets], cwd=folder, env=env, stdout=log,
                          stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(f"stage {stage} failed (exit {done.returncode}); log: {log.name}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", nargs="+", default=None, help="default: every stage")
    parser.add_argument("--keep", action="store_true", help="keep the temporary project")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="a parameter override for every stage, e.g. "
                        "runtime.task_runner=auto (repeatable)")
    parser.add_argument("--baseline", action="append", default=[], metavar="KEY=VALUE",
                        help="also run each stage cold in a baseline project with these "
                        "overrides (on top of --set), just before the measured side")
    args = parser.parse_args()
    stages = args.stages or stage_names()
    folder = Path(tempfile.mkdtemp(prefix="lingtest-cold-"))
    env = make_project(folder)
    sides = {"measured": (folder, env, args.overrides)}
    if args.baseline:
        other = Path(tempfile.mkdtemp(prefix="lingtest-cold-baseline-"))
        sides["baseline"] = (other, make_project(other), args.overrides + args.baseline)
    rows = []
    with open(folder / "run.log", "w") as log:
        for stage in stages:
            base = None
            if "baseline" in sides:
                base = run_stage(stage, *sides["baseline"][:2], log, sides["baseline"][2])
            cold = run_stage(stage, folder, env, log, args.overrides)
            warm = run_stage(stage, folder, env, log, args.overrides)
            rows.append((stage, cold, warm, base))
            print(f"{stage}: cold {cold:.1f} s, warm {warm:.1f} s"
                  + (f", baseline cold {base:.1f} s" if base is not None else ""), flush=True)
    print(f"\noverrides: {' '.join(args.overrides) or 'none'} (params.yaml otherwise); "
          f"baseline: {' '.join(args.baseline) or 'none'}")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load "
          f"average {os.getloadavg()[0]:.1f} at the end; project {folder}")
    print_table(rows, args.stages is None)
    if not args.keep:
        for project, _, _ in sides.values():
            shutil.rmtree(project, ignore_errors=True)


def print_table(rows: list[tuple], every_stage: bool) -> None:
    """Cold and warm seconds per stage and in total, with the baseline beside them if run."""
    based = any(r[3] is not None for r in rows)
    extra = " baseline cold s | baseline / cold |" if based else ""
    print(f"| stage | cold s | cold min | warm s | warm / cold |{extra} earlier cold min |")
    print("|---|---:|---:|---:|---:|" + ("---:|---:|" if based else "") + "---:|")
    for stage, cold, warm, base in [*rows, ("total", *(sum(r[i] or 0 for r in rows)
                                                       for i in (1, 2, 3)))]:
        earlier = (EARLIER_COLD_MIN["total"] if stage == "total" and every_stage else
                   EARLIER_COLD_MIN.get(stage, "") if stage != "total" else "")
        beside = f" {base:.1f} | ×{base / cold:.2f} |" if based else ""
        print(f"| {stage} | {cold:.1f} | {cold / 60:.1f} | {warm:.1f} | {warm / cold:.2f} |"
              f"{beside} {earlier} |")


if __name__ == "__main__":
    main()
