"""The Python API: ``Memory.open()`` then ``search`` / ``get`` / ``sync`` / ``status``."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from datetime import date
from typing import Any

from mdmemory import agent as integration
from mdmemory import catchup
from mdmemory.agent import FlushDecision, SessionKind, clock
from mdmemory.config import AgentConfig, Config, load_config
from mdmemory.errors import EmbeddingsPending, ProviderError, StoreError
from mdmemory.indexer import Indexer, Progress, SyncReport, is_utf8, printable
from mdmemory.providers.factory import ProviderChoice, build, choose
from mdmemory.search import search as run_search
from mdmemory.store import Store
from mdmemory.tools import get_file, search_response
from mdmemory.watchstate import read_watch_state
from mdmemory.workspace import Workspace

FALLBACK_RETRY_SECONDS = 3600.0  # how long a fallback that took over stays in charge before the primary is retried


class Memory:
    """One agent's memory: its workspace, index and embedding provider (all opened lazily)."""

    background = "thread"  # work a search leaves behind: "thread" (long-lived processes) or "worker" (CLI)

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
        self.workspace = Workspace(agent.workspace, self.settings.extra_paths)
        self._choice = choice
        self._store: Store | None = None
        self._indexer: Indexer | None = None
        self.should_stop: Callable[[], bool] | None = None  # lets a background sync stop between files
        self._background: threading.Thread | None = None
        self._closing = threading.Event()

    @classmethod
    def open(cls, agent: str | None = None, config_path: str | os.PathLike[str] | None = None) -> Memory:
        """Load the configuration (``config_path``, ``MDMEMORY_CONFIG`` or the default) and pick an agent."""
        config = load_config(config_path)
        return cls(config.agent(agent), config)

    # -- lazily built parts ------------------------------------------------------------------------
    @property
    def choice(self) -> ProviderChoice:
        if self._choice is None:
            self._choice = self._persisted_fallback() or choose(self.settings, self.agent.home, self.env)
        return self._choice

    def _persisted_fallback(self) -> ProviderChoice | None:
        """A fallback that took over recently stays in charge (in every process) until its cool-down ends."""
        state = self.store.get_meta("fallback")
        if not state or state.get("to") != self.settings.fallback:
            return None
        if _expired(state):
            return None
        try:
            provider = build(state["to"], self.settings, self.agent.home, self.env)  # fallback: its own model
        except ProviderError:
            return None
        reason = {"from": state["from"], "reason": state["reason"]}
        return ProviderChoice(provider, self.settings.provider, fallback=reason)

    def _take_over(self, exc: ProviderError) -> bool:
        """Switch to the configured fallback after the primary kept failing; False if there is none."""
        current = self.choice
        target = self.settings.fallback
        if target == "none" or target == current.name or current.fallback:
            return False
        try:
            provider = build(target, self.settings, self.agent.home, self.env)
        except ProviderError:
            return False
        if current.provider is not None:
            current.provider.close()
        self._choice = ProviderChoice(provider, current.requested, fallback={"from": current.name, "reason": str(exc)})
        self._indexer = None
        return True

    def _sync(
        self,
        force: bool = False,
        progress: Progress | None = None,
        wait: float = 60.0,
        *,
        embed: bool = True,
        budget: float | None = None,
    ) -> SyncReport:
        """Sync (see ``Indexer.sync``); raises EmbeddingsPending when the text is indexed but embedding failed."""
        self._follow_shared_state()
        try:
            try:
                report = self._sync_once(force, progress, wait, embed, budget)
            except ProviderError as exc:
                if not self._take_over(ProviderError(exc.cause) if isinstance(exc, EmbeddingsPending) else exc):
                    raise
                report = self._sync_once(False, progress, wait, embed, budget)  # new identity: one atomic rebuild
        except (ProviderError, StoreError, OSError) as exc:
            self._record_error(exc)
            raise
        self._record_fallback()
        if report.pending == 0 and self.store.get_meta("lastError") is not None:
            self.store.conn.execute("DELETE FROM meta WHERE key = 'lastError'")
        return report

    def _sync_once(
        self, force: bool, progress: Progress | None, wait: float, embed: bool, budget: float | None
    ) -> SyncReport:
        current = self.choice
        # a rebuild that cannot embed is discarded when a fallback can take over (it may match the live index)
        keep_live = self.settings.fallback not in ("none", current.name) and not current.fallback
        report = self.indexer.sync(
            force=force, progress=progress, wait=wait, embed=embed, budget=budget, keep_live=keep_live
        )
        if report.embed_error is not None:
            raise EmbeddingsPending(report.pending, report.embed_error, report.to_dict())
        return report

    def _record_error(self, exc: BaseException) -> None:
        try:
            error: dict[str, Any] = {"at": time.time(), "error": f"{type(exc).__name__}: {exc}"}
            if isinstance(exc, EmbeddingsPending):  # the text is indexed: say what failed and how much waits
                error.update(error=f"embedding failed: {exc.cause}", pending=exc.pending)
            self.store.set_meta("lastError", error)
        except Exception:  # noqa: BLE001 - recording must never hide the original error
            pass

    def _follow_shared_state(self) -> None:
        """Pick up a swapped index, and drop a fallback that another process has already ended."""
        self.store.refresh()
        if self._choice is not None and self._choice.fallback is not None:
            state = self.store.get_meta("fallback")
            if state is None or _expired(state):
                if self._choice.provider is not None:
                    self._choice.provider.close()
                self._choice = None
                self._indexer = None

    def _record_fallback(self) -> None:
        fb = self.choice.fallback
        state = self.store.get_meta("fallback")
        if fb is None:
            if state is not None:
                self.store.conn.execute("DELETE FROM meta WHERE key = 'fallback'")
        elif state is None or state.get("from") != fb["from"] or _expired(state):
            self.store.set_meta("fallback", {**fb, "to": self.choice.name, "at": time.time()})

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.agent.store_path)
        return self._store

    @property
    def indexer(self) -> Indexer:
        if self._indexer is None:
            self._indexer = Indexer(self.store, self.workspace, self.settings, self.choice.provider)
        self._indexer.should_stop = self.should_stop
        return self._indexer

    def close(self) -> None:
        self._closing.set()
        if self._background is not None:
            self._background.join(60)
        if self._store is not None:
            self._store.close()
            self._store = None
            self._indexer = None
        if self._choice is not None and self._choice.provider is not None:
            self._choice.provider.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- operations --------------------------------------------------------------------------------
    def sync(self, force: bool = False, progress: Progress | None = None, *, embed: bool = True) -> dict[str, Any]:
        """Index new and changed memory files, drop removed ones. Returns the sync report.

        Raises EmbeddingsPending (a ProviderError) when the text was indexed but the provider failed
        before every chunk was embedded; its ``report`` is the sync report, and the next sync embeds them.
        ``embed=False`` indexes the text only and leaves new chunks pending.
        """
        return self._sync(force=force, progress=progress, embed=embed).to_dict()

    def search(self, query: str, max_results: int | None = None, min_score: float | None = None) -> dict[str, Any]:
        """memory_search: ``{results: [{path, startLine, endLine, score, snippet, source}], provider, model, ...}``."""
        q = self.settings.query
        limit = q.max_results if max_results is None else max_results
        threshold = q.min_score if min_score is None else min_score
        notes: list[str] = []
        self.store.refresh()
        stale = False
        if self.settings.sync.on_search:
            stale, more = self._sync_before_search()
            notes.extend(more)
        provider = self.choice.provider
        vector = None
        if provider is not None and self.indexer.identity_matches():
            try:
                vector = provider.embed_query(query)
            except ProviderError as exc:
                notes.append(f"query embedding failed, answered from keywords only: {exc}")
        elif provider is not None and not self.settings.sync.on_search:  # with onSearch, the catch-up said it
            stored = self.store.get_meta("identity") or {}
            notes.append(f"{catchup.identity_change(stored, self.indexer.identity())}: run `mdmemory index` to rebuild")
        outcome = run_search(
            self.store,
            query,
            query_vector=vector,
            max_results=limit,
            min_score=threshold,
            hybrid=q.hybrid,
            keyword_score=q.keyword_score,
            today=clock.day(self.agent),
        )
        response = search_response(outcome, provider=self.choice.name, model=provider.model if provider else None)
        if self.choice.fallback:
            response["fallback"] = self.choice.fallback
        if outcome.mode == "keyword" and provider is None:
            notes.append(self.choice.hint or "keyword-only search: no embedding provider is configured")
        if stale:
            response["stale"] = True
        if notes:
            response["warnings"] = notes
        return response

    def session_start(self) -> dict[str, Any]:
        """Call when an agent session starts: syncs the index (``sync.onSessionStart``) and reports status."""
        report = None
        if self.settings.sync.on_session_start:
            try:
                report = self._sync().to_dict()
            except EmbeddingsPending as exc:  # the text is indexed; status shows what waits for embeddings
                report = exc.report
        return {"sync": report, "status": self.status()}

    # -- agent integration (mdmemory.agent) ---------------------------------------------------------
    def call_tool(self, name: str, arguments: Mapping[str, Any] | str | None = None) -> dict[str, Any]:
        """Run memory_search / memory_get / memory_status; errors come back as ``{..., error}``, never raised."""
        return integration.call_tool(self, name, arguments)

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
        return get_file(self.workspace, path, from_line, lines)

    def status(self) -> dict[str, Any]:
        """Index state computed from the files on disk and the database, not from cached flags."""
        warnings: list[str] = []
        try:
            choice = self.choice
        except ProviderError as exc:  # report the broken provider instead of failing the whole status
            choice = ProviderChoice(None, self.settings.provider, hint=f"provider unavailable: {exc}")
        provider = choice.provider
        store = self.store
        identity = store.get_meta("identity") or {}
        last = store.get_meta("lastSync")
        files = store.files()
        for row in files.values():
            if row.encoding_errors:
                warnings.append(
                    f"{row.path}: {row.encoding_errors} invalid UTF-8 sequence(s) indexed as U+FFFD; "
                    "re-save the file as UTF-8"
                )
        for mf in self.workspace.discover():
            try:
                size = os.lstat(mf.abs).st_size
            except OSError:
                continue  # deleted since discovery
            if not is_utf8(mf.rel):
                warnings.append(f"{printable(mf.rel)}: file name is not valid UTF-8, not indexed; rename the file")
            elif size > self.settings.max_file_bytes:
                warnings.append(
                    f"{mf.rel}: skipped, {size} bytes is over maxFileBytes ({self.settings.max_file_bytes})"
                )
        if last and last["report"].get("errors"):
            warnings.extend(f"{e['path']}: {e['error']}" for e in last["report"]["errors"])
        if choice.hint:
            warnings.append(choice.hint)
        if self._choice is not None:  # the provider could be built: compare the index with what it would write
            warnings.extend(catchup.status_notes(self, Indexer(store, self.workspace, self.settings, provider)))
        if self.config and self.config.ignored_keys:
            warnings.append("config keys ignored (not mdmemory's): " + ", ".join(self.config.ignored_keys))
        counts = store.counts()
        out: dict[str, Any] = {
            "agent": self.agent.id,
            "workspace": str(self.workspace.root),
            "store": str(store.path),
            "provider": choice.name,
            "requestedProvider": choice.requested,
            "model": provider.model if provider else None,
            "dims": store.vec_dims() or (provider.dims if provider else None),
            "mode": ("hybrid" if self.settings.query.hybrid.enabled else "vector") if provider else "keyword",
            "files": counts["files"],
            "chunks": counts["chunks"],
            "vectors": counts["vectors"],
            "pendingEmbeddings": store.pending_count(),
            "cacheEntries": counts["cacheEntries"],
            "indexProvider": identity.get("provider"),
            "indexModel": identity.get("model"),
            "lastSync": _iso(last["at"]) if last else None,
            "lastSyncSeconds": last["report"]["seconds"] if last else None,
            "staleFiles": Indexer(store, self.workspace, self.settings, provider).stale_files(),
            "lastError": store.get_meta("lastError"),
            "watcher": read_watch_state(self.agent),
            "worker": catchup.worker_state(self),
            "warnings": warnings,
        }
        if choice.fallback:
            out["fallback"] = choice.fallback
        return out

    def _sync_before_search(self) -> tuple[bool, list[str]]:
        """Catch up before answering (see mdmemory.catchup). Returns (stale, notes)."""
        return catchup.before_search(self)


def _expired(state: dict[str, Any]) -> bool:
    return time.time() - float(state.get("at", 0)) > FALLBACK_RETRY_SECONDS


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
