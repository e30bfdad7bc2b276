"""A retain that waits, a little, for its turn's vectors.

A recall never waits for vectors: a turn is found by its keywords as soon as the retain has indexed its
text. But a question that shares no word with the turn (a paraphrase) needs the turn's vector, so a retain
answers once the background indexer has embedded it, if that happens within the retain's time (the proxy
gives a retain 2 s: mdmem.service.app ``RETAIN_SECONDS``), else at that time: the vectors then follow.

Each retain takes a ticket; the indexer, after a pass that left nothing pending, says up to which ticket
the vectors are in. Waiting is asynchronous (a future on the event loop), so retains that wait hold no
thread of the pool the requests share.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class VectorTickets:
    """One agent's retains and how many of them have their vectors (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.issued = 0
        self.done = 0
        self._waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def take(self) -> int:
        """A ticket for a retain whose text is written (call before the indexer may start on it)."""
        with self._lock:
            self.issued += 1
            return self.issued

    def finished(self, upto: int) -> None:
        """The vectors of every retain up to ticket ``upto`` are in (the indexer read ``issued`` before its pass)."""
        with self._lock:
            self.done = max(self.done, upto)
            ready = [w for w in self._waiters if w[0] <= self.done]
            self._waiters = [w for w in self._waiters if w[0] > self.done and not w[2].done()]
        for _, loop, future in ready:
            with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits any more
                loop.call_soon_threadsafe(_resolve, future)

    async def wait(self, ticket: int, seconds: float) -> bool:
        """Wait up to ``seconds`` for ticket ``ticket``'s vectors; whether they are in."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.done >= ticket:
                return True
            future: asyncio.Future[None] = loop.create_future()
            self._waiters = [w for w in self._waiters if not w[2].done()]
            self._waiters.append((ticket, loop, future))
        try:
            await asyncio.wait_for(future, max(0.0, seconds))
        except TimeoutError:
            return False
        return True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
