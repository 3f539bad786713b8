"""The bad-input sweeps' one harness (``test_bad_input*.py`` import it; no copies).

A case runs ``lingtest ...`` in-process against a throw-away project and asserts
(a) exit status 2, (b) exactly one ``lingtest: error:`` line holding the case's needle (the
file/line/key and, where the case names it, the fix), no traceback, (c) nothing under
data/, reports/ or inputs/ created or changed, and (d) for ``run``: no flow started (the
stage's flow is replaced by a recorder, so a case that slips past validation fails fast
instead of running for minutes).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from lingtest.tasks.core.paths import PACKAGE_ROOT
from lingtest.tasks.models.sentiment import MINILM_CONFIG

NOT_UTF8 = b"caf\xe9 \xff\xfe\n"
# a case's file contents besides bytes (None: remove the file): a named pipe, a folder, a
# symbolic link (``link("/dev/zero")``); a key "$NAME" sets the environment variable NAME
FIFO, FOLDER, LINK = "<fifo>", "<folder>", "<link>"


REVIEW_TREE = (b",topic,input,output,label,labeler,description\n"
               b"m1,/Rooms,,,topic_marker,a,\nt1,/Rooms,Clean room,pos,pass,a,\n")


def link(target: str) -> str:
    return LINK + target


def run(stage: str, *sets: str) -> list[str]:
    return ["run", stage, *[arg for s in sets for arg in ("--set", s)]]


def _snapshot(root: Path) -> dict[str, tuple[int, str]]:
    out = {}
    for top in ("data", "reports", "inputs"):
        for path in sorted((root / top).rglob("*")):
            if path.is_file():
                out[str(path.relative_to(root))] = (path.stat().st_mtime_ns,
                                                    hashlib.sha256(path.read_bytes()).hexdigest())
    return out


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mirror: Path) -> Path:
    """A project with params, and earlier outputs under data/ and reports/ to protect."""
    (tmp_path / "params").mkdir()
    (tmp_path / "params.yaml").write_bytes((PACKAGE_ROOT / "params.yaml").read_bytes())
    raw = tmp_path / "data" / "raw"
    raw.mkdir(parents=True)
    (raw / "MANIFEST.tsv").write_text("path\tsha256\tbytes\tasset\tsource\n"
                                      "sst/a\t00\t1\tsst\tmirror\nmrpc/b\t00\t1\tmrpc\tmirror\n")
    (tmp_path / "data" / "processed").mkdir()
    (tmp_path / "data" / "processed" / "sst.parquet").write_bytes(b"earlier table")
    (raw / "adatest").mkdir()  # the data stage's copy of the tree the adaptive stage reads
    (raw / "adatest" / "imdb_hotel_conversion.csv").write_bytes(
        (mirror / "adatest" / "imdb_hotel_conversion.csv").read_bytes())
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "metrics.json").write_text(json.dumps({"earlier": 1}))
    (tmp_path / "inputs").mkdir()
    trained = tmp_path / "data" / "models" / "minilm-sst2"  # train-sentiment's output
    trained.mkdir(parents=True)
    (trained / MINILM_CONFIG).write_text("{}")
    monkeypatch.setenv("LINGTEST_ROOT", str(tmp_path))
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)  # an openai: spec names its server
    monkeypatch.delenv("LINGTEST_MAX_INPUT_MB", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def lingtest(argv: list[str], monkeypatch, capsys) -> tuple[int, str, list[str]]:
    """Run the CLI's ``main`` in-process: (exit status, stdout+stderr, stages started)."""
    import lingtest.flows.stage
    from lingtest.flows import cli

    started: list[str] = []
    monkeypatch.setattr(lingtest.flows.stage, "run_stage", lambda stage, *a, **k: started.append(stage))
    monkeypatch.setattr(sys, "argv", ["lingtest", *argv])
    try:
        cli.main()
        status = 0
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 1
    except Exception as error:  # noqa: BLE001 - a raw traceback is exactly what we test for
        status, captured = -1, capsys.readouterr()
        return status, f"Traceback: {type(error).__name__}: {error}", started
    captured = capsys.readouterr()
    return status, captured.out + captured.err, started


def write_files(project: Path, files: dict, monkeypatch) -> None:
    """A case's files: bytes written, None removed, FIFO a named pipe, FOLDER a folder,
    ``link(target)`` a symbolic link; "$NAME": the environment variable NAME set."""
    for rel, content in files.items():
        if rel.startswith("$"):
            monkeypatch.setenv(rel[1:], content)
            continue
        target = project / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if content is None or isinstance(content, str) and target.exists():
            target.unlink()
        if content == FIFO:
            os.mkfifo(target)
        elif content == FOLDER:
            target.mkdir(exist_ok=True)
        elif isinstance(content, str) and content.startswith(LINK):
            target.symlink_to(content[len(LINK):])
        elif content is not None:
            target.write_bytes(content)


def assert_one_clear_error(argv: list[str], files: dict, needle: str, project: Path,
                           monkeypatch, capsys) -> str:
    """The sweep's contract for one case; the output, for a caller's further checks.
    ``{root}`` in ``needle`` stands for the project folder (``~`` there in such a case)."""
    write_files(project, files, monkeypatch)
    needle = needle.replace("{root}", str(project))
    if any("~/" in arg for arg in argv):
        monkeypatch.setenv("HOME", str(project))  # `~/inputs/...` is the project's inputs/
    before = _snapshot(project)
    status, output, started = lingtest(argv, monkeypatch, capsys)
    assert "Traceback" not in output, output
    assert not started, f"no error: stage {started} started ({output[-300:]})"
    assert status == 2, (status, output)
    errors = [line for line in output.splitlines() if line.startswith("lingtest: error:")]
    assert len(errors) == 1, output
    assert needle in errors[0], output
    assert "tok3n" not in output, "a webhook URL's token was echoed"
    assert len(output.strip().splitlines()) <= 3, output
    assert _snapshot(project) == before, "an output file was created or changed"
    return output
