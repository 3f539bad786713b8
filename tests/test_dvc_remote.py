"""The team workflow with a DVC remote (a local folder here): one host reproduces and
pushes; a fresh clone pulls (`make run`'s first step: `dvc pull --allow-missing`) and has
every output with `dvc status` clean and nothing recomputed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

DVC = str(Path(sys.executable).with_name("dvc"))
STAGE = """stages:
  count:
    cmd: python -c "import pathlib; pathlib.Path('out').mkdir(exist_ok=True);
      pathlib.Path('out/words.txt').write_text(str(len(open('words.txt').read().split())));
      open('{marker}', 'a').write('ran\\n')"
    deps:
      - words.txt
    outs:
      - out
"""


def sh(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "DVC_NO_ANALYTICS": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(args, cwd=cwd, env=env, check=True, capture_output=True,
                          text=True, timeout=300).stdout


def test_a_fresh_clone_pulls_instead_of_recomputing(tmp_path):
    producer, remote, marker = tmp_path / "a", tmp_path / "remote", tmp_path / "ran.log"
    producer.mkdir()
    sh(producer, "git", "init", "-q")
    sh(producer, DVC, "init", "-q")
    sh(producer, DVC, "remote", "add", "-d", "storage", str(remote))
    (producer / "dvc.yaml").write_text(STAGE.format(marker=marker))
    (producer / "words.txt").write_text("one two three\n")
    sh(producer, DVC, "repro", "-q")
    assert marker.read_text() == "ran\n"
    sh(producer, DVC, "push", "-q")
    sh(producer, "git", "add", "-A")
    sh(producer, "git", "commit", "-q", "-m", "first run")

    clone = tmp_path / "b"
    sh(tmp_path, "git", "clone", "-q", str(producer), str(clone))
    assert not (clone / "out").exists()
    sh(clone, DVC, "remote", "default")  # the remote travels with the clone (.dvc/config)
    sh(clone, DVC, "pull", "--allow-missing", "-q")
    assert (clone / "out" / "words.txt").read_text() == "3"
    assert "up to date" in sh(clone, DVC, "status")
    sh(clone, DVC, "repro", "-q")
    assert marker.read_text() == "ran\n"  # nothing recomputed
