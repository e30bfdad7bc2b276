"""Keeping one agent's index in step with its files: syncing (with the store's faults turned into
``StoreError``s that say the fix, a corrupt index moved aside and rebuilt), the failures recorded where
``status`` finds them (the health file beside the index), and the index and indexer opened on first use.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from mdmem.config.load import AgentConfig
from mdmem.engine.provider_choice import ProviderChoiceKeeper
from mdmem.files.workspace import Workspace
from mdmem.providers import deadline
from mdmem.store.faults import store_errors, store_fault
from mdmem.store.health import MAX_MESSAGE_CHARS, error_entry, live_inode, read_health, update_health
from mdmem.util.errors import EmbeddingsPending, ProviderError, StoreError, WorkspaceError

if TYPE_CHECKING:
    from mdmem.index.indexer import Indexer, Progress, SyncReport
    from mdmem.store.api import IndexStore


class IndexKeeper:
    """One agent's index: opened on first use, synced, repaired, its failures on record."""

    def __init__(self, agent: AgentConfig, workspace: Workspace, providers: ProviderChoiceKeeper) -> None:
        self.agent = agent
        self.settings = agent.memory_search
        self.workspace = workspace
        self.providers = providers
        self._store: IndexStore | None = None
        self._indexer: Indexer | None = None
        self._indexer_for = -1  # the providers' version the indexer was built for
        self._last_error: dict[str, Any] | None = None  # kept here too when the health file cannot be written
        self.last_repair: dict[str, Any] | None = None  # the corrupt index this object last moved aside
        self.should_stop: Callable[[], bool] | None = None  # lets a background sync stop between files

    @property
    def store(self) -> IndexStore:
        """The agent's index, on the store ``memorySearch.store.backend`` names (opened on first use)."""
        if self._store is None:
            from mdmem.store.open import open_store

            self._store = open_store(self.agent)
        return self._store

    @property
    def opened(self) -> IndexStore | None:
        """The index if it is open, without opening it."""
        return self._store

    @property
    def indexer(self) -> Indexer:
        choice = self.providers.choice
        if self._indexer is None or self._indexer_for != self.providers.version:
            from mdmem.index.indexer import Indexer

            self._indexer = Indexer(self.store, self.workspace, self.settings, choice.provider)
            self._indexer_for = self.providers.version
        self._indexer.should_stop = self.should_stop
        return self._indexer

    @contextlib.contextmanager
    def store_faults(self) -> Iterator[None]:
        """A SQLite failure while reading the index becomes a recorded ``StoreError`` that says the fix."""
        try:
            yield
        except store_errors(StoreError) as exc:
            fault = store_fault(exc, self.agent.store_path)
            self.record_error(fault)
            self.release_store()
            if fault is exc:
                raise
            raise fault from exc

    def sync(
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
            self.record_error(exc)
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
            self.providers.follow_shared_state()
            known = read_health(path).get("corrupt")
            if known and known.get("inode") == self.store.inode:  # a search found this very file damaged
                raise StoreError(str(known.get("error") or f"the index {path} is corrupt"), kind="corrupt")
            self.store.ensure_writable()
            self._check_provider()
            try:
                report = self._sync_once(force, progress, wait, embed, budget, prune)
            except ProviderError as exc:
                if not self.providers.take_over(
                    ProviderError(exc.cause) if isinstance(exc, EmbeddingsPending) else exc
                ):
                    raise
                report = self._sync_once(False, progress, wait, embed, budget, prune)  # new identity: one rebuild
            self.providers.record_fallback()
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
        current = self.providers.choice
        # a rebuild that cannot embed is discarded when a fallback can take over (it may match the live index)
        keep_live = self.settings.fallback not in ("none", current.name) and not current.fallback
        if not self.agent.files_here:  # a replica without the files: the database's entries, nothing else
            from mdmem.index.replica import sync_entries

            report = sync_entries(self.indexer, wait, embed)
        else:
            report = self.indexer.sync(
                force=force, progress=progress, wait=wait, embed=embed, budget=budget, keep_live=keep_live, prune=prune
            )
        if report.embed_error is not None:
            raise EmbeddingsPending(report.pending, report.embed_error, report.to_dict())
        return report

    def embed_waiting(self) -> int:
        """Embed the chunks text-only syncs (``sync(embed=False)``, a service's catch-up) left pending, taking
        no writer lock (``Indexer.embed_waiting``); returns how many still wait. Nothing is embedded while the
        index was built for another identity (a rebuild, started by a search, replaces it). Raises
        EmbeddingsPending when the provider failed, recorded as a sync's failure is."""
        path = self.agent.store_path
        try:
            self.providers.follow_shared_state()
            if self.providers.choice.provider is None or not self.indexer.identity_matches():
                return self.store.pending_count()
            report = self.indexer.embed_waiting()
        except StoreError as exc:
            self.release_store()
            self.record_error(exc)
            raise
        except store_errors() as exc:
            self.release_store()
            fault = store_fault(exc, path)
            self.record_error(fault)
            raise fault from exc
        except (ProviderError, OSError) as exc:
            self.record_error(exc)
            raise
        if report.embed_error is not None:
            error = EmbeddingsPending(report.pending, report.embed_error, report.to_dict())
            self.record_error(error)
            raise error
        if report.pending == 0:
            self._last_error = None
            update_health(path, lastError=None)
        return report.pending

    def _check_provider(self) -> None:
        """With the configured provider unavailable, sync keyword-only unless that would drop vectors.

        An index that holds another provider's vectors is left as it is (searches use its keywords
        meanwhile); an empty or keyword-only index is kept fresh by keywords, so search always works.
        """
        provider = self.providers.choice.provider  # made first: making it says whether it can be
        error = self.providers.provider_error
        if provider is not None or error is None:
            return
        identity = self.store.get_meta("identity")
        if identity is not None and identity.get("provider") != "none":
            raise ProviderError(
                f"{error} (the index keeps its {identity.get('provider')} vectors and searches "
                "answer from keywords until this is fixed)"
            )

    def _move_corrupt_aside(self, exc: StoreError, wait: float) -> dict[str, Any]:
        seen = live_inode(self.agent.store_path)  # the file just found corrupt (unless another process moved it)
        self.release_store()
        from mdmem.store.repair import repair_corrupt

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

    def resolved(self) -> None:
        """This object's own last failure is resolved (another connection synced): status must not show it."""
        self._last_error = None

    def record_error(self, exc: BaseException) -> None:
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

    def embedding_deadline(self) -> float:
        """When a search stops waiting for embeddings: ``query.embedTimeoutMs`` from now, after the one-time
        warm-up (SDK import, model load), which cannot hang on the network and no budget counts; earlier when
        the caller set a deadline (``deadline.until``: a service recall's time budget)."""
        try:
            provider = self.providers.choice.provider
            if provider is not None and (provider.breaker is None or provider.breaker.status()["state"] != "open"):
                provider.warm_up()  # not while paused: a CLI search then answers without importing the SDK
        except ProviderError:
            pass  # the embedding call reports it
        own = time.monotonic() + self.settings.query.embed_timeout_ms / 1000
        outer = deadline.current()
        return own if outer is None else min(own, outer)


def _about_store(exc: OSError, store_path: os.PathLike[str]) -> bool:
    """True for a file-system error on the index folder (its lock, a generation, a state file)."""
    folder = os.path.dirname(os.path.realpath(store_path))
    name = exc.filename
    if name is None:
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return os.path.dirname(os.path.realpath(os.fsdecode(name))) in (folder, os.path.dirname(os.fspath(store_path)))
