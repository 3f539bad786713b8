"""Covering arrays: the checker, the built-in generator, CSV files, external tools, the CLI."""
from __future__ import annotations

import os
import stat
import sys
from itertools import product

import numpy as np
import pytest
from typer.testing import CliRunner

from lingtest.tasks.consistency.covering import (
    CoverageError,
    check,
    covering_array,
    generate,
    missing_tuples,
    read_ca_csv,
    tuple_count,
    write_ca_csv,
)
from lingtest.flows.cli import app
from lingtest.tasks.core.errors import InputFormatError, LingtestError

# OA(9; 2, 4, 3): rows (a, b, a+b, a+2b) mod 3
OA9 = np.array([[a, b, (a + b) % 3, (a + 2 * b) % 3] for a in range(3) for b in range(3)])


def test_check_accepts_a_known_orthogonal_array() -> None:
    check(OA9, [3, 3, 3, 3], 2)
    assert missing_tuples(OA9, [3, 3, 3, 3], 2) == 0
    assert tuple_count([3, 3, 3, 3], 2) == 54


def test_check_names_the_first_missing_tuple() -> None:
    broken = OA9[1:]  # row (0, 0, 0, 0) gone: its 6 pairs are uncovered
    assert missing_tuples(broken, [3, 3, 3, 3], 2) == 6
    with pytest.raises(CoverageError, match=r"6 2-tuple\(s\).*column 0 = 0, column 1 = 0"):
        check(broken, [3, 3, 3, 3], 2)


def test_check_rejects_out_of_range_and_wrong_width() -> None:
    bad = OA9.copy()
    bad[4, 2] = 3
    with pytest.raises(CoverageError, match=r"row 4, column 2: value 3 out of range \[0, 3\)"):
        check(bad, [3, 3, 3, 3], 2)
    with pytest.raises(CoverageError, match=r"expected \(rows, 5\)"):
        check(OA9, [3, 3, 3, 3, 3], 2)
    assert issubclass(CoverageError, LingtestError)


def test_strength_beyond_the_parameters_is_clamped_to_a_full_factorial() -> None:
    array = generate([2, 3], 5)
    assert len(array) == 6
    check(array, [2, 3], 2)


@pytest.mark.parametrize("case", range(30))
def test_generator_is_valid_on_random_mixed_models(case: int) -> None:
    rng = np.random.default_rng(case)
    t = case % 4 + 1
    k = int(rng.integers(t, 7))
    levels = rng.integers(1, 5 if t < 4 else 4, size=k).tolist()
    array = generate(levels, t, seed=case, optimise=case % 3 != 0)
    check(array, levels, t)
    assert (array[0] == 0).all()
    assert array.dtype.kind == "i" and ((array >= 0) & (array < levels)).all()


def test_sizes_match_best_known_where_cheap() -> None:
    assert len(generate([3] * 4, 2)) == 9  # OA: CAN(2,4,3) = 9
    assert len(generate([3] * 4, 3)) == 27  # OA: CAN(3,4,3) = 27
    assert len(generate([2] * 10, 2)) == 6  # Kleitman-Spencer: CAN(2,10,2) = 6
    assert len(generate([5] * 6, 2)) == 25  # OA over GF(5)
    assert len(generate([4] * 5, 2)) == 16  # OA over GF(4)
    assert len(generate([3] * 13, 2)) == 15  # best known CAN(2,13,3) = 15


def test_row_zero_is_the_original_input_and_generation_is_deterministic() -> None:
    levels = [4, 3, 3, 2, 2, 5]
    first, again = generate(levels, 2, seed=3), generate(levels, 2, seed=3)
    assert (first[0] == 0).all()
    np.testing.assert_array_equal(first, again)
    check(first, levels, 2)


def test_csv_round_trip(tmp_path) -> None:
    path = tmp_path / "ca-9.csv"
    write_ca_csv(OA9, path)
    assert path.read_text().splitlines()[1] == "0,1,1,2"
    np.testing.assert_array_equal(read_ca_csv(path), OA9)


@pytest.mark.parametrize("text, line, problem", [
    ("0,1\n1,x\n", 2, "not an integer"),
    ("0,1\n\n1,0,1\n", 3, "3 values, the first row has 2"),
    ("0,-1\n", 1, "negative value"),
])
def test_malformed_csv_names_the_line(tmp_path, text: str, line: int, problem: str) -> None:
    path = tmp_path / "ca.csv"
    path.write_text(text)
    with pytest.raises(InputFormatError, match=problem) as caught:
        read_ca_csv(path)
    assert caught.value.line == line and str(caught.value).startswith(f"{path}:{line}: ")


