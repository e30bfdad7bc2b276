"""One thread for every llama.cpp computation of a loaded model.

llama.cpp's CPU backend parallelises each computation with OpenMP, whose team of worker threads belongs to
the thread that called in and spins for a while after each use. Called from many threads (a service
answers each request on a thread of a pool; a query with a time budget used to get a thread of its own),
every caller gets a team of its own, and the teams spin against each other on the same cores: a short
query took twice as long as on one thread. So a local provider runs its computations on this one thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class Runner:
    """A single worker thread, started on first use and stopped by ``close`` (a later use starts it again)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._executor: ThreadPoolExecutor | None = None
        self._ident: int | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix=self.name, initializer=self._started)
            return self._executor.submit(fn)

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the runner's thread, waiting for it (directly when already on that thread)."""
        if threading.get_ident() == self._ident:
            return fn()
        return self.submit(fn).result()

    def close(self) -> None:
        """Stop the thread once its current work ends (not waiting for it: a computation cannot be cut)."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    def _started(self) -> None:
        self._ident = threading.get_ident()
