"""Validation of configuration values: the bounds (``RANGES``), type conversion with clear errors that never
echo secrets, misspelt-key suggestions, and the layer merge. Driven by the dataclasses of mdmem.config.settings.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from mdmem.config.settings import AgentKeys, Defaults, Entry, MemorySearchConfig
from mdmem.util.errors import ConfigError
from mdmem.util.redaction.credentials import REDACTED, looks_secret, redact_value, scrub


@dataclass(frozen=True)
class Range:
    lo: float
    hi: float | None = None
    lo_open: bool = False  # True: lo itself is not allowed

    def ok(self, v: float) -> bool:
        return (v > self.lo if self.lo_open else v >= self.lo) and (self.hi is None or v <= self.hi)

    def text(self) -> str:
        lo, hi = _number(self.lo), None if self.hi is None else _number(self.hi)
        if hi is not None:
            return f"greater than {lo} and at most {hi}" if self.lo_open else f"from {lo} to {hi}"
        return f"greater than {lo}" if self.lo_open else f"of at least {lo}"


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


# Bounds by camelCase key path inside memorySearch: a new field needs a line here only if it is bounded.
# Upper bounds keep values away from what crashes native code or overflows: llama.cpp with thousands of
# threads, sqlite-vec's 8192-dimension limit, timeouts the OS clock cannot represent. Every integer also has
# to fit in 64 bits (checked for all fields), since indexes and state files store them.
RANGES: dict[str, Range] = {
    "remote.dimensions": Range(1, 8192),  # sqlite-vec stores at most 8192 dimensions
    "remote.timeoutSeconds": Range(0, 3600, lo_open=True),
    "remote.maxRetries": Range(0, 20),
    "local.threads": Range(1, 256),  # llama.cpp aborts or segfaults with absurd thread counts
    "local.contextSize": Range(32, 1_048_576),
    "chunking.tokens": Range(32, 8192),
    "chunking.overlap": Range(0),  # and < chunking.tokens, checked after merging
    "chunking.windowTokens": Range(0, 8192),
    "sync.watchDebounceMs": Range(0, 600_000),
    "sync.intervalMinutes": Range(0),
    "query.maxResults": Range(1, 100),
    "query.lowConfidenceResults": Range(0, 100),
    "query.minScore": Range(0, 1),
    "query.embedTimeoutMs": Range(1, 600_000),
    "query.hybrid.vectorWeight": Range(0),  # and not both 0, checked after merging
    "query.hybrid.textWeight": Range(0),
    "query.hybrid.candidateMultiplier": Range(1, 50),
    "query.hybrid.rrfK": Range(1),
    "query.hybrid.mmr.lambda": Range(0, 1),
    "query.hybrid.temporalDecay.halfLifeDays": Range(0, lo_open=True),
    "cache.maxEntries": Range(0),
    "breaker.failures": Range(1, 1000),
    "breaker.coolDownSeconds": Range(0, 86_400),
    "breaker.maxCoolDownSeconds": Range(0, 86_400),
    "maxFileBytes": Range(1),
    "store.maxConnections": Range(1, 1000),
    "store.hnsw.m": Range(2, 100),  # pgvector's bounds
    "store.hnsw.efConstruction": Range(4, 1000),
    "store.hnsw.efSearch": Range(1, 1000),
    "store.ivf.exactBelow": Range(1_000),  # fewer vectors than this are always searched exactly
    "store.ivf.probes": Range(1, 4096),
    "usage.flushSeconds": Range(0, 86_400),
    "lifecycle.tiers[].olderThanDays": Range(0, 100_000),
    "lifecycle.tiers[].unusedDays": Range(0, 100_000),
}
# Bounds by camelCase key path inside an agent (agents.defaults or agents.list[]), besides memorySearch.
AGENT_RANGES: dict[str, Range] = {
    "compaction.reserveTokensFloor": Range(0),
    "compaction.memoryFlush.softThresholdTokens": Range(0),
    "sessionContext.maxChars": Range(1000),
}
REMOTE_ENV = "MDMEMORY_REMOTE_AGENTS"
# Bounds of the top-level ``service`` keys.
SERVICE_RANGES: dict[str, Range] = {
    "port": Range(0, 65535),
    "maxBodyBytes": Range(1024, 1 << 30),
    "maxMessageChars": Range(1000, 1 << 26),
    "recallWorkers": Range(0, 64),
    "recallBudgetMs": Range(10, 600_000),
    "maxOpenAgents": Range(1, 100_000),
    "maxConnections": Range(1, 1_000_000),
    "maxHeaderBytes": Range(1024, 1 << 20),
    "headerTimeoutMs": Range(100, 600_000),
    "bodyTimeoutMs": Range(100, 3_600_000),
}
# Keys of agents.defaults.compaction that belong to the agent runtime (Clawdbot/OpenClaw): ignored, never typos.
RUNTIME_COMPACTION_KEYS = frozenset(
    {"mode", "model", "reserveTokens", "keepRecentTokens", "maxHistoryShare", "identifierPolicy", "timeoutSeconds"}
)
_UNION_FIELDS = frozenset({"extra_paths"})  # lists merged as a de-duplicated union instead of replaced
AGENT_ID = re.compile(r"[A-Za-z0-9_-]+")
POD = re.compile(r"[A-Za-z0-9._-]{1,64}")  # a pod name, as the service takes one: an agent id's rule
TOKEN = re.compile(r"\{(\w*)\}")
_MISMATCH = object()
_INT64 = 2**63 - 1
T = TypeVar("T")
Layers = list[tuple[str, dict[str, Any]]]  # (key prefix for messages, validated snake_case values)


def camel(name: str) -> str:
    """The JSON key of a dataclass field: ``max_file_bytes`` -> ``maxFileBytes``."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def describe(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, UnionType):
        return " or ".join(describe(a) for a in args if a is not NoneType) + " or null"
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(a) for a in args)
    kinds = {dict: "an object of string values", tuple: "a list of strings", bool: "true or false"}
    kinds |= {int: "an integer", float: "a number", str: "a string"}
    return kinds.get(origin or tp, "an object")


