"""How ``Memory`` keeps its index in step with the files: syncing (with the store's faults turned into
``StoreError``s that say the fix, a corrupt index moved aside and rebuilt), the failures recorded where
``status`` finds them, and the catch-up a search does first. ``Memory`` inherits this; it owns the
attributes declared below.
"""

from __future__ import annotations

import errno
import functools
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

from mdmemory.engine.provider_choice import ProviderSelection
from mdmemory.providers import deadline
from mdmemory.store.faults import store_errors, store_fault
from mdmemory.store.health import MAX_MESSAGE_CHARS, error_entry, live_inode, read_health, update_health
from mdmemory.util.errors import EmbeddingsPending, ProviderError, StoreError, WorkspaceError

if TYPE_CHECKING:
    import threading

    from mdmemory.files.workspace import Workspace
    from mdmemory.index.indexer import Indexer, Progress, SyncReport
    from mdmemory.memory import Memory
    from mdmemory.store.api import IndexStore

_R = TypeVar("_R")
_P = ParamSpec("_P")
_S = TypeVar("_S", bound="IndexSync")


def recorded_store_faults(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """A SQLite failure while reading the index becomes a recorded ``StoreError`` that says the fix."""

    @functools.wraps(method)
    def wrapper(self: _S, *args: _P.args, **kwargs: _P.kwargs) -> _R:
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


class IndexSync(ProviderSelection):
    """The syncing half of ``Memory``."""

    workspace: Workspace
    should_stop: Callable[[], bool] | None
    last_repair: dict[str, Any] | None
    catch_up_interval: float
    catches_up: bool
    catch_up_budgeted: bool
    _last_error: dict[str, Any] | None
    _store: IndexStore | None
    _changes: int
    _caught_up: tuple[float, int, tuple[bool, list[str]]] | None
    _closing: threading.Event

    @property
    def indexer(self) -> Indexer:  # provided by Memory
        raise NotImplementedError

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
            from mdmemory.index.replica import sync_entries

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
            self._follow_shared_state()
            if self.choice.provider is None or not self.indexer.identity_matches():
                return self.store.pending_count()
            report = self.indexer.embed_waiting()
        except StoreError as exc:
            self.release_store()
            self._record_error(exc)
            raise
        except store_errors() as exc:
            self.release_store()
            fault = store_fault(exc, path)
            self._record_error(fault)
            raise fault from exc
        except (ProviderError, OSError) as exc:
            self._record_error(exc)
            raise
        if report.embed_error is not None:
            error = EmbeddingsPending(report.pending, report.embed_error, report.to_dict())
            self._record_error(error)
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

    def _embedding_deadline(self) -> float:
        """When a search stops waiting for embeddings: ``query.embedTimeoutMs`` from now, after the one-time
        warm-up (SDK import, model load), which cannot hang on the network and no budget counts; earlier when
        the caller set a deadline (``deadline.until``: a service recall's time budget)."""
        try:
            provider = self.choice.provider
            if provider is not None and (provider.breaker is None or provider.breaker.status()["state"] != "open"):
                provider.warm_up()  # not while paused: a CLI search then answers without importing the SDK
        except ProviderError:
            pass  # the embedding call reports it
        own = time.monotonic() + self.settings.query.embed_timeout_ms / 1000
        outer = deadline.current()
        return own if outer is None else min(own, outer)

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
        """Catch up before answering (see mdmemory.engine.catchup). Returns (stale, notes)."""
        from mdmemory.engine import catchup

        if not self.catches_up:
            return False, []
        last = self._caught_up
        if last is not None and not self.catch_up_due():
            return last[2][0], list(last[2][1])
        now, changes = time.monotonic(), self._changes  # what this catch-up covers
        result = catchup.before_search(cast("Memory", self))
        self._caught_up = (now, changes, result) if self.catch_up_interval > 0 else None
        return result


def _about_store(exc: OSError, store_path: os.PathLike[str]) -> bool:
    """True for a file-system error on the index folder (its lock, a generation, a state file)."""
    folder = os.path.dirname(os.path.realpath(store_path))
    name = exc.filename
    if name is None:
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return os.path.dirname(os.path.realpath(os.fsdecode(name))) in (folder, os.path.dirname(os.fspath(store_path)))
