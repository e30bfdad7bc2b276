"""Time budgets for embedding calls: a deadline carried by the calling thread's context.

``with until(deadline):`` sets a limit (a ``time.monotonic()`` value) for every embedding call made inside
the block on this thread; nested blocks keep the earlier deadline. The retry loop in ``base`` never starts an
attempt or a backoff sleep that would end past it, and a provider that can cut its own requests (``remote``)
reads ``time_left()`` to stop each request by it. Threads started inside the block do not inherit it, so a
background sync a search starts is not bound by the search's budget.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("mdmemory_embedding_deadline", default=None)


def current() -> float | None:
    """The deadline in force on this thread (``time.monotonic()`` value), or None."""
    return _DEADLINE.get()


def time_left() -> float | None:
    """Seconds until the deadline in force (may be negative), or None without one."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline - time.monotonic()


@contextmanager
def until(deadline: float | None) -> Iterator[None]:
    """Bound every embedding call in the block by ``deadline``; an earlier deadline already in force wins."""
    current_deadline = _DEADLINE.get()
    if deadline is None or (current_deadline is not None and current_deadline <= deadline):
        yield
        return
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)