def _fake_pict(tmp_path, rows: list[str]) -> str:
    """A stand-in `pict` printing a fixed TSV table and logging its arguments."""
    script = tmp_path / "pict"
    table = "P0\tP1\tP2\n" + "".join(r + "\n" for r in rows)
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"open({str(tmp_path / 'args.txt')!r}, 'w').write(' '.join(sys.argv[1:]))\n"
                      f"sys.stdout.write({table!r})\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_pict_wrapper_parses_relabels_and_checks(tmp_path) -> None:
    rows = ["\t".join(map(str, r)) for r in product([1, 0], [0, 1], [2, 1, 0])]
    pict = _fake_pict(tmp_path, rows)
    array = covering_array([2, 2, 3], 2, seed=7, generator="pict", binary=pict)
    assert array.shape == (12, 3) and (array[0] == 0).all()
    check(array, [2, 2, 3], 3)
    assert (tmp_path / "args.txt").read_text().endswith("/o:2 /r:7")


def test_pict_output_missing_a_tuple_is_rejected(tmp_path) -> None:
    pict = _fake_pict(tmp_path, ["0\t0\t0", "1\t1\t1"])
    with pytest.raises(CoverageError, match="not covered"):
        covering_array([2, 2, 2], 2, generator="pict", binary=pict)


def test_missing_external_binary_names_the_parameter(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LingtestError, match=r"consistency\.generator_binary.*--binary"):
        covering_array([2, 2], 2, generator="pict")
    with pytest.raises(LingtestError, match="unknown covering-array generator 'nope'"):
        covering_array([2, 2], 2, generator="nope")


def test_cli_prints_a_checked_array_and_checks_files(tmp_path) -> None:
    runner = CliRunner()
    printed = runner.invoke(app, ["covering-array", "--values", "3,3,3,3", "--strength", "2"])
    assert printed.exit_code == 0, printed.output
    lines = printed.output.splitlines()
    assert len(lines) == 9 and lines[0] == "0,0,0,0"
    good = tmp_path / "ca-9.csv"
    good.write_text(printed.output)
    ok = runner.invoke(app, ["covering-array", "--values", "3,3,3,3", "--check", str(good)])
    assert ok.exit_code == 0
    assert ok.output.strip() == f"{good}: 9 rows, all 54 2-tuples covered"
    bad = tmp_path / "ca-8.csv"
    bad.write_text("\n".join(lines[1:]) + "\n")
    # errors reach `lingtest`'s main, which prints them as one line with status 2 (the
    # bad-input sweep runs that path: ca-* cases)
    failed = runner.invoke(app, ["covering-array", "--values", "3,3,3,3", "--check", str(bad)])
    assert "column 0 = 0, column 1 = 0" in str(failed.exception)
    wrong = runner.invoke(app, ["covering-array", "--values", "3,x"])
    assert "expected comma-separated integers" in str(wrong.exception)


FAKE_FIPO_CLI = '''
import argparse, itertools, sys
parser = argparse.ArgumentParser(prog="fipo-cli")  # the options the guide uses, no others
parser.add_argument("-t", type=int, required=True)
parser.add_argument("-i", required=True)
parser.add_argument("-o", required=True)
parser.add_argument("-p", action="store_true")
parser.add_argument("-q", action="store_true")
parser.add_argument("--randomize", action="store_true")
args = parser.parse_args()
try:
    levels = [int(v) for v in args.i.split(",")]
except ValueError:
    sys.exit(f"fipo-cli: -i expects comma-separated value counts, got {args.i!r}")
rows = list(itertools.product(*[range(v) for v in levels]))  # exhaustive: covers any t
with open(args.o, "w") as out:
    out.writelines(",".join(map(str, row)) + "\\n" for row in rows)
sys.stderr.write(f"{len(rows)} rows\\n")
'''


def test_cagen_is_called_like_the_guide_calls_fipo_cli(tmp_path, monkeypatch) -> None:
    """A `fipo-cli` on PATH with the real CLI's interface: `-t`, `-i` with the level counts,
    a header-less CSV in `-o` (KomMKonLLM meta-runner/src/payload_generator/ca_generator.py)."""
    script = tmp_path / "fipo-cli"
    script.write_text(f"#!{sys.executable}\n{FAKE_FIPO_CLI}")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    array = covering_array([2, 3, 2], 2, seed=1, generator="cagen")
    assert array.shape == (12, 3) and (array[0] == 0).all()
    check(array, [2, 3, 2], 3)
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('fipo-cli: bad option')\n")
    with pytest.raises(LingtestError, match="cagen: .*exited with 1: fipo-cli: bad option"):
        covering_array([2, 2], 2, generator="cagen")