def _convert(tp: Any, value: Any) -> Any:
    """``value`` as the Python type ``tp``, or ``_MISMATCH``. Dataclasses are handled by the caller."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, UnionType):
        return None if value is None else _convert(next(a for a in args if a is not NoneType), value)
    if origin is Literal:
        return value if any(type(value) is type(a) and value == a for a in args) else _MISMATCH
    if origin is dict:
        ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
        return dict(value) if ok else _MISMATCH
    if origin is tuple:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return tuple(value) if ok else _MISMATCH
    if tp in (bool, str):
        return value if isinstance(value, tp) else _MISMATCH
    if tp is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _MISMATCH
    if tp is float:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if number and math.isfinite(value) else _MISMATCH
    raise TypeError(f"config field type {tp!r} is not supported by the loader")  # a programming error


def show(value: Any, secret: bool = False) -> str:
    """``value`` for an error message: JSON, at most 80 characters, with secrets replaced by ``[REDACTED]``.

    ``secret`` marks a value of a secret field (apiKey, headers). Besides those, any string that looks like a
    credential (``sk-...``, ``Bearer ...``, a URL with user:password) is redacted wherever it was put, and so
    is the value of any secret-looking key inside a shown object (``token``, ``apikey``, ``Authorization``...).
    """
    if secret or (isinstance(value, str) and looks_secret(value)):
        return REDACTED
    try:
        text = json.dumps(redact_value(value, public=_public_keys()))
    except (TypeError, ValueError):
        text = REDACTED  # not JSON data: never fall back to repr(), which could show anything
    return text if len(text) <= 80 else text[:77] + "..."


@functools.cache
def _public_keys() -> frozenset[str]:
    """The camelCase names of every config field that is not secret (``repr=False`` marks secrets)."""
    public, todo = set(RUNTIME_COMPACTION_KEYS), [MemorySearchConfig, AgentKeys, Defaults, Entry]
    while todo:
        cls = todo.pop()
        hints = get_type_hints(cls)
        for f in fields(cls):
            public |= {camel(f.name)} if f.repr else set()
            todo += [hints[f.name]] if is_dataclass(hints[f.name]) else []
            todo += [item] if (item := _object_list_item(hints[f.name])) is not None else []
    return frozenset(public)


def json_kind(value: Any) -> str:
    """The JSON type of ``value``, for messages about a value that is not shown (it may hold secrets)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int | float):
        return "a number"
    kinds: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}
    return kinds.get(type(value), type(value).__name__)


def suggest(word: str, choices: list[str], cutoff: float = 0.6) -> str | None:
    """The choice ``word`` most likely misspells (case, ``_``/``-`` and difflib ratio), if any."""

    def norm(s: str) -> str:
        return s.lower().replace("_", "").replace("-", "")

    import difflib  # here: only a misspelt key needs it

    close = difflib.get_close_matches(word.lower(), [c.lower() for c in choices], n=1, cutoff=cutoff)
    same = [c for c in choices if norm(c) == norm(word) or close and c.lower() == close[0]]
    return same[0] if same else None


