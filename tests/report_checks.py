"""Checks of a run's ``report.html`` (lingtest.report) against the run folder it was written
from: plain functions taking a finished run's folder, so that a test which already made a
real run (tests/test_python_api.py) checks its report without paying for another run."""
from __future__ import annotations

import re
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd

IMAGE_SUFFIXES = (".png", ".svg")


class Page(HTMLParser):
    """The report's tags as a browser reads them (entities decoded): its ids and links, the
    images per ``<section id=…>``, and the header and data cells per part of the page (the
    latest section or heading with an id: a method's side-by-side table, its failures)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.ids: set[str] = set()
        self.section: str | None = None
        self.part: str | None = None
        self.headers: dict[str | None, list[str]] = defaultdict(list)
        self.cells: dict[str | None, list[str]] = defaultdict(list)
        self.images: dict[str | None, list[str]] = defaultdict(list)
        self._cell: list[str] | None = None
        self._kind = ""

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attributes = {name: value or "" for name, value in attrs}
        self.tags.append((tag, attributes))
        if "id" in attributes:
            self.ids.add(attributes["id"])
            if tag in ("section", "h2", "h3", "h4"):
                self.part = attributes["id"]
        if tag == "section":
            self.section = attributes.get("id")
        elif tag in ("th", "td"):
            self._cell, self._kind = [], tag
        elif tag == "img":
            self.images[self.section].append(attributes.get("src", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self.section = self.part = None
        elif tag in ("th", "td") and self._cell is not None:
            text = "".join(self._cell).strip()
            (self.headers if tag == "th" else self.cells)[self.part].append(text)
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def figure_files(folder: Path, method: str) -> list[Path]:
    """The images the method's own report holds (hidden staging leftovers aside)."""
    own = folder / "reports" / method
    return [p for p in own.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(own).parts)]


def check_report(folder: Path) -> None:
    """``folder/report.html`` shows every method of the run: its side-by-side table with
    each model's column, its worst failing cases with their texts, every figure of the
    method's report embedded; it loads nothing from elsewhere and names no machine path."""
    import lingtest
    from lingtest.flows.registry import stage_method
    from lingtest.tasks.core.publish import slug

    folder = Path(folder).resolve()
    result = lingtest.load(folder)
    path = folder / "report.html"
    assert path.is_file(), f"{path} was not written"
    page = parse(path)

    sections = [attrs.get("id") for tag, attrs in page.tags if tag == "section"]
    for method in result.methods:
        section = f"method-{slug(method)}"
        assert sections.count(section) == 1, f"{method}: sections {sections}"
        table = result.table(method)
        for model in [*result.models, *result.baselines.get(method, [])]:
            assert any(model in column for column in table.columns), (model, list(table.columns))
        missing = [c for c in table.columns
                   if c not in page.headers[f"{section}-side-by-side"]]
        assert not missing, f"{method}: side-by-side columns not shown: {missing}"

        failures = result.failures(method)
        if len(failures):
            texts = [c for c in stage_method(method).contract.texts if c in failures.columns]
            shown = {str(failures.iloc[0][c]) for c in texts} - {"", "nan"}
            assert shown and shown <= set(page.cells[f"{section}-failures"]), (
                f"{method}: the worst failing case's texts {shown} are not in the report")

        images = page.images[section]
        assert len(images) == len(figure_files(folder, method)), (
            f"{method}: {len(images)} images for {len(figure_files(folder, method))} figures")
        assert all(re.match(r"data:image/(png|svg\+xml);base64,", src) for src in images)

    # the contents link to ids on the page; nothing is fetched from anywhere
    for tag, attrs in page.tags:
        for name in ("src", "href"):
            value = attrs.get(name, "")
            assert not re.match(r"(https?:)?//", value), f"<{tag} {name}={value!r}>"
            if name == "href" and value.startswith("#"):
                assert value[1:] in page.ids, f"link {value} to no id"
        assert tag not in ("script", "link", "iframe"), f"<{tag}> in a static report"

    text = re.sub(r"data:[^\"']*", "", path.read_text(encoding="utf-8"))  # the figures
    home = str(Path.home()).rstrip("/") + "/"
    for machine in {"/work/", "/tmp/", home, str(folder)} - {"/"}:
        assert machine not in text, f"{path} names a machine path ({machine})"


def check_summary(folder: Path) -> None:
    """The report's summary table is the run's ``summary()``: same rows, same fail %."""
    import lingtest

    folder = Path(folder).resolve()
    summary = lingtest.load(folder).summary()
    page = parse(folder / "report.html")
    cells = page.cells["summary"]
    width = len(summary.columns)
    assert page.headers["summary"][:width] == list(summary.columns)
    shown = pd.DataFrame([cells[i:i + width] for i in range(0, len(cells), width)],
                         columns=summary.columns)
    assert list(shown["model"]) == list(summary["model"])
    assert [float(v) for v in shown["fail %"]] == [float(v) for v in summary["fail %"]]
