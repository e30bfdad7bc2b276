"""The proxy's entry id, byte for byte: ``hist1_`` + sha256 of the entry's canonical JSON without ``id``.

Followed from cllama ``internal/sessionhistory/id.go`` (``EnsureID``, ``IDFromJSON``) and the ``Entry``
struct of ``internal/sessionhistory/recorder.go``. The canonical form is what Go's ``json.Marshal`` writes
for ``entryWithoutID``:

- fields in this order: ``version, ts, claw_id, path, requested_model, effective_provider,
  effective_model, status_code, stream, request_original, request_effective, response, usage``;
  ``request_original`` / ``request_effective`` are left out when absent (``omitempty`` on a
  ``json.RawMessage``), ``response`` is ``{format, json?, text?}`` (``json`` left out when absent, ``text``
  when empty), ``usage`` is always there as ``{prompt_tokens?, completion_tokens?, reported_cost_usd?}``
  (zero counts and a null cost left out);
- no whitespace; strings escaped as Go does: ``\\"`` ``\\\\`` ``\\n`` ``\\r`` ``\\t`` ``\\b`` ``\\f``, other
  control characters as ``\\u00XX`` (lower-case hex), ``<`` ``>`` ``&`` as ``\\u003c`` ``\\u003e``
  ``\\u0026``, U+2028/U+2029 escaped, everything else as UTF-8;
- typed numbers as Go formats them (``reported_cost_usd``: shortest round-trip, exponent only below 1e-6
  or from 1e21, as ``1e-7``); inside the raw-JSON fields, numbers keep their literal text and object keys
  their order (Go compacts a ``RawMessage``, it does not re-encode it).

A raw-JSON field whose strings used non-canonical escapes (``\\u00e9`` for ``é``) hashes differently here
than in the proxy; entries the proxy sends over HTTP were re-marshalled by it (``scrubMemoryJSON``), and
ledger lines without an id are hashed from their own bytes (``id_from_json``), both exact.
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Any

ENTRY_ID_PREFIX = "hist1_"
_FIELDS = (
    "version",
    "ts",
    "claw_id",
    "path",
    "requested_model",
    "effective_provider",
    "effective_model",
    "status_code",
    "stream",
)
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
_ESCAPES.update({c: f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"})


class RawInt(int):
    """An integer parsed from JSON that remembers its literal text."""

    raw: str


class RawFloat(float):
    """A float parsed from JSON that remembers its literal text (``1.50`` stays ``1.50``)."""

    raw: str


def _raw_int(text: str) -> RawInt:
    v = RawInt(text)
    v.raw = text
    return v


def _raw_float(text: str) -> RawFloat:
    v = RawFloat(text)
    v.raw = text
    return v


def loads(text: str | bytes) -> Any:
    """``json.loads`` keeping number literals (for hashing raw-JSON fields as Go compacts them)."""
    return json.loads(text, parse_int=_raw_int, parse_float=_raw_float)


def go_string(s: str) -> str:
    out = ['"']
    for ch in s:
        esc = _ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        elif "\ud800" <= ch <= "\udfff":
            out.append("\ufffd")  # Go writes invalid UTF-8 (a lone surrogate here) as U+FFFD
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def go_float(f: float) -> str:
    """Go's ``encoding/json`` float64: shortest round-trip digits, ``e`` notation outside [1e-6, 1e21)."""
    if f == 0:
        return "0"
    a = abs(f)
    if a < 1e-6 or a >= 1e21:
        mant, _, exp = repr(f).partition("e")
        if len(exp) == 3 and exp.startswith("-0"):
            exp = "-" + exp[2]  # Go cleans e-07 to e-7 (encoding/json floatEncoder)
        return f"{mant}e{exp}"
    s = format(Decimal(repr(f)), "f")
    return s.rstrip("0").rstrip(".") if "." in s else s


def raw_json(value: Any) -> str:
    """A parsed raw-JSON value written as Go's ``json.Compact`` with HTML escaping would leave it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, RawInt | RawFloat):
        return value.raw
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_string(value)
    if isinstance(value, list):
        return "[" + ",".join(raw_json(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{go_string(str(k))}:{raw_json(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _typed(value: Any, kind: type) -> str:
    if kind is str:
        return go_string(value if isinstance(value, str) else "")
    if kind is bool:
        return "true" if value is True else "false"
    return str(int(value)) if isinstance(value, int | float) and not isinstance(value, bool) else "0"


def canonical_entry(entry: dict[str, Any]) -> str:
    """The JSON ``json.Marshal(entryWithoutID{...})`` writes for ``entry`` (see the module docstring)."""
    kinds: dict[str, type] = {"version": int, "status_code": int, "stream": bool}
    parts = [f"{go_string(name)}:{_typed(entry.get(name), kinds.get(name, str))}" for name in _FIELDS]
    for name in ("request_original", "request_effective"):
        if name in entry:
            parts.append(f"{go_string(name)}:{raw_json(entry[name])}")
    response: dict[str, Any] = entry["response"] if isinstance(entry.get("response"), dict) else {}
    resp = [f'"format":{_typed(response.get("format"), str)}']
    if "json" in response:
        resp.append(f'"json":{raw_json(response["json"])}')
    if isinstance(response.get("text"), str) and response["text"]:
        resp.append(f'"text":{go_string(response["text"])}')
    parts.append('"response":{' + ",".join(resp) + "}")
    usage: dict[str, Any] = entry["usage"] if isinstance(entry.get("usage"), dict) else {}
    use = []
    for name in ("prompt_tokens", "completion_tokens"):
        n = usage.get(name)
        if isinstance(n, int | float) and not isinstance(n, bool) and int(n) != 0:
            use.append(f"{go_string(name)}:{int(n)}")
    cost = usage.get("reported_cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        use.append(f'"reported_cost_usd":{go_float(float(cost))}')
    parts.append('"usage":{' + ",".join(use) + "}")
    return "{" + ",".join(parts) + "}"


def id_from_json(raw: bytes | str) -> str:
    """``IDFromJSON``: ``hist1_`` + hex sha256 of the whitespace-trimmed raw JSON line."""
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    return ENTRY_ID_PREFIX + hashlib.sha256(data.strip()).hexdigest()


def entry_id(entry: dict[str, Any]) -> str:
    """``EnsureID``: the entry's own ``id`` when set, else the id the proxy would give it."""
    own = entry.get("id")
    if isinstance(own, str) and own.strip():
        return own.strip()
    return id_from_json(canonical_entry(entry))
