"""A throwaway PostgreSQL server for the tests.

The server binaries come first from the ``pgserver`` wheel (the ``test`` extra bundles
PostgreSQL in the venv, so no root and no apt are needed), else from PATH or Debian's
``/usr/lib/postgresql/*/bin``. PostgreSQL refuses to run as root, so as root the server runs
as the ``postgres`` user (created if missing), from a copy of the binaries that user can read
when the venv is not readable by it. Missing binaries fail the tests that need them instead of
skipping: a skip would hide that the PostgreSQL path is untested.
"""
from __future__ import annotations

import atexit
import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

DATABASE = "lingtest"


TOOLS = ("initdb", "pg_ctl", "createdb", "postgres")


def bundled_bin_dir() -> Path | None:
    """The ``pgserver`` wheel's ``pginstall/bin`` in this venv, or None when not installed."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "pginstall" / "bin"


def find_bin_dir() -> Path | None:
    """The folder holding the server tools: the venv's bundled build first, then the system's."""
    bundled = bundled_bin_dir()
    candidates = [bundled] if bundled is not None else []
    on_path = shutil.which("initdb")
    candidates += [Path(os.path.realpath(on_path)).parent] if on_path else []
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for folder in candidates:
        if all((folder / tool).exists() for tool in TOOLS):
            return folder
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _postgres_uid() -> int:
    """The uid of the ``postgres`` user, created as a system user when missing (we are root)."""
    try:
        return pwd.getpwnam("postgres").pw_uid
    except KeyError:
        _run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
              "postgres"], Path("/"))
        return pwd.getpwnam("postgres").pw_uid


def _runner() -> tuple[list[str], int | None]:
    """Command prefix that drops root, and the uid to own the data folder (None: keep)."""
    if os.geteuid() != 0:
        return [], None
    return ["runuser", "-u", "postgres", "--"], _postgres_uid()


def _runnable_bin_dir(bin_dir: Path, prefix: list[str]) -> Path:
    """``bin_dir``, or a world-readable copy of its install when the server user cannot run it.

    As root the server runs as ``postgres``, which cannot enter e.g. a venv under /root. The
    wheel's install is relocatable: it finds lib/ and share/ next to bin/, and its shared
    libraries through the RPATH ``$ORIGIN/../../../pgserver.libs``, so the copy keeps
    ``<package>/pginstall`` and ``pgserver.libs`` side by side.
    """
    probe = subprocess.run(prefix + [str(bin_dir / "postgres"), "--version"], check=False,
                           capture_output=True, timeout=60)
    if probe.returncode == 0 or bin_dir != bundled_bin_dir():  # system installs: as they are
        return bin_dir
    install, package = bin_dir.parent, bin_dir.parent.parent
    top = Path(tempfile.mkdtemp(prefix="lingtest-pginstall-"))
    atexit.register(shutil.rmtree, top, True)
    shutil.copytree(install, top / package.name / install.name)
    libs = package.parent / f"{package.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, top / libs.name)
    for folder in [top, *(p for p in top.rglob("*") if p.is_dir())]:
        folder.chmod(0o755)
    return top / package.name / install.name / "bin"


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, check=False, cwd=cwd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")


def start_server() -> tuple[str, Path, list[str]]:
    """Start a server; returns its URL, its folder and the ``pg_ctl stop`` command."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in "
                    "/usr/lib/postgresql/*/bin: pip install -e '.[test]' (bundles them via "
                    "pgserver), or apt-get install postgresql")
    prefix, uid = _runner()
    bin_dir = _runnable_bin_dir(bin_dir, prefix)
    root = Path(tempfile.mkdtemp(prefix="lingtest-pg-"))
    if uid is not None:
        os.chown(root, uid, -1)
    data, port = root / "data", _free_port()
    pg_ctl = prefix + [str(bin_dir / "pg_ctl"), "-D", str(data)]
    stop = pg_ctl + ["-m", "immediate", "-w", "stop"]
    options = (f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
               "-c synchronous_commit=off -c full_page_writes=off")
    try:
        _run(prefix + [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                       "-E", "UTF8", "--no-locale", "--no-sync"], root)
        _run(pg_ctl + ["-o", options, "-l", str(root / "server.log"), "-w", "-t", "60", "start"],
             root)
        _run(prefix + [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port),
                       "-U", "postgres", DATABASE], root)
    except BaseException:  # pytest.fail raises a BaseException: clean up, then fail
        stop_server(root, stop)
        raise
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/{DATABASE}", root, stop


def stop_server(root: Path, stop: list[str]) -> None:
    """Stop the server if it runs, and delete its folder."""
    if (root / "data" / "postmaster.pid").exists():
        subprocess.run(stop, check=False, cwd=root, capture_output=True, timeout=60)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a fresh PostgreSQL database, stopped and deleted at the end of the session."""
    url, root, stop = start_server()
    try:
        yield url
    finally:
        stop_server(root, stop)
