"""The documentation site builds strictly (a broken link or anchor fails), its parameters page
lists every setting, and the README stays a short entry point."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import BaseModel

from flows.registry import Params
from tasks.core.paths import PACKAGE_ROOT


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
