"""One open agent of the service: its ``Memory``, its session log, its locks, and how its index keeps up.

Its text is brought up to date with the files on demand (``catch_up``: before a recall, bounded by the
recall's budget, and by each retain); its vectors by the background indexer (``index_vectors``, on a
connection of its own, without the agent's lock, so that recalls and retains go on meanwhile). Opened and
closed by mdmem.service.agents.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mdmem.config.load import AgentConfig
from mdmem.engine.drain import Drainer
from mdmem.files.sessionlog import SessionLog
from mdmem.memory import Memory
from mdmem.providers import deadline
from mdmem.service.readers import Readers
from mdmem.service.remote import RemoteLog
from mdmem.service.vectorwait import VectorTickets
from mdmem.util.errors import EmbeddingsPending, WorkspaceError


@dataclass
class Agent:
    config: AgentConfig
    memory: Memory
    log: SessionLog | RemoteLog  # LocalLog (a SessionLog) for an agent in the shared store whose files are here
    lock: threading.Lock  # around the writes of ``memory``: sync, forget, catching up
    readers: Readers  # what recalls search with, side by side
    dirty: bool = field(default=False)
    drainer: Drainer | None = None  # writes what replicas without the files retained (shared store, files here)
    users: int = field(default=0)  # requests and background passes holding it (``Agents.use``): never closed then
    embedder: Memory | None = None  # the background indexer's own connection, for vectors (``index_vectors``)
    vectors: VectorTickets = field(default_factory=VectorTickets)  # retains waiting for their vectors

    def catch_up(self, until: float | None = None) -> bool:
        """Bring the index's text up to date with the files (their vectors follow in the background,
        ``index_vectors``): at once after a retain or forget through the service (``Memory.changed``), else at
        most every ``CATCH_UP_SECONDS`` and only when no catch-up is running already (the one that is covers
        it). With ``until`` (a ``time.monotonic()`` value: a recall's budget) it waits for the agent's lock and
        indexes only until then; False when it could not catch up in time (what is indexed answers)."""
        mem = self.memory
        if not mem.catch_up_due():
            return True
        if until is not None and time.monotonic() >= until:
            return False
        if mem.change_announced:
            if not self.lock.acquire(timeout=-1 if until is None else until - time.monotonic()):
                return False
        elif not self.lock.acquire(blocking=False):
            return True  # a catch-up is running: it covers this one
        try:
            with deadline.until(until):
                mem.catch_up()
        finally:
            self.lock.release()
        return True

    def open_index(self, should_stop: Callable[[], bool] | None = None) -> None:
        """What the first recall would otherwise do, done now: the model loaded, the index opened and brought
        up to date with the files, text and vectors (as ``mdmem index``; vectors a failing provider could
        not make are left to the background), the files' state noted so that the next catch-up finds
        nothing. ``should_stop`` stops it between files (the service is shutting down)."""
        mem = self.memory
        with self.lock:
            mem.should_stop = should_stop
            try:
                mem.sync()
            except EmbeddingsPending:
                self.dirty = True  # the text is indexed; the background indexer embeds the rest
            except WorkspaceError:
                pass  # a folder is missing (an unmounted volume): recalls answer from the index meanwhile
            finally:
                mem.should_stop = None
            mem.catch_up()

    def index_vectors(self) -> int:
        """Embed what text-only catch-ups left pending, on a connection of its own and without the agent's
        lock (recalls and retains go on meanwhile); how many chunks still wait. For the background indexer."""
        if self.embedder is None:
            mem = self.memory
            self.embedder = Memory(mem.agent, mem.config, choice=mem.choice, env=mem.env)
            self.embedder.catches_up = False
        self.embedder.follow(self.memory)
        return self.embedder.embed_waiting()

    def vectors_waiting(self) -> bool:
        """Whether chunks may wait for their vectors (True while the agent's lock is taken: cannot tell)."""
        if self.embedder is not None:  # the background indexer's own connection: no lock needed
            return self.embedder.store.pending_count() > 0
        if not self.lock.acquire(blocking=False):
            return True
        try:
            return self.memory.store.pending_count() > 0
        finally:
            self.lock.release()
