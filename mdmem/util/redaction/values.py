"""What a detected value must look like to be a secret: letters with digits, some entropy, no placeholder
(``<your-key>``, ``${VAR}``) and no reference to where a secret is kept (``$PGPASSWORD``, ``MEMORY_API_TOKEN``,
``settings.SECRET_KEY``, a file path). The checks the rules (``rules.py``) and detectors (``scan.py``) share."""

from __future__ import annotations

import base64
import binascii
import math

from mdmem.util.lazyre import lazy

_PLACEHOLDER = lazy(r"(?i)^<.*>$|^\$\{|^\{\{|x{4}|\*{3}|\.{3}|redacted|example|your[_-]|changeme")
_SEGMENT = r"(?:[a-z_][a-z0-9_]*|[A-Z_][A-Z0-9_]*|[A-Z]?[a-z]+(?:[A-Z][a-z]+)*)"
_REFERENCE = lazy(
    r"\$[A-Za-z_][A-Za-z0-9_]*|%[A-Za-z_][A-Za-z0-9_]*%"  # $PGPASSWORD, %API_KEY%
    r"|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+"  # MEMORY_API_TOKEN: an environment variable's name
    rf"|{_SEGMENT}(?:\.{_SEGMENT})+"  # settings.SECRET_KEY, process.env.TOKEN_SECRET, config.get
    r"|(?:~|\.\.?|/(?:home|Users|etc|var|tmp|opt|usr|srv|root|run|mnt|data|app))/[A-Za-z0-9_.@/-]*"  # a path
)
"""Where a value says where the secret is kept, not the secret: an environment variable, an attribute path
of identifiers (no random-looking segment such as ``Xk9``), a file path."""


DIGIT = lazy(r"[0-9]")
_LETTER = lazy(r"[A-Za-z]")
UPPER = lazy(r"[A-Z]")
_LOWER = lazy(r"[a-z]")


def mixed(value: str) -> bool:
    """ASCII letters and digits both present (real keys; not words joined by hyphens)."""
    return DIGIT.search(value) is not None and _LETTER.search(value) is not None


def entropy(value: str) -> float:
    counts: dict[str, int] = {}
    for c in value:
        counts[c] = counts.get(c, 0) + 1
    n = len(value)
    return -sum(k / n * math.log2(k / n) for k in counts.values())


def reference(value: str) -> bool:
    """Whether ``value`` names where a secret is kept (``_REFERENCE``) rather than being one."""
    return _REFERENCE.fullmatch(value) is not None


def keyed_value(value: str) -> bool:
    """A value after ``password:`` and the like: no placeholder or reference, letters with digits or symbols,
    some entropy."""
    if _PLACEHOLDER.search(value) or reference(value):
        return False
    has_alpha = any(c.isalpha() for c in value)
    has_other = any(not c.isalpha() for c in value)
    return has_alpha and has_other and entropy(value) >= 3.0


def password_value(value: str) -> bool:
    """A value after a password key: 6+ characters, letters with digits or symbols (``hunter2``), mostly
    distinct characters, no placeholder (short passwords are common; ordinary words have no digit)."""
    if len(value) < 6 or _PLACEHOLDER.search(value) or reference(value):
        return False
    has_alpha = any(c.isalpha() for c in value)
    has_other = any(not c.isalpha() for c in value)
    return has_alpha and has_other and (len(set(value)) >= 0.6 * len(value) or entropy(value) >= 3.0)


def token(value: str) -> bool:
    return mixed(value) and not _PLACEHOLDER.search(value)


def cased(value: str) -> bool:
    """Upper and lower case ASCII letters both present (tokens of letters only, such as Hugging Face's)."""
    return UPPER.search(value) is not None and _LOWER.search(value) is not None


def basic_credentials(value: str) -> bool:
    """``Basic <base64>`` whose decoding is printable ``user:password``."""
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    return ":" in raw and raw.isprintable()
