"""The Python API: ``Memory.open()`` then ``search`` / ``get`` / ``sync`` / ``status``."""

from __future__ import annotations

import errno
import functools
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from mdmemory import agent as integration
from mdmemory import roots
from mdmemory.agent import clock
from mdmemory.agent.schemas import check_search_arguments
from mdmemory.config import AgentConfig, Config, load_config
from mdmemory.errors import EmbeddingsPending, ProviderError, ProviderPaused, StoreError, WorkspaceError
from mdmemory.providers import deadline
from mdmemory.selection import ProviderSelection
from mdmemory.store.api import IndexStore
from mdmemory.store.faults import store_errors, store_fault
from mdmemory.store.health import MAX_MESSAGE_CHARS, error_entry, live_inode, read_health, update_health
from mdmemory.tools import citations_on, get_file, search_response
from mdmemory.transcripts import transcripts_folder
from mdmemory.workspace import Workspace

# Imported where they are used, so that a command pays only for what it runs (``mdmemory get`` opens no
# index; a keyword-only search needs neither numpy nor the Markdown parser): mdmemory.catchup,
# mdmemory.indexer, mdmemory.packer, mdmemory.search, mdmemory.status, mdmemory.store.repair.
if TYPE_CHECKING:
    import numpy as np

    from mdmemory.agent import FlushDecision, SessionKind
    from mdmemory.indexer import Indexer, Progress, SyncReport
    from mdmemory.providers.base import EmbeddingProvider
    from mdmemory.providers.factory import ProviderChoice
    from mdmemory.search import SearchOutcome

_R = TypeVar("_R")
_P = ParamSpec("_P")


