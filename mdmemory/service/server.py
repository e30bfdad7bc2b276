"""``mdmemory serve``: the app on uvicorn, the token rules, and a background indexer for retained turns.

uvicorn handles SIGTERM and SIGINT: it stops accepting connections and lets in-flight requests finish
(up to ``DRAIN_SECONDS``) before the agents' indexes are closed. A retain answers after its block is
durable; the index follows within about a second (``INDEX_EVERY_SECONDS``), and any search catches up first.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any

from mdmemory.config import Config
from mdmemory.errors import ConfigError, MdMemoryError
from mdmemory.ipc_server import IpcServer
from mdmemory.service.agents import Agent, Agents
from mdmemory.service.recallpool import RecallPool, default_size
from mdmemory.service.telemetry import Telemetry

DRAIN_SECONDS = 30
INDEX_EVERY_SECONDS = 1.0
TOKEN_ENV = "MEMORY_API_TOKEN"


def token_of(config: Config, env: Mapping[str, str]) -> str | None:
    return env.get(TOKEN_ENV) or config.service.token or None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host} without a token: anyone who can reach it could read and erase memory. "
            f"Fix: set {TOKEN_ENV} (or service.token), or listen on 127.0.0.1."
        )


class BackgroundIndexer:
    """Syncs the index of every agent that retained something since the last pass."""

    def __init__(self, agents: Agents, telemetry: Telemetry) -> None:
        self.agents = agents
        self.telemetry = telemetry
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mdmemory-service-index", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)

    def _run(self) -> None:
        import time

        while not self._stop.wait(INDEX_EVERY_SECONDS):
            for agent in self.agents.opened():
                if agent.drainer is not None and not self._stop.is_set():
                    self._drain(agent)
                if not agent.dirty or self._stop.is_set():
                    continue
                agent.dirty = False
                start = time.perf_counter()
                try:
                    with agent.lock:
                        agent.memory.sync()
                    status = "succeeded"
                except (MdMemoryError, OSError):
                    status = "failed"  # status shows it (lastError); the next retain or search tries again
                self.telemetry.op(agent.config.id, "index", status, (time.perf_counter() - start) * 1000)

    def _drain(self, agent: Agent) -> None:
        """Write what replicas without the agent's files retained and forgot into them (mdmemory.service.drain)."""
        assert agent.drainer is not None
        try:
            report = agent.drainer.run_once()
        except (MdMemoryError, OSError):
            return  # the database or the workspace is away: the next pass tries again
        if report is not None:
            agent.dirty = True
            agent.memory.changed()


def serve(
    config: Config,
    host: str | None = None,
    port: int | None = None,
    env: Mapping[str, str] | None = None,
    fingerprint: str | None = None,
    recall_workers: int | None = None,
) -> None:
    """Run until SIGTERM/SIGINT. Raises ConfigError for a non-loopback host without a token.
    ``recall_workers`` (default: ``service.recallWorkers``) processes answer recalls beside this one.

    With the ``fingerprint`` of ``config`` (mdmemory.ipc_server.load_pinned), every configured agent also
    answers the command line's ``search``/``get``/``pack`` on its socket; its errors go to stderr as JSON."""
    import uvicorn

    from mdmemory.service.app import build_app

    env = os.environ if env is None else env
    host = host or config.service.host
    port = config.service.port if port is None else port
    token = token_of(config, env)
    check_bind(host, token)
    telemetry = Telemetry()
    agents = Agents(config, env)
    indexer = BackgroundIndexer(agents, telemetry)
    workers = config.service.recall_workers if recall_workers is None else recall_workers
    pool = RecallPool(config, default_size() if workers is None else workers)
    if pool.size:
        pool.start()  # before the first request: each worker imports and reads the configuration once
    app = build_app(agents, token, telemetry, pool if pool.size else None)
    settings: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "off"}
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, timeout_graceful_shutdown=DRAIN_SECONDS, **settings)
    )
    # uvicorn drains, then raises the signal it caught again under the handler it found: a no-op here,
    # so that the indexer stops and every index is closed before the process exits (status 0).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    sockets = None
    if fingerprint is not None:
        sockets = IpcServer(config, fingerprint, config.agents, _log_error, shared_choice=agents.shared_choice)
        sockets.start()
    indexer.start()
    try:
        server.run()
    finally:
        if sockets is not None:
            sockets.stop()
        indexer.stop()
        pool.close()
        agents.close()


def _log_error(event: dict[str, Any]) -> None:
    if event.get("event") == "error":
        print(json.dumps(event, ensure_ascii=False), file=sys.stderr, flush=True)
