"""Configuration: json5 file -> frozen dataclasses with defaults, per-agent merge, validation.

The file is shaped like the Clawdbot/OpenClaw config so users can bring theirs::

    { agents: { defaults: { workspace: "~/clawd", memorySearch: {...} },
                list: [ { id: "main", default: true, workspace: "...", memorySearch: {...} } ] } }

JSON keys are camelCase; dataclass fields are the snake_case of the same words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

DEFAULT_LOCAL_MODEL = "hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf"
DEFAULT_REMOTE_MODEL = "text-embedding-3-small"
DEFAULT_STORE_PATH = "{home}/state/memory/{agentId}.sqlite"

ProviderName = Literal["auto", "local", "openai", "none", "hash"]
FallbackName = Literal["openai", "local", "none"]
FusionName = Literal["weighted", "rrf"]


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
class StoreConfig:
    path: str = DEFAULT_STORE_PATH


@dataclass(frozen=True)
class ChunkingConfig:
    tokens: int = 400
    overlap: int = 80


@dataclass(frozen=True)
class SyncConfig:
    on_session_start: bool = True
    on_search: bool = True
    watch: bool = True
    watch_debounce_ms: int = 1500
    interval_minutes: float = 0.0  # 0 disables the periodic reconcile


@dataclass(frozen=True)
class HybridConfig:
    enabled: bool = True
    vector_weight: float = 0.7  # normalised with text_weight to sum 1
    text_weight: float = 0.3
    candidate_multiplier: int = 4
    fusion: FusionName = "weighted"
    rrf_k: int = 60


@dataclass(frozen=True)
class QueryConfig:
    max_results: int = 6
    min_score: float = 0.35
    hybrid: HybridConfig = field(default_factory=HybridConfig)


@dataclass(frozen=True)
class CacheConfig:
    enabled: bool = True
    max_entries: int = 50_000


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
    extra_paths: tuple[str, ...] = ()
    max_file_bytes: int = 5 * 1024 * 1024


@dataclass(frozen=True)
class AgentConfig:
    """One agent after merging ``agents.list[i]`` over ``agents.defaults``; paths are absolute."""

    id: str
    workspace: Path
    store_path: Path
    memory_search: MemorySearchConfig
    default: bool = False
    home: Path = field(default_factory=lambda: Path("~/.mdmemory").expanduser())


@dataclass(frozen=True)
class Config:
    home: Path
    source: Path | None  # the file read, or None when running on built-in defaults
    agents: tuple[AgentConfig, ...]
    ignored_keys: tuple[str, ...] = ()  # keys owned by the agent runtime, not by mdmemory

    def agent(self, agent_id: str | None = None) -> AgentConfig:
        """The agent ``agent_id``, or the default agent; ConfigError naming the known ids otherwise."""
        raise NotImplementedError  # filled in below by the loader work


def load_config(path: str | Path | None = None, env: dict[str, str] | None = None) -> Config:
    """Read, validate and merge the configuration. See module docstring."""
    raise NotImplementedError
