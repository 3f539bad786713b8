"""mkdocs hook: the parameters page's reference tables, generated from the settings' pydantic
fields (``lingtest.flows.param_reference``), so each setting is described once."""
from __future__ import annotations

from pathlib import Path

MARKER = "<!-- parameter reference -->"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER not in markdown:
        return markdown
    from lingtest.flows.param_reference import reference_markdown

    return markdown.replace(MARKER, reference_markdown(Path(config["config_file_path"]).parent))