class Loader:
    """One load: the source named in messages and the runtime keys ignored so far."""

    def __init__(self, source: Path | None) -> None:
        self.source = str(source) if source else None
        self.ignored: list[str] = []

    def error(self, key: str | None, message: str) -> ConfigError:
        key = key and scrub(key)  # a credential pasted as a key name ({ "sk-...": true }) is not echoed either
        return ConfigError(f"{key}: {message}" if key else message, key=key, source=self.source)

    def bad(self, key: str, value: Any, expected: str, fix: str, secret: bool = False, hint: str = "") -> ConfigError:
        return self.error(key, f"expected {expected}, got {show(value, secret)}{hint}. Fix: {fix}.")

    def obj(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):  # the value is not echoed: an object's place may hold secrets
            raise self.error(
                key, f"expected an object, got {json_kind(value)}. Fix: write it as {{ key: value, ... }}."
            )
        return value

    def runtime_keys(
        self, obj: dict[str, Any], prefix: str, ours: tuple[str, ...], known: frozenset[str] = frozenset()
    ) -> None:
        """Record keys that belong to the agent runtime; reject likely typos of ours (``known`` never are)."""
        for key in obj:
            path = f"{prefix}.{key}" if prefix else key
            if key not in ours and key not in known and (mine := suggest(key, list(ours), cutoff=0.8)):
                fix = f"rename it to '{mine}' (keys are case-sensitive camelCase)"
                raise self.error(path, f"unknown key; did you mean '{mine}'? Fix: {fix}.")
            if key not in ours:
                self.ignored.append(scrub(path))

    def section(
        self, cls: Any, raw: Any, key: str, rel: str = "", ranges: Mapping[str, Range] = RANGES
    ) -> dict[str, Any]:
        """Validate one (partial) layer of dataclass ``cls``: snake_case keys, converted values.

        ``ranges`` holds the bounds by camelCase path relative to where validation started.
        """
        hints, by_key = get_type_hints(cls), {camel(f.name): f for f in fields(cls)}
        out: dict[str, Any] = {}
        for name, value in self.obj(raw, key).items():
            path, sub = f"{key}.{name}", f"{rel}.{name}" if rel else name
            if (f := by_key.get(name)) is None:
                hint = suggest(name, list(by_key))
                did, fix = (f"did you mean '{hint}'? ", f"rename it to '{hint}'") if hint else ("", "remove it")
                raise self.error(path, f"unknown key; {did}Fix: {fix}. Valid keys here: {', '.join(by_key)}.")
            tp = hints[f.name]
            if is_dataclass(tp):
                out[f.name] = self.section(tp, value, path, sub, ranges)
            elif (item := _object_list_item(tp)) is not None:
                out[f.name] = self.objects(item, value, path, f"{sub}[]", ranges)
            else:
                out[f.name] = self.value(tp, value, path, sub, f, ranges)
        return out

    def objects(self, cls: Any, value: Any, path: str, rel: str, ranges: Mapping[str, Range]) -> tuple[Any, ...]:
        """A list of objects of dataclass ``cls`` (``lifecycle.tiers``), each validated and built; a list
        replaces the one of a lower layer whole."""
        if not isinstance(value, list):
            raise self.error(path, f"expected a list of objects, got {json_kind(value)}. Fix: write it as [{{...}}].")
        return tuple(build(cls, self.section(cls, v, f"{path}[{i}]", rel, ranges)) for i, v in enumerate(value))

    def value(
        self, tp: Any, value: Any, path: str, rel: str, f: Field[Any], ranges: Mapping[str, Range] = RANGES
    ) -> Any:
        secret = not f.repr  # repr=False marks secrets: their values never appear in messages
        default = f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc,operator]
        keep = "or remove it to use the default" + ("" if secret else f" ({show(default)})")
        converted, rule = _convert(tp, value), ranges.get(rel)
        if converted is _MISMATCH:
            choice = (
                suggest(value, list(get_args(tp))) if get_origin(tp) is Literal and isinstance(value, str) else None
            )
            hint = f" (did you mean {json.dumps(choice)}?)" if choice else ""
            if isinstance(value, float) and not math.isfinite(value):
                hint = " (infinity and NaN are not numbers here)"
            raise self.bad(path, value, describe(tp), f"set it to {describe(tp)}, {keep}", secret, hint)
        if rule and converted is not None and not rule.ok(converted):
            expected = f"{describe(tp).removesuffix(' or null')} {rule.text()}"
            raise self.bad(path, value, expected, f"set it to a value {rule.text()}, {keep}", secret)
        if isinstance(converted, int) and not isinstance(converted, bool) and abs(converted) > _INT64:
            expected = "an integer that fits in 64 bits"
            raise self.bad(path, value, expected, f"set it to a smaller value, {keep}", secret)
        return converted


def _object_list_item(tp: Any) -> Any:
    """``X`` when ``tp`` is ``tuple[X, ...]`` of a dataclass ``X`` (a list of objects), else None."""
    args = get_args(tp)
    if get_origin(tp) is tuple and len(args) == 2 and args[1] is Ellipsis and is_dataclass(args[0]):
        return args[0]
    return None


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if key in _UNION_FIELDS:
            out[key] = tuple(dict.fromkeys((*base.get(key, ()), *value)))
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def build(cls: type[T], data: dict[str, Any]) -> T:
    hints = get_type_hints(cls)
    return cls(**{k: build(hints[k], v) if is_dataclass(hints[k]) else v for k, v in data.items()})


def origin(layers: Layers, *paths: str) -> str:
    """The key prefix of the last layer that set any of the dotted ``paths`` (else the first layer)."""
    for prefix, layer in reversed(layers):
        for path in paths:
            node: Any = layer
            for key in path.split("."):
                node = node.get(key, MISSING) if isinstance(node, dict) else MISSING
            if node is not MISSING:
                return prefix
    return layers[0][0]
