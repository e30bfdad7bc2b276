"""Background sync for one agent: debounced dirty marks, periodic reconcile, retry with backoff.

The service owns its own ``Memory`` (its own SQLite connection), so searches on other connections keep
reading the last committed index while a sync writes. It never embeds on the caller's thread: callers
only mark the index dirty or request a sync.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from mdmemory.util.errors import EmbeddingsPending, LockError, ProviderError, StoreError, SyncCancelled

MAX_BACKOFF_SECONDS = 300.0
FIRST_BACKOFF_SECONDS = 2.0
MAX_STORE_BACKOFF_SECONDS = (
    30.0  # a full disk or read-only index is retried at least this often: freed space is used soon
)


@dataclass
class SyncState:
    """What the service knows about its last runs (read by status and the daemon's log)."""

    syncs: int = 0
    last_sync_at: float | None = None
    last_sync_seconds: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    pending: set[str] = field(default_factory=set)


class Syncable(Protocol):
    """What the service syncs (a ``Memory``): ``sync(embed=)``, a stop flag it reads between files, ``close``."""

    should_stop: Callable[[], bool] | None

    def sync(self, *, embed: bool = True) -> dict[str, Any]: ...

    def close(self) -> None: ...


class SyncService:
    """Runs ``Memory.sync`` on a background thread when files change, on an interval, or on request."""

    def __init__(
        self,
        memory: Syncable,
        *,
        debounce_seconds: float,
        interval_seconds: float = 0.0,
        on_report: Callable[[dict[str, Any]], None] | None = None,
        on_error: Callable[[BaseException, float], None] | None = None,
        name: str = "mdmemory-sync",
    ) -> None:
        self.memory = memory
        self.debounce = max(0.0, debounce_seconds)
        self.interval = max(0.0, interval_seconds)
        self.on_report = on_report
        self.on_error = on_error
        self.state = SyncState()
        self._cond = threading.Condition()
        self._due: float | None = None
        self._next_reconcile = time.monotonic() + self.interval if self.interval else None
        self._stopping = False
        self._backoff = 0.0
        # While embeddings fail: when to try them again. File events meanwhile still index text at once.
        self._embed_retry_at: float | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._idle = threading.Event()
        self._idle.set()
        self.memory.should_stop = self._stop_requested

    # -- control -------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def mark_dirty(self, path: str | None = None) -> None:
        """A file changed: (re)start the debounce timer so a burst of events ends in one sync."""
        with self._cond:
            if path:
                self.state.pending.add(path)
            if self._backoff == 0.0 or self._embed_retry_at is not None:
                self._due = time.monotonic() + self.debounce
            self._cond.notify()

    def request_sync(self) -> None:
        """Sync as soon as possible (initial sync, session start)."""
        with self._cond:
            self._due = time.monotonic()
            self._cond.notify()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no sync is due or running (used by tests and benchmarks)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._cond:
                quiet = self._due is None
            if quiet and self._idle.wait(0 if deadline is None else max(0.0, deadline - time.monotonic())):
                with self._cond:
                    if self._due is None:
                        return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current file's transaction; idempotent; joins the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.memory.close()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _stop_requested(self) -> bool:
        return self._stopping

    # -- the loop ------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    now = time.monotonic()
                    wake = min(t for t in (self._due, self._next_reconcile, now + 3600) if t is not None)
                    if wake <= now:
                        break
                    self._cond.wait(wake - now)
                if self._stopping:
                    return
                self._due = None
                if self._next_reconcile is not None and self._next_reconcile <= time.monotonic():
                    self._next_reconcile = time.monotonic() + self.interval
                pending, self.state.pending = self.state.pending, set()
                self._idle.clear()
            try:
                self._sync_once(pending)
            finally:
                self._idle.set()

    def _sync_once(self, pending: set[str]) -> None:
        started = time.monotonic()
        retry = self._embed_retry_at
        embed = retry is None or time.monotonic() >= retry  # before the retry is due, index text only
        try:
            report = self.memory.sync(embed=embed)
        except SyncCancelled:
            return
        except LockError as exc:  # another writer is busy: try again shortly
            self._retry_later(exc, 1.0, pending)
            return
        except EmbeddingsPending as exc:  # the text is indexed; embed again with backoff
            self._backoff = min(MAX_BACKOFF_SECONDS, max(FIRST_BACKOFF_SECONDS, self._backoff * 2))
            self._embed_retry_at = time.monotonic() + self._backoff
            self._retry_later(exc, self._backoff, set())
            return
        except ProviderError as exc:  # embeddings down: keep the last index, retry with backoff
            self._backoff = min(MAX_BACKOFF_SECONDS, max(FIRST_BACKOFF_SECONDS, self._backoff * 2))
            self._retry_later(exc, self._backoff, pending)
            return
        except StoreError as exc:  # disk full, read-only or corrupt beyond repair: the last index keeps answering
            self._backoff = min(MAX_STORE_BACKOFF_SECONDS, max(FIRST_BACKOFF_SECONDS, self._backoff * 2))
            self._retry_later(exc, self._backoff, pending)
            return
        except Exception as exc:  # noqa: BLE001 - the loop must outlive any single failure; it is reported
            self._backoff = min(MAX_BACKOFF_SECONDS, max(FIRST_BACKOFF_SECONDS, self._backoff * 2))
            self._retry_later(exc, self._backoff, pending)
            return
        if not embed:  # a text-only sync during an embedding outage: the retry stays scheduled
            with self._cond:
                self._due = retry if self._due is None or retry is None else min(self._due, retry)
        else:
            self._backoff = 0.0
            self._embed_retry_at = None
        self.state.syncs += 1
        self.state.last_sync_at = time.time()
        self.state.last_sync_seconds = time.monotonic() - started
        if embed:
            self.state.last_error = None
        if self.on_report:
            self.on_report(report)

    def _retry_later(self, exc: BaseException, delay: float, pending: set[str]) -> None:
        self.state.last_error = str(exc)
        self.state.last_error_at = time.time()
        with self._cond:
            self.state.pending |= pending
            due = time.monotonic() + delay
            self._due = due if self._due is None else min(self._due, due)
        if self.on_error:
            self.on_error(exc, delay)
