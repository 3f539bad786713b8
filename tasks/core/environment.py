"""The locked environment: ``requirements.lock`` pins every package the committed reports
came from; ``make install`` installs with it as pip constraints, ``make lock`` re-resolves
it (the newest versions ``pyproject.toml`` allows, through ``pip install --dry-run
--report``), and a report made in another environment says so in its provenance.

Local version labels (``torch==2.13.0+cpu``) are dropped from the lock: ``==2.13.0`` is
satisfied by the CPU and the CUDA builds alike (PEP 440), and which build a host installs
is its choice (``TORCH`` in the Makefile). ``python -m lingtest.tasks.core.environment`` writes the
lock from a pip report, or from the current environment (``--freeze``).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import re
from pathlib import Path

from lingtest.tasks.core import io
from lingtest.tasks.core.errors import LingtestError

LOCK_FILE = "requirements.lock"
HEADER = ("# The versions lingtest's committed reports came from: `make install` installs with\n"
          "# these as pip constraints; `make lock` re-resolves them. Generated; do not edit.\n")
SELF = "lingtest"
TOOLS = {"pip", "setuptools", "wheel"}  # the installer's own, upgraded before it installs
log = logging.getLogger(__name__)
_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*$")


def canonical(name: str) -> str:
    """PEP 503's normalised name (``vaderSentiment`` → ``vadersentiment``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def public_version(version: str) -> str:
    """The version without its local label (``2.13.0+cpu`` → ``2.13.0``)."""
    return version.split("+", 1)[0]


def lock_text(pins: dict[str, str]) -> str:
    """The lock file's text: one ``name==version`` per package, sorted by name."""
    lines = [f"{name}=={public_version(version)}" for name, version in
             sorted(pins.items(), key=lambda kv: canonical(kv[0]))
             if canonical(name) != SELF and canonical(name) not in TOOLS]
    return HEADER + "\n".join(lines) + "\n"


def read_lock(path: Path) -> dict[str, str]:
    """Canonical name → version of a lock file; a malformed line is one error naming it."""
    pins = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            raise LingtestError(f"{path}:{number}: {line!r} is not `name==version`; fix: "
                                "`make lock` rewrites the file")
        pins[canonical(match.group(1))] = match.group(2)
    return pins


def installed() -> dict[str, str]:
    """Canonical name → version of every installed distribution."""
    return {canonical(d.metadata["Name"]): d.version
            for d in importlib.metadata.distributions() if d.metadata["Name"]}


def lock_mismatches(lock: dict[str, str], present: dict[str, str]) -> list[str]:
    """``name version (locked X)`` for each locked package installed at another version;
    packages the lock names but this host has not installed (extras) are not counted."""
    return [f"{name} {present[name]} (locked {version})" for name, version in sorted(
        lock.items()) if name in present and public_version(present[name]) != version]


def environment_note(root: Path) -> dict[str, str]:
    """A report's ``environment warning`` naming each package installed at another version
    than the lock says (logged too); nothing when they match, so reports made in the locked
    environment read as they did."""
    path = root / LOCK_FILE
    if not path.is_file():
        return {"environment warning": f"no {LOCK_FILE}: the package versions are not pinned"}
    differing = lock_mismatches(read_lock(path), installed())
    if not differing:
        return {}
    log.warning("the installed packages differ from %s (%d): %s; results may differ from the "
                "committed reports (make install; make lock after a deliberate upgrade)",
                LOCK_FILE, len(differing), ", ".join(differing[:10]))
    return {"environment warning": (f"{len(differing)} packages differ from {LOCK_FILE} "
                                    f"(results may differ from the committed reports): "
                                    + ", ".join(differing[:12])
                                    + (", …" if len(differing) > 12 else ""))}


def pins_from_report(report: Path) -> dict[str, str]:
    """Name → version of every package a ``pip install --dry-run --report`` would install."""
    data = json.loads(report.read_text(encoding="utf-8"))
    return {item["metadata"]["name"]: item["metadata"]["version"] for item in data["install"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write requirements.lock.")
    parser.add_argument("lock", type=Path)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--report", type=Path, help="a pip --dry-run --report JSON")
    source.add_argument("--freeze", action="store_true", help="the installed packages")
    parser.add_argument("--pin", action="append", default=[],
                        help="name==version added as is (a package installed --no-deps)")
    args = parser.parse_args(argv)
    pins = pins_from_report(args.report) if args.report else {
        d.metadata["Name"]: d.version for d in importlib.metadata.distributions()
        if d.metadata["Name"]}
    for pin in args.pin:
        name, _, version = pin.partition("==")
        pins[name] = version
    io.write_text(args.lock, lock_text(pins))


if __name__ == "__main__":
    main()
