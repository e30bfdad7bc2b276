"""Secret detection: which names carry credentials and which strings look like one.

One place for the rules shared by the remote provider (header and URL query names, text quoted from a
server) and the config loader (values echoed in its error messages). Besides its own broad patterns (any
``sk-`` word, any ``Bearer`` value), it also treats what ``mdmemory.redaction`` detects as secret. Imports only
that module, so any module can use it without an import cycle.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from mdmemory.redaction import find_secrets, redact

_SECRET_NAME = re.compile(r"auth|key|cookie|token|secret|passw|credential|session", re.IGNORECASE)
SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?i)(bearer\s+)[^\s\"',}]+"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"),
)
"""Secret-looking text; group 1, when present, is a prefix to keep (``Bearer ``)."""
_URL_USERINFO = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^/\s@]+@")
REDACTED = "<redacted>"


def is_secret_name(name: str) -> bool:
    """True for names that may carry credentials (authorization, api-key, apiKey, *token*, cookie...)."""
    return _SECRET_NAME.search(name) is not None


def looks_secret(text: str) -> bool:
    """True when ``text`` holds a bearer token, an ``sk-`` API key or a URL with user:password."""
    return (
        _URL_USERINFO.search(text) is not None
        or any(p.search(text) for p in SECRET_PATTERNS)
        or bool(find_secrets(text))
    )


def scrub(text: str) -> str:
    """``text`` with every secret-looking part (see ``looks_secret``) replaced by ``***`` (or by
    ``[REDACTED:<kind>]`` where ``mdmemory.redaction`` recognises the kind)."""
    text = redact(text)
    for pattern in SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "***", text)
    return _URL_USERINFO.sub(lambda m: m.group(0).split("//", 1)[0] + "//***@", text)


def redact_value(value: Any, public: Collection[str] = ()) -> Any:
    """JSON-like ``value`` with secrets replaced by ``<redacted>``, at any depth: the value of every
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
