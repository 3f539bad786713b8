"""What `dvc metrics`, `dvc exp show` and `dvc plots` read: dvc.yaml declares every stage's
metrics file and every figure's data with the columns the code writes, and DVC draws the
project's plot templates."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from lingtest.tasks.adaptive.debug_report import FIGURE7_DATA, FIGURE7_LINES
from lingtest.tasks.capabilities.coverage_report import FIGURE4_LINES
from lingtest.tasks.capabilities.method import FIGURE4
from lingtest.tasks.consistency.report import CHART_METRICS
from lingtest.tasks.contrastive.method import FIGURE6
from lingtest.tasks.contrastive.report import FIGURE6_LINES
from lingtest.tasks.core.paths import PACKAGE_ROOT

SPEC = yaml.safe_load((PACKAGE_ROOT / "dvc.yaml").read_text(encoding="utf-8"))


def _names(entries) -> list[str]:
    return [next(iter(e)) if isinstance(e, dict) else e for e in entries or []]


def test_every_stage_declares_its_one_metrics_file_inside_its_report_folder():
    stages = SPEC["stages"]
    assert _names(SPEC["metrics"]) == [f"reports/{s}/metrics.json" for s in stages]
    for name, stage in stages.items():
        assert "metrics" not in stage, name  # inside its out: only the top level may say so
        assert f"reports/{name}" in _names(stage["outs"]), name


def test_each_figure_is_declared_with_the_columns_the_code_writes():
    plots = {next(iter(p)) if isinstance(p, dict) else p: (p[next(iter(p))]
                                                          if isinstance(p, dict) else {})
             for p in SPEC["plots"]}
    expected = {
        f"reports/contrastive/{FIGURE6}": ("threshold", FIGURE6_LINES),
        f"reports/capabilities/{FIGURE4}": ("size", FIGURE4_LINES),
        "reports/consistency/consistency-figure.csv": ("model_id",
                                                      [name for name, _ in CHART_METRICS]),
        f"reports/adaptive-debug/{FIGURE7_DATA}": ("k", FIGURE7_LINES),
    }
    for path, (x, lines) in expected.items():
        assert (plots[path]["x"], sorted(plots[path]["y"])) == (x, sorted(lines)), path
        assert (PACKAGE_ROOT / ".dvc" / "plots" / f"{plots[path]['template']}.json").is_file()
    images = {p for p in plots if p.endswith(".png")}
    assert images == {"reports/consistency/consistency-figure.png",
                      "reports/adaptive-debug/adaptive-debug-figure7.png"}


def test_dvc_draws_both_templates_and_leaves_blank_cells_to_them(tmp_path):
    """A real `dvc plots show` on a scratch repository with the project's templates: every
    line of a wide CSV is a series, the blank cell reaches the template (whose filter drops
    it) and the PNG in the folder is an image plot."""
    dvc = str(Path(sys.executable).with_name("dvc"))
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    for command in (["git", "init", "-q"], [dvc, "init", "-q"]):
        subprocess.run(command, cwd=tmp_path, check=True, env=env)
    (tmp_path / ".dvc" / "plots").mkdir()
    for name in ("lines.json", "categories.json"):
        (tmp_path / ".dvc" / "plots" / name).write_bytes(
            (PACKAGE_ROOT / ".dvc" / "plots" / name).read_bytes())
    folder = tmp_path / "fig"
    folder.mkdir()
    (folder / "m.csv").write_text("threshold,a,b\n0,1,2\nμ−σ,,4\n", encoding="utf-8")
    (folder / "m.png").write_bytes(_png())
    (tmp_path / "k.csv").write_text("k,a\n1,3\n2,5\n")
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"plots": [
        {"fig": {"x": "threshold", "y": ["a", "b"], "template": "categories"}},
        {"k.csv": {"x": "k", "y": ["a"], "template": "lines"}}]}), encoding="utf-8")
    shown = subprocess.run([dvc, "plots", "show", "--json"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=True).stdout
    plots = json.loads(shown)["data"]
    assert set(plots) == {"fig/m.csv", "fig/m.png", "k.csv"}, shown[:500]
    assert plots["fig/m.png"][0]["type"] == "image"
    spec = plots["fig/m.csv"][0]["content"]
    assert spec["encoding"]["x"]["type"] == "ordinal"
    assert spec["transform"] == [{"filter": "isValid(toNumber(datum['dvc_inferred_y_value']))"}]
    values = [(d["field"], d["dvc_inferred_y_value"]) for d in spec["data"]["values"]]
    assert sorted(values) == [("a", ""), ("a", "1"), ("b", "2"), ("b", "4")]
    assert plots["k.csv"][0]["content"]["encoding"]["x"]["type"] == "quantitative"


def _png() -> bytes:
    """A 1×1 PNG."""
    import base64

    return base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8"
                            "BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
