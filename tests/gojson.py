r"""Go's ``encoding/json`` in Python, as cllama's bodies need it (Go 1.22+; cllama is built with 1.27).

- ``go_marshal``: ``json.Marshal`` of a value ``json.Unmarshal`` decoded into ``any`` — object keys sorted,
  every number a float64 (``go_float``);
- ``go_compact``: ``json.Marshal`` of a ``json.RawMessage`` — compacted, key order and number literals kept;
- ``go_string``: strings with ``<``, ``>``, ``&``, U+2028 and U+2029 escaped (``json.Marshal`` escapes HTML),
  ``\b`` ``\f`` ``\n`` ``\r`` ``\t`` short, other control characters as ``\u00xx``.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_HTML = {c: f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"}


def go_string(s: str) -> str:
    """A Go string as ``json.Marshal`` writes it (encode.go ``appendString`` with HTML escaping).
    A lone surrogate stands for a byte that was not UTF-8 (``bytes.decode(errors="surrogateescape")``):
    Go writes each such byte as the six characters ``\\ufffd``."""
    out = ['"']
    for ch in s:
        if ch in _SHORT:
            out.append(_SHORT[ch])
        elif ch in _HTML:
            out.append(_HTML[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        elif "\ud800" <= ch <= "\udfff":
            out.append("\\ufffd")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_float(f: float) -> str:
    """A float64 as ``encoding/json`` writes it: shortest digits, ``e`` notation below 1e-6 and from 1e21,
    ``e-07`` cleaned to ``e-7`` (encode.go ``floatEncoder``)."""
    if f == 0:
        return "-0" if str(f).startswith("-") else "0"
    if abs(f) < 1e-6 or abs(f) >= 1e21:
        mant, _, exp = repr(f).partition("e")
        sign, digits = exp[0], exp[1:].lstrip("0") or "0"
        return f"{mant}e{sign}{digits.zfill(2) if sign == '+' else digits}"
    return format(Decimal(repr(f)).normalize(), "f")


def go_marshal(value: Any) -> str:
    """``json.Marshal`` of a value ``json.Unmarshal`` decoded into ``any``: maps with sorted keys, every
    number a float64 (what cllama does to the agent's messages and to everything it scrubs)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return go_string(value)
    if isinstance(value, int | float):
        return go_float(float(value))
    if isinstance(value, list):
        return "[" + ",".join(go_marshal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(go_string(k) + ":" + go_marshal(value[k]) for k in sorted(value)) + "}"
    raise TypeError(f"not a decoded JSON value: {type(value).__name__}")


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[ \t\r\n]+', re.S)
_COMPACT_ESC = {
    b"<": b"\\u003c",
    b">": b"\\u003e",
    b"&": b"\\u0026",
    b"\xe2\x80\xa8": b"\\u2028",
    b"\xe2\x80\xa9": b"\\u2029",
}
_COMPACT_RE = re.compile(rb"[<>&]|\xe2\x80[\xa8\xa9]")


def go_compact(raw: bytes) -> bytes:
    """A ``json.RawMessage`` as ``json.Marshal`` writes it: ``appendCompact`` with HTML escaping — no
    whitespace between tokens, ``<>&`` and U+2028/9 escaped, keys and number literals untouched."""

    def token(m: re.Match[bytes]) -> bytes:
        t = m.group(0)
        return b"" if t[:1] != b'"' else _COMPACT_RE.sub(lambda e: _COMPACT_ESC[e.group(0)], t)

    return _TOKEN.sub(token, raw.strip())


def go_int(n: int) -> str:
    """A Go ``int`` field."""
    return str(int(n))
