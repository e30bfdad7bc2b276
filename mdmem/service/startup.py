"""Ready before it answers recalls: ``mdmem serve`` opens its agents before it says it is ready.

A recall has a budget of a few hundred milliseconds (mdmem.service.timebox), and an agent's first one
used to pay for everything opened lazily: loading the embedding model, opening the index (and sqlite-vec),
indexing a fresh workspace, a recall worker's imports, its own model and its vectors in memory — 0.5 to 3 s.
So the service binds its port at once (a retain that comes meanwhile is taken: no turn is lost while it
starts) and, on a thread of its own:

1. opens each agent of ``startup_ids`` — every configured agent, then the ``service.autoAgents`` agents that
   exist on disk, most recently used first, up to ``service.maxOpenAgents`` — and brings its index up to
   date with its files, text and vectors (``Agent.open_index``: a fresh workspace is indexed as by
   ``mdmem index``);
2. starts the recall workers, each of which opens the same agents and answers one query for each before it
   says it is ready (a replacement worker does the same before it takes a recall);
3. without workers, answers one query per agent in this process;
4. starts the background indexer, and is ready.

Until then ``/healthz`` answers 503 ``{"ok": false, "ready": false, "starting": {"opened", "of", "seconds"}}``
and a recall 503 (the proxy sends the turn without memory, as it would with nothing listening). An agent
that cannot be opened does not hold the start up: ``/healthz`` names it under ``degraded``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mdmem.config.load import Config
from mdmem.service.agents import Agents
from mdmem.service.contract import check_agent_id
from mdmem.service.edge import HttpError
from mdmem.service.recall import recall, warm_body
from mdmem.service.recallpool import RecallPool, cores
from mdmem.util.errors import InvalidArgumentError

STOP_SECONDS = 60.0  # how long a stop waits for the agent being opened (a sync stops between files)


class Starting(HttpError):
    """A recall before the service is ready (HTTP 503)."""


def startup_ids(config: Config, max_open: int, served: frozenset[str] | None = None) -> list[str]:
    """The agents a start opens: every configured one, then the ``service.autoAgents`` agents that exist
    under ``{home}/agents/`` (most recently used first), at most ``max_open`` in all; with ``served``
    (``serve --agent``) only those of them it names."""
    ids = [a.id for a in config.agents]
    if config.service.auto_agents:
        found: list[tuple[float, str]] = []
        with contextlib.suppress(OSError):
            for path in (config.home / "agents").iterdir():
                with contextlib.suppress(OSError, InvalidArgumentError):
                    if path.is_dir() and path.name not in ids and check_agent_id(path.name):
                        found.append((_last_used(path), path.name))
        ids += [name for _, name in sorted(found, reverse=True)]
    if served is not None:
        ids = [agent_id for agent_id in ids if agent_id in served]
    return ids[:max_open]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _last_used(workspace: Path) -> float:
    sessions = workspace / "sessions"
    return max(workspace.stat().st_mtime, sessions.stat().st_mtime if sessions.is_dir() else 0.0)


class Startup:
    """Opens ``agents`` and starts ``pool``, then calls ``then`` and is ready (see the module docstring)."""

    def __init__(self, agents: Agents, pool: RecallPool, then: Callable[[], None]) -> None:
        self.agents = agents
        self.pool = pool
        self.then = then
        self.ids = startup_ids(agents.config, agents.max_open, agents.served)
        self.opened = 0
        self.ready = threading.Event()
        self._started = time.monotonic()
        self._took: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mdmemory-service-start", daemon=True)

    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """Stop opening (between files of the agent being indexed) and wait for it to end."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(STOP_SECONDS)

    def state(self) -> dict[str, Any]:
        """What ``/healthz`` says of the start: how many agents are open of how many, and for how long."""
        took = self._took if self._took is not None else time.monotonic() - self._started
        return {"opened": self.opened, "of": len(self.ids), "seconds": round(took, 1)}

    def check(self) -> None:
        """Raise ``Starting`` (503) while the service is not ready."""
        if not self.ready.is_set():
            raise Starting(
                503,
                f"the service is starting: {self.opened} of {len(self.ids)} agents opened; GET /healthz says when "
                "it is ready. Fix: retry shortly",
            )

    def _run(self) -> None:
        for agent_id in self.ids:
            if self._stop.is_set():
                return
            try:
                with self.agents.use(agent_id) as agent:
                    agent.open_index(self._stop.is_set)
            except Exception as exc:  # noqa: BLE001 - reported by /healthz; one agent must not hold the start up
                if self._stop.is_set():
                    return
                self.agents.failed(agent_id, exc)
            self.opened += 1
        if self._stop.is_set():
            return
        if self.pool.size:
            self.pool.warm = list(self.ids)
            self.pool.start()  # each worker opens the agents and answers a query for each before it is ready
        if not self.pool.alive:
            self._warm_here()
        else:  # from now on this process's indexing leaves the cores the workers do not need to them
            self.agents.limit_threads(max(1, cores() - self.pool.alive))
        self.then()
        self._took = time.monotonic() - self._started
        self.ready.set()
        print(
            f"mdmem serve: ready: {_count(self.opened, 'agent')} opened and queried once, "
            f"{_count(self.pool.alive, 'recall worker')}, in {self._took:.1f} s",
            file=sys.stderr,
            flush=True,
        )

    def _warm_here(self) -> None:
        """One recall per agent on this process's read connections (the path without recall workers)."""
        for agent_id in self.ids:
            if self._stop.is_set():
                return
            with contextlib.suppress(Exception), self.agents.use(agent_id) as agent, agent.readers.reader() as r:
                recall(r, warm_body(agent_id))
