"""Credentials in configuration, errors and headers: which names carry them and which strings look like one.

One place for the rules shared by the remote provider (header and URL query names, text quoted from a
server) and the config loader (values echoed in its error messages). It is broader than
``mdmem.util.redaction`` (any ``sk-`` word, any ``Bearer`` value, any user in a URL), which it applies first;
the markers are the package's: ``[REDACTED:<kind>]`` where the kind is known, ``[REDACTED]`` for the value of
a secret-looking key. Imports only the package, so any module can use it without an import cycle. (It was
``mdmem.util.redaction.credentials``, beside this package: one home for redaction now.)
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from mdmem.util.redaction import REDACTED, find_secrets, marker, redact

__all__ = ["REDACTED", "SECRET_PATTERNS", "is_secret_name", "looks_secret", "redact_value", "scrub"]

_SECRET_NAME = re.compile(r"auth|key|cookie|token|secret|passw|credential|session", re.IGNORECASE)
SECRET_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)(bearer\s+)(?!\[REDACTED)[^\s\"',}]+"), "bearer_token"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"), "openai_key"),
    (re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://)(?!\[REDACTED)[^/\s@]+(?=@)"), "url_password"),
)
"""Secret-looking text and its kind; group 1, when present, is a prefix to keep (``Bearer ``, ``https://``)."""


def is_secret_name(name: str) -> bool:
    """True for names that may carry credentials (authorization, api-key, apiKey, *token*, cookie...)."""
    return _SECRET_NAME.search(name) is not None


def looks_secret(text: str) -> bool:
    """True when ``text`` holds a bearer token, an ``sk-`` API key, a URL with user info or anything
    ``mdmem.util.redaction`` detects."""
    return any(p.search(text) for p, _ in SECRET_PATTERNS) or bool(find_secrets(text))


def scrub(text: str) -> str:
    """``text`` with every secret-looking part (see ``looks_secret``) replaced by ``[REDACTED:<kind>]``."""
    text = redact(text)
    for pattern, kind in SECRET_PATTERNS:
        shown = marker(kind)
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + shown, text)  # noqa: B023
    return text


def redact_value(value: Any, public: Collection[str] = ()) -> Any:
    """JSON-like ``value`` with secrets replaced by ``[REDACTED]``, at any depth: the value of every
    secret-looking key (except the names in ``public``, such as a config's ``tokens``) and every string
    that looks like a credential."""
    if isinstance(value, dict):
        return {
            k: REDACTED if is_secret_name(str(k)) and k not in public else redact_value(v, public)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact_value(v, public) for v in value]
    if isinstance(value, str) and looks_secret(value):
        return REDACTED
    return value
