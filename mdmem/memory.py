"""The Python API: ``Memory.open()`` then ``search`` / ``get`` / ``sync`` / ``status``.

``Memory`` is a facade: the work is done by its engine (mdmem.engine.engine) and, for the agent-runtime
calls (tools, session context, remember, flush), by mdmem.agent.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import TYPE_CHECKING, Any

from mdmem import agent as integration
from mdmem.config.load import AgentConfig, Config, load_config
from mdmem.engine.engine import Engine

if TYPE_CHECKING:
    from mdmem.agent import FlushDecision, SessionKind
    from mdmem.index.indexer import Indexer, Progress
    from mdmem.providers.factory import ProviderChoice
    from mdmem.store.api import IndexStore


class _Part:
    """An attribute of one of the engine's parts, read and set through the facade."""

    def __init__(self, part: str, name: str) -> None:
        self.part, self.name = part, name

    def __get__(self, obj: Memory | None, owner: type) -> Any:
        return self if obj is None else getattr(getattr(obj.engine, self.part), self.name)

    def __set__(self, obj: Memory, value: Any) -> None:
        setattr(getattr(obj.engine, self.part), self.name, value)


class Memory:
    """One agent's memory: its workspace, index and embedding provider (all opened lazily)."""

    # who does the work a search leaves: "thread" (long-lived processes), "worker" (CLI), or "owner" (the
    # object's owner embeds what waits itself, the service's indexer; only a rebuild gets a thread)
    background = _Part("catchup", "background")
    catch_up_interval = _Part("catchup", "interval")  # a search catches up at most once per interval...
    catches_up = _Part("catchup", "enabled")  # False for a second reader of an index another keeps fresh
    catch_up_budgeted = _Part("catchup", "budgeted")  # a catch-up indexes text only, within the deadline
    entries_seen = _Part("catchup", "entries_seen")  # the EntryLog version this replica last indexed
    should_stop = _Part("keeper", "should_stop")  # lets a background sync stop between files
    last_repair = _Part("keeper", "last_repair")  # the corrupt index this object last moved aside
    provider_error = _Part("providers", "provider_error")  # why the configured provider could not be created

    def __init__(
        self,
        agent: AgentConfig,
        config: Config | None = None,
        *,
        choice: ProviderChoice | None = None,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``clock`` (Unix seconds; default ``time.time``) stamps the uses this object records and is the "now"
        and "today" of its lifecycle plans: a simulation passes its own (benchmarks/ten_year.py)."""
        self.engine = Engine(agent, config, choice=choice, env=env, clock=clock)
        self.agent, self.config, self.settings = agent, config, agent.memory_search
        self.env, self.workspace = self.engine.env, self.engine.workspace

    @classmethod
    def open(
        cls,
        agent: str | None = None,
        config_path: str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> Memory:
        """Load the configuration (``config_path``, ``MDMEMORY_CONFIG`` or the default) and pick an agent."""
        config = load_config(config_path)
        return cls(config.agent(agent), config, clock=clock)

    @property
    def store(self) -> IndexStore:
        """The agent's index, on the store ``memorySearch.store.backend`` names (opened on first use)."""
        return self.engine.keeper.store

    @property
    def indexer(self) -> Indexer:
        return self.engine.keeper.indexer

    @property
    def choice(self) -> ProviderChoice:
        """The embedding provider in use (made on first use; keyword-only, with a ``hint``, when it cannot be)."""
        return self.engine.providers.choice

    @property
    def current_choice(self) -> ProviderChoice | None:
        """The provider choice in use, without making one (``choice`` makes one when there is none yet)."""
        return self.engine.providers.current

    @property
    def last_error(self) -> dict[str, Any] | None:
        """``{at, error, kind}`` of this object's last failed sync, also when it could not be recorded on disk."""
        return self.engine.keeper.last_error

    def follow(self, other: Memory) -> None:
        """Use the provider ``other`` (another connection to the same agent's index) uses now."""
        self.engine.providers.follow(other.engine.providers)

    def close(self, *, provider: bool = True) -> None:
        """Close the index; the embedding provider too unless ``provider`` is False (another object shares it)."""
        self.engine.close(provider=provider)

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the index ----------------------------------------------------------------------------------
    def sync(
        self, force: bool = False, progress: Progress | None = None, prune: bool = False, *, embed: bool = True
    ) -> dict[str, Any]:
        """Index new and changed memory files, drop removed ones. Returns the sync report.

        Raises EmbeddingsPending (a ProviderError) when the text was indexed but the provider failed
        before every chunk was embedded; its ``report`` is the sync report, and the next sync embeds them.
        ``embed=False`` indexes the text only and leaves new chunks pending.

        Files under a missing folder are kept unless ``prune`` (or ``force``) says to drop them (mdmem.files.roots).
        With ``memorySearch.enabled: false`` nothing is indexed: the report says ``disabled`` and why.

        A corrupt index is moved aside and rebuilt from the files first (``repaired``: where it went);
        ``warnings`` says when the configured provider was unavailable and the index kept keywords only.
        """
        return self.engine.sync(force, progress, prune, embed=embed)

    def take_over(self, progress: Progress | None = None) -> dict[str, Any]:
        """Make this host's workspace the one the agent's index belongs to (PostgreSQL refuses any other:
        mdmem.store.pg.claims), then rebuild the index from its files (``sync(force=True)``). The report's
        ``tookOver`` is the workspace that had it (None: none, or this one already)."""
        return self.engine.take_over(progress)

    def embed_waiting(self) -> int:
        """Embed the chunks text-only syncs left pending, without the writer lock; returns how many still wait.
        Raises EmbeddingsPending when the provider failed, recorded as a sync's failure is."""
        return self.engine.keeper.embed_waiting()

    def release_store(self) -> None:
        """Close the index connection; the next use opens it again (perhaps writable again, or rebuilt)."""
        self.engine.keeper.release_store()

    def changed(self) -> None:
        """Something wrote to the memory files: the next search catches up, whatever ``catch_up_interval``."""
        self.engine.catchup.changed()

    @property
    def change_announced(self) -> bool:
        """Whether ``changed()`` was called (or nothing caught up yet) since the last catch-up began."""
        return self.engine.catchup.announced

    def catch_up_due(self) -> bool:
        """Whether the next search would catch up with the files (see ``catch_up_interval``)."""
        return self.engine.catchup.due()

    def catch_up(self) -> tuple[bool, list[str]]:
        """What a search does first (``sync.onSearch``), alone: (stale, notes)."""
        return self.engine.catch_up()

    # -- answers ------------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        max_results: int | None = None,
        min_score: float | None = None,
        *,
        session_kind: SessionKind = "main",
        neighbors: int = 0,
        include_archive: bool = False,
    ) -> dict[str, Any]:
        """memory_search: ``{results: [{path, startLine, endLine, score, snippet, source}], provider, model, ...}``.

        Raises InvalidArgumentError (a ValueError) for an empty query, ``max_results`` outside 1-100 or
        ``min_score`` outside 0-1: the bounds of the memory_search tool schema. Results carry ``citation``
        (and their snippet a ``Source:`` line) when ``query.citations`` is ``on``, or ``auto`` in a ``main``
        session (``session_kind``; ``group`` for shared chats). ``neighbors=1`` adds, after the results, the
        chunks they link to or are linked from, each with ``via`` (docs/truth.md). Archived files
        (``memory/archive/``) are left out unless ``include_archive`` (docs/lifecycle.md).
        """
        return self.engine.search(
            query,
            max_results,
            min_score,
            session_kind=session_kind,
            neighbors=neighbors,
            include_archive=include_archive,
        )

    def pack(
        self,
        query: str,
        budget_tokens: int = 1000,
        max_items: int | None = None,
        sources: Sequence[str] | None = None,
        trace: bool = False,
        neighbors: int = 0,
        include_archive: bool = False,
    ) -> dict[str, Any]:
        """A ContextPack: the most evidence per token for ``query`` within ``budget_tokens``, every item cited.

        ``{query, budgetTokens, usedTokens, items: [{ref, path, startLine, endLine, text, score, source, kind,
        date?}], bundleText, provider, model, mode}``, plus ``trace`` (one receipt per candidate, no text)
        when asked. ``sources`` keeps only these kinds (``curated``, ``daily``, ``extra``, ``session``).
        ``matched`` counts the candidates (0: nothing matched) and ``bestLeftOut`` names the best one when the
        budget could not hold it, with the budget that would. A budget below the header's cost raises
        InvalidArgumentError naming the minimum. See mdmem.pack.build.
        ``neighbors=1`` also considers the notes the matches link to or are linked
        from (items and receipts from them carry ``via``). Archived files are left out unless ``include_archive``.
        """
        return self.engine.pack(
            query, budget_tokens, max_items, sources, trace, neighbors=neighbors, include_archive=include_archive
        )

    def get(self, path: str, from_line: int | None = None, lines: int | None = None) -> dict[str, Any]:
        """memory_get: ``{path, text}``, or ``{path, text: "", error}`` for a path that is not allowed."""
        return self.engine.get(path, from_line, lines)

    def status(self) -> dict[str, Any]:
        """Index state computed from the files on disk, the database and the health and watcher files, not
        from cached flags; a broken index is reported in ``storeState`` rather than raised."""
        return self.engine.status()

    def usage(self, limit: int = 10) -> dict[str, Any]:
        """How the memory files were used (docs/lifecycle.md): ``{files, used, hottest, coldest}``, each file
        ``{path, uses, byKind, lastUsedAt}``; uses still in memory are written first."""
        return self.engine.usage_report(limit)

    def lifecycle(self, action: str, path: str | None = None) -> dict[str, Any]:
        """``plan`` (a dry run: ``{moves, held, counts}``), ``apply`` (``{moved, skipped, receipt, sync}``) or
        ``revive`` the archived file ``path`` (docs/lifecycle.md)."""
        return self.engine.lifecycle(action, path)

    def session_start(self) -> dict[str, Any]:
        """Call when an agent session starts: syncs the index (``sync.onSessionStart``) and reports status."""
        return self.engine.session_start()

    # -- agent integration (mdmem.agent) ---------------------------------------------------------
    def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        session_kind: SessionKind = "main",
        tools: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Run a tool (memory_search, memory_get, memory_pack, memory_truth, memory_status, memory_remember);
        errors come back as ``{..., error}``, never raised. ``session_kind`` is the session the call comes from
        (citations ``auto``); ``tools``, the tools the runtime offered (others are refused; default: all)."""
        return integration.call_tool(self, name, arguments, session_kind=session_kind, tools=tools)

    def session_context(self, kind: SessionKind = "main", today: date | str | None = None) -> dict[str, Any]:
        """Today's and yesterday's daily logs, plus MEMORY.md for ``main`` only (never ``group``), size-bounded."""
        return integration.session_context(self.agent, kind, today)

    def truth(self, subject: str, max_facts: int = 5) -> dict[str, Any]:
        """What is currently true about ``subject``: ``{subject, facts: [{current, history}]}``, each version with
        its ``ref``, ``text``, ``date`` and ``supportedBy`` refs, history newest first with ``supersededOn``
        (docs/truth.md)."""
        return self.engine.truth(subject, max_facts)

    def links(self, path: str) -> dict[str, Any]:
        """The links of the memory file ``path`` and its backlinks, resolved: ``{path, links: [{line, to, ref,
        broken?}], backlinks: [{ref, to}], aliases}`` (docs/truth.md)."""
        return self.engine.links(path)

    def remember(
        self, text: str, long_term: bool = False, supersedes: str | None = None, *, redact_secrets: bool = False
    ) -> dict[str, Any]:
        """Append a timestamped line to today's log (or MEMORY.md); the next search or sync indexes it.
        ``supersedes`` (``path#L<n>``): the new fact replaces that line, which is marked with a link to it.
        ``redact_secrets``: store secrets in ``text`` as ``[REDACTED:<kind>]`` (the tool and the service do)."""
        indexed = self.engine.indexed_lines if supersedes is not None else None
        return integration.remember(
            self.agent,
            text,
            long_term=long_term,
            supersedes=supersedes,
            indexed=indexed,
            redact_secrets=redact_secrets,
        )

    def check_flush(
        self, session_key: str, total_tokens: int, context_window: int, *, writable: bool | None = None
    ) -> FlushDecision:
        """Whether the pre-compaction memory flush turn is due now (see mdmem.agent.flush)."""
        return integration.check_flush(self.agent, session_key, total_tokens, context_window, writable=writable)

    def record_flush(self, session_key: str) -> dict[str, Any]:
        """Record that the flush turn ran in this compaction cycle."""
        return integration.record_flush(self.agent, session_key)

    def record_compaction(self, session_key: str) -> dict[str, Any]:
        """Record that the runtime compacted the session (a new flush cycle)."""
        return integration.record_compaction(self.agent, session_key)

    def reset_session(self, session_key: str) -> dict[str, Any]:
        """Clear the session's flush and compaction records (after a session reset)."""
        return integration.reset_session(self.agent, session_key)