def _store_faults(method: Callable[Concatenate[Memory, _P], _R]) -> Callable[Concatenate[Memory, _P], _R]:
    """A SQLite failure while reading the index becomes a recorded ``StoreError`` that says the fix."""

    @functools.wraps(method)
    def wrapper(self: Memory, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except store_errors(StoreError) as exc:
            fault = store_fault(exc, self.agent.store_path)
            self._record_error(fault)
            self.release_store()
            if fault is exc:
                raise
            raise fault from exc

    return wrapper


class Memory(ProviderSelection):
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
        self.entries_seen: tuple[int, int] | None = None  # the EntryLog version this replica last indexed

    @classmethod
    def open(cls, agent: str | None = None, config_path: str | os.PathLike[str] | None = None) -> Memory:
        """Load the configuration (``config_path``, ``MDMEMORY_CONFIG`` or the default) and pick an agent."""
        config = load_config(config_path)
        return cls(config.agent(agent), config)

    def _sync(
        self,
        force: bool = False,
        progress: Progress | None = None,
        wait: float = 60.0,
        prune: bool = False,
        *,
        embed: bool = True,
        budget: float | None = None,
    ) -> SyncReport:
        """Sync (see ``Indexer.sync``); raises EmbeddingsPending when the text is indexed but embedding failed."""
        self.last_repair = None
        try:
            try:
                report = self._sync_store(force, progress, wait, prune, embed, budget)
            except StoreError as exc:
                if exc.kind != "corrupt" and not (force and exc.kind == "foreign"):
                    raise
                self.last_repair = self._move_corrupt_aside(exc, wait)
                report = self._sync_store(force, progress, wait, prune, embed, budget)
        except (ProviderError, StoreError, WorkspaceError, OSError) as exc:
            self._record_error(exc)
            raise
        path = self.agent.store_path
        known = read_health(path).get("corrupt")
        stale = known is not None and known.get("inode") != live_inode(path)  # about a file no longer in use
        if report.pending == 0:  # else an embedding error stays on record until the vectors are in
            self._last_error = None
            update_health(path, lastError=None, **({"corrupt": None} if stale else {}))
        elif stale:
            update_health(path, corrupt=None)
        return report

    def _sync_store(
        self,
        force: bool,
        progress: Progress | None,
        wait: float,
        prune: bool = False,
        embed: bool = True,
        budget: float | None = None,
    ) -> SyncReport:
        """One sync; a SQLite or file-system failure of the index comes out as a ``StoreError`` saying the fix."""
        path = self.agent.store_path
        try:
            self._follow_shared_state()
            known = read_health(path).get("corrupt")
            if known and known.get("inode") == self.store.inode:  # a search found this very file damaged
                raise StoreError(str(known.get("error") or f"the index {path} is corrupt"), kind="corrupt")
            self.store.ensure_writable()
            self._check_provider()
            try:
                report = self._sync_once(force, progress, wait, embed, budget, prune)
            except ProviderError as exc:
                if not self._take_over(ProviderError(exc.cause) if isinstance(exc, EmbeddingsPending) else exc):
                    raise
                report = self._sync_once(False, progress, wait, embed, budget, prune)  # new identity: one rebuild
            self._record_fallback()
            if self.store.get_meta("lastError") is not None:  # recorded there by older versions
                self.store.delete_meta("lastError")
            return report
        except StoreError:
            self.release_store()
            raise
        except store_errors() as exc:
            self.release_store()
            raise store_fault(exc, path) from exc
        except OSError as exc:
            if not _about_store(exc, path):
                raise
            self.release_store()
            raise store_fault(exc, path) from exc

    def _sync_once(
        self, force: bool, progress: Progress | None, wait: float, embed: bool, budget: float | None, prune: bool
    ) -> SyncReport:
        current = self.choice
        # a rebuild that cannot embed is discarded when a fallback can take over (it may match the live index)
        keep_live = self.settings.fallback not in ("none", current.name) and not current.fallback
        if not self.agent.files_here:  # a replica without the files: the database's entries, nothing else
            from mdmemory.entryindex import sync_entries

            report = sync_entries(self.indexer, wait, embed)
        else:
            report = self.indexer.sync(
                force=force, progress=progress, wait=wait, embed=embed, budget=budget, keep_live=keep_live, prune=prune
            )
        if report.embed_error is not None:
            raise EmbeddingsPending(report.pending, report.embed_error, report.to_dict())
        return report

    def _check_provider(self) -> None:
        """With the configured provider unavailable, sync keyword-only unless that would drop vectors.

        An index that holds another provider's vectors is left as it is (searches use its keywords
        meanwhile); an empty or keyword-only index is kept fresh by keywords, so search always works.
        """
        if self.choice.provider is not None or self.provider_error is None:
            return
        identity = self.store.get_meta("identity")
        if identity is not None and identity.get("provider") != "none":
            raise ProviderError(
                f"{self.provider_error} (the index keeps its {identity.get('provider')} vectors and searches "
                "answer from keywords until this is fixed)"
            )

    def _move_corrupt_aside(self, exc: StoreError, wait: float) -> dict[str, Any]:
        seen = live_inode(self.agent.store_path)  # the file just found corrupt (unless another process moved it)
        self.release_store()
        from mdmemory.store.repair import repair_corrupt

        return repair_corrupt(self.agent.store_path, str(exc), seen, wait=wait)

    @property
    def last_error(self) -> dict[str, Any] | None:
        """``{at, error, kind}`` of this object's last failed sync, also when it could not be recorded on disk."""
        return self._last_error

    def release_store(self) -> None:
        """Close the index connection; the next use opens it again (perhaps writable again, or rebuilt)."""
        if self._store is not None:
            self._store.close()
            self._store = None
            self._indexer = None

    def _record_error(self, exc: BaseException) -> None:
        """Keep the failure where ``status`` finds it, in every process: the health file beside the index."""
        kind = exc.kind if isinstance(exc, StoreError) else "provider" if isinstance(exc, ProviderError) else "error"
        if isinstance(exc, EmbeddingsPending):  # the text is indexed: say what failed and how much waits
            entry = {**error_entry(f"embedding failed: {exc.cause}", kind), "pending": exc.pending}
        else:
            entry = error_entry(f"{type(exc).__name__}: {exc}", kind)
        self._last_error = entry
        change: dict[str, Any] = {"lastError": entry}
        if kind == "corrupt":
            inode = self._store.inode if self._store is not None else live_inode(self.agent.store_path)
            change["corrupt"] = {"inode": inode, "at": entry["at"], "error": str(exc)[:MAX_MESSAGE_CHARS]}
        update_health(self.agent.store_path, **change)  # False on a read-only folder: status computes it

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

    def _disabled(self) -> str:
        return (
            f"memory search is disabled for agent {self.agent.id!r} (memorySearch.enabled is false): "
            "set it to true to index and search this agent's memory"
        )

    @_store_faults
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

    @_store_faults
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
        See mdmemory.pack.
        """
        from mdmemory.packer import check_pack_arguments, run_pack

        if not self.settings.enabled:
            check_pack_arguments(query, budget_tokens, max_items, sources)
            empty = {"query": query, "budgetTokens": budget_tokens, "usedTokens": 0, "items": [], "bundleText": ""}
            return {**empty, "disabled": True, "error": self._disabled()}
        return run_pack(self, query, budget_tokens, max_items=max_items, sources=sources, trace=trace)

    def _embedding_deadline(self) -> float:
        """When a search stops waiting for embeddings: ``query.embedTimeoutMs`` from now, after the one-time
        warm-up (SDK import, model load), which cannot hang on the network and no budget counts."""
        try:
            provider = self.choice.provider
            if provider is not None and (provider.breaker is None or provider.breaker.status()["state"] != "open"):
                provider.warm_up()  # not while paused: a CLI search then answers without importing the SDK
        except ProviderError:
            pass  # the embedding call reports it
        return time.monotonic() + self.settings.query.embed_timeout_ms / 1000

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

    def changed(self) -> None:
        """Something wrote to the memory files: the next search catches up, whatever ``catch_up_interval``."""
        self._changes += 1

    @property
    def change_announced(self) -> bool:
        """Whether ``changed()`` was called (or nothing caught up yet) since the last catch-up began."""
        last = self._caught_up
        return last is None or last[1] != self._changes

    def catch_up_due(self) -> bool:
        """Whether the next search would catch up with the files (see ``catch_up_interval``)."""
        last = self._caught_up
        return last is None or last[1] != self._changes or time.monotonic() - last[0] >= self.catch_up_interval

    def catch_up(self) -> tuple[bool, list[str]]:
        """What a search does first (``sync.onSearch``), alone: (stale, notes)."""
        if not self.settings.sync.on_search:
            return False, []
        with deadline.until(self._embedding_deadline()):
            return self._sync_before_search()

    def _sync_before_search(self) -> tuple[bool, list[str]]:
        """Catch up before answering (see mdmemory.catchup). Returns (stale, notes)."""
        from mdmemory import catchup

        if not self.catches_up:
            return False, []
        last = self._caught_up
        if last is not None and not self.catch_up_due():
            return last[2][0], list(last[2][1])
        now, changes = time.monotonic(), self._changes  # what this catch-up covers
        result = catchup.before_search(self)
        self._caught_up = (now, changes, result) if self.catch_up_interval > 0 else None
        return result


def _about_store(exc: OSError, store_path: os.PathLike[str]) -> bool:
    """True for a file-system error on the index folder (its lock, a generation, a state file)."""
    folder = os.path.dirname(os.path.realpath(store_path))
    name = exc.filename
    if name is None:
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return os.path.dirname(os.path.realpath(os.fsdecode(name))) in (folder, os.path.dirname(os.fspath(store_path)))


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
