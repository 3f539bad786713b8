"""Test cases as data: the content-hashed ``case_id`` every method's cases carry.

The contract: every generated case has ``case_id`` (hash of method, inputs and
expectation), ``method``, a grouping column, the text(s), the expectation and
``provenance`` (operator, seed id, generator, parameters) as a JSON string.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any


def case_id(method: str, texts: list[str] | tuple[str, ...], expectation: str) -> str:
    """16 hex of sha256 over method, texts and expectation: same case, same id, everywhere."""
    payload = json.dumps([method, list(texts), expectation], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def provenance_json(**fields: Any) -> str:
    """Provenance as stable JSON text (sorted keys) for a Parquet string column."""
    return json.dumps(fields, sort_keys=True, ensure_ascii=False, default=str)
