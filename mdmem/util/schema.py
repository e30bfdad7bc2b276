"""The JSON-Schema subset the tools' flat argument objects use: types, bounds, required and unknown keys (with
"did you mean"), ``minLength`` for strings. One checker for the tools' arguments (and the service's
``/remember`` body), whichever way they are called (tool call, Python, command line, HTTP)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def validate_arguments(
    schema: Mapping[str, Any], args: dict[str, Any], names: Mapping[str, str] | None = None
) -> str | None:
    """Check ``args`` against one of the flat object schemas above; None, or what is wrong and how to fix it.

    Integral floats (``5.0``) are accepted for integers and converted in place. ``names`` gives the name an
    argument has for the caller (``max_results`` in Python, ``--max-results`` on the command line).
    """
    props: Mapping[str, Any] = schema.get("properties", {})
    for key in args:
        if key not in props:
            hint = next((p for p in props if _norm(p) == _norm(key)), None)
            did = f" (did you mean {hint!r}?)" if hint else ""
            valid = ", ".join(props) or "none"
            return f"unknown argument {key!r}{did}; valid arguments: {valid}"
    for key in schema.get("required", ()):
        if key not in args:
            return f"missing required argument {key!r}"
    for key, rule in props.items():
        if key not in args:
            continue
        value, name = args[key], (names or {}).get(key) or repr(key)
        kind = rule["type"]
        if kind == "integer" and isinstance(value, float) and value.is_integer():
            value = args[key] = int(value)
        if not _JSON_TYPES[kind](value):
            return f"{name} must be {'an' if kind == 'integer' else 'a'} {kind}, got {_json(value)}"
        if kind == "number" and not math.isfinite(value):
            return f"{name} must be a finite number, got {value}"
        if kind == "string" and len(value.strip()) < rule.get("minLength", 0):
            return f"{name} must not be empty or only spaces"
        low, high = rule.get("minimum"), rule.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
            return f"{name} must be {bounds}, got {value}"
    return None


def _json(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return type(value).__name__


def _norm(key: str) -> str:
    return key.lower().replace("_", "").replace("-", "")
