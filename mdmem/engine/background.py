"""Background work, one way: a thread that runs a job when it is due, with one backoff policy.

``BackgroundWork`` runs ``job`` on a thread of its own when poked (debounced), when asked (``run_soon``),
every ``interval``, and after a failure when ``Backoff`` says; ``stop()`` is idempotent and joins; its
``state`` (runs, last run, last error) is what status and the watch state file show; ``on_error`` gets
every failure with the delay before the next try. With ``patience`` it runs the job until it succeeds (or
the patience is spent) and ends. ``settle`` is the same in the foreground (the detached index worker).

Its users: the watch daemon's sync (``SyncService`` below), the service's background indexer
(mdmem.service.server), the catch-up a search leaves (mdmem.engine.catchup), the drain of retained
entries into the files (mdmem.engine.drain).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from mdmem.util.errors import EmbeddingsPending, LockError, StoreError, SyncCancelled

BUSY_SECONDS = 1.0  # another writer holds the index: try again this soon, whatever the failures before


@dataclass(frozen=True)
class Backoff:
    """The one retry policy: after the n-th failure in a row wait ``first * 2**(n-1)`` seconds, at most
    ``most``; a store fault (full disk, read-only index) at most ``store_most`` (freed space is used soon);
    a busy writer (``LockError``) ``BUSY_SECONDS``, without counting as a failure."""

    first: float = 2.0
    most: float = 300.0
    store_most: float = 30.0

    def after(self, failures: int, exc: BaseException | None = None) -> float:
        if isinstance(exc, LockError):
            return BUSY_SECONDS
        cap = self.store_most if isinstance(exc, StoreError) else self.most
        return min(cap, self.first * 2 ** (max(1, failures) - 1))


WORKER_BACKOFF = Backoff(most=60.0)  # a run that waits for the provider within a patience (worker, catch-up)


@dataclass
class WorkState:
    """What a ``BackgroundWork`` knows about its last runs (status and the watch daemon's log read it)."""

    runs: int = 0
    last_run_at: float | None = None
    last_run_seconds: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    failures: int = 0  # in a row; 0 after a full success


@dataclass(frozen=True)
class Partial:
    """A job's answer for a run that did part of its work (a text-only sync while embeddings fail): it counts
    as a run, but the failure before stays on record, the backoff is kept, and the job runs again at ``at``."""

    result: Any
    at: float


class BackgroundWork:
    """Runs ``job`` on one thread when due (see the module docstring)."""

    def __init__(
        self,
        job: Callable[[], Any],
        *,
        name: str,
        debounce: float = 0.0,
        interval: float = 0.0,
        backoff: Backoff | None = None,
        patience: float | None = None,
        retry: tuple[type[BaseException], ...] = (Exception,),
        poke_in_backoff: Callable[[BaseException], bool] | None = None,
        on_done: Callable[[Any], None] | None = None,
        on_error: Callable[[BaseException, float], None] | None = None,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        self.job = job
        self.debounce = max(0.0, debounce)
        self.interval = max(0.0, interval)
        self.backoff = backoff or Backoff()
        self.patience = patience  # set: run until done (or out of patience), then end
        self.retry = retry  # with patience: the failures worth another try (others end the work)
        self.poke_in_backoff = poke_in_backoff  # a poke after such a failure runs the job at once anyway
        self.on_done, self.on_error, self.on_exit = on_done, on_error, on_exit
        self.state = WorkState()
        self._cond = threading.Condition()
        self._due: float | None = time.monotonic() if patience is not None else None
        self._next_interval = time.monotonic() + self.interval if self.interval else None
        self._stopping = False
        self._last_exc: BaseException | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # -- control -------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Something changed: (re)start the debounce timer so a burst of pokes ends in one run (during a
        backoff, only when ``poke_in_backoff`` says so for the failure: else the retry is soon enough)."""
        with self._cond:
            last = self._last_exc
            if self.state.failures == 0 or (last is not None and self.poke_in_backoff and self.poke_in_backoff(last)):
                self._due = time.monotonic() + self.debounce
            self._cond.notify()

    def run_soon(self) -> None:
        """Run as soon as possible (the first run, a session start, a wake-up)."""
        self.run_at(time.monotonic())

    def run_at(self, when: float) -> None:
        """Run at ``when`` (``time.monotonic()``) at the latest."""
        with self._cond:
            self._due = when if self._due is None else min(self._due, when)
            self._cond.notify()

    @property
    def stopping(self) -> bool:
        """True once ``stop()`` was called (a job checks it between steps)."""
        return self._stopping

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no run is due or running (tests and benchmarks)."""
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
        """Stop after the current run (a job that checks ``stopping`` sooner); idempotent; joins the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    # -- the loop ------------------------------------------------------------------------------------
    def _run(self) -> None:
        give_up = None if self.patience is None else time.monotonic() + self.patience
        try:
            while self._wait_until_due():
                if self._run_once(give_up):
                    return
        finally:
            if self.on_exit is not None:
                self.on_exit()

    def _wait_until_due(self) -> bool:
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                wake = min(t for t in (self._due, self._next_interval, now + 3600) if t is not None)
                if wake <= now:
                    break
                self._cond.wait(wake - now)
            if self._stopping:
                return False
            self._due = None
            if self._next_interval is not None and self._next_interval <= time.monotonic():
                self._next_interval = time.monotonic() + self.interval
            self._idle.clear()
            return True

    def _run_once(self, give_up: float | None) -> bool:
        """One run; True when the work is over (a run with patience that succeeded or may not try again)."""
        try:
            return self._attempt(give_up)
        finally:
            self._idle.set()

    def _attempt(self, give_up: float | None) -> bool:
        started = time.monotonic()
        try:
            result = self.job()
        except SyncCancelled:  # the job saw ``stopping`` (or its owner's stop flag) between two steps
            return self._stopping or self.patience is not None
        except Exception as exc:  # noqa: BLE001 - the loop outlives any single failure; it is reported
            return self._failed(exc, give_up)
        st = self.state
        st.runs += 1
        st.last_run_at = time.time()
        st.last_run_seconds = time.monotonic() - started
        if isinstance(result, Partial):
            self.run_at(result.at)
            result = result.result
        else:
            st.failures, st.last_error, self._last_exc = 0, None, None
        if self.on_done is not None:
            self.on_done(result)
        return self.patience is not None

    def _failed(self, exc: Exception, give_up: float | None) -> bool:
        st = self.state
        if not isinstance(exc, LockError):
            st.failures += 1
        delay = self.backoff.after(st.failures, exc)
        st.last_error, st.last_error_at, self._last_exc = str(exc), time.time(), exc
        over = give_up is not None and (not isinstance(exc, self.retry) or time.monotonic() + delay > give_up)
        if self.on_error is not None:
            self.on_error(exc, delay)
        if over:
            return True
        self.run_at(time.monotonic() + delay)
        return False


def settle(
    sync: Callable[[], dict[str, Any]],
    patience: float,
    pause: Callable[[float], bool],
    backoff: Backoff = WORKER_BACKOFF,
) -> dict[str, Any]:
    """``sync()`` until it succeeds, in the foreground, retrying a provider outage (chunks left pending) or a
    busy writer with ``backoff`` for up to ``patience`` seconds; ``pause(seconds)`` returns True to give up."""
    give_up = time.monotonic() + patience
    failures = 0
    while True:
        try:
            return sync()
        except (EmbeddingsPending, LockError):  # a busy writer here is one long rebuild: backed off alike
            failures += 1
            delay = backoff.after(failures)
            if time.monotonic() + delay > give_up or pause(delay):
                raise


class Syncable(Protocol):
    """What the watch daemon syncs (a ``Memory``): ``sync(embed=)``, a stop flag it reads between files, ``close``."""

    should_stop: Callable[[], bool] | None

    def sync(self, *, embed: bool = True) -> dict[str, Any]: ...

    def close(self) -> None: ...


class SyncService:
    """The watch daemon's sync of one agent: a ``BackgroundWork`` whose job is ``memory.sync``, run when files
    change (debounced), every ``interval_seconds`` (a reconcile), or on request. While embeddings fail, file
    changes still get their text indexed at once (keyword search stays fresh); the embedding is tried again
    when the backoff says. The service owns its ``memory`` (its own connection), so searches on other
    connections keep reading the last committed index while a sync writes."""

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
        self.on_error = on_error
        self._embed_retry_at: float | None = None  # while embeddings fail: when to try them again
        self.work = BackgroundWork(
            self._sync,
            name=name,
            debounce=debounce_seconds,
            interval=interval_seconds,
            poke_in_backoff=lambda exc: isinstance(exc, EmbeddingsPending),
            on_done=on_report,
            on_error=self._failed,
        )
        self.state = self.work.state
        self.memory.should_stop = lambda: self.work.stopping

    def start(self) -> None:
        self.work.start()

    def mark_dirty(self, path: str | None = None) -> None:
        """A file changed: a sync after the debounce (a burst of events ends in one sync)."""
        self.work.poke()

    def request_sync(self) -> None:
        """Sync as soon as possible (initial sync, session start)."""
        self.work.run_soon()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no sync is due or running (used by tests and benchmarks)."""
        return self.work.wait_idle(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current file's transaction; idempotent; joins the thread; closes the memory."""
        self.work.stop(timeout)
        self.memory.close()

    def is_alive(self) -> bool:
        return self.work.is_alive()

    def _sync(self) -> Any:
        retry = self._embed_retry_at
        embed = retry is None or time.monotonic() >= retry  # before the retry is due, index text only
        report = self.memory.sync(embed=embed)
        if not embed:  # a text-only sync during an embedding outage: the retry stays scheduled
            return Partial(report, retry) if retry is not None else report
        self._embed_retry_at = None
        return report

    def _failed(self, exc: BaseException, delay: float) -> None:
        if isinstance(exc, EmbeddingsPending):  # the text is indexed; embed again after the backoff
            self._embed_retry_at = time.monotonic() + delay
        if self.on_error is not None:
            self.on_error(exc, delay)
