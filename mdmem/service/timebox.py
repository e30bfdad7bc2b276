"""A recall's time budget (``service.recallBudgetMs``) and its client: what a recall may still wait for.

The proxy waits a fixed time for a recall (cllama: 300 ms) and then hangs up and sends the turn without
memory. An answer after that helps nobody, and computing it takes a core from the recalls that can still
make it: when turns come faster than they are answered, such work piles up without bound. So every step of
a recall that may wait is bounded by a share of its budget, counted from the moment the request came in:

- catching the index up with the files (its text: the vectors follow in the background) until
  ``CATCH_UP_SHARE``; past it, or when the agent's lock is not free by then, the recall answers from what is
  indexed (a retain indexes its turn's text before it answers, so a retained turn is there);
- waiting for an idle recall worker until ``START_SHARE``; past it the service's own process answers, by
  keywords alone (a keyword search costs milliseconds; the query embedding is what takes a core);
- embedding the query until ``EMBED_SHARE``; past it the search answers from keywords (``keyword`` mode);
- the search and the pack take the rest.

A recall whose whole budget is spent before it could start, or whose client went away while it waited, is
*dropped*: not computed, answered 503 (``timed_out``) or not at all (``abandoned``), and telemetry says
which, never ``succeeded``. The client is watched while the recall waits (``race_client``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TypeVar

from starlette.requests import Request

from mdmem.service.edge import HttpError

CATCH_UP_SHARE = 0.4
START_SHARE = 0.7
EMBED_SHARE = 0.8
ABANDONED_STATUS = 499  # nginx's "client closed request": the answer that nobody reads (telemetry only)

T = TypeVar("T")


class Dropped(HttpError):
    """A recall that is not computed: ``outcome`` is ``timed_out`` (503) or ``abandoned`` (the client left)."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(503 if outcome == "timed_out" else ABANDONED_STATUS, message)
        self.outcome = outcome


@dataclass
class Timebox:
    """One recall's budget: ``budget`` seconds from ``start`` (``time.monotonic()`` values)."""

    start: float
    budget: float
    gone: threading.Event = field(default_factory=threading.Event)  # the client went away

    def at(self, share: float) -> float:
        """The moment ``share`` of the budget is spent."""
        return self.start + self.budget * share

    def check(self, share: float = 1.0) -> None:
        """Raise ``Dropped`` when the client left or ``share`` of the budget is spent: too late to start."""
        if self.gone.is_set():
            raise Dropped("abandoned", "the client went away before the recall was computed")
        if time.monotonic() >= self.at(share):
            raise self.late()

    def late(self) -> Dropped:
        ms = self.budget * 1000
        return Dropped(
            "timed_out",
            f"recall not started within its budget of {ms:.0f} ms (service.recallBudgetMs): the service is busy. "
            "Fix: retry; if it keeps happening, add cores or recall workers, or raise service.recallBudgetMs "
            "(below the proxy's recall timeout)",
        )


async def until_gone(request: Request) -> None:
    """Return when the client has closed its connection (the body has been read: nothing else comes)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def race_client(request: Request, work: Awaitable[T], box: Timebox) -> T:
    """``work``'s result, unless the client goes away first: then ``work`` is cancelled (a thread running
    part of it sees ``box.gone`` at its next check) and ``Dropped("abandoned")`` is raised."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(until_gone(request))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this request cancelled (the server stops): so is its work
        task.cancel()
        raise
    finally:
        watch.cancel()
    if task.done():
        return task.result()
    box.gone.set()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task  # a worker's reply is still read (the pool shields it); a thread's result is dropped
    raise Dropped("abandoned", "the client went away before the recall was answered")
