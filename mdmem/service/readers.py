"""Recalls of one agent side by side: a few extra read connections to its index.

The agent's own ``Memory`` writes (retained turns, forget, catching up with hand edits) under the agent's
lock; a recall only reads, so it borrows one of these readers instead and does not wait behind another
recall. SQLite (WAL) lets readers run while the writer commits, and releases the GIL while it works,
so two recalls on two cores overlap; a local model runs each embedding on its own thread, one at a time.

A reader never catches up with the files itself (``Memory.catches_up``): the caller asks the agent's
``Memory`` first (``catch_up``), at most every ``CATCH_UP_SECONDS`` or at once after a retain or forget.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Iterator

from mdmem.memory import Memory

MAX_READERS = 8


def reader_count() -> int:
    """One reader per core (at least 2): more only queue for the cores and the GIL."""
    return max(2, min(MAX_READERS, os.cpu_count() or 2))


class Readers:
    """Up to ``size`` read-only ``Memory`` objects of ``primary``'s agent, opened on first use."""

    def __init__(self, primary: Memory, size: int | None = None) -> None:
        self.primary = primary
        self.size = size or reader_count()
        self._idle: queue.SimpleQueue[Memory] = queue.SimpleQueue()
        self._all: list[Memory] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextlib.contextmanager
    def reader(self) -> Iterator[Memory]:
        """A reader for one recall: an idle one, a new one while fewer than ``size`` exist, else the next
        one given back. It uses the provider ``primary`` uses now (after a fallback took over, the new one)."""
        mem = self._take()
        try:
            mem.follow(self.primary)
            yield mem
        finally:
            self._idle.put(mem)

    def _take(self) -> Memory:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self._closed:
                raise RuntimeError("the service is shutting down")
            if len(self._all) < self.size:
                p = self.primary
                mem = Memory(p.agent, p.config, choice=p.choice, env=p.env)
                mem.catches_up = False
                self._all.append(mem)
                return mem
        return self._idle.get()

    def close(self) -> None:
        """Close every reader's connection (the provider belongs to ``primary``: it is not closed here)."""
        with self._lock:
            self._closed = True
            readers, self._all = self._all, []
        for mem in readers:
            mem.close(provider=False)
