"""Configuration: json5 file -> frozen dataclasses with defaults, per-agent merge, validation.

The file is shaped like the Clawdbot/OpenClaw config so users can bring theirs::

    { agents: { defaults: { workspace: "~/clawd", memorySearch: {...} },
                list: [ { id: "main", default: true, workspace: "...", memorySearch: {...} } ] } }

JSON keys are camelCase; dataclass fields are the snake_case of the same words. Validation is driven
by the dataclass fields and their type hints, plus the ``RANGES`` table; adding a key means adding a field
(and, if bounded, a ``RANGES`` line). Each ``agents.list[]`` memorySearch is deep-merged over the defaults:
objects merge key by key, ``extraPaths`` is a de-duplicated union, anything else replaces. Keys mdmem
does not own at the top level and in ``agents``/``agents.defaults``/``agents.list[]`` belong to the agent
runtime and are ignored (listed in ``Config.ignored_keys``) unless they look like a typo of ours.
The agent integration's keys (``userTimezone``, ``compaction``, ``sessionContext``; see ``AgentKeys``) are
deep-merged the same way; ``compaction`` is shared with the runtime, whose own keys in it are ignored.

Paths: ``home`` is ``$MDMEMORY_HOME`` or ``~/.mdmemory``. Workspaces are relative to the config file's
directory (cwd without a file; ``$MDMEMORY_WORKSPACE`` overrides ``agents.defaults.workspace``, relative to
cwd). ``extraPaths`` are made absolute relative to the agent's workspace. ``store.path`` substitutes
``{agentId}`` and ``{home}`` and is relative to home.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, TypeVar

from mdmem.config import json5read
from mdmem.config import paths as configpath
from mdmem.config.settings import (
    CONFIG_CACHE,
    DEFAULT_LOCAL_MODEL,
    DEFAULT_REMOTE_MODEL,
    MEMORY_SOURCES,
    AgentConfig,
    AgentKeys,
    BreakerConfig,
    CacheConfig,
    ChunkingConfig,
    CitationsMode,
    CompactionConfig,
    Config,
    Defaults,
    Entry,
    FallbackName,
    FusionName,
    HybridConfig,
    KeywordScoreName,
    LocalConfig,
    MemoryFlushConfig,
    MemorySearchConfig,
    MmrConfig,
    ProviderName,
    QueryConfig,
    RemoteConfig,
    ServiceConfig,
    SessionContextConfig,
    SessionsConfig,
    SyncConfig,
    TemporalDecayConfig,
)
from mdmem.config.store import DEFAULT_STORE_PATH as DEFAULT_STORE_PATH  # re-exported for callers
from mdmem.config.store import resolve_store, store_path_clash
from mdmem.config.validation import (
    AGENT_ID,
    AGENT_RANGES,
    POD,
    REMOTE_ENV,
    RUNTIME_COMPACTION_KEYS,
    SERVICE_RANGES,
    TOKEN,
    Layers,
    Loader,
    build,
    camel,
    json_kind,
    merge,
    origin,
)
from mdmem.util.errors import ConfigError

__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "DEFAULT_REMOTE_MODEL",
    "DEFAULT_STORE_PATH",
    "AgentConfig",
    "BreakerConfig",
    "CacheConfig",
    "ChunkingConfig",
    "CitationsMode",
    "CompactionConfig",
    "Config",
    "FallbackName",
    "FusionName",
    "HybridConfig",
    "KeywordScoreName",
    "LocalConfig",
    "MemoryFlushConfig",
    "MemorySearchConfig",
    "MmrConfig",
    "ProviderName",
    "QueryConfig",
    "RemoteConfig",
    "ServiceConfig",
    "SessionContextConfig",
    "SessionsConfig",
    "SyncConfig",
    "TemporalDecayConfig",
    "camel",
    "is_remote",
    "load_config",
    "remote_agents",
]

_AGENT_KEYS = tuple(camel(f.name) for f in fields(AgentKeys))
H = TypeVar("H", Defaults, Entry)


def _absolute(text: str, base: Path, env: Mapping[str, str]) -> Path:
    """``text`` with ``~`` expanded (``env["HOME"]`` first), made absolute against ``base``.

    Normalised like ``os.path.abspath``; symlinks are not resolved, so the workspace rules still see them.
    The rule lives in mdmem.config.paths, shared with the command line's daemon client.
    """
    return Path(configpath.absolute(text, str(base), env))


def _read(ld: Loader, path: Path, home: Path) -> Any:
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


def _head(ld: Loader, cls: type[H], raw: Any, key: str) -> H:
    """Validate and build the agent-level keys of ``cls`` after setting runtime keys aside."""
    own: tuple[str, ...] = tuple(camel(f.name) for f in fields(cls))
    ld.runtime_keys(ld.obj(raw, key), key, (*own, *_AGENT_KEYS, "memorySearch"))
    return build(cls, ld.section(cls, {k: v for k, v in raw.items() if k in own}, key))


def _shared(ld: Loader, cls: Any, raw: Any, key: str) -> Any:
    """Our keys of a section shared with the agent runtime (``compaction``); the runtime's are ignored."""
    if not isinstance(raw, dict):
        return raw  # section() reports the type error
    ours = tuple(camel(f.name) for f in fields(cls))
    ld.runtime_keys(raw, key, ours, known=RUNTIME_COMPACTION_KEYS)
    return {k: v for k, v in raw.items() if k in ours}


