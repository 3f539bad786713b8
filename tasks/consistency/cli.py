"""KomMKonLLM's commands outside the stage: the oracle over a CSV of answers, and covering
arrays (printed, or an existing one checked) as the guide's tools make them."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from lingtest.tasks.core.errors import LingtestError

app = typer.Typer()


@app.command("classify-answers")
def classify_answers(
        file: str = typer.Argument(..., help="CSV with one LLM response per row."),
        column: str = typer.Option(..., "--column", help="Column holding the responses."),
        output: str | None = typer.Option(None, "--output",
                                        help="Write here (default: replace FILE); a folder "
                                             "(or a path ending in /) gets a file of FILE's "
                                             "name."),
        overwrite: bool = typer.Option(False, "--overwrite",
                                       help="Replace a `parsed` column FILE already has "
                                            "(refused without it)."),
        oracle: str = typer.Option("guide", "--oracle",
                                   help="guide (the guide's first-word rule) | lenient | "
                                   "strict, as consistency.oracle")) -> None:
    """Add a `parsed` column (true/false/undefined, the consistency oracle) to a CSV."""
    from lingtest.tasks.consistency.oracle import MODES, classified_path, classify_csv, oracle_version

    if oracle not in MODES:
        raise LingtestError(f"classify-answers --oracle {oracle!r} is not one of "
                            f"{', '.join(MODES)}; fix: --oracle guide (the guide's default)")
    version = oracle_version(oracle)
    folder = classified_path(file, output).parent
    new_folder = not folder.exists()  # made, and said: a typo in --output shows at once
    counts = classify_csv(file, column, output, oracle, overwrite)
    if new_folder:
        typer.echo(f"lingtest classify-answers: created the folder {folder}", err=True)
    typer.echo(f"oracle {oracle} v{version}: wrote {classified_path(file, output)}")
    for value, count in counts.items():
        typer.echo(f"{value}\t{count}")


@app.command("covering-array")
def covering_array_command(
        values: str = typer.Option(..., "--values", help="Levels per parameter, e.g. 3,3,2,2."),
        strength: int = typer.Option(2, "--strength", help="Interaction strength t."),
        seed: int = typer.Option(0, "--seed"),
        generator: str = typer.Option("builtin", "--generator",
                                      help="builtin, pict, acts or cagen."),
        binary: str | None = typer.Option(None, "--binary",
                                          help="Path of the external generator."),
        check_file: str | None = typer.Option(None, "--check",
                                              help="Verify this ca-N.csv instead."),
        max_tuples: Optional[int] = typer.Option(
            None, "--max-tuples", help="Refuse a model with more t-tuples than this before "
            "generating or checking (about 30 µs each; default 500,000, about 15 s).")) -> None:
    """Print a covering array as CSV (row 0 = original input), or --check an existing one."""
    from lingtest.tasks.consistency import covering

    try:
        levels = [int(v) for v in values.split(",")]
    except ValueError:
        raise LingtestError(f"--values {values[:80]!r}: expected comma-separated integers "
                            f">= 1, e.g. --values 3,3,2,2") from None
    if strength > len(levels):
        raise LingtestError(f"--strength {strength}: an array over {len(levels)} parameter(s) "
                            f"(--values {values}) covers at most {len(levels)}-tuples; fix: "
                            f"--strength {len(levels)} or less, or give more --values")
    max_tuples = covering.DEFAULT_MAX_TUPLES if max_tuples is None else max_tuples
    if max_tuples < 1:
        raise LingtestError(f"--max-tuples {max_tuples}: give a bound >= 1 (default "
                            f"{covering.DEFAULT_MAX_TUPLES:,})")
    count = covering.check_size(levels, strength, max_tuples, "--max-tuples")
    if check_file:
        array = covering.read_ca_csv(Path(check_file).expanduser())
        covering.check(array, levels, strength)
        t = min(strength, len(levels))
        typer.echo(f"{check_file}: {len(array)} rows, all {count} {t}-tuples covered")
        return
    array = covering.covering_array(levels, strength, seed, generator,
                                    str(Path(binary).expanduser()) if binary else None)
    typer.echo(covering.ca_csv_text(array), nl=False)
