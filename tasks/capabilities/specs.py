"""Capability specifications (S²LCT): one YAML file per linguistic capability, validated on load.

A specification is data, not code, so a user adds a capability by dropping ``LC12.yaml`` into
``capabilities.specs_dir``. Schema (unknown keys are errors; "labels" is one of ``neg``,
``neutral``, ``pos`` or a list of them; the file's stem must equal ``id``)::

    id: LC4                      # letters, digits, _ or -; equals the file name without .yaml
    capability: short title      # what is tested, as in the paper's table
    description: the paper's intent and the choices made here
    search:                      # one rule or a list; a sentence matching any rule is a match
      - label: neg               # required: the sentence's SST 3-way label(s)
        max_length: 10           # tokens, strictly fewer; a final . ! or ? is not counted
        require_words:           # every constraint needs >= 1 token matching it
          - {polarity: neutral, pos: [ADJ]}
        exclude_words:           # no token may match any of these constraints
          - {polarity: [pos, neg], pos: [ADJ, NOUN]}
        starts_with: [[This, That, These, Those], [is, are]]   # token-by-token alternatives
        not_followed_by: [not, "n't"]                          # word right after the start
    transform:                   # optional; without it every seed is a case expecting its label
      variants_per_seed: 1       # cases drawn per seed (distinct texts kept)
      templates:                 # or `negation:` (exactly one of the two)
        - template: "{intro} {s}, {ending}."
          seed_label: neg        # the seed filling {s}; omitted: any searched label
          fillers: {s1: neutral} # other sentence slots, drawn from the other matches
          choices: {intro: [I agreed that, I thought that], ending: [but it wasn't]}
          expected: [pos, neutral]
      negation:
        replace: {is: [is not, "isn't"], are: [are not, "aren't"]}  # first such token
        seed_label: neg
        expected: [pos, neutral]

A word constraint has ``polarity`` (labels), ``pos`` (spaCy coarse tags: ADJ, NOUN, …) and
``words`` (lowercase literal words); a token matches when it meets every field given.
Errors are InputFormatError naming the file, the line and the key, and how to fix it.
"""
from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError
from pydantic import field_validator, model_validator

from lingtest.tasks.core.errors import InputFormatError, LingtestError, read_utf8
from lingtest.tasks.core.io import parse_yaml

LABELS = ("neg", "neutral", "pos")
# Universal POS tags that spaCy's English pipelines assign (token.pos_).
UPOS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON",
        "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X", "SPACE")
SEED_SLOT = "s"
SUFFIXES = (".yaml", ".yml")
BUILTIN_SPECS = Path(__file__).resolve().parent / "specs"  # LC1–LC11, shipped with the package
_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def _as_list(value: Any) -> Any:
    """A scalar where a list is allowed becomes a one-item list (YAML convenience)."""
    return [value] if isinstance(value, str) else value


def _labels(value: Any) -> tuple[str, ...]:
    """Labels in canonical order (neg, neutral, pos), so equal sets hash to equal case ids."""
    items = _as_list(value)
    if not isinstance(items, list) or not items:
        raise ValueError(f"expected a label or a non-empty list of labels from {', '.join(LABELS)}")
    bad = [v for v in items if v not in LABELS]
    if bad:
        raise ValueError(f"unknown label {bad[0]!r}; use {', '.join(LABELS)}")
    return tuple(label for label in LABELS if label in items)


def _tags(value: Any) -> tuple[str, ...]:
    items = _as_list(value)
    if not isinstance(items, list) or not items:
        raise ValueError("expected a POS tag or a non-empty list of tags")
    bad = [v for v in items if v not in UPOS]
    if bad:
        raise ValueError(f"unknown POS tag {bad[0]!r}; use spaCy coarse tags: {', '.join(UPOS)}")
    return tuple(items)


