"""What a valid CKP 0.3.0 ``kind: Memory`` declaration is: the JSON schema (``schema/0.3.0/memory.schema.json``
and the definitions it uses) as a table, and the MUST rules of the spec's text besides it.

``check(doc)`` raises a ``ConfigError`` naming the field the way a JSON pointer would (``spec.stores[1].backend``),
what was expected, and how to fix it; a likely misspelling of a key or an enum value gets a "did you mean".
The rules of the spec's text (clawkernel-spec.md, section 5 "The Eleven Primitives" and 5.6 "Memory"):

- every document has ``claw``, ``kind`` and ``metadata.name``; ``claw`` is the protocol version (this schema
  pins ``0.3.0``); ``kind`` is one of the twelve kinds (here it must be ``Memory``);
- ``spec.stores`` holds at least one store; the cognitive fields (``role``, ``lifecycle``, ``forgetting``,
  ``salience``, ``confidence``) are optional and validators MUST accept them;
- two stores with one name are refused too: a store is addressed by its name (``claw.memory.query``'s
  ``store`` is "Store name from the Memory primitive"), so a second one could never be reached.

Path templates (``{identity_name}``) are resolved where the declaration is mapped (mdmem.config.ckp.to_config).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mdmem.config.validation import json_kind, show, suggest
from mdmem.util.errors import ConfigError

PROTOCOL = "0.3.0"
KINDS = (
    "Identity",
    "Provider",
    "Channel",
    "Tool",
    "Skill",
    "Memory",
    "WorldModel",
    "Sandbox",
    "Policy",
    "Swarm",
    "Telemetry",
    "Claw",
)
STORE_TYPES = ("conversation", "semantic", "key-value", "workspace", "checkpoint")
BACKENDS = ("sqlite", "postgresql", "filesystem", "sqlite-vec", "pgvector", "qdrant", "custom")
DURATION = re.compile(r"[0-9]+(s|m|h|d)")
KEBAB = re.compile(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,62})")
SEMVER = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+(-.+)?")


@dataclass(frozen=True)
class Str:
    enum: tuple[str, ...] = ()
    pattern: re.Pattern[str] | None = None
    expected: str = "a string"
    min_length: int = 0


@dataclass(frozen=True)
class Int:
    minimum: int = 1


@dataclass(frozen=True)
class Bool:
    pass


@dataclass(frozen=True)
class List:
    items: Any
    min_items: int = 0


@dataclass(frozen=True)
class Obj:
    fields: Mapping[str, Any]
    required: tuple[str, ...] = ()
    closed: bool = True  # additionalProperties: false
    values: Any = None  # the schema of every value (labels: strings), when ``fields`` is empty
    extra: dict[str, Any] = field(default_factory=dict)


def _enum(*values: str) -> Str:
    return Str(enum=values)


_SIGNALS = List(Str())
STORE = Obj(
    {
        "name": Str(min_length=1, expected="a non-empty string"),
        "type": Str(enum=STORE_TYPES),
        "backend": Str(enum=BACKENDS),
        "retention": Obj(
            {
                "max_age": Str(pattern=DURATION, expected='a duration such as "90d", "24h", "30m", "90s"'),
                "max_entries": Int(),
            }
        ),
        "compaction": Obj({"enabled": Bool(), "strategy": _enum("summarize", "truncate", "sliding-window")}),
        "embedding": Obj(
            {"provider_ref": Str(), "model": Str(), "dimensions": Int()},
            required=("provider_ref", "model", "dimensions"),
        ),
        "search": Obj(
            {
                "strategy": _enum("vector-only", "fts-only", "hybrid"),
                "fusion": _enum("reciprocal-rank", "linear-combination"),
                "top_k": Int(),
            }
        ),
        "scope": _enum("global", "per-identity", "per-channel"),
        "encryption": Bool(),
        "path": Str(),
        "isolation": _enum("shared", "per-identity", "per-channel"),
        "max_size_mb": Int(),
        "checkpoint": Obj(
            {"max_snapshots": Int(), "ttl": Str(pattern=DURATION, expected='a duration such as "24h" or "7d"')}
        ),
        "role": _enum("sensory", "working", "episodic", "semantic", "procedural"),
        "lifecycle": Obj(
            {
                "acquisition": _enum("event-driven", "continuous", "manual"),
                "consolidation": _enum("none", "summarize", "merge", "adaptive"),
                "retrieval": _enum("exact", "semantic", "contextual", "hybrid"),
            }
        ),
        "forgetting": Obj({"strategy": _enum("none", "decay", "summarize", "adaptive"), "signals": _SIGNALS}),
        "salience": Obj({"enabled": Bool(), "signals": _SIGNALS}),
        "confidence": Obj({"source_tracking": Bool(), "decay": _enum("optional", "none", "adaptive")}),
    },
    required=("name", "type"),
)
METADATA = Obj(
    {
        "name": Str(
            pattern=KEBAB, expected="a name of 1-63 letters, digits and hyphens, starting with a letter or digit"
        ),
        "version": Str(pattern=SEMVER, expected='a semantic version such as "1.0.0"'),
        "labels": Obj({}, closed=False, values=Str()),
        "annotations": Obj({}, closed=False),
    },
    required=("name",),
    closed=False,
)
MEMORY = Obj(
    {
        "claw": Str(),  # checked on its own first: the message says which version this reads
        "kind": Str(),
        "metadata": METADATA,
        "spec": Obj({"stores": List(STORE, min_items=1)}, required=("stores",)),
    },
    required=("claw", "kind", "metadata", "spec"),
)

_FIXES = {
    "spec.stores": "declare at least one store, e.g. - { name: knowledge, type: semantic }",
    "embedding": "give provider_ref, model and dimensions together, or remove embedding",
}


def _error(path: str, message: str, source: str | None) -> ConfigError:
    return ConfigError(f"{path}: {message}" if path else message, key=path or None, source=source)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check(schema: Any, value: Any, path: str, source: str | None) -> None:
    if isinstance(schema, Obj):
        _check_obj(schema, value, path, source)
    elif isinstance(schema, List):
        if not isinstance(value, list):
            raise _error(
                path, f"expected a list, got {json_kind(value)}. Fix: write it as a YAML list (- item).", source
            )
        if len(value) < schema.min_items:
            fix = _FIXES.get(path, f"give at least {schema.min_items} item(s)")
            raise _error(path, f"expected at least {schema.min_items} item(s), got none. Fix: {fix}.", source)
        for i, item in enumerate(value):
            _check(schema.items, item, f"{path}[{i}]", source)
    elif isinstance(schema, Str):
        _check_str(schema, value, path, source)
    elif isinstance(schema, Int):
        if isinstance(value, bool) or not isinstance(value, int):
            hint = " (write it without quotes)" if isinstance(value, str) and value.strip().isdigit() else ""
            raise _error(path, f"expected an integer, got {show(value)}{hint}. Fix: write a whole number.", source)
        if value < schema.minimum:
            raise _error(path, f"expected an integer of at least {schema.minimum}, got {value}. Fix: raise it.", source)
    elif isinstance(schema, Bool) and not isinstance(value, bool):
        raise _error(path, f"expected true or false, got {show(value)}. Fix: write true or false.", source)


def _check_str(schema: Str, value: Any, path: str, source: str | None) -> None:
    if not isinstance(value, str):
        hint = " (quote it)" if isinstance(value, int | float) and not isinstance(value, bool) else ""
        what = schema.expected if not schema.enum else "one of " + ", ".join(json.dumps(e) for e in schema.enum)
        raise _error(path, f"expected {what}, got {show(value)}{hint}. Fix: write {what}.", source)
    if schema.enum and value not in schema.enum:
        choices = ", ".join(json.dumps(e) for e in schema.enum)
        close = suggest(value, list(schema.enum))
        did = f" (did you mean {json.dumps(close)}?)" if close else ""
        raise _error(path, f"expected one of {choices}, got {show(value)}{did}. Fix: use one of them.", source)
    if schema.pattern is not None and not schema.pattern.fullmatch(value):
        raise _error(path, f"expected {schema.expected}, got {show(value)}. Fix: write {schema.expected}.", source)
    if len(value) < schema.min_length:
        raise _error(path, f"expected {schema.expected}, got an empty string. Fix: give it a value.", source)


def _check_obj(schema: Obj, value: Any, path: str, source: str | None) -> None:
    if not isinstance(value, dict):
        raise _error(path, f"expected a mapping, got {json_kind(value)}. Fix: write it as key: value lines.", source)
    for key in value:
        if not isinstance(key, str):
            raise _error(path, f"a key is {show(key)}, not a string. Fix: quote the key.", source)
    for key in schema.required:
        if key not in value:
            fix = _FIXES.get(_join(path, key)) or (_FIXES["embedding"] if path.endswith("embedding") else f"add {key}")
            typo = next((k for k in value if k not in schema.fields and suggest(k, [key]) == key), None)
            if typo is not None:
                fix = f"rename {typo!r} to {key!r}"
            raise _error(_join(path, key), f"missing; it is required. Fix: {fix}.", source)
    for key, item in value.items():
        sub = _join(path, key)
        if key in schema.fields:
            _check(schema.fields[key], item, sub, source)
        elif schema.values is not None:
            _check(schema.values, item, sub, source)
        elif schema.closed:
            close = suggest(key, list(schema.fields))
            did = f"did you mean '{close}'? " if close else ""
            fix = f"rename it to '{close}'" if close else "remove it"
            valid = ", ".join(schema.fields)
            raise _error(sub, f"unknown field; {did}Fix: {fix}. Valid fields here: {valid}.", source)


def check(doc: Any, source: str | None = None) -> None:
    """Raise ``ConfigError`` naming the first field of ``doc`` that breaks the schema or a MUST rule."""
    if not isinstance(doc, dict):
        raise _error(
            "",
            f"the declaration must be a mapping, got {json_kind(doc)}. Fix: start it with "
            "claw:, kind:, metadata:, spec:.",
            source,
        )
    claw = doc.get("claw")
    if "claw" in doc and claw != PROTOCOL:
        got = show(claw) if isinstance(claw, str) else f"{show(claw)} ({json_kind(claw)}; quote the version)"
        version = isinstance(claw, str) and SEMVER.fullmatch(claw)
        why = f"mdmem reads CKP {PROTOCOL} declarations" + (", not other versions" if version else "")
        raise _error("claw", f'expected "{PROTOCOL}", got {got}: {why}. Fix: write claw: "{PROTOCOL}".', source)
    kind = doc.get("kind")
    if "kind" in doc and kind != "Memory":
        if isinstance(kind, str) and kind in KINDS:
            why = f"this is a {kind} declaration; `mdmem ckp import` takes the Memory one"
            fix = "give the file that holds kind: Memory (a Claw manifest names it under spec.memory)"
        else:
            close = suggest(kind, list(KINDS)) if isinstance(kind, str) else None
            why = "not a CKP kind" + (f' (did you mean "{close}"?)' if close else "")
            fix = "write kind: Memory"
        raise _error("kind", f'expected "Memory", got {show(kind)}: {why}. Fix: {fix}.', source)
    _check(MEMORY, doc, "", source)
    seen: dict[str, int] = {}
    for i, store in enumerate(doc["spec"]["stores"]):
        first = seen.setdefault(store["name"], i)
        if first != i:
            raise _error(
                f"spec.stores[{i}].name",
                f"{show(store['name'])} is also the name of spec.stores[{first}]; a store is addressed by its name. "
                "Fix: give each store its own name.",
                source,
            )
