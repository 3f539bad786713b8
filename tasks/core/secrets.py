"""Masking of credentials wherever parameters are written out.

Every parameter section dumps through :func:`redact_fields` (see ``config.Section``), so the
reports' provenance, ``lingtest params``, the result database's run record and the flow-run
parameters Prefect stores (it serialises models with ``model_dump(mode="json")``) never hold
a password or key, while the code keeps reading the real value from the model's attribute.
Only strings that carry credentials change: cache keys of credential-free parameters stay.
"""
from __future__ import annotations

import re
from typing import Any

MASK = "***"

# scheme://user:password@host → scheme://user:***@host (a '/' or '@' in a password is %-encoded)
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^@/\s]*@")
# ?api_key=...&token=... in a URL's query
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&](?:api[_-]?key|key|token|access[_-]?token|password|secret|sig|signature)=)"
    r"[^&#\s]*", re.IGNORECASE)
# field names whose value is itself a secret (not e.g. max_new_tokens)
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:password|passwd|secret|token|api_?key|access_?key|credentials?)$", re.IGNORECASE)


def redact_text(text: str) -> str:
    """``text`` with URL passwords and secret query values masked; unchanged when none."""
    masked = _URL_PASSWORD.sub(lambda m: m["head"] + MASK + "@", text)
    return _QUERY_SECRET.sub(lambda m: m["head"] + MASK, masked)


def is_secret_name(name: str) -> bool:
    """Whether a parameter called ``name`` holds a secret (``api_key``, ``token``, ...)."""
    return bool(_SECRET_NAME.search(name))


def redact_value(value: Any, name: str = "") -> Any:
    """``value`` (str, list, dict, nested) with every credential masked."""
    if isinstance(value, str):
        return MASK if value and is_secret_name(name) else redact_text(value)
    if isinstance(value, dict):
        return {key: redact_value(item, str(key)) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_value(item, name) for item in value)
    return value


def redact_fields(dumped: Any) -> Any:
    """A model dump with its credentials masked (the hook of ``Section``'s serializer)."""
    return redact_value(dumped)