def _agent_layer(ld: Loader, raw: dict[str, Any], key: str) -> dict[str, Any]:
    """Validate the ``AgentKeys`` of one ``agents.defaults`` or ``agents.list[]`` object (a partial layer)."""
    picked = {k: raw[k] for k in _AGENT_KEYS if k in raw}
    if "compaction" in picked:
        compaction = picked["compaction"] = _shared(ld, CompactionConfig, picked["compaction"], f"{key}.compaction")
        if isinstance(compaction, dict) and "memoryFlush" in compaction:
            flush_key = f"{key}.compaction.memoryFlush"
            compaction["memoryFlush"] = _shared(ld, MemoryFlushConfig, compaction["memoryFlush"], flush_key)
    return ld.section(AgentKeys, picked, key, ranges=AGENT_RANGES)


def _agent(
    ld: Loader, layers: Layers, agent_layers: Layers, entry: Entry, ws: Path, home: Path, env: Mapping[str, str]
) -> AgentConfig:
    """Merge the layers, apply the cross-field rules and resolve the agent's paths."""
    merged: dict[str, Any] = {}
    for _, layer in layers:
        merged = merge(merged, layer)
    ms = build(MemorySearchConfig, merged)
    chunking, hybrid = ms.chunking, ms.query.hybrid
    if chunking.overlap >= chunking.tokens:
        key = origin(layers, "chunking.overlap", "chunking.tokens") + ".chunking.overlap"
        expected = f"an integer less than chunking.tokens ({chunking.tokens})"
        raise ld.bad(key, chunking.overlap, expected, "lower overlap or raise tokens (defaults 80 and 400)")
    scale = max(hybrid.vector_weight, hybrid.text_weight)
    if scale == 0:
        key = origin(layers, "query.hybrid.vector_weight", "query.hybrid.text_weight") + ".query.hybrid"
        fix = "give vectorWeight or textWeight a positive value (defaults 0.7 and 0.3)"
        raise ld.bad(key, {"vectorWeight": 0, "textWeight": 0}, "weights that are not both 0", fix)
    # Scale by the larger weight before summing, so 1e308 + 1e308 cannot overflow to infinity (which made
    # both normalised weights 0) and tiny weights cannot underflow.
    vector, text = hybrid.vector_weight / scale, hybrid.text_weight / scale
    hybrid = replace(hybrid, vector_weight=vector / (vector + text), text_weight=text / (vector + text))
    store_key = origin(layers, "store.path") + ".store.path"
    if any(t not in ("agentId", "home") for t in TOKEN.findall(ms.store.path)):
        expected = "a path whose only {tokens} are {agentId} and {home}"
        raise ld.bad(store_key, ms.store.path, expected, "fix or remove the unknown {token}")
    if not ms.sources or any(src not in MEMORY_SOURCES for src in ms.sources):
        key = origin(layers, "sources") + ".sources"
        expected = 'a non-empty list of "memory" and "sessions"'
        raise ld.bad(key, list(ms.sources), expected, 'use ["memory"] (the default) or ["memory", "sessions"]')
    transcripts = ms.sessions.transcripts_dir
    store = ms.store.path.replace("{agentId}", str(entry.id)).replace("{home}", str(home))
    cache_dir = ms.local.model_cache_dir
    store_section = origin(layers, "store.backend", "store.url", "store.schema") + ".store"
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
        own = merge(own, layer)
    keys = build(AgentKeys, own)
    if keys.user_timezone is not None:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # here: most configs name no time zone

        try:
            ZoneInfo(keys.user_timezone)
        except (ValueError, ZoneInfoNotFoundError):
            tz_key = origin(agent_layers, "user_timezone") + ".userTimezone"
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


def _pod(ld: Loader, entry: Entry, key: str, service: ServiceConfig) -> str | None:
    """``agents.list[i].pod``: a pod name (what a request's ``pod`` must be) or ``"*"`` (every pod)."""
    pod = entry.pod
    if pod is None:
        return None
    if pod != "*" and (not POD.fullmatch(pod) or pod in (".", "..")):
        expected = 'a pod name of 1-64 letters, digits, ".", "_" or "-" (not "." or ".."), or "*" for every pod'
        raise ld.bad(f"{key}.pod", pod, expected, "write the pod's name as the proxy sends it (metadata.json's pod)")
    if service.pod_scope == "off":
        raise ld.error(
            f"{key}.pod",
            f'{pod!r} would have no effect: service.podScope is "off", so requests are served whatever their pod. '
            'Fix: remove the pod, or set service.podScope to "bind" (the default) or "namespace".',
        )
    return pod