Labels = Annotated[tuple[str, ...], BeforeValidator(_labels)]
Tags = Annotated[tuple[str, ...], BeforeValidator(_tags)]
Words = Annotated[tuple[str, ...], BeforeValidator(_as_list)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WordConstraint(_Strict):
    """Tokens with this polarity, POS and/or spelling (every field given must hold)."""

    polarity: Labels | None = None
    pos: Tags | None = None
    words: Words | None = None

    @model_validator(mode="after")
    def _not_empty(self) -> "WordConstraint":
        if self.polarity is None and self.pos is None and self.words is None:
            raise ValueError("a word constraint needs at least one of polarity, pos, words")
        return self


class SearchRule(_Strict):
    """Which SST sentences qualify as seeds (all conditions must hold)."""

    label: Labels
    max_length: int | None = Field(None, ge=1)
    require_words: list[WordConstraint] = Field(default_factory=list)
    exclude_words: list[WordConstraint] = Field(default_factory=list)
    starts_with: tuple[Words, ...] = ()
    not_followed_by: Words = ()

    @model_validator(mode="after")
    def _follow_needs_start(self) -> "SearchRule":
        if self.not_followed_by and not self.starts_with:
            raise ValueError("not_followed_by needs starts_with (it checks the word after it)")
        return self


class Template(_Strict):
    """A sentence frame: ``{s}`` takes the seed, fillers take other matches, choices phrases."""

    template: str
    seed_label: Labels | None = None
    fillers: dict[str, Labels] = Field(default_factory=dict)
    choices: dict[str, Annotated[list[str], Field(min_length=1)]] = Field(default_factory=dict)
    expected: Labels

    @model_validator(mode="after")
    def _slots_match(self) -> "Template":
        found = template_slots(self.template)
        declared = {SEED_SLOT} | set(self.fillers) | set(self.choices)
        named = [*self.fillers, *self.choices]
        clash = {n for n in named if named.count(n) > 1 or n == SEED_SLOT}
        if clash:
            raise ValueError(f"slot {sorted(clash)[0]!r} is declared twice (fillers, choices "
                             f"and the seed slot {{{SEED_SLOT}}} need distinct names)")
        if SEED_SLOT not in found:
            raise ValueError(f"template {self.template!r} has no {{{SEED_SLOT}}} slot for the seed")
        if found - declared:
            raise ValueError(f"slot {{{sorted(found - declared)[0]}}} is neither the seed slot "
                             f"{{{SEED_SLOT}}} nor declared in fillers or choices")
        if declared - found:
            raise ValueError(f"{sorted(declared - found)[0]!r} is declared but the template "
                             f"{self.template!r} does not use it")
        return self


class Negation(_Strict):
    """Negate the first token found in ``replace`` (e.g. is → is not / isn't)."""

    replace: dict[str, Annotated[list[str], Field(min_length=1)]] = Field(min_length=1)
    seed_label: Labels | None = None
    expected: Labels

    @field_validator("replace")
    @classmethod
    def _lower_keys(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        return {key.lower(): alternatives for key, alternatives in value.items()}


class Transform(_Strict):
    """How seeds become test sentences: templates or a negation, never both."""

    variants_per_seed: int = Field(1, ge=1)
    templates: list[Template] = Field(default_factory=list)
    negation: Negation | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> "Transform":
        if bool(self.templates) == (self.negation is not None):
            raise ValueError("give exactly one of `templates` (a non-empty list) or `negation`")
        return self


class CapabilitySpec(_Strict):
    """One linguistic capability: search rules, optional transformation, where it came from."""

    id: str
    capability: str = Field(min_length=1)
    description: str = Field(min_length=1)
    search: list[SearchRule] = Field(min_length=1)
    transform: Transform | None = None
    _path: str = PrivateAttr("")

    @property
    def path(self) -> str:
        """The file the spec was loaded from ("" when built in code)."""
        return self._path

    @field_validator("id")
    @classmethod
    def _id_format(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError("an id starts with a letter and has only letters, digits, _ and -")
        return value

    @field_validator("search", mode="before")
    @classmethod
    def _one_rule(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    def seed_labels(self) -> tuple[str, ...]:
        """Labels a sampled seed may have: what the transformation's seed slot accepts."""
        searched = {label for rule in self.search for label in rule.label}
        if self.transform is None:
            accepted = searched
        else:
            parts = self.transform.templates or [self.transform.negation]
            accepted = set()
            for part in parts:
                accepted |= set(part.seed_label or searched)
        return tuple(label for label in LABELS if label in accepted & searched)


def template_slots(template: str) -> set[str]:
    """Names of the ``{name}`` slots of a template; ValueError on ``{}``, ``{0}`` or ``{x:>5}``."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"template {template!r} has unbalanced braces ({exc}); "
                         "write a literal brace as {{ or }}") from None
    names = set()
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise ValueError(f"template {template!r}: slot {{{name}}} must be a plain name "
                             "such as {s} or {intro}")
        names.add(name)
    return names


# --------------------------------------------------------------------------- loading

def _node_at(node: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    """The YAML node along a pydantic error location: the key itself for a mapping's last part,
    the deepest existing ancestor when the key is missing (for the line number)."""
    for i, part in enumerate(loc):
        if isinstance(node, yaml.MappingNode):
            pair = next(((k, v) for k, v in node.value if k.value == str(part)), None)
            if pair is None:
                return node
            node = pair[0] if i == len(loc) - 1 else pair[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node
            node = node.value[part]
        else:
            return node
    return node


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that holds the key at ``loc`` (for the list of allowed keys)."""
    model: Any = CapabilitySpec
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part)) if isinstance(model, type) else None
        if field is None:
            return None
        annotation = field.annotation
        for arg in (annotation, *getattr(annotation, "__args__", ())):
            for inner in (arg, *getattr(arg, "__args__", ())):
                if isinstance(inner, type) and issubclass(inner, BaseModel):
                    model = inner
                    break
            else:
                continue
            break
        else:
            return None
    return model


def _explain(item: dict[str, Any]) -> str:
    """One validation error as ``problem (fix)``."""
    loc = tuple(item["loc"])
    key = ".".join(str(p) for p in loc) or "(top level)"
    if item["type"] == "extra_forbidden":
        model = _model_at(loc)
        allowed = ", ".join(sorted(model.model_fields)) if model else "see the schema"
        return f"unknown key `{key}` (allowed keys here: {allowed})"
    if item["type"] == "missing":
        return f"missing required key `{key}` (add it; the schema is in {__name__})"
    message = item["msg"].removeprefix("Value error, ")
    got = repr(item.get("input"))
    shown = "" if got in message or len(got) > 80 else f", got {got}"
    return f"bad value for `{key}`: {message}{shown}"


def load_spec(path: str | Path) -> CapabilitySpec:
    """Read and validate one specification file; InputFormatError names file, line and key."""
    path = Path(path)
    try:
        text = read_utf8(path, "save the specification as UTF-8")
    except OSError as exc:
        raise LingtestError(f"{path}: cannot read the capability specification ({exc})") from None
    fix = "check indentation, colons and quoting on that line"
    node = parse_yaml(text, path, fix, yaml.compose)
    data = parse_yaml(text, path, fix)
    if not isinstance(data, dict):
        raise InputFormatError(path, 1, "a specification must be a mapping of keys",
                               "start with `id:`, `capability:`, `description:`, `search:`")
    try:
        spec = CapabilitySpec.model_validate(data)
    except ValidationError as exc:
        lines = []
        for item in exc.errors():
            found = _node_at(node, tuple(item["loc"]))
            lines.append(found.start_mark.line + 1 if found is not None else None)
        problems = [_explain(item) + ("" if i == 0 or lines[i] is None else f" at line {lines[i]}")
                    for i, item in enumerate(exc.errors())]
        raise InputFormatError(path, lines[0], "; ".join(problems)) from None
    if spec.id != path.stem:
        line = _node_at(node, ("id",))
        raise InputFormatError(path, line.start_mark.line + 1 if line else None,
                               f"id `{spec.id}` differs from the file name `{path.name}`",
                               f"rename the file to {spec.id}{path.suffix} or set id: {path.stem}")
    spec._path = str(path)
    return spec


def _natural(spec_id: str) -> tuple[Any, ...]:
    """LC2 before LC10: digits compare as numbers."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", spec_id))


def load_specs(specs_dir: str | Path, only: list[str] | None = None) -> list[CapabilitySpec]:
    """Every ``*.yaml``/``*.yml`` spec of a folder (or the ``only`` ids), in natural id order."""
    folder = Path(specs_dir)
    if not folder.is_dir():
        raise LingtestError(f"capabilities.specs_dir: {folder} is not a folder "
                            "(set capabilities.specs_dir to the folder of LC*.yaml files)")
    specs: dict[str, CapabilitySpec] = {}
    for path in sorted(p for p in folder.iterdir() if p.suffix in SUFFIXES and not p.is_dir()):
        spec = load_spec(path)
        if spec.id in specs:
            raise InputFormatError(path, None, f"id `{spec.id}` is also defined in "
                                   f"{specs[spec.id].path}", "keep one file per capability")
        specs[spec.id] = spec
    if not specs:
        raise LingtestError(f"{folder}: no capability specification (*.yaml) found")
    if only is not None:
        unknown = [i for i in only if i not in specs]
        if unknown:
            raise LingtestError(f"capabilities.capabilities: unknown id `{unknown[0]}`; "
                                f"{folder} defines {', '.join(sorted(specs, key=_natural))}")
        return [specs[i] for i in sorted(dict.fromkeys(only), key=_natural)]
    return [specs[i] for i in sorted(specs, key=_natural)]
