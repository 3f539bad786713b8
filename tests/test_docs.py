"""The documentation site builds strictly (a broken link or anchor fails), its parameters page
lists every setting, the README stays a short entry point, and no page points at code that is
not there or at a file outside the repository."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from lingtest.flows.registry import Params
from lingtest.tasks.core.paths import PACKAGE_ROOT


def _settings(model: type[BaseModel], prefix: str = "") -> dict[str, object]:
    """Every leaf setting's dotted key and its pydantic field."""
    found = {}
    for name, field in model.model_fields.items():
        inner = field.annotation
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            found.update(_settings(inner, f"{prefix}{name}."))
        else:
            found[f"{prefix}{name}"] = field
    return found


def test_the_site_builds_strictly_and_documents_every_setting(tmp_path):
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=PACKAGE_ROOT, capture_output=True, text=True,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    parameters = (site / "parameters" / "index.html").read_text(encoding="utf-8")
    missing = [key for key in _settings(Params) if f"<code>{key}</code>" not in parameters]
    assert not missing, f"settings missing from the parameters page: {missing}"
    for page in ("methods/capabilities", "methods/contrastive", "methods/adaptive",
                 "methods/consistency"):
        assert "Fidelity" in (site / page / "index.html").read_text(encoding="utf-8"), page


def test_every_setting_is_described_in_its_field():
    undescribed = [key for key, field in _settings(Params).items() if not field.description]
    assert not undescribed, f"settings without a Field description: {undescribed}"


def test_the_readme_is_a_short_entry_point_whose_links_resolve():
    import re

    readme = (PACKAGE_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 160
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        assert (PACKAGE_ROOT / target).exists(), target


DOC_FILES = ("README.md", "benchmarks/README.md", "docs/**/*.md", "params.yaml", "params/*.yaml")


def _doc_texts() -> dict[str, str]:
    return {str(path.relative_to(PACKAGE_ROOT)): path.read_text(encoding="utf-8")
            for pattern in DOC_FILES for path in sorted(PACKAGE_ROOT.glob(pattern))}


def _defined(module: Path) -> set[str]:
    """Top-level names a module defines or imports (what `file.py::name` may point at)."""
    import ast

    names: set[str] = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def test_the_docs_point_only_at_code_that_exists():
    """Every `tasks/…py`, `flows/…py::name`, `lingtest.tasks.x.y` a page names is there (modules move:
    a stale pointer fails here, not in a reader's search)."""
    import re

    from test_new_method import page_files

    example = set(page_files())  # the files docs/new-method.md shows how to write
    wrong = []
    for doc, text in _doc_texts().items():
        for path, name in re.findall(
                r"`((?:tasks|flows|tests|benchmarks)/[\w/.-]+\.py)(?:::(\w+))?`", text):
            if path in example:
                continue
            target = PACKAGE_ROOT / path
            if not target.is_file() or (name and name not in _defined(target)):
                wrong.append(f"{doc}: {path}{'::' + name if name else ''}")
        for dotted in re.findall(r"`((?:tasks|flows)(?:\.\w+)+)`", text):
            parts = dotted.split(".")
            for cut in range(len(parts), 0, -1):
                base = PACKAGE_ROOT.joinpath(*parts[:cut])
                module = base.with_suffix(".py") if base.with_suffix(".py").is_file() \
                    else base / "__init__.py"
                if module.is_file():
                    if parts[cut:] and parts[cut] not in _defined(module):
                        wrong.append(f"{doc}: {dotted}")
                    break
            else:
                wrong.append(f"{doc}: {dotted}")
    assert not wrong, f"docs name code that does not exist: {wrong}"


def test_the_docs_name_no_file_outside_the_repository():
    outside = [f"{doc}: {hit}" for doc, text in _doc_texts().items()
               for hit in ("../shared", "DESIGN.md", "helper-notes") if hit in text]
    assert not outside, outside