def _openclaw_memory(ld: Loader, root: dict[str, Any]) -> dict[str, Any]:
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
    ld, base = Loader(source), source.parent if source else Path.cwd()
    root = _read(ld, source, home) if source else {}
    if not isinstance(root, dict):
        raise ld.error(
            None, f"the file must hold an object, got {json_kind(root)}. Fix: start it with {{ agents: ... }}."
        )
    ld.runtime_keys(root, "", ("agents", "memory", "service"))
    service = build(ServiceConfig, ld.section(ServiceConfig, root.get("service", {}), "service", ranges=SERVICE_RANGES))
    openclaw = _openclaw_memory(ld, root)
    agents = ld.obj(root.get("agents", {}), "agents")
    ld.runtime_keys(agents, "agents", ("defaults", "list"))
    defaults = _head(ld, Defaults, agents.get("defaults", {}), "agents.defaults")
    workspace = _absolute(defaults.workspace, base, env)
    if env.get("MDMEMORY_WORKSPACE"):
        workspace = _absolute(env["MDMEMORY_WORKSPACE"], Path.cwd(), env)
    agent_base = ("agents.defaults", _agent_layer(ld, agents.get("defaults", {}), "agents.defaults"))
    ms_key = "agents.defaults.memorySearch"
    base_layer = (
        ms_key,
        merge(openclaw, ld.section(MemorySearchConfig, agents.get("defaults", {}).get("memorySearch", {}), ms_key)),
    )

    entries = agents.get("list", [])
    if not isinstance(entries, list):
        fix = 'Fix: write it as [ { id: "main" } ]'
        raise ld.error("agents.list", f"expected a list of agent objects, got {json_kind(entries)}. {fix}.")
    built: list[AgentConfig] = []
    ids: dict[str, int] = {}
    stores: dict[Path, str] = {}
    default_at: int | None = None
    for i, raw in enumerate(entries or [{"id": "main"}]):
        key = f"agents.list[{i}]"
        entry = _head(ld, Entry, raw, key)
        if entry.id is None:
            raise ld.error(f"{key}.id", 'missing; every agent needs one. Fix: add an id such as id: "main".')
        if not AGENT_ID.fullmatch(entry.id):
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
        agent = replace(_agent(ld, layers, agent_layers, entry, ws, home, env), pod=_pod(ld, entry, key, service))
        clash = store_path_clash(agent.memory_search.store.path, str(home), agent.id)
        if clash is not None:
            store_key = origin(layers, "store.path") + ".store.path"
            raise ld.error(
                f"{key}.id",
                f"{entry.id!r}: with {store_key} {agent.memory_search.store.path!r} its index file "
                f"{agent.store_path.name} would be taken for one of the files beside agent {clash!r}'s index (its "
                "generations, journal, locks), and that agent's clean-up could delete it. Fix: rename the agent, "
                "or end the file name in store.path with an extension after {agentId}, e.g. {agentId}.sqlite",
            )
        if agent.store_path in stores:
            key = origin(layers, "store.path") + ".store.path"
            fix = "put {agentId} in the path so that every agent has its own index"
            expected = f"an index file not shared with agent {stores[agent.store_path]!r}"
            raise ld.bad(key, str(agent.store_path), expected, fix)
        stores[agent.store_path] = agent.id
        built.append(agent)
    built[default_at or 0] = replace(built[default_at or 0], default=True)
    remote = remote_agents(service.remote_agents, env)
    for i, agent in enumerate(built):
        if is_remote(agent.id, remote):
            if agent.memory_search.store.backend != "postgres":
                raise ld.error(
                    "service.remoteAgents",
                    f"agent {agent.id!r} is named there (or in {REMOTE_ENV}), but its index is in SQLite on the "
                    "host that holds its files: a replica without them needs the shared store. Fix: set "
                    'memorySearch.store.backend to "postgres" for it, or serve it from the host with its files',
                )
            built[i] = replace(agent, files_here=False)
    return Config(home=home, source=source, agents=tuple(built), ignored_keys=tuple(ld.ignored), service=service)


def remote_agents(configured: Sequence[str], env: Mapping[str, str]) -> frozenset[str]:
    """The agents whose files this host does not hold (``"*"``: all): ``service.remoteAgents``, or the
    comma-separated ``MDMEMORY_REMOTE_AGENTS`` instead when it is set."""
    raw = env.get(REMOTE_ENV)
    names = raw.split(",") if raw is not None else configured
    return frozenset(n.strip() for n in names if n.strip())


def is_remote(agent_id: str, remote: frozenset[str]) -> bool:
    return "*" in remote or agent_id in remote


def with_sessions(agent: AgentConfig) -> AgentConfig:
    """``agent`` searching its ``sessions/`` folder too (see the module docstring)."""
    ms = agent.memory_search
    if "sessions" in ms.sources:
        return agent
    return replace(agent, memory_search=replace(ms, sources=(*ms.sources, "sessions")))
