"""``mdmem serve``: the app on uvicorn within its limits, and a background indexer for retained turns.

The port is bound at once; recalls are answered once every agent is open (mdmem.service.startup).
uvicorn handles SIGTERM and SIGINT: it stops accepting connections and lets in-flight requests finish
(up to ``DRAIN_SECONDS``) before the agents' indexes are closed. A retain answers after its block is
durable and its text indexed; its vectors follow within about a second (``INDEX_EVERY_SECONDS``), on the
background indexer's own connection, and until then recalls find the turn by its keywords.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from mdmem.config.load import AgentConfig, Config
from mdmem.engine.background import WORKER_BACKOFF as RETRY
from mdmem.engine.background import BackgroundWork
from mdmem.engine.lifecycle_schedule import Schedule
from mdmem.runtime.ipc_server import CommandLine, IpcServer
from mdmem.service import auth, budget
from mdmem.service.agents import Agent, Agents
from mdmem.service.contract import check_agent_id
from mdmem.service.readers import reader_count
from mdmem.service.recallpool import RecallPool, default_size
from mdmem.service.startup import Startup
from mdmem.service.telemetry import Telemetry
from mdmem.util.errors import ConfigError, InvalidArgumentError, MdMemoryError

DRAIN_SECONDS = 30
INDEX_EVERY_SECONDS = 1.0
KEEP_ALIVE_SECONDS = 5  # an idle connection between requests is closed after this (uvicorn's default)


class BackgroundIndexer:
    """Indexes what the requests left to the background, for every open agent: the text of files a recall's
    catch-up did not reach in its budget, and the vectors of every chunk indexed by text only. One
    ``BackgroundWork`` makes a pass every ``INDEX_EVERY_SECONDS``, or at once when woken; an agent whose pass
    failed (the provider is down) is passed over until the backoff (``RETRY``) says to try it again. It also
    applies each agent's lifecycle when ``lifecycle.schedule`` says so."""

    def __init__(self, agents: Agents, telemetry: Telemetry) -> None:
        self.agents = agents
        self.telemetry = telemetry
        self.work = BackgroundWork(self._run, name="mdmemory-service-index", interval=INDEX_EVERY_SECONDS)
        self._failures: dict[str, int] = {}  # agent id -> failed passes in a row
        self._retry_at: dict[str, float] = {}  # agent id -> no pass before this (``time.monotonic()``)
        self._schedules: dict[str, Schedule] = {}  # agent id -> its ``lifecycle.schedule``

    def start(self) -> None:
        self.work.start()

    def wake(self) -> None:
        """Make a pass now (a retain waits for its vectors), not at the next ``INDEX_EVERY_SECONDS``."""
        self.work.run_soon()

    def stop(self) -> None:
        self.work.stop(60)

    def _run(self) -> None:
        for agent_id in self.agents.opened():
            agent = self.agents.held(agent_id)  # held: not closed to make room while it is indexed
            if agent is None:
                continue
            try:
                self._pass(agent)
                self._lifecycle(agent)
            finally:
                self.agents.release(agent)

    def _pass(self, agent: Agent) -> None:
        if agent.drainer is not None and not self.work.stopping:
            self._drain(agent)
        now = time.monotonic()
        if self.work.stopping or now < self._retry_at.get(agent.config.id, 0.0):
            return
        upto = agent.vectors.issued  # the retains this pass covers (each announced its change before)
        try:
            due = agent.dirty or agent.memory.change_announced or agent.vectors_waiting()
        except (MdMemoryError, OSError):
            due = True  # its index cannot be read: the pass below says so
        if not due:
            agent.vectors.finished(upto)  # all indexed and embedded
            return
        agent.dirty = False
        start = time.perf_counter()
        try:
            agent.catch_up()  # text the requests' catch-ups left (they are bounded by a recall's budget)
            if agent.index_vectors() == 0:
                agent.vectors.finished(upto)  # retains waiting for them answer now
            status = "succeeded"
            self._failures.pop(agent.config.id, None)
        except (MdMemoryError, OSError):
            status = "failed"  # status shows it (lastError); tried again after a pause
            failures = self._failures[agent.config.id] = self._failures.get(agent.config.id, 0) + 1
            pause = RETRY.after(failures)
            self._retry_at[agent.config.id] = now + pause
        self.telemetry.op(agent.config.id, "index", status, (time.perf_counter() - start) * 1000)

    def _lifecycle(self, agent: Agent) -> None:
        """``lifecycle apply`` when the agent's ``lifecycle.schedule`` says it is due (mdmem.engine.lifecycle_schedule),
        for an agent whose files are here, under its lock like every write of its ``Memory``: recalls meanwhile
        answer from the index (their catch-up gives up at their budget). One event on stderr, one telemetry op."""
        if self.work.stopping or not agent.config.files_here:
            return
        schedule = self._schedules.get(agent.config.id)
        if schedule is None:
            schedule = self._schedules[agent.config.id] = Schedule(agent.config)

        def apply() -> dict[str, Any]:
            with agent.lock:
                done = agent.memory.lifecycle("apply")
            if done["moved"]:
                agent.dirty = True  # the next pass checks the moved files' vectors
            return done

        start = time.perf_counter()
        event = schedule.run_if_due(apply)
        if event is None:
            return
        status = "succeeded" if event["event"] == "lifecycle" else "failed"
        self.telemetry.op(agent.config.id, "lifecycle", status, (time.perf_counter() - start) * 1000)
        print(json.dumps(event, ensure_ascii=False), file=sys.stderr, flush=True)

    def _drain(self, agent: Agent) -> None:
        """Write what replicas without the agent's files retained and forgot into them (mdmem.engine.drain)."""
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
    commands: CommandLine | None = None,
    recall_workers: int | None = None,
    only: Sequence[str] = (),
) -> None:
    """Run until SIGTERM/SIGINT. Raises ConfigError for a token or a bind that cannot work (mdmem.service.auth)
    and for limits the file-descriptor limit cannot hold (mdmem.service.budget).
    ``recall_workers`` (default: ``service.recallWorkers``) processes answer recalls beside this one.

    With the ``fingerprint`` of ``config`` (mdmem.runtime.ipc_server.load_pinned) and the ``commands`` to run
    (mdmem.cli.commands.SocketCommands), every configured agent also answers the command line's
    ``search``/``get``/``pack`` on its socket; its errors go to stderr as JSON.

    ``only`` (``serve --agent``): serve just these agents (configured ones, or any id under ``service.autoAgents``);
    a request for another answers 404. Once listening, one line on stderr says where, for which agents, and
    where the token comes from."""
    try:
        import uvicorn

        from mdmem.service.protocol import Connections, GuardedHttpTools, Limits  # httptools'
    except ImportError as exc:
        raise ConfigError(f"mdmem serve needs {exc.name}. Fix: pip install 'mdmem[server]'") from None

    from mdmem.service.app import build_app

    env = os.environ if env is None else env
    served = served_agents(config, only)
    host = host or config.service.host
    port = config.service.port if port is None else port
    who = auth.resolve(config, env, host)
    workers = config.service.recall_workers if recall_workers is None else recall_workers
    size = default_size() if workers is None else workers
    svc = config.service
    caps = budget.plan(
        budget.raise_fd_limit(),
        readers=reader_count() + 1,  # and the background indexer's connection (``Agent.index_vectors``)
        sockets=len(_configured(config, served)) if fingerprint is not None and commands is not None else 0,
        workers=size,
        max_open_agents=svc.max_open_agents,
        max_connections=svc.max_connections,
    )
    config = replace(config, service=replace(svc, max_open_agents=caps.max_open_agents))  # workers follow it
    telemetry = Telemetry()
    agents = Agents(config, env, max_open=caps.max_open_agents, served=served)
    indexer = BackgroundIndexer(agents, telemetry)
    pool = RecallPool(config, size)
    startup = Startup(agents, pool, indexer.start)  # opens every agent, starts the workers, then is ready
    connections = Connections(caps.max_connections)
    app = build_app(
        agents,
        who,
        telemetry,
        pool if pool.size else None,
        connections=connections,
        budget=caps,
        startup=startup,
        wake=indexer.wake,
    )
    limits = Limits(svc.max_header_bytes, svc.header_timeout_ms / 1000, svc.body_timeout_ms / 1000)
    protocol = functools.partial(GuardedHttpTools, limits=limits, connections=connections)
    settings: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": "off"}
    listening = functools.partial(_listening, config, served, who.origin, caps)
    server = _server_class(uvicorn.Server)(
        listening,
        uvicorn.Config(
            app,
            host=host,
            port=port,
            http=protocol,  # type: ignore[arg-type]
            ws="none",  # no WebSocket routes: an upgrade request is an ordinary request (and keeps its limits)
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            timeout_graceful_shutdown=DRAIN_SECONDS,
            **settings,
        ),
    )
    # uvicorn drains, then raises the signal it caught again under the handler it found: a no-op here,
    # so that the indexer stops and every index is closed before the process exits (status 0).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    sockets = None
    if fingerprint is not None and commands is not None:
        mine = _configured(config, served)
        sockets = IpcServer(config, fingerprint, mine, _log_error, commands, shared_choice=agents.shared_choice)
        sockets.start()
    startup.start()  # the port is bound at once (below); recalls are answered once it is done
    try:
        server.run()
    finally:
        startup.stop()
        if sockets is not None:
            sockets.stop()
        indexer.stop()
        pool.close()
        agents.close()


