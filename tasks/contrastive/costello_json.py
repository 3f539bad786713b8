"""COSTELLO's JSON suites: ``{"<relation>": [[seed, positive, negative(, label)], ...]}``.

Reading maps COSTELLO's relation names to CR1–CR4 and keeps repeated triples (the paper
counts them); writing exports any suite (generated or imported) in the same layout.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lingtest.tasks.contrastive.suite import METHOD, _frame, _row
from lingtest.tasks.contrastive.params import RELATIONS
from lingtest.tasks.core.cases import case_id, provenance_json
from lingtest.tasks.core.errors import InputFormatError, LingtestError, read_utf8
from lingtest.tasks.core.io import parse_json
from lingtest.tasks.core.io import sha256_file, write_json

#: COSTELLO's relation names in its released suites (``ctset1.json``, ``mrpc_ct.json``).
COSTELLO_NAMES = {"SenWordFuzz": "CR1", "swapGender_sentiSynonymSubstitution": "CR2",
                  "synon_contr": "CR3", "mrpc_fuzz": "CR4"}
_FIX = ('a COSTELLO suite is a JSON object {"<relation>": [[seed, positive, negative], ...]}; '
        "a 4th element (a label) is allowed")


def _key_line(text: str, key: str) -> int | None:
    """1-based line where the JSON key ``key`` first appears (None when not found)."""
    at = text.find(json.dumps(key) + ":")
    if at < 0:
        at = text.find(json.dumps(key))
    return text.count("\n", 0, at) + 1 if at >= 0 else None


def read_costello_suite(path: str | Path) -> pd.DataFrame:
    """A COSTELLO suite ``{"<relation>": [[seed, positive, negative(, label)], ...]}`` as a table.

    COSTELLO's relation names are mapped to CR1–CR4 (``COSTELLO_NAMES``; the file's name is
    kept in the provenance), so Table 1 shows the paper's counts beside them. Malformed JSON,
    a relation that is not a list, a triple that is not 3–4 items with three strings (and a
    scalar label), or a suite without triples is an InputFormatError naming the file, the
    relation and the triple's index. A triple repeated within a relation is kept (the paper
    counts it: 37 of ``SenWordFuzz``'s 1417) under its own case_id, its provenance naming
    the ``duplicate_of`` index; ``duplicate_triples`` counts them.
    """
    path = Path(path)
    try:
        text = read_utf8(path, "save the suite as UTF-8")
    except OSError as exc:
        raise InputFormatError(path, None, f"cannot read the suite ({exc})", _FIX) from None
    data = parse_json(text, path, _FIX)
    if not isinstance(data, dict):
        raise InputFormatError(path, 1, f"the top level is a {type(data).__name__}, "
                               "not an object of relations", _FIX)
    digest, rows = sha256_file(path), []
    for name, triples in data.items():
        relation, line = COSTELLO_NAMES.get(name, name), _key_line(text, name)
        first_index: dict[tuple[str, str, str], int] = {}
        if not isinstance(triples, list):
            raise InputFormatError(path, line, f"relation {name!r} holds a "
                                   f"{type(triples).__name__}, not a list of triples", _FIX)
        for index, triple in enumerate(triples):
            ok = (isinstance(triple, list) and len(triple) in (3, 4)
                  and all(isinstance(t, str) and t for t in triple[:3])
                  and (len(triple) == 3 or isinstance(triple[3], (str, int, float, type(None)))))
            if not ok:
                shown = json.dumps(triple, ensure_ascii=False)[:80]
                raise InputFormatError(path, line, f"relation {name!r}, triple {index}: "
                                       f"expected [seed, positive, negative] with three non-empty "
                                       f"strings and an optional scalar label, got {shown}", _FIX)
            seed_id = f"{name}:{index}"
            texts = tuple(triple[:3])
            original = first_index.setdefault(texts, index)
            repeat = {"duplicate_of": original} if original != index else {}
            provenance = provenance_json(imported_from=str(path), sha256=digest,
                                         relation=name, index=index, seed_id=seed_id, **repeat)
            label = triple[3] if len(triple) == 4 else None
            row = _row(relation, seed_id, texts, label, provenance)
            if repeat:  # its own id, so results and violations stay one row per triple
                row["case_id"] = case_id(METHOD, [*texts, f"repeat of {original}", str(index)],
                                         row["expectation"])
            rows.append(row)
    if not rows:
        raise InputFormatError(path, None, "the suite has no triples", _FIX)
    return _frame(rows)


def select_imported(suite: pd.DataFrame, relations: list[str], max_seeds: int | None,
                    seed: int, path: str | Path = "the suite") -> pd.DataFrame:
    """An imported suite under ``contrastive.relations`` and ``max_seeds``, as a generated
    one is: the relations asked for that the suite has (a relation outside CR1–CR4, which
    the parameter cannot name, is always kept), then per relation at most ``max_seeds``
    distinct seeds, drawn with a generator seeded by ``[seed, relation's position]``, each
    with all its triples, in the file's order. The defaults (all four, no cap) keep every
    triple. No relation left is a LingtestError naming ``contrastive.relations``."""
    present = list(dict.fromkeys(suite["relation"]))
    keep = [r for r in present if r in relations or r not in RELATIONS]
    if not keep:
        raise LingtestError(
            f"contrastive.relations {list(relations)}: {Path(path).name} holds none of them "
            f"(it holds {', '.join(present)}); fix: list at least one of those, or the "
            f"default [{', '.join(RELATIONS)}]")
    chosen = suite[suite["relation"].isin(keep)]
    if max_seeds is None:
        return chosen.reset_index(drop=True)
    parts = []
    for position, relation in enumerate(keep):
        rows = chosen[chosen["relation"] == relation]
        seeds = list(dict.fromkeys(rows["seed"]))
        if len(seeds) > max_seeds:
            rng = np.random.default_rng([seed, position])
            picked = {seeds[i] for i in rng.choice(len(seeds), max_seeds, replace=False)}
            rows = rows[rows["seed"].isin(picked)]
        parts.append(rows)
    return pd.concat(parts).sort_index().reset_index(drop=True)


def _label_value(label: Any) -> Any:
    """A label for JSON: integer-looking text as an integer (COSTELLO's MRPC files use 0/1)."""
    text = str(label)
    return int(text) if text.lstrip("-").isdigit() else text


def write_costello_suite(suite: pd.DataFrame, path: str | Path) -> Path:
    """Write ``suite`` in COSTELLO's JSON layout (atomically); labels as a 4th element."""
    missing = [c for c in ("relation", "seed", "positive", "negative") if c not in suite]
    if missing:
        raise LingtestError(f"write_costello_suite({path}): the suite lacks columns {missing}")
    if suite.empty:
        raise LingtestError(f"write_costello_suite({path}): the suite has no triples to write")
    out: dict[str, list[list[Any]]] = {}
    labels = suite["label"] if "label" in suite else pd.Series([None] * len(suite))
    for (relation, seed, positive, negative), label in zip(
            suite[["relation", "seed", "positive", "negative"]].itertuples(index=False), labels):
        triple: list[Any] = [seed, positive, negative]
        if label is not None and not pd.isna(label):
            triple.append(_label_value(label))
        out.setdefault(str(relation), []).append(triple)
    return write_json(path, out)
