"""Configuration: json5 file -> frozen dataclasses with defaults, per-agent merge, validation.

The file is shaped like the Clawdbot/OpenClaw config so users can bring theirs::

    { agents: { defaults: { workspace: "~/clawd", memorySearch: {...} },
                list: [ { id: "main", default: true, workspace: "...", memorySearch: {...} } ] } }

JSON keys are camelCase; dataclass fields are the snake_case of the same words. Validation is driven
by the dataclass fields and their type hints, plus the ``RANGES`` table; adding a key means adding a field
(and, if bounded, a ``RANGES`` line). Each ``agents.list[]`` memorySearch is deep-merged over the defaults:
objects merge key by key, ``extraPaths`` is a de-duplicated union, anything else replaces. Keys mdmemory
does not own at the top level and in ``agents``/``agents.defaults``/``agents.list[]`` belong to the agent
runtime and are ignored (listed in ``Config.ignored_keys``) unless they look like a typo of ours.
The agent integration's keys (``userTimezone``, ``compaction``, ``sessionContext``; see ``_AgentKeys``) are
deep-merged the same way; ``compaction`` is shared with the runtime, whose own keys in it are ignored.

Paths: ``home`` is ``$MDMEMORY_HOME`` or ``~/.mdmemory``. Workspaces are relative to the config file's
directory (cwd without a file; ``$MDMEMORY_WORKSPACE`` overrides ``agents.defaults.workspace``, relative to
cwd). ``extraPaths`` are made absolute relative to the agent's workspace. ``store.path`` substitutes
``{agentId}`` and ``{home}`` and is relative to home.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from mdmemory import configpath, json5read
from mdmemory.errors import ConfigError
from mdmemory.redact import REDACTED, looks_secret, redact_value, scrub
from mdmemory.storeconfig import DEFAULT_STORE_PATH as DEFAULT_STORE_PATH  # re-exported for callers
from mdmemory.storeconfig import StoreConfig, resolve_store

DEFAULT_LOCAL_MODEL = "hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf"
DEFAULT_REMOTE_MODEL = "text-embedding-3-small"
CONFIG_CACHE = "cache/config"  # under home: JSON5 files parsed once (mdmemory.json5read)

ProviderName = Literal["auto", "local", "openai", "none", "hash"]
FallbackName = Literal["openai", "local", "none"]
FusionName = Literal["weighted", "rrf"]
KeywordScoreName = Literal["relative", "coverage", "blend"]
CitationsMode = Literal["auto", "on", "off"]


@dataclass(frozen=True)
class RemoteConfig:
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    dimensions: int | None = None
    timeout_seconds: float = 30.0
    max_retries: int = 5


@dataclass(frozen=True)
class LocalConfig:
    model_path: str = DEFAULT_LOCAL_MODEL
    model_cache_dir: str | None = None  # None -> <home>/models
    threads: int | None = None  # None -> all cores
    context_size: int | None = None  # cap on n_ctx; None -> the model's trained context
    query_prefix: str | None = None  # None -> known default for the model family
    document_prefix: str | None = None


@dataclass(frozen=True)
class ChunkingConfig:
    tokens: int = 400
    overlap: int = 80
    window_tokens: int = 64  # also embed windows of about this many tokens per chunk (0: one vector per chunk)


@dataclass(frozen=True)
class SyncConfig:
    on_session_start: bool = True
    on_search: bool = True
    watch: bool = True
    watch_debounce_ms: int = 1500
    interval_minutes: float = 0.0  # 0 disables the periodic reconcile


@dataclass(frozen=True)
class MmrConfig:
    """Maximal marginal relevance re-ranking of the candidates (off by default: no gain measured on LoCoMo)."""

    enabled: bool = False
    lambda_: float = 0.7  # JSON key "lambda": 1 = relevance only, 0 = diversity only


@dataclass(frozen=True)
class TemporalDecayConfig:
    """Recency weighting of dated daily logs (off by default: LoCoMo questions are not about recent days)."""

    enabled: bool = False
    half_life_days: float = 30.0


@dataclass(frozen=True)
class HybridConfig:
    enabled: bool = True
    vector_weight: float = 0.7  # normalised with text_weight to sum 1
    text_weight: float = 0.3
    candidate_multiplier: int = 4
    fusion: FusionName = "weighted"
    rrf_k: int = 60
    mmr: MmrConfig = field(default_factory=MmrConfig)
    temporal_decay: TemporalDecayConfig = field(default_factory=TemporalDecayConfig)


@dataclass(frozen=True)
class QueryConfig:
    max_results: int = 6
    min_score: float = 0.35
    low_confidence_results: int = 3  # when nothing reaches min_score, return up to this many, marked (0: none)
    keyword_score: KeywordScoreName = "blend"
    hybrid: HybridConfig = field(default_factory=HybridConfig)
    citations: CitationsMode = "auto"  # memory_search cites path#Lx-Ly: auto = in main sessions only
    embed_timeout_ms: int = 2000  # a search waits at most this long for embeddings, then answers from keywords


@dataclass(frozen=True)
class BreakerConfig:
    """Pause a provider that keeps failing, for every process using the index (providers/breaker.py)."""

    failures: int = 2  # consecutive failed calls that open the breaker
    cool_down_seconds: float = 30.0  # first pause; doubles after each failed probe...
    max_cool_down_seconds: float = 300.0  # ...up to this


@dataclass(frozen=True)
class CacheConfig:
    enabled: bool = True
    max_entries: int = 50_000


@dataclass(frozen=True)
class SessionsConfig:
    """The ``sessions`` source (OpenClaw's key): ``sessions/*.md`` in the workspace, plus OpenClaw transcripts."""

    transcripts_dir: str | None = None  # OpenClaw's state dir: <dir>/agents/<agentId>/sessions/*.jsonl


MEMORY_SOURCES = ("memory", "sessions")


@dataclass(frozen=True)
class MemorySearchConfig:
    enabled: bool = True
    provider: ProviderName = "auto"
    model: str | None = None  # None -> the provider's default
    fallback: FallbackName = "none"
    remote: RemoteConfig = field(default_factory=RemoteConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)
    query: QueryConfig = field(default_factory=QueryConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    extra_paths: tuple[str, ...] = ()
    max_file_bytes: int = 5 * 1024 * 1024
    sources: tuple[str, ...] = ("memory",)  # some of MEMORY_SOURCES (OpenClaw's memorySearch.sources)
    sessions: SessionsConfig = field(default_factory=SessionsConfig)


DEFAULT_FLUSH_SYSTEM_PROMPT = "Session nearing compaction. Store durable memories now."
DEFAULT_FLUSH_PROMPT = "Write any lasting notes to memory/YYYY-MM-DD.md; reply with NO_REPLY if nothing to store."


@dataclass(frozen=True)
class MemoryFlushConfig:
    enabled: bool = True
    soft_threshold_tokens: int = 4000
    system_prompt: str = DEFAULT_FLUSH_SYSTEM_PROMPT
    prompt: str = DEFAULT_FLUSH_PROMPT  # "YYYY-MM-DD" becomes today's date; NO_REPLY is appended if missing


@dataclass(frozen=True)
class CompactionConfig:
    reserve_tokens_floor: int = 20_000
    memory_flush: MemoryFlushConfig = field(default_factory=MemoryFlushConfig)


@dataclass(frozen=True)
class SessionContextConfig:
    max_chars: int = 20_000


@dataclass(frozen=True)
class AgentConfig:
    """One agent after merging ``agents.list[i]`` over ``agents.defaults``; paths are absolute."""

    id: str
    workspace: Path
    store_path: Path
    memory_search: MemorySearchConfig
    default: bool = False
    home: Path = field(default_factory=lambda: Path("~/.mdmemory").expanduser())
    user_timezone: str | None = None  # IANA name; None -> the local time zone
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    session_context: SessionContextConfig = field(default_factory=SessionContextConfig)


@dataclass(frozen=True)
class ServiceConfig:
    """``service``: the memory-plane HTTP service (``mdmemory serve``, mdmemory.service)."""

    host: str = "127.0.0.1"
    port: int = 8080
    token: str | None = field(default=None, repr=False)  # bearer token; MEMORY_API_TOKEN wins
    auto_agents: bool = False  # an unknown agent_id gets {home}/agents/{id}/ from workspace-template
    max_body_bytes: int = 2 * 1024 * 1024


@dataclass(frozen=True)
class Config:
    home: Path
    source: Path | None  # the file read, or None when running on built-in defaults
    agents: tuple[AgentConfig, ...]
    ignored_keys: tuple[str, ...] = ()  # keys owned by the agent runtime, not by mdmemory
    service: ServiceConfig = field(default_factory=ServiceConfig)

    def agent(self, agent_id: str | None = None) -> AgentConfig:
        """The agent ``agent_id``, or the default agent; ConfigError naming the known ids otherwise."""
        source = str(self.source) if self.source else None
        if not self.agents:
            raise ConfigError("no agents are configured. Fix: add an entry to agents.list.", source=source)
        if agent_id is None:
            return next((a for a in self.agents if a.default), self.agents[0])
        for candidate in self.agents:
            if candidate.id == agent_id:
                return candidate
        known = ", ".join(a.id for a in self.agents)
        raise ConfigError(
            f"unknown agent id {agent_id!r}; configured agents: {known}. "
            "Fix: use one of these ids, or add an entry with this id to agents.list.",
            key="agents.list",
            source=source,
        )


# -- validation rules -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Range:
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
RANGES: dict[str, _Range] = {
    "remote.dimensions": _Range(1, 8192),  # sqlite-vec stores at most 8192 dimensions
    "remote.timeoutSeconds": _Range(0, 3600, lo_open=True),
    "remote.maxRetries": _Range(0, 20),
    "local.threads": _Range(1, 256),  # llama.cpp aborts or segfaults with absurd thread counts
    "local.contextSize": _Range(32, 1_048_576),
    "chunking.tokens": _Range(32, 8192),
    "chunking.overlap": _Range(0),  # and < chunking.tokens, checked after merging
    "chunking.windowTokens": _Range(0, 8192),
    "sync.watchDebounceMs": _Range(0, 600_000),
    "sync.intervalMinutes": _Range(0),
    "query.maxResults": _Range(1, 100),
    "query.lowConfidenceResults": _Range(0, 100),
    "query.minScore": _Range(0, 1),
    "query.embedTimeoutMs": _Range(1, 600_000),
    "query.hybrid.vectorWeight": _Range(0),  # and not both 0, checked after merging
    "query.hybrid.textWeight": _Range(0),
    "query.hybrid.candidateMultiplier": _Range(1, 50),
    "query.hybrid.rrfK": _Range(1),
    "query.hybrid.mmr.lambda": _Range(0, 1),
    "query.hybrid.temporalDecay.halfLifeDays": _Range(0, lo_open=True),
    "cache.maxEntries": _Range(0),
    "breaker.failures": _Range(1, 1000),
    "breaker.coolDownSeconds": _Range(0, 86_400),
    "breaker.maxCoolDownSeconds": _Range(0, 86_400),
    "maxFileBytes": _Range(1),
    "store.maxConnections": _Range(1, 1000),
    "store.hnsw.m": _Range(2, 100),  # pgvector's bounds
    "store.hnsw.efConstruction": _Range(4, 1000),
    "store.hnsw.efSearch": _Range(1, 1000),
}
# Bounds by camelCase key path inside an agent (agents.defaults or agents.list[]), besides memorySearch.
AGENT_RANGES: dict[str, _Range] = {
    "compaction.reserveTokensFloor": _Range(0),
    "compaction.memoryFlush.softThresholdTokens": _Range(0),
    "sessionContext.maxChars": _Range(1000),
}
# Bounds of the top-level ``service`` keys.
SERVICE_RANGES: dict[str, _Range] = {
    "port": _Range(0, 65535),
    "maxBodyBytes": _Range(1024, 1 << 30),
}
# Keys of agents.defaults.compaction that belong to the agent runtime (Clawdbot/OpenClaw): ignored, never typos.
_RUNTIME_COMPACTION_KEYS = frozenset(
    {"mode", "model", "reserveTokens", "keepRecentTokens", "maxHistoryShare", "identifierPolicy", "timeoutSeconds"}
)
_UNION_FIELDS = frozenset({"extra_paths"})  # lists merged as a de-duplicated union instead of replaced
_AGENT_ID = re.compile(r"[A-Za-z0-9_-]+")
_TOKEN = re.compile(r"\{(\w*)\}")
_MISMATCH = object()
_INT64 = 2**63 - 1
T = TypeVar("T")
Layers = list[tuple[str, dict[str, Any]]]  # (key prefix for messages, validated snake_case values)


def camel(name: str) -> str:
    """The JSON key of a dataclass field: ``max_file_bytes`` -> ``maxFileBytes``."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


def _describe(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, UnionType):
        return " or ".join(_describe(a) for a in args if a is not NoneType) + " or null"
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


def _show(value: Any, secret: bool = False) -> str:
    """``value`` for an error message: JSON, at most 80 characters, with secrets replaced by <redacted>.

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
    public, todo = set(_RUNTIME_COMPACTION_KEYS), [MemorySearchConfig, _AgentKeys, _Defaults, _Entry]
    while todo:
        cls = todo.pop()
        hints = get_type_hints(cls)
        for f in fields(cls):
            public |= {camel(f.name)} if f.repr else set()
            todo += [hints[f.name]] if is_dataclass(hints[f.name]) else []
    return frozenset(public)


def _kind(value: Any) -> str:
    """The JSON type of ``value``, for messages about a value that is not shown (it may hold secrets)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int | float):
        return "a number"
    kinds: dict[type, str] = {str: "a string", list: "a list", dict: "an object"}
    return kinds.get(type(value), type(value).__name__)


def _suggest(word: str, choices: list[str], cutoff: float = 0.6) -> str | None:
    """The choice ``word`` most likely misspells (case, ``_``/``-`` and difflib ratio), if any."""

    def norm(s: str) -> str:
        return s.lower().replace("_", "").replace("-", "")

    import difflib  # here: only a misspelt key needs it

    close = difflib.get_close_matches(word.lower(), [c.lower() for c in choices], n=1, cutoff=cutoff)
    same = [c for c in choices if norm(c) == norm(word) or close and c.lower() == close[0]]
    return same[0] if same else None


class _Loader:
    """One load: the source named in messages and the runtime keys ignored so far."""

    def __init__(self, source: Path | None) -> None:
        self.source = str(source) if source else None
        self.ignored: list[str] = []

    def error(self, key: str | None, message: str) -> ConfigError:
        key = key and scrub(key)  # a credential pasted as a key name ({ "sk-...": true }) is not echoed either
        return ConfigError(f"{key}: {message}" if key else message, key=key, source=self.source)

    def bad(self, key: str, value: Any, expected: str, fix: str, secret: bool = False, hint: str = "") -> ConfigError:
        return self.error(key, f"expected {expected}, got {_show(value, secret)}{hint}. Fix: {fix}.")

    def obj(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):  # the value is not echoed: an object's place may hold secrets
            raise self.error(key, f"expected an object, got {_kind(value)}. Fix: write it as {{ key: value, ... }}.")
        return value

    def runtime_keys(
        self, obj: dict[str, Any], prefix: str, ours: tuple[str, ...], known: frozenset[str] = frozenset()
    ) -> None:
        """Record keys that belong to the agent runtime; reject likely typos of ours (``known`` never are)."""
        for key in obj:
            path = f"{prefix}.{key}" if prefix else key
            if key not in ours and key not in known and (mine := _suggest(key, list(ours), cutoff=0.8)):
                fix = f"rename it to '{mine}' (keys are case-sensitive camelCase)"
                raise self.error(path, f"unknown key; did you mean '{mine}'? Fix: {fix}.")
            if key not in ours:
                self.ignored.append(scrub(path))

    def section(
        self, cls: Any, raw: Any, key: str, rel: str = "", ranges: Mapping[str, _Range] = RANGES
    ) -> dict[str, Any]:
        """Validate one (partial) layer of dataclass ``cls``: snake_case keys, converted values.

        ``ranges`` holds the bounds by camelCase path relative to where validation started.
        """
        hints, by_key, out = get_type_hints(cls), {camel(f.name): f for f in fields(cls)}, {}
        for name, value in self.obj(raw, key).items():
            path, sub = f"{key}.{name}", f"{rel}.{name}" if rel else name
            if (f := by_key.get(name)) is None:
                hint = _suggest(name, list(by_key))
                did, fix = (f"did you mean '{hint}'? ", f"rename it to '{hint}'") if hint else ("", "remove it")
                raise self.error(path, f"unknown key; {did}Fix: {fix}. Valid keys here: {', '.join(by_key)}.")
            tp = hints[f.name]
            out[f.name] = (
                self.section(tp, value, path, sub, ranges)
                if is_dataclass(tp)
                else self.value(tp, value, path, sub, f, ranges)
            )
        return out

    def value(
        self, tp: Any, value: Any, path: str, rel: str, f: Field[Any], ranges: Mapping[str, _Range] = RANGES
    ) -> Any:
        secret = not f.repr  # repr=False marks secrets: their values never appear in messages
        default = f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc,operator]
        keep = "or remove it to use the default" + ("" if secret else f" ({_show(default)})")
        converted, rule = _convert(tp, value), ranges.get(rel)
        if converted is _MISMATCH:
            choice = (
                _suggest(value, list(get_args(tp))) if get_origin(tp) is Literal and isinstance(value, str) else None
            )
            hint = f" (did you mean {json.dumps(choice)}?)" if choice else ""
            if isinstance(value, float) and not math.isfinite(value):
                hint = " (infinity and NaN are not numbers here)"
            raise self.bad(path, value, _describe(tp), f"set it to {_describe(tp)}, {keep}", secret, hint)
        if rule and converted is not None and not rule.ok(converted):
            expected = f"{_describe(tp).removesuffix(' or null')} {rule.text()}"
            raise self.bad(path, value, expected, f"set it to a value {rule.text()}, {keep}", secret)
        if isinstance(converted, int) and not isinstance(converted, bool) and abs(converted) > _INT64:
            expected = "an integer that fits in 64 bits"
            raise self.bad(path, value, expected, f"set it to a smaller value, {keep}", secret)
        return converted


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if key in _UNION_FIELDS:
            out[key] = tuple(dict.fromkeys((*base.get(key, ()), *value)))
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _build(cls: type[T], data: dict[str, Any]) -> T:
    hints = get_type_hints(cls)
    return cls(**{k: _build(hints[k], v) if is_dataclass(hints[k]) else v for k, v in data.items()})


def _origin(layers: Layers, *paths: str) -> str:
    """The key prefix of the last layer that set any of the dotted ``paths`` (else the first layer)."""
    for prefix, layer in reversed(layers):
        for path in paths:
            node: Any = layer
            for key in path.split("."):
                node = node.get(key, MISSING) if isinstance(node, dict) else MISSING
            if node is not MISSING:
                return prefix
    return layers[0][0]


# -- files, paths and agents ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Defaults:
    """The keys of ``agents.defaults`` besides memorySearch."""

    workspace: str = "~/clawd"


@dataclass(frozen=True)
class _Entry:
    """The keys of an ``agents.list[]`` entry besides memorySearch."""

    id: str | None = None
    default: bool = False
    workspace: str | None = None  # None -> agents.defaults.workspace


@dataclass(frozen=True)
class _AgentKeys:
    """Keys of ``agents.defaults`` that ``agents.list[]`` entries deep-merge over, besides memorySearch."""

    user_timezone: str | None = None
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    session_context: SessionContextConfig = field(default_factory=SessionContextConfig)


_AGENT_KEYS = tuple(camel(f.name) for f in fields(_AgentKeys))
H = TypeVar("H", _Defaults, _Entry)


def _absolute(text: str, base: Path, env: Mapping[str, str]) -> Path:
    """``text`` with ``~`` expanded (``env["HOME"]`` first), made absolute against ``base``.

    Normalised like ``os.path.abspath``; symlinks are not resolved, so the workspace rules still see them.
    The rule lives in mdmemory.configpath, shared with the command line's daemon client.
    """
    return Path(configpath.absolute(text, str(base), env))


def _read(ld: _Loader, path: Path, home: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ld.error(None, f"the file is not UTF-8 text ({exc.reason}). Fix: save it as UTF-8.") from None
    except OSError as exc:
        raise ld.error(None, f"cannot read the file ({exc.strerror}). Fix: check the path.") from None
    try:
        return json5read.loads(text, path, home / CONFIG_CACHE)
    except ValueError as exc:
        msg, fix = str(exc), "correct the syntax there (commas, quotes, braces)"
        if m := re.match(r"<string>:(\d+) (.*) at column (\d+)", msg):
            msg = f"line {m[1]}, column {m[3]}: {m[2]}"
        if msg.startswith("Duplicate key"):
            fix = "keep only one of the duplicated keys"
        raise ld.error(None, f"invalid JSON5 ({msg}). Fix: {fix}.") from None


def _find_source(path: str | os.PathLike[str] | None, env: Mapping[str, str], home: Path) -> Path | None:
    found, origin = configpath.config_file(path, env, str(home))
    if found is None:
        return None
    if origin != "default" and not os.path.isfile(found):
        fix = "create it (see config.example.json5) or give the path of an existing file"
        raise ConfigError(f"config file not found (from {origin}). Fix: {fix}.", source=found)
    return Path(found)


def _head(ld: _Loader, cls: type[H], raw: Any, key: str) -> H:
    """Validate and build the agent-level keys of ``cls`` after setting runtime keys aside."""
    own: tuple[str, ...] = tuple(camel(f.name) for f in fields(cls))
    ld.runtime_keys(ld.obj(raw, key), key, (*own, *_AGENT_KEYS, "memorySearch"))
    return _build(cls, ld.section(cls, {k: v for k, v in raw.items() if k in own}, key))


def _shared(ld: _Loader, cls: Any, raw: Any, key: str) -> Any:
    """Our keys of a section shared with the agent runtime (``compaction``); the runtime's are ignored."""
    if not isinstance(raw, dict):
        return raw  # section() reports the type error
    ours = tuple(camel(f.name) for f in fields(cls))
    ld.runtime_keys(raw, key, ours, known=_RUNTIME_COMPACTION_KEYS)
    return {k: v for k, v in raw.items() if k in ours}


def _agent_layer(ld: _Loader, raw: dict[str, Any], key: str) -> dict[str, Any]:
    """Validate the ``_AgentKeys`` of one ``agents.defaults`` or ``agents.list[]`` object (a partial layer)."""
    picked = {k: raw[k] for k in _AGENT_KEYS if k in raw}
    if "compaction" in picked:
        compaction = picked["compaction"] = _shared(ld, CompactionConfig, picked["compaction"], f"{key}.compaction")
        if isinstance(compaction, dict) and "memoryFlush" in compaction:
            flush_key = f"{key}.compaction.memoryFlush"
            compaction["memoryFlush"] = _shared(ld, MemoryFlushConfig, compaction["memoryFlush"], flush_key)
    return ld.section(_AgentKeys, picked, key, ranges=AGENT_RANGES)


def _agent(
    ld: _Loader, layers: Layers, agent_layers: Layers, entry: _Entry, ws: Path, home: Path, env: Mapping[str, str]
) -> AgentConfig:
    """Merge the layers, apply the cross-field rules and resolve the agent's paths."""
    merged: dict[str, Any] = {}
    for _, layer in layers:
        merged = _merge(merged, layer)
    ms = _build(MemorySearchConfig, merged)
    chunking, hybrid = ms.chunking, ms.query.hybrid
    if chunking.overlap >= chunking.tokens:
        key = _origin(layers, "chunking.overlap", "chunking.tokens") + ".chunking.overlap"
        expected = f"an integer less than chunking.tokens ({chunking.tokens})"
        raise ld.bad(key, chunking.overlap, expected, "lower overlap or raise tokens (defaults 80 and 400)")
    scale = max(hybrid.vector_weight, hybrid.text_weight)
    if scale == 0:
        key = _origin(layers, "query.hybrid.vector_weight", "query.hybrid.text_weight") + ".query.hybrid"
        fix = "give vectorWeight or textWeight a positive value (defaults 0.7 and 0.3)"
        raise ld.bad(key, {"vectorWeight": 0, "textWeight": 0}, "weights that are not both 0", fix)
    # Scale by the larger weight before summing, so 1e308 + 1e308 cannot overflow to infinity (which made
    # both normalised weights 0) and tiny weights cannot underflow.
    vector, text = hybrid.vector_weight / scale, hybrid.text_weight / scale
    hybrid = replace(hybrid, vector_weight=vector / (vector + text), text_weight=text / (vector + text))
    store_key = _origin(layers, "store.path") + ".store.path"
    if any(t not in ("agentId", "home") for t in _TOKEN.findall(ms.store.path)):
        expected = "a path whose only {tokens} are {agentId} and {home}"
        raise ld.bad(store_key, ms.store.path, expected, "fix or remove the unknown {token}")
    if not ms.sources or any(src not in MEMORY_SOURCES for src in ms.sources):
        key = _origin(layers, "sources") + ".sources"
        expected = 'a non-empty list of "memory" and "sessions"'
        raise ld.bad(key, list(ms.sources), expected, 'use ["memory"] (the default) or ["memory", "sessions"]')
    transcripts = ms.sessions.transcripts_dir
    store = ms.store.path.replace("{agentId}", str(entry.id)).replace("{home}", str(home))
    cache_dir = ms.local.model_cache_dir
    store_section = _origin(layers, "store.backend", "store.url", "store.schema") + ".store"
    ms = replace(
        ms,
        store=resolve_store(ms.store, store_section, env, ld.source),
        query=replace(ms.query, hybrid=hybrid),
        extra_paths=tuple(dict.fromkeys(str(_absolute(p, ws, env)) for p in ms.extra_paths)),
        local=replace(ms.local, model_cache_dir=cache_dir and str(_absolute(cache_dir, home, env))),
        sources=tuple(dict.fromkeys(ms.sources)),
        sessions=replace(ms.sessions, transcripts_dir=transcripts and str(_absolute(transcripts, home, env))),
    )
    own: dict[str, Any] = {}
    for _, layer in agent_layers:
        own = _merge(own, layer)
    keys = _build(_AgentKeys, own)
    if keys.user_timezone is not None:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # here: most configs name no time zone

        try:
            ZoneInfo(keys.user_timezone)
        except (ValueError, ZoneInfoNotFoundError):
            tz_key = _origin(agent_layers, "user_timezone") + ".userTimezone"
            expected = 'an IANA time zone name such as "Europe/Lisbon"'
            fix = "use a name from the tz database, or null for the local time zone"
            raise ld.bad(tz_key, keys.user_timezone, expected, fix) from None
    return AgentConfig(
        str(entry.id),
        ws,
        _absolute(store, home, env),
        ms,
        home=home,
        user_timezone=keys.user_timezone,
        compaction=keys.compaction,
        session_context=keys.session_context,
    )


def _openclaw_memory(ld: _Loader, root: dict[str, Any]) -> dict[str, Any]:
    """OpenClaw's top-level ``memory.citations`` as a memorySearch layer under ``agents.defaults``' own.

    It sets the default of every agent's ``memorySearch.query.citations`` (which wins when set); the other
    keys of ``memory`` (``backend``, ``qmd``...) belong to the runtime and are ignored.
    """
    raw = root.get("memory")
    if not isinstance(raw, dict):
        if "memory" in root:
            ld.ignored.append("memory")
        return {}
    ld.runtime_keys(raw, "memory", ("citations",))
    if "citations" not in raw:
        return {}
    return {"query": ld.section(QueryConfig, {"citations": raw["citations"]}, "memory", "query")}


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read, validate and merge the configuration; see the module docstring for the file's shape.

    The file is ``path``, else ``$MDMEMORY_CONFIG``, else ``<home>/config.json5`` when it exists, else
    built-in defaults. ``env`` (default ``os.environ``) supplies every environment lookup. Raises
    ConfigError naming the dotted key path for any invalid input.
    """
    env = os.environ if env is None else env
    home = Path(configpath.home_dir(env))
    source = _find_source(path, env, home)
    ld, base = _Loader(source), source.parent if source else Path.cwd()
    root = _read(ld, source, home) if source else {}
    if not isinstance(root, dict):
        raise ld.error(None, f"the file must hold an object, got {_kind(root)}. Fix: start it with {{ agents: ... }}.")
    ld.runtime_keys(root, "", ("agents", "memory", "service"))
    service = _build(
        ServiceConfig, ld.section(ServiceConfig, root.get("service", {}), "service", ranges=SERVICE_RANGES)
    )
    openclaw = _openclaw_memory(ld, root)
    agents = ld.obj(root.get("agents", {}), "agents")
    ld.runtime_keys(agents, "agents", ("defaults", "list"))
    defaults = _head(ld, _Defaults, agents.get("defaults", {}), "agents.defaults")
    workspace = _absolute(defaults.workspace, base, env)
    if env.get("MDMEMORY_WORKSPACE"):
        workspace = _absolute(env["MDMEMORY_WORKSPACE"], Path.cwd(), env)
    agent_base = ("agents.defaults", _agent_layer(ld, agents.get("defaults", {}), "agents.defaults"))
    ms_key = "agents.defaults.memorySearch"
    base_layer = (
        ms_key,
        _merge(openclaw, ld.section(MemorySearchConfig, agents.get("defaults", {}).get("memorySearch", {}), ms_key)),
    )

    entries = agents.get("list", [])
    if not isinstance(entries, list):
        fix = 'Fix: write it as [ { id: "main" } ]'
        raise ld.error("agents.list", f"expected a list of agent objects, got {_kind(entries)}. {fix}.")
    built: list[AgentConfig] = []
    ids: dict[str, int] = {}
    stores: dict[Path, str] = {}
    default_at: int | None = None
    for i, raw in enumerate(entries or [{"id": "main"}]):
        key = f"agents.list[{i}]"
        entry = _head(ld, _Entry, raw, key)
        if entry.id is None:
            raise ld.error(f"{key}.id", 'missing; every agent needs one. Fix: add an id such as id: "main".')
        if not _AGENT_ID.fullmatch(entry.id):
            expected = 'an id of letters, digits, "_" and "-" (it is used in file names)'
            raise ld.bad(f"{key}.id", entry.id, expected, 'rename the agent, e.g. "work-bot"')
        if entry.id in ids:
            fix = f"agents.list[{ids[entry.id]}] already uses this id; give each agent its own id"
            raise ld.bad(f"{key}.id", entry.id, "a unique agent id", fix)
        ids[entry.id] = i
        if entry.default and default_at is not None:
            fix = f"agents.list[{default_at}] is already the default; keep default: true on one agent only"
            raise ld.bad(f"{key}.default", True, "at most one agent with default: true", fix)
        default_at = i if entry.default else default_at
        ms_key = f"{key}.memorySearch"
        layers = [base_layer, (ms_key, ld.section(MemorySearchConfig, raw.get("memorySearch", {}), ms_key))]
        ws = _absolute(entry.workspace, base, env) if entry.workspace is not None else workspace
        agent_layers = [agent_base, (key, _agent_layer(ld, raw, key))]
        agent = _agent(ld, layers, agent_layers, entry, ws, home, env)
        if agent.store_path in stores:
            key = _origin(layers, "store.path") + ".store.path"
            fix = "put {agentId} in the path so that every agent has its own index"
            expected = f"an index file not shared with agent {stores[agent.store_path]!r}"
            raise ld.bad(key, str(agent.store_path), expected, fix)
        stores[agent.store_path] = agent.id
        built.append(agent)
    built[default_at or 0] = replace(built[default_at or 0], default=True)
    return Config(home=home, source=source, agents=tuple(built), ignored_keys=tuple(ld.ignored), service=service)
