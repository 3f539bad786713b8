"""A throwaway PostgreSQL server for the tests (Debian's postgresql; ``.ci/run`` installs it).

PostgreSQL refuses to run as root, so as root the server runs as the ``postgres`` user.
Missing binaries fail the tests that need them instead of skipping: a skip would hide that
the PostgreSQL path is untested.
"""
from __future__ import annotations

import glob
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


def find_bin_dir() -> Path | None:
    """The folder holding initdb, pg_ctl and createdb, or None."""
    on_path = shutil.which("initdb")
    candidates = [Path(os.path.realpath(on_path)).parent] if on_path else []
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for folder in candidates:
        if all((folder / tool).exists() for tool in ("initdb", "pg_ctl", "createdb")):
            return folder
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _runner() -> tuple[list[str], int | None]:
    """Command prefix that drops root, and the uid to own the data folder (None: keep)."""
    if os.geteuid() != 0:
        return [], None
    try:
        uid = pwd.getpwnam("postgres").pw_uid
    except KeyError:
        pytest.fail("running as root and there is no 'postgres' user to run PostgreSQL as; "
                    "install Debian's postgresql package (see .ci/run)")
    return ["runuser", "-u", "postgres", "--"], uid


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, check=False, cwd=cwd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")


def start_server() -> tuple[str, Path, list[str]]:
    """Start a server; returns its URL, its folder and the ``pg_ctl stop`` command."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.fail("PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in "
                    "/usr/lib/postgresql/*/bin: run .ci/run, or apt-get install postgresql")
    prefix, uid = _runner()
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
