"""Wrappers for external covering-array generators: PICT, ACTS and CAgen.

They are optional (none is packaged): each runs only when its binary/jar is given
(``consistency.generator_binary``, CLI ``--binary``) or found on PATH. Every wrapper writes the
model with parameters ``P0..P{k-1}`` whose values are the indices ``0..levels[j]-1`` and parses
the tool's table back into value indices; ``covering_array`` then relabels row 0 to zeros and
checks coverage, so a tool's quirks cannot slip an invalid array through.
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from lingtest.tasks.core.errors import LingtestError

PARAM = "consistency.generator_binary"
DEFAULT_BINARIES = {"pict": "pict", "acts": "acts.jar", "cagen": "fipo-cli"}
TIMEOUT_S = 600


def find_binary(generator: str, binary: str | None) -> str:
    """The executable (or jar) to run: ``binary`` if given, else the default name on PATH."""
    if generator not in DEFAULT_BINARIES:
        raise LingtestError(f"unknown covering-array generator {generator!r} (set "
                            f"consistency.generator to builtin, {', '.join(DEFAULT_BINARIES)})")
    name = binary or DEFAULT_BINARIES[generator]
    found = name if Path(name).is_file() else shutil.which(name)
    if found is None and name.endswith(".jar"):  # a jar is a plain file: look along PATH
        found = next((str(Path(d) / name) for d in os.environ.get("PATH", "").split(os.pathsep)
                      if (Path(d) / name).is_file()), None)
    if found is None:
        raise LingtestError(f"{generator}: {name!r} not found (set {PARAM} / --binary to the "
                            f"path of the {generator} executable, put it on PATH, or use "
                            f"--generator builtin)")
    if not found.endswith(".jar") and not os.access(found, os.X_OK):
        raise LingtestError(f"{generator}: {found} is not executable (set {PARAM} / --binary "
                            f"to the {generator} program, or chmod +x it)")
    return found


def _run(command: list[str], generator: str) -> str:
    """Run a tool, returning stdout; a failure becomes one LingtestError with its stderr."""
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LingtestError(f"{generator}: could not run {command[0]}: {error} "
                            f"(check {PARAM})") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise LingtestError(f"{generator}: {' '.join(command)} exited with "
                            f"{done.returncode}: {tail[0]}")
    return done.stdout


def _table(text: str, delimiter: str, k: int, generator: str) -> np.ndarray:
    """Parse a header + rows table of value indices (``#`` comment lines skipped)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    rows = list(csv.reader(io.StringIO("\n".join(lines[1:])), delimiter=delimiter))
    try:
        array = np.array([[int(v) for v in row] for row in rows], dtype=np.int64)
    except ValueError as error:
        raise LingtestError(f"{generator}: unexpected output ({error}); expected a header line "
                            f"then one row of value indices per test") from None
    if len(rows) and array.shape != (len(rows), k):
        raise LingtestError(f"{generator}: output rows do not all have {k} values")
    return array.reshape(len(rows), k)


def pict(levels: list[int], strength: int, seed: int, binary: str) -> np.ndarray:
    """Microsoft PICT: model ``P0: 0, 1, 2`` per line, ``/o:t /r:seed``, TSV with a header."""
    with tempfile.TemporaryDirectory(prefix="lingtest-pict-") as tmp:
        model = Path(tmp) / "model.txt"
        model.write_text("".join(f"P{j}: {', '.join(map(str, range(v)))}\n"
                                 for j, v in enumerate(levels)), encoding="utf-8")
        out = _run([binary, str(model), f"/o:{strength}", f"/r:{seed}"], "pict")
    return _table(out, "\t", len(levels), "pict")


def acts(levels: list[int], strength: int, seed: int, binary: str) -> np.ndarray:
    """NIST ACTS (IPOG): ``java -Dalgo=ipog -Ddoi=t -Doutput=csv -jar acts.jar in out``.

    ACTS has no seed option; ``seed`` is accepted for a uniform interface and ignored.
    """
    del seed
    with tempfile.TemporaryDirectory(prefix="lingtest-acts-") as tmp:
        model, out = Path(tmp) / "model.txt", Path(tmp) / "out.csv"
        params = "".join(f"P{j} (int): {','.join(map(str, range(v)))}\n"
                         for j, v in enumerate(levels))
        model.write_text(f"[System]\nName: lingtest\n\n[Parameter]\n{params}\n[Relation]\n\n"
                         f"[Constraint]\n", encoding="utf-8")
        _run(["java", "-Dalgo=ipog", f"-Ddoi={strength}", "-Doutput=csv", "-jar", binary,
              str(model), str(out)], "acts")
        return _table(out.read_text(encoding="utf-8"), ",", len(levels), "acts")


def cagen(levels: list[int], strength: int, seed: int, binary: str) -> np.ndarray:
    """CAgen's FIPOG command-line tool, called as the guide calls it (KomMKonLLM
    ``meta-runner/src/payload_generator/ca_generator.py``, ``CaGenExecutor``):
    ``fipo-cli -t T -i 3,3,2 -p -q -o out.csv``; ``-i`` takes the level counts, not a model
    file, and the output is a header-less CSV of value indices.

    The guide also passes ``--randomize``, which has no seed option: it is left out so that
    the same levels give the same array (``seed`` is accepted and ignored).
    """
    del seed
    with tempfile.TemporaryDirectory(prefix="lingtest-cagen-") as tmp:
        out = Path(tmp) / "out.csv"
        _run([binary, "-t", str(strength), "-i", ",".join(map(str, levels)), "-p", "-q",
              "-o", str(out)], "cagen")
        if not out.is_file():
            raise LingtestError(f"cagen: {binary} wrote no {out.name} (check {PARAM}: it must "
                                f"be CAgen's fipo-cli)")
        return _headerless(out.read_text(encoding="utf-8"), len(levels), "cagen")


def _headerless(text: str, k: int, generator: str) -> np.ndarray:
    """Parse a header-less CSV of value indices (a stray ``P0,P1,…`` header is skipped)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if lines and not lines[0].replace(",", "").replace(" ", "").isdigit():
        lines = lines[1:]
    return _table("\n".join(["header", *lines]), ",", k, generator)


def run_external(generator: str, levels: list[int], strength: int, seed: int,
                 binary: str | None) -> np.ndarray:
    """Run one external generator; raw rows (not yet relabelled or checked)."""
    found = find_binary(generator, binary)
    return {"pict": pict, "acts": acts, "cagen": cagen}[generator](levels, strength, seed,
                                                                   found)