def served_agents(config: Config, only: Sequence[str]) -> frozenset[str] | None:
    """The agent ids ``serve --agent`` names (None: every agent); ConfigError naming the known ones for an id
    that is neither configured nor creatable (``service.autoAgents``)."""
    if not only:
        return None
    known = [a.id for a in config.agents]
    for agent_id in only:
        try:
            check_agent_id(agent_id, "--agent")
        except InvalidArgumentError as exc:
            raise ConfigError(str(exc)) from None
        if agent_id not in known and not config.service.auto_agents:
            raise ConfigError(
                f"--agent {agent_id!r}: no such agent; configured agents: {', '.join(known) or 'none'}. Fix: name one "
                "of them, add it to agents.list, or set service.autoAgents to serve agents created on first use"
            )
    return frozenset(only)


def _configured(config: Config, served: frozenset[str] | None) -> tuple[AgentConfig, ...]:
    return tuple(a for a in config.agents if served is None or a.id in served)


def _listening(
    config: Config, served: frozenset[str] | None, origin: str, caps: budget.Budget, addresses: list[Any]
) -> None:
    """The line saying the service is up: where it listens, for which agents, where its token comes from."""
    urls = []
    for address in addresses:
        host, port = address[0], address[1]
        urls.append(f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}")
    names = sorted(served) if served is not None else [a.id for a in config.agents]
    agents = ", ".join(names) or "none configured"
    if config.service.auto_agents and served is None:
        agents += ", and any other id (service.autoAgents)"
    print(
        f"mdmem serve: listening on {' '.join(urls)} (agents: {agents}; token from {origin}); up to "
        f"{caps.max_connections} connections and {caps.max_open_agents} open agents (file-descriptor limit "
        f"{caps.fd_limit})",
        file=sys.stderr,
        flush=True,
    )


def _server_class(base: type[Any]) -> type[Any]:
    """uvicorn's ``Server`` that calls ``on_listening(addresses)`` once its sockets are bound and listening."""

    class Server(base):  # type: ignore[misc, valid-type]
        def __init__(self, on_listening: Callable[[list[Any]], None], config: Any) -> None:
            super().__init__(config)
            self.on_listening = on_listening

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                self.on_listening([sock.getsockname() for server in self.servers for sock in server.sockets or ()])

    return Server


def _log_error(event: dict[str, Any]) -> None:
    if event.get("event") == "error":
        print(json.dumps(event, ensure_ascii=False), file=sys.stderr, flush=True)
