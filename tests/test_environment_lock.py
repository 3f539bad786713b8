"""The environment lock (constraints.txt): it pins what pyproject.toml declares, agrees with
its hard pins, matches the venv the tests run in, and a report made elsewhere says so."""
from __future__ import annotations

import tomllib
from importlib.metadata import version

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tasks.core import publish
from tasks.core.paths import PACKAGE_ROOT


def _locked() -> dict[str, str]:
    pins = {}
    for line in (PACKAGE_ROOT / "constraints.txt").read_text().splitlines():
        name, sep, locked = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[canonicalize_name(name)] = locked
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((PACKAGE_ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for reqs in project["optional-dependencies"].values() for r in reqs]
    return [Requirement(r) for r in [*project["dependencies"], *extras]]


def test_the_lock_pins_every_declared_package_within_its_range():
    locked = _locked()
    for requirement in _declared():
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement.name} is not in constraints.txt: run `make lock`"
        assert requirement.specifier.contains(locked[name], prereleases=True), (
            f"constraints.txt pins {name}=={locked[name]}, outside pyproject's {requirement}")
    assert locked["prefect"] == "3.8.8" and locked["fastapi"] == "0.150.0"


def test_the_tests_run_in_the_locked_environment():
    """What the committed reports came from is what the tests check (else: `make install`,
    or `make lock` after a deliberate upgrade)."""
    drift = [f"{r.name} {version(r.name)} (locked {_locked()[canonicalize_name(r.name)]})"
             for r in _declared()
             if (r.marker is None or r.marker.evaluate())
             and canonicalize_name(r.name) in _locked()
             and version(r.name).split("+")[0] != _locked()[canonicalize_name(r.name)]]
    assert not drift, drift


def test_a_report_made_off_the_lock_carries_a_warning(tmp_path, monkeypatch):
    lock = tmp_path / "constraints.txt"
    pandas = version("pandas")
    lock.write_text(f"# a lock\npandas==0.0.1\nnumpy=={version('numpy')}\n"
                    "no-such-package-here==1.0\n")
    assert publish.environment_drift(lock) == [f"pandas {pandas} (locked 0.0.1)"]
    note = publish.environment_note(lock)
    assert note == {"environment differs from constraints.txt (warning)":
                    f"pandas {pandas} (locked 0.0.1)"}
    # The provenance every report writes carries it; in the locked environment it does not.
    from tasks.core.config import load_params
    from tasks.core.paths import Workspace

    (tmp_path / "params.yaml").write_text((PACKAGE_ROOT / "params.yaml").read_text())
    params, workspace = load_params(tmp_path), Workspace(tmp_path)
    assert "environment differs from constraints.txt (warning)" not in publish.provenance(
        params, workspace, "data")
    monkeypatch.setattr(publish, "LOCK_FILE", lock)
    assert publish.provenance(params, workspace, "data")[
        "environment differs from constraints.txt (warning)"] == f"pandas {pandas} (locked 0.0.1)"
