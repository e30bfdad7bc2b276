"""The Python API: ``Memory.open()`` then ``search`` / ``get`` / ``sync`` / ``status``."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import TYPE_CHECKING, Any

from mdmemory import agent as integration
from mdmemory import roots
from mdmemory.agent import clock
from mdmemory.agent.schemas import check_search_arguments
from mdmemory.config import AgentConfig, Config, load_config
from mdmemory.errors import EmbeddingsPending, ProviderError, ProviderPaused
from mdmemory.providers import deadline
from mdmemory.store.api import IndexStore
from mdmemory.syncing import IndexSync, recorded_store_faults
from mdmemory.tools import citations_on, get_file, search_response
from mdmemory.transcripts import transcripts_folder
from mdmemory.workspace import Workspace

# Imported where they are used, so that a command pays only for what it runs (``mdmemory get`` opens no
# index; a keyword-only search needs neither numpy nor the Markdown parser): mdmemory.catchup,
# mdmemory.indexer, mdmemory.packer, mdmemory.search, mdmemory.status, mdmemory.store.repair.
if TYPE_CHECKING:
    import numpy as np

    from mdmemory.agent import FlushDecision, SessionKind
    from mdmemory.indexer import Indexer, Progress
    from mdmemory.providers.base import EmbeddingProvider
    from mdmemory.providers.factory import ProviderChoice
    from mdmemory.search import SearchOutcome


class Memory(IndexSync):
    """One agent's memory: its workspace, index and embedding provider (all opened lazily)."""

    # work a search leaves behind: "thread" (long-lived processes), "worker" (CLI), or "owner": the object's
    # owner embeds what waits itself (the service's indexer), only a rebuild gets a thread
    background = "thread"

    def __init__(
        self,
        agent: AgentConfig,
        config: Config | None = None,
        *,
        choice: ProviderChoice | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.agent = agent
        self.config = config
        self.settings = agent.memory_search
        self.env = os.environ if env is None else env
        self.workspace = Workspace(
            agent.workspace,
            self.settings.extra_paths,
            sessions="sessions" in self.settings.sources,
            transcripts=transcripts_folder(self.settings.sessions.transcripts_dir, agent.id),
        )
        self._choice = choice
        self._choice_at = 0.0
        self.provider_error: ProviderError | None = None  # why the configured provider could not be created
        self._last_error: dict[str, Any] | None = None  # kept here too when the health file cannot be written
        self.last_repair: dict[str, Any] | None = None  # the corrupt index this object last moved aside
        self._store: IndexStore | None = None
        self._indexer: Indexer | None = None
        self.should_stop: Callable[[], bool] | None = None  # lets a background sync stop between files
        self._background: threading.Thread | None = None
        self._closing = threading.Event()
        # A long-lived caller answering many searches a second (the service) sets this: a search then
        # catches up with the files at most once per interval; ``changed()`` makes the next one catch up.
        self.catch_up_interval = 0.0
        self._changes = 0  # bumped by changed(): a catch-up that began before a write does not cover it
        self._caught_up: tuple[float, int, tuple[bool, list[str]]] | None = None
        self.catches_up = True  # False for a second reader of an index another object keeps up to date
        # True for a caller answering within a time budget (the service): a catch-up before a search then
        # indexes text only (new chunks are found by keywords at once), stops at the deadline in force
        # (``deadline.until``), and leaves what it did not reach, and every vector, to the background
        self.catch_up_budgeted = False
        self.entries_seen: tuple[int, int] | None = None  # the EntryLog version this replica last indexed

    @classmethod
    def open(cls, agent: str | None = None, config_path: str | os.PathLike[str] | None = None) -> Memory:
        """Load the configuration (``config_path``, ``MDMEMORY_CONFIG`` or the default) and pick an agent."""
        config = load_config(config_path)
        return cls(config.agent(agent), config)

    @property
    def store(self) -> IndexStore:
        """The agent's index, on the store ``memorySearch.store.backend`` names (opened on first use)."""
        if self._store is None:
            from mdmemory.store.open import open_store

            self._store = open_store(self.agent)
        return self._store

    @property
    def indexer(self) -> Indexer:
        if self._indexer is None:
            from mdmemory.indexer import Indexer

            self._indexer = Indexer(self.store, self.workspace, self.settings, self.choice.provider)
        self._indexer.should_stop = self.should_stop
        return self._indexer

    @property
    def current_choice(self) -> ProviderChoice | None:
        """The provider choice in use, without making one (``choice`` makes one when there is none yet)."""
        return self._choice

    def close(self, *, provider: bool = True) -> None:
        """Close the index; the embedding provider too unless ``provider`` is False (another object shares it)."""
        self._closing.set()
        if self._background is not None:
            self._background.join(60)
        if self._store is not None:
            self._store.close()
            self._store = None
            self._indexer = None
        if not provider:
            self._choice = None
        elif self._choice is not None and self._choice.provider is not None:
            self._choice.provider.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- operations --------------------------------------------------------------------------------
    def sync(
        self, force: bool = False, progress: Progress | None = None, prune: bool = False, *, embed: bool = True
    ) -> dict[str, Any]:
        """Index new and changed memory files, drop removed ones. Returns the sync report.

        Raises EmbeddingsPending (a ProviderError) when the text was indexed but the provider failed
        before every chunk was embedded; its ``report`` is the sync report, and the next sync embeds them.
        ``embed=False`` indexes the text only and leaves new chunks pending.

        Files under a missing folder are kept unless ``prune`` (or ``force``) says to drop them (mdmemory.roots).
        With ``memorySearch.enabled: false`` nothing is indexed: the report says ``disabled`` and why.

        A corrupt index is moved aside and rebuilt from the files first (``repaired``: where it went);
        ``warnings`` says when the configured provider was unavailable and the index kept keywords only.
        """
        if not self.settings.enabled:
            from mdmemory.indexer import SyncReport

            return {**SyncReport().to_dict(), "disabled": True, "reason": self._disabled()}
        report = self._sync(force=force, progress=progress, prune=prune, embed=embed).to_dict()
        if self.last_repair is not None:
            report["repaired"] = self.last_repair
        if self.provider_error is not None and self.choice.hint:
            report["warnings"] = [self.choice.hint]
        return report

    def take_over(self, progress: Progress | None = None) -> dict[str, Any]:
        """Make this host's workspace the one the agent's index belongs to (PostgreSQL refuses any other:
        mdmemory.store.pg.claims), then rebuild the index from its files (``sync(force=True)``). The report's
        ``tookOver`` is the workspace that had it (None: none, or this one already)."""
        replaced = self.store.claim_workspace()
        return {**self.sync(force=True, progress=progress), "tookOver": replaced}

    def _disabled(self) -> str:
        return (
            f"memory search is disabled for agent {self.agent.id!r} (memorySearch.enabled is false): "
            "set it to true to index and search this agent's memory"
        )

    @recorded_store_faults
    def search(
        self,
        query: str,
        max_results: int | None = None,
        min_score: float | None = None,
        *,
        session_kind: SessionKind = "main",
    ) -> dict[str, Any]:
        """memory_search: ``{results: [{path, startLine, endLine, score, snippet, source}], provider, model, ...}``.

        Raises InvalidArgumentError (a ValueError) for an empty query, ``max_results`` outside 1-100 or
        ``min_score`` outside 0-1: the bounds of the memory_search tool schema. Results carry ``citation``
        (and their snippet a ``Source:`` line) when ``query.citations`` is ``on``, or ``auto`` in a ``main``
        session (``session_kind``; ``group`` for shared chats).
        """
        query, max_results, min_score = check_search_arguments(query, max_results, min_score)
        if not self.settings.enabled:
            return {"results": [], "disabled": True, "error": self._disabled()}
        q = self.settings.query
        limit = q.max_results if max_results is None else max_results
        threshold = q.min_score if min_score is None else min_score
        outcome, _, extra = self._search(query, limit, threshold)
        provider = self.choice.provider
        model = provider.model if provider else None
        cited = citations_on(q.citations, session_kind)
        return {**search_response(outcome, provider=self.choice.name, model=model, citations=cited), **extra}

    def _search(
        self, query: str, limit: int, threshold: float
    ) -> tuple[SearchOutcome, np.ndarray | None, dict[str, Any]]:
        """Sync if due, embed the query and search: the outcome, the query vector (None: keyword-only) and
        the notes a response carries (``fallback``, ``stale``, ``warnings``)."""
        from mdmemory import catchup
        from mdmemory.search import search as run_search

        q = self.settings.query
        notes: list[str] = []
        self.store.refresh()
        until = self._embedding_deadline()
        stale = False
        if self.settings.sync.on_search:
            with deadline.until(until):  # catching up and the query embedding share the search's budget
                stale, more = self._sync_before_search()
            notes.extend(more)
        missing = self.workspace.missing_roots() if self.agent.files_here else []
        if missing:
            notes.extend(roots.warnings(missing, self.store.files()))
        provider = self.choice.provider
        vector = None
        if provider is not None and self.indexer.identity_matches():
            vector = self._embed_query(provider, query, until, notes)
        elif provider is not None and not self.settings.sync.on_search:  # with onSearch, the catch-up said it
            stored = self.store.get_meta("identity") or {}
            notes.append(f"{catchup.identity_change(stored, self.indexer.identity())}: run `mdmemory index` to rebuild")
        with self.store.reading():  # one connection and one snapshot for the search's queries on PostgreSQL
            outcome = run_search(
                self.store,
                query,
                query_vector=vector,
                max_results=limit,
                min_score=threshold,
                hybrid=q.hybrid,
                keyword_score=q.keyword_score,
                today=clock.day(self.agent),
                low_confidence_results=q.low_confidence_results,
                sources=self.workspace.sources,
            )
        notes.extend(outcome.notes)
        extra: dict[str, Any] = {}
        if self.choice.fallback:
            extra["fallback"] = self.choice.fallback
        if outcome.mode == "keyword" and provider is None:
            notes.append(self.choice.hint or "keyword-only search: no embedding provider is configured")
        if stale:
            extra["stale"] = True
        if notes:
            extra["warnings"] = notes
        return outcome, vector, extra

    @recorded_store_faults
    def pack(
        self,
        query: str,
        budget_tokens: int = 1000,
        max_items: int | None = None,
        sources: Sequence[str] | None = None,
        trace: bool = False,
    ) -> dict[str, Any]:
        """A ContextPack: the most evidence per token for ``query`` within ``budget_tokens``, every item cited.

        ``{query, budgetTokens, usedTokens, items: [{ref, path, startLine, endLine, text, score, source, kind,
        date?}], bundleText, provider, model, mode}``, plus ``trace`` (one receipt per candidate, no text)
        when asked. ``sources`` keeps only these kinds (``curated``, ``daily``, ``extra``, ``session``).
        ``matched`` counts the candidates (0: nothing matched) and ``bestLeftOut`` names the best one when the
        budget could not hold it, with the budget that would. A budget below the header's cost raises
        InvalidArgumentError naming the minimum. See mdmemory.pack.
        """
        from mdmemory.packer import check_pack_arguments, run_pack

        if not self.settings.enabled:
            check_pack_arguments(query, budget_tokens, max_items, sources)
            empty = {"query": query, "budgetTokens": budget_tokens, "usedTokens": 0, "items": [], "bundleText": ""}
            return {**empty, "disabled": True, "error": self._disabled()}
        return run_pack(self, query, budget_tokens, max_items=max_items, sources=sources, trace=trace)

    def _embed_query(self, provider: EmbeddingProvider, query: str, until: float, notes: list[str]) -> Any:
        """The query vector, or None with a note saying why the search answers from keywords; back by ``until``."""
        try:
            return provider.embed_query_within(query, until)
        except ProviderPaused as exc:
            notes.append(f"query embedding skipped, answered from keywords only: {exc}")
        except ProviderError as exc:
            notes.append(f"query embedding failed, answered from keywords only: {exc}")
        return None

    def session_start(self) -> dict[str, Any]:
        """Call when an agent session starts: syncs the index (``sync.onSessionStart``) and reports status."""
        report = None
        if self.settings.sync.on_session_start and self.settings.enabled:
            try:
                report = self._sync().to_dict()
            except EmbeddingsPending as exc:  # the text is indexed; status shows what waits for embeddings
                report = exc.report
        return {"sync": report, "status": self.status()}

    # -- agent integration (mdmemory.agent) ---------------------------------------------------------
    def call_tool(
        self, name: str, arguments: Mapping[str, Any] | str | None = None, *, session_kind: SessionKind = "main"
    ) -> dict[str, Any]:
        """Run memory_search / memory_pack / memory_get / memory_status; errors come back as ``{..., error}``,
        never raised. ``session_kind`` is the session the call comes from (citations ``auto``)."""
        return integration.call_tool(self, name, arguments, session_kind=session_kind)

    def session_context(self, kind: SessionKind = "main", today: date | str | None = None) -> dict[str, Any]:
        """Today's and yesterday's daily logs, plus MEMORY.md for ``main`` only (never ``group``), size-bounded."""
        return integration.session_context(self.agent, kind, today)

    def remember(self, text: str, long_term: bool = False) -> dict[str, Any]:
        """Append a timestamped line to today's log (or MEMORY.md); the next search or sync indexes it."""
        return integration.remember(self.agent, text, long_term=long_term)

    def check_flush(
        self, session_key: str, total_tokens: int, context_window: int, *, writable: bool | None = None
    ) -> FlushDecision:
        """Whether the pre-compaction memory flush turn is due now (see mdmemory.agent.flush)."""
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

    def get(self, path: str, from_line: int | None = None, lines: int | None = None) -> dict[str, Any]:
        """memory_get: ``{path, text}``, or ``{path, text: "", error}`` for a path that is not allowed."""
        if not self.settings.enabled:
            return {"path": path, "text": "", "disabled": True, "error": self._disabled()}
        return get_file(self.workspace, path, from_line, lines, max_bytes=self.settings.max_file_bytes)

    def status(self) -> dict[str, Any]:
        """Index state computed from the files on disk, the database and the health and watcher files, not
        from cached flags; a broken index is reported in ``storeState`` rather than raised."""
        from mdmemory.status import build_status

        return build_status(self)
