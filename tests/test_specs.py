"""Capability specifications: the bundled LC1–LC11 files, a user's own file, and load errors."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from lingtest.tasks.capabilities.specs import load_spec, load_specs
from lingtest.tasks.core.errors import InputFormatError, LingtestError
from lingtest.tasks.core.paths import PACKAGE_ROOT

SPECS = PACKAGE_ROOT / "tasks" / "capabilities" / "specs"
MINIMAL = """\
id: {id}
capability: Short questions
description: A user's own capability.
search:
  label: pos
  max_length: 8
"""


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _error(path: Path) -> str:
    with pytest.raises(InputFormatError) as caught:
        load_spec(path)
    return str(caught.value)


# --------------------------------------------------------------------------- bundled specs

def test_bundled_specs_are_lc1_to_lc11_in_order() -> None:
    specs = load_specs(SPECS)
    assert [s.id for s in specs] == [f"LC{i}" for i in range(1, 12)]
    assert all(Path(s.path).name == f"{s.id}.yaml" and s.description for s in specs)


def test_bundled_specs_encode_the_design_table() -> None:
    spec = {s.id: s for s in load_specs(SPECS)}
    lc1 = spec["LC1"].search[0]
    assert lc1.label == ("neutral",) and lc1.max_length == 10
    assert {(c.polarity, c.pos) for c in lc1.require_words} == {
        (("neutral",), ("ADJ",)), (("neutral",), ("NOUN",))}
    assert lc1.exclude_words[0].polarity == ("neg", "pos") and spec["LC1"].transform is None
    assert [r.label for r in spec["LC2"].search] == [("pos",), ("neg",)]
    assert spec["LC4"].search[0].starts_with == (
        ("This", "That", "These", "Those"), ("is", "are"))
    assert spec["LC4"].transform.negation.expected == ("neutral", "pos")
    assert spec["LC5"].transform.negation.expected == ("neutral",)
    assert spec["LC7"].transform.templates[0].fillers == {"s1": ("neutral",)}
    assert spec["LC7"].transform.templates[0].expected == ("neg",)
    assert spec["LC7"].seed_labels() == ("pos",)
    for template in spec["LC8"].transform.templates:  # opposite labels; the author's wins
        assert set(template.fillers["s1"]).isdisjoint(template.seed_label)
        assert template.expected == template.seed_label
    assert all(t.expected == t.seed_label for t in spec["LC9"].transform.templates)
    assert spec["LC10"].transform.templates[0].expected == ("neg",)
    assert spec["LC11"].transform.templates[0].expected == ("neutral", "pos")
    assert spec["LC6"].transform.templates[0].choices["intro"] == ["I agreed that",
                                                                  "I thought that"]


def test_user_spec_in_specs_dir_is_picked_up(tmp_path: Path) -> None:
    shutil.copytree(SPECS, tmp_path / "specs")
    _write(tmp_path / "specs", "LC12.yml", MINIMAL.format(id="LC12"))
    specs = load_specs(tmp_path / "specs")
    assert [s.id for s in specs][-3:] == ["LC10", "LC11", "LC12"]
    assert specs[-1].search[0].label == ("pos",)  # a single rule and a scalar label
    assert [s.id for s in load_specs(tmp_path / "specs", ["LC12", "LC2"])] == ["LC2", "LC12"]


def test_unknown_capability_id_lists_the_known_ones(tmp_path: Path) -> None:
    _write(tmp_path, "Mine.yaml", MINIMAL.format(id="Mine"))
    with pytest.raises(LingtestError, match=r"unknown id `LC99`.*defines Mine"):
        load_specs(tmp_path, ["LC99"])


def test_empty_or_missing_specs_dir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(LingtestError, match="no capability specification"):
        load_specs(tmp_path)
    with pytest.raises(LingtestError, match="not a folder"):
        load_specs(tmp_path / "nope")


# --------------------------------------------------------------------------- errors

def test_unknown_key_names_file_line_key_and_allowed_keys(tmp_path: Path) -> None:
    path = _write(tmp_path, "LC1.yaml", """\
        id: LC1
        capability: c
        description: d
        search:
          - label: neutral
            max_len: 10
        """)
    message = _error(path)
    assert message.startswith(f"{path}:6: unknown key `search.0.max_len`")
    assert "allowed keys here:" in message and "max_length" in message
    assert "require_words" in message


def test_bad_label_names_the_key_and_the_labels(tmp_path: Path) -> None:
    path = _write(tmp_path, "LC2.yaml", """\
        id: LC2
        capability: c
        description: d
        search:
          label: positive
        """)
    message = _error(path)
    assert f"{path}:5:" in message and "`search.0.label`" in message
    assert "unknown label 'positive'; use neg, neutral, pos" in message


def test_bad_pos_tag_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, "LC2.yaml", """\
        id: LC2
        capability: c
        description: d
        search:
          label: pos
          require_words: [{polarity: pos, pos: adjective}]
        """)
    assert "unknown POS tag 'adjective'" in _error(path)


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "LC3.yaml", """\
        id: LC3
        capability: c
        description: d
        search:
          - label: pos
           max_length: 20
        """)
    message = _error(path)
    assert message.startswith(f"{path}:6: not valid YAML")


def test_missing_required_field(tmp_path: Path) -> None:
    path = _write(tmp_path, "LC4.yaml", """\
        id: LC4
        capability: c
        description: d
        search:
          - max_length: 20
        """)
    message = _error(path)
    assert "missing required key `search.0.label`" in message and f"{path}:5:" in message
    no_search = _write(tmp_path, "LC5.yaml", "id: LC5\ncapability: c\ndescription: d\n")
    assert "missing required key `search`" in _error(no_search)


def test_id_must_match_the_file_name(tmp_path: Path) -> None:
    path = _write(tmp_path, "LC6.yaml", MINIMAL.format(id="LC7"))
    assert "id `LC7` differs from the file name `LC6.yaml`" in _error(path)


@pytest.mark.parametrize("template, fillers, problem", [
    ("{intro} the film", "{}", "has no {s} slot"),
    ("{intro} {s} {s2}", "{}", "slot {s2} is neither the seed slot"),
    ("{intro} {s}", "{s1: neg}", "'s1' is declared but the template"),
    ("{intro} {s:>5}", "{}", "must be a plain name"),
])
def test_template_slots_must_match_declarations(tmp_path: Path, template: str, fillers: str,
                                                problem: str) -> None:
    path = _write(tmp_path, "LC8.yaml", f"""\
        id: LC8
        capability: c
        description: d
        search: {{label: pos}}
        transform:
          templates:
            - template: "{template}"
              fillers: {fillers}
              choices: {{intro: [Some people think that]}}
              expected: pos
        """)
    message = _error(path)
    assert problem in message and "`transform.templates.0`" in message and f"{path}:7:" in message


def test_transform_needs_exactly_one_kind(tmp_path: Path) -> None:
    path = _write(tmp_path, "LC9.yaml", """\
        id: LC9
        capability: c
        description: d
        search: {label: neg}
        transform:
          templates: [{template: "{s}? no", expected: pos}]
          negation: {replace: {is: [is not]}, expected: pos}
        """)
    assert "exactly one of `templates`" in _error(path)
