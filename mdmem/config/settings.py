"""The configuration's shape: frozen dataclasses with their defaults, one per section (``memorySearch``,
``service``, the agent integration's keys...). JSON keys are the camelCase of the fields; mdmem.config.load
loads a file into them and mdmem.config.validation validates each value on the way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from mdmem.config.store import StoreConfig
from mdmem.util.errors import ConfigError

DEFAULT_LOCAL_MODEL = "hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf"
DEFAULT_REMOTE_MODEL = "text-embedding-3-small"
CONFIG_CACHE = "cache/config"  # under home: JSON5 files parsed once (mdmem.config.json5read)

ProviderName = Literal["auto", "local", "openai", "none", "hash"]
FallbackName = Literal["openai", "local", "none"]
FusionName = Literal["weighted", "rrf"]
WindowVectorsName = Literal["separate", "late"]
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
    # "separate": each window embedded as its own input; "late": the chunk decoded once, each window's vector
    # pooled from its tokens (mdmem.index.late); chunks over the model's context fall back to "separate"
    window_vectors: WindowVectorsName = "separate"


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
    current_first: bool = True  # implicit supersession, newer first; packs bring and prefer the current line


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


@dataclass(frozen=True)
class UsageConfig:
    """Use tracking (docs/lifecycle.md): counts of searches shown, pack items included and memory_get reads, per
    chunk and file, kept in the index; batched in memory and written at most every ``flush_seconds``."""

    enabled: bool = True
    flush_seconds: float = 30.0


@dataclass(frozen=True)
class TierConfig:
    """One rule of ``lifecycle.tiers``: memory files whose path matches one of ``paths`` (fnmatch patterns on the
    workspace-relative path, ``*`` crossing folders), at least ``older_than_days`` old (the date in a daily log's
    name, else the file's mtime) and not used for ``unused_days`` (0: uses do not matter), go to ``action``:
    ``archive`` (memory/archive/YYYY/...) or ``keep`` (never moved). The first tier that matches a file decides."""

    name: str = "daily"
    paths: tuple[str, ...] = ("memory/????-??-??.md",)
    older_than_days: int = 90
    unused_days: int = 60
    action: Literal["archive", "keep"] = "archive"


@dataclass(frozen=True)
class LifecycleConfig:
    """``mdmem lifecycle plan/apply/revive`` (docs/lifecycle.md); nothing moves unless a person runs ``apply``."""

    tiers: tuple[TierConfig, ...] = (TierConfig(),)
    revive_on_use: bool = True  # apply brings back an archived file read (memory_get) or packed since it moved
    # "off": only a person runs apply; else `mdmem watch` applies once per period (counted from the last apply)
    schedule: Literal["off", "hourly", "daily", "weekly"] = "off"


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
    usage: UsageConfig = field(default_factory=UsageConfig)
    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)


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
    # False in a ``mdmem serve`` replica that does not hold this agent's files (``service.remoteAgents``):
    # it retains into the shared store's entries and reads file text from the index (README "Service replicas")
    files_here: bool = True
    # The pod whose requests ``mdmem serve`` answers for this agent (``agents.list[].pod``; "*": every pod);
    # None: the first pod that uses it (``service.podScope``, mdmem.service.pods)
    pod: str | None = None


@dataclass(frozen=True)
class ServiceConfig:
    """``service``: the memory-plane HTTP service (``mdmem serve``, mdmem.service)."""

    host: str = "127.0.0.1"
    port: int = 8080
    token: str | None = field(default=None, repr=False)  # bearer token; MEMORY_API_TOKEN wins
    auto_agents: bool = False  # an unknown agent_id gets {home}/agents/{id}/ from workspace-template
    # a request body past this answers 413 (cllama sends a conversation whole, twice: 2.4 MB for 1.2 MB)
    max_body_bytes: int = 64 * 1024 * 1024
    # each part of a retained turn (user, assistant, tool calls) is stored whole up to this many characters,
    # longer ones cut in the middle and the answer says so (mdmem.files.retained)
    max_message_chars: int = 256 * 1024
    # A recall is answered within this (mdmem.service.timebox): it never waits past it for catching up,
    # a worker or the query embedding (keywords answer then), and one whose time is up is not computed.
    # Below the proxy's recall timeout (cllama: 300 ms) by the network's and the event loop's share.
    recall_budget_ms: int = 250
    # Processes answering recalls beside the service's own (mdmem.service.recallpool): None is one per
    # core up to 4 (none on one core); 0 answers every recall in the service's process.
    recall_workers: int | None = None
    # agents whose files this replica does not hold ("*": every agent); MDMEMORY_REMOTE_AGENTS wins
    remote_agents: tuple[str, ...] = ()
    # "token": every request but /healthz and the descriptor needs the bearer token (MEMORY_API_TOKEN,
    # service.token, or one generated on first start); "loopback": none, but only from this machine and never
    # from a web page (README "Memory service", mdmem.service.edge)
    auth: Literal["token", "loopback"] = "token"
    max_open_agents: int | None = None  # indexes kept open at once; None: up to 64, as the fd limit allows
    max_connections: int | None = None  # None: as many as the fd limit leaves room for (mdmem.service.budget)
    max_header_bytes: int = 32 * 1024  # request line and headers; more answers 431
    header_timeout_ms: int = 10_000  # a request's line and headers must arrive within this, else 408
    body_timeout_ms: int = 30_000  # and its body within this after them
    # What a request's ``pod`` does (mdmem.service.pods, README "Pods"): "bind" (an agent serves one pod:
    # its agents.list[].pod, else the first pod that uses it), "namespace" (only its agents.list[].pod), "off"
    # (pods are ignored). Under "bind" and "namespace", autoAgents serves other pods from ``<id>@<pod>``.
    pod_scope: Literal["bind", "namespace", "off"] = "bind"


@dataclass(frozen=True)
class Config:
    home: Path
    source: Path | None  # the file read, or None when running on built-in defaults
    agents: tuple[AgentConfig, ...]
    ignored_keys: tuple[str, ...] = ()  # keys owned by the agent runtime, not by mdmem
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


@dataclass(frozen=True)
class Defaults:
    """The keys of ``agents.defaults`` besides memorySearch."""

    workspace: str = "~/clawd"


@dataclass(frozen=True)
class Entry:
    """The keys of an ``agents.list[]`` entry besides memorySearch."""

    id: str | None = None
    default: bool = False
    workspace: str | None = None  # None -> agents.defaults.workspace
    pod: str | None = None  # the pod this agent serves ("*": every pod); see AgentConfig.pod


@dataclass(frozen=True)
class AgentKeys:
    """Keys of ``agents.defaults`` that ``agents.list[]`` entries deep-merge over, besides memorySearch."""

    user_timezone: str | None = None
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    session_context: SessionContextConfig = field(default_factory=SessionContextConfig)
