"""AdaTest's templates: ``The {room|suite} was {dirty|filthy}`` stands for every combination.

A port of ``expand_template`` in ``adaptivetesting/_scorer.py`` (v0.3.5): each ``{a|b|…}``
group is one slot, the expansions are the product of the slots in order, repeated options
kept once (its ``clean_template``). AdaTest keeps the template as one test and scores its
worst expansion; lingtest expands a template when it is filed, one test per expansion, so
every test in a tree is a plain input any model and any method can read.
"""
from __future__ import annotations

import itertools
import re

from lingtest.tasks.core.errors import LingtestError

MAX_EXPANSIONS = 64  # a filed template beyond this is refused, not silently cut
_SLOT = re.compile(r"{([^{}]*)}")


def is_template(text: str) -> bool:
    """Whether ``text`` holds a ``{a|b}`` group (a brace pair without ``|`` is plain text)."""
    return any("|" in group for group in _SLOT.findall(text))


def expand_template(text: str, limit: int = MAX_EXPANSIONS) -> list[str]:
    """Every expansion of ``text`` in slot order (plain text: itself); more than ``limit``
    is one error naming the count and the fix."""
    groups = [list(dict.fromkeys(g.split("|"))) for g in _SLOT.findall(text) if "|" in g]
    if not groups:
        return [text]
    count = 1
    for options in groups:
        count *= len(options)
    if count > limit:
        raise LingtestError(f"template {text!r} expands to {count} tests (limit {limit}); "
                            "split it into smaller templates")
    parts = re.split(r"{[^{}]*\|[^{}]*}", text)
    out = []
    for combo in itertools.product(*groups):
        pieces = [parts[0]]
        for option, rest in zip(combo, parts[1:]):
            pieces += [option, rest]
        out.append(" ".join("".join(pieces).split()))
    return list(dict.fromkeys(out))
