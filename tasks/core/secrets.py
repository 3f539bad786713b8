"""Masking of credentials wherever parameters are written out.

Every parameter section dumps through :func:`redact_fields` (see ``config.Section``), so the
reports' provenance, ``lingtest params``, the result database's run record and the flow-run
parameters Prefect stores (it serialises models with ``model_dump(mode="json")``) never hold
a password or key, while the code keeps reading the real value from the model's attribute.
Log records (:func:`install_log_masking`) and error messages (the CLI) pass through
:func:`redact_text`. Only strings that carry credentials change: cache keys of
credential-free parameters stay.

Where a URL's password ends is ambiguous when it holds unencoded ``/ @ : # ? %``: SQLAlchemy
accepts ``postgresql://u:pa/ss@host/db`` (password ``pa/ss``), ``urllib.parse`` ends the
authority at the first ``/`` and SQLAlchemy's own parser stops at the first ``@``. So the
mask covers everything from ``user:`` to the *last* ``@`` of the URL, a superset of what
either parser takes for the password (tests/test_secrets.py checks both parsers); a ``@`` in
a query string can hide a little more than the password, never less.
"""
from __future__ import annotations

import logging
import re
from typing import Any

from pydantic import BaseModel, model_serializer

MASK = "***"

_SCHEME = r"\b[A-Za-z][A-Za-z0-9+.-]*://"
# scheme://user:password@host with the mask up to the last '@' of a whole-string URL ...
_URL_VALUE = re.compile(rf"^(?P<head>\s*{_SCHEME}[^:/@\s]*:).*@", re.DOTALL)
# ... and, in free text, of the URL's token (it ends at whitespace or an unescaped '"',
# the end of a JSON string; '\"' and '\\' inside JSON stay part of it)
_URL_PASSWORD = re.compile(rf"(?P<head>{_SCHEME}[^:/@\s\"]*:)(?:\\.|[^\s\"\\])*@")
# ?api_key=...&token=... in a URL's query
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&](?:api[_-]?key|key|token|access[_-]?token|password|secret|sig|signature)=)"
    r"[^&#\s\"]*", re.IGNORECASE)
# field names whose value is itself a secret (not e.g. max_new_tokens)
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:password|passwd|secret|token|api_?key|access_?key|credentials?)$", re.IGNORECASE)


def _mask_query(text: str) -> str:
    return _QUERY_SECRET.sub(lambda m: m["head"] + MASK, text)


def redact_url(url: str) -> str:
    """A URL (the whole string) with its password masked, whatever characters it holds."""
    return _mask_query(_URL_VALUE.sub(lambda m: m["head"] + MASK + "@", url, count=1))


def redact_text(text: str) -> str:
    """``text`` with URL passwords and secret query values masked; unchanged when none."""
    if "://" not in text and "=" not in text:
        return text
    return _mask_query(_URL_PASSWORD.sub(lambda m: m["head"] + MASK + "@", text))


def is_secret_name(name: str) -> bool:
    """Whether a parameter called ``name`` holds a secret (``api_key``, ``token``, ...)."""
    return bool(_SECRET_NAME.search(name))


def redact_value(value: Any, name: str = "") -> Any:
    """``value`` (str, list, dict, nested) with every credential masked."""
    if isinstance(value, str):
        if value and is_secret_name(name):
            return MASK
        return redact_url(value) if _URL_VALUE.match(value) else redact_text(value)
    if isinstance(value, dict):
        return {key: redact_value(item, str(key)) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_value(item, name) for item in value)
    return value


class MaskedURL(BaseModel):
    """A URL passed as a flow parameter (``lingtest adapt --base-url``): Prefect stores its
    dump, :func:`redact_url`'s (``http://user:***@host/v1``), while the flow reads ``.url``."""

    url: str

    @model_serializer
    def _masked(self) -> str:
        return redact_url(self.url)


def plain_url(value: "MaskedURL | str | None") -> str | None:
    """The real URL of a :class:`MaskedURL` (a plain string or None as it is)."""
    return value.url if isinstance(value, MaskedURL) else value


def redact_fields(dumped: Any) -> Any:
    """A model dump with its credentials masked (the hook of ``Section``'s serializer)."""
    return redact_value(dumped)


def redact_override(item: str) -> str:
    """A ``--set key=value`` as it may be echoed: the value masked like a parameter of
    that name (``consistency.database_url=postgresql://u:***@host/db``)."""
    key, sep, raw = item.partition("=")
    if not sep:
        return redact_text(item)
    masked = redact_value(raw.strip(), key.strip().rsplit(".", 1)[-1])
    return f"{key}={masked}"


def install_log_masking() -> None:
    """Mask credentials in every log record from now on (Prefect's API log handler and the
    console alike): a record factory, since logger filters do not reach child loggers."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "_lingtest_masking", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format is logging's to report
            return record
        masked = redact_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        return record

    factory._lingtest_masking = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


install_log_masking()  # on import: every process that reads parameters (flows, workers) masks
