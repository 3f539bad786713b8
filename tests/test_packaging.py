"""The installed distribution's one top-level name is ``lingtest``: the repository's tasks/
and flows/ install as ``lingtest.tasks`` and ``lingtest.flows``, so a project with its own
``tasks.py`` (invoke's and Celery's convention) or ``flows`` package keeps it, and lingtest
keeps working beside it."""
from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from lingtest.tasks.core.paths import PACKAGE_ROOT

FOLDERS = {"lingtest": "lingtest", "tasks": "lingtest.tasks", "flows": "lingtest.flows"}


def package_folders() -> set[str]:
    """Every folder of the three that holds code or package data, as its installed name."""
    found = set()
    for folder, name in FOLDERS.items():
        for path in [PACKAGE_ROOT / folder, *(PACKAGE_ROOT / folder).rglob("*")]:
            if path.is_dir() and path.name != "__pycache__" and any(
                    p.is_file() for p in path.iterdir()):
                relative = path.relative_to(PACKAGE_ROOT / folder).parts
                found.add(".".join([name, *relative]))
    return found


def test_pyproject_installs_every_package_folder_under_lingtest() -> None:
    setuptools = tomllib.loads((PACKAGE_ROOT / "pyproject.toml").read_text())["tool"][
        "setuptools"]
    assert set(setuptools["packages"]) == package_folders()
    assert setuptools["package-dir"] == {name: folder for folder, name in FOLDERS.items()}


def test_the_wheel_holds_lingtest_alone(tmp_path: Path) -> None:
    """Built from a copy of the sources (a build writes build/ beside them)."""
    import shutil

    source = tmp_path / "source"
    for folder in FOLDERS:
        shutil.copytree(PACKAGE_ROOT / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PACKAGE_ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "--quiet", "-w", str(tmp_path / "wheel"),
                            str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheel").glob("lingtest-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {
        "lingtest"}
    for expected in ("lingtest/api.py", "lingtest/py.typed", "lingtest/report_template.html",
                     "lingtest/tasks/core/config.py", "lingtest/flows/cli.py",
                     "lingtest/tasks/capabilities/specs/LC4.yaml"):
        assert expected in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "lingtest = lingtest.flows.cli:main" in zipfile.ZipFile(wheel).read(
        entry_points).decode()


def test_a_project_with_its_own_tasks_and_flows_keeps_them(tmp_path: Path) -> None:
    """In a folder with its own ``tasks.py`` and ``flows/`` (first on sys.path, as a
    notebook's or script's folder is), lingtest imports and lists its stages whichever is
    imported first, and the project's modules stay its own."""
    (tmp_path / "tasks.py").write_text("def hello():\n    return 'my tasks'\n")
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "__init__.py").write_text("NAME = 'my flows'\n")
    lingtest_side = ("import lingtest, lingtest.flows.cli\n"
                     "from lingtest.flows.registry import PLUGINS\n"
                     "print(sorted(p.name for p in PLUGINS))\n")
    mine = "import tasks, flows\nprint(tasks.hello(), flows.NAME)\n"
    for script in (mine + lingtest_side, lingtest_side + mine):
        done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "my tasks my flows" in done.stdout
        assert ("['adaptive', 'capabilities', 'consistency', 'contrastive', 'data', 'repair']"
                in done.stdout)
    stages = subprocess.run([str(Path(sys.executable).with_name("lingtest")), "stages"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert stages.returncode == 0, stages.stderr
    assert "capabilities" in stages.stdout
