"""The agents one service process serves: each with its ``Memory`` and ``SessionLog`` (an ``Agent``,
mdmem.service.openagent), opened when the service starts (mdmem.service.startup) or on first use.

Every configured agent is served (only those ``serve --agent`` names, with it); an unknown id is refused
(``UnknownAgent``) unless ``service.autoAgents``, which creates ``{home}/agents/{id}/`` from the workspace
template on the agent's first retain or recall (a status request creates nothing). At most ``max_open`` agents
are open at once (``service.maxOpenAgents``, mdmem.service.budget): to open another, the least recently
used one that no request is using is closed (its index synced first when it has unindexed retains), and it is
opened again on its next request. Each request holds its agent (``use``) so that it is never closed under it;
when every open agent is in use, a request for another waits for one (up to ``BUSY_SECONDS``, then
``AgentsBusy``, HTTP 503).

Agents whose embedding settings are equal share one provider (a local model is loaded once per process, and
its computations run on one thread of its own: ``mdmem.providers.runner``); each agent serialises only its
own index work.

An agent in ``service.remoteAgents`` is served without its files (mdmem.service.remote): retains go to the
shared store's entries, recalls read file text from the index.

Which agent answers a request also depends on its ``pod`` (``service.podScope``, mdmem.service.pods): an
agent serves one pod, and under autoAgents another pod's request for the same id is served by that pod's
own agent ``<id>@<pod>``, created as above in ``{home}/agents/<id>@<pod>/``.

The service always searches the retained turns: the ``sessions`` source (``memorySearch.sources``) is
switched on for every agent it serves (pack items from them have kind ``session``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from mdmem.config.load import DEFAULT_STORE_PATH, AgentConfig, Config, is_remote, remote_agents, with_sessions
from mdmem.config.store import store_path_clash
from mdmem.engine.drain import Drainer
from mdmem.engine.provider_choice import SharedProviders
from mdmem.files.sessionlog import SessionLog
from mdmem.files.workspace import MEMORY_DIR, SESSIONS_DIR
from mdmem.memory import Memory
from mdmem.service.openagent import Agent
from mdmem.service.pods import Pods, split_id
from mdmem.service.readers import Readers
from mdmem.service.remote import LocalLog, RemoteLog
from mdmem.util.errors import ConfigError, InvalidArgumentError, MdMemoryError
from mdmem.util.filewrite import Folder

TEMPLATE = Path(__file__).resolve().parents[2] / "workspace-template"
# A recall catches up with hand edits at most this often (a stat of every file each time costs more than the
# search under load); a retain or forget through the service makes the next recall catch up at once.
CATCH_UP_SECONDS = 0.5
BUSY_SECONDS = 10.0  # how long a request for an agent that is not open waits for an open one to be idle
FAILURE_SECONDS = 60.0  # /healthz reports an agent that failed to open for this long (unless it opened since)
DEFAULT_MAX_OPEN = 64


class UnknownAgent(MdMemoryError):
    """No such agent is configured (HTTP 404)."""


class AgentUnavailable(MdMemoryError):
    """The agent cannot be opened now: the system refused one of its files (HTTP 503)."""


class AgentsBusy(AgentUnavailable):
    """Every open agent is in use, so no other may be opened now (HTTP 503)."""


class Agents:
    """The served agents, opened lazily, at most ``max_open`` at once (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        env: Mapping[str, str] | None = None,
        max_open: int | None = None,
        served: frozenset[str] | None = None,
    ) -> None:
        self.config = config
        self.env = env
        self.served = served  # ``serve --agent``: only these ids (None: every configured one, and autoAgents)
        self.max_open = max_open or config.service.max_open_agents or DEFAULT_MAX_OPEN
        self._open: OrderedDict[str, Agent | None] = OrderedDict()  # least recently used first; None: opening
        self.providers = SharedProviders()  # agents with the same provider settings share one
        self._lock = threading.Condition()
        self._opening = threading.Lock()  # around making an agent's provider choice
        self._failures: dict[str, tuple[float, str]] = {}  # agent id -> (when, why) its last request failed
        self.closed_idle = 0  # agents closed to make room since start
        self._threads: int | None = None  # ``limit_threads``: also for providers made later
        self.remote = remote_agents(config.service.remote_agents, os.environ if env is None else env)  # autoAgents
        self.pods = Pods(config, self.config_of)

    def ids(self) -> list[str]:
        return [a.id for a in self.config.agents if self.served is None or a.id in self.served]

    @contextlib.contextmanager
    def use(self, agent_id: str, *, create: bool = True, pod: str | None = None) -> Iterator[Agent]:
        """The agent, open and held until the block ends. ``create=False``: UnknownAgent for an autoAgents
        agent that does not exist yet, instead of creating it (and no pod claims it)."""
        agent = self.acquire(agent_id, create=create, pod=pod)
        try:
            yield agent
        finally:
            self.release(agent)

    def acquire(self, agent_id: str, *, create: bool = True, pod: str | None = None) -> Agent:
        """Hold the agent that answers ``agent_id`` from ``pod`` (open it first when it is not); ``release`` it
        when done. May wait (see the module docstring): call it off the event loop, or ``held`` first."""
        agent_id = self.pods.key(agent_id, pod, create=create)  # "<id>@<pod>": the pod's own (autoAgents)
        deadline = time.monotonic() + BUSY_SECONDS
        with self._lock:
            while True:
                found = self._held(agent_id)
                if found is not None:
                    return found
                if agent_id not in self._open and self._room() and agent_id not in self._open:
                    self._open[agent_id] = None  # opening: others asking for it wait
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AgentsBusy(
                        f"all {self.max_open} open agents are in use (service.maxOpenAgents), so agent {agent_id!r} "
                        "cannot be opened now. Fix: retry; if it keeps happening, raise service.maxOpenAgents"
                    )
                self._lock.wait(min(left, 1.0))
        agent: Agent | None = None
        try:
            agent = self._open_agent(agent_id, create)
        finally:
            with self._lock:
                if agent is None:
                    del self._open[agent_id]
                else:
                    agent.users = 1
                    self._open[agent_id] = agent
                self._lock.notify_all()
        return agent

    def held(self, agent_id: str) -> Agent | None:
        """The agent, held, when it is open now (never waits long, never opens): ``release`` it when done."""
        with self._lock:
            return self._held(agent_id)

    def release(self, agent: Agent) -> None:
        with self._lock:
            agent.users -= 1
            if agent.users == 0:
                self._lock.notify_all()

    def _held(self, agent_id: str) -> Agent | None:
        found = self._open.get(agent_id)
        if found is not None:
            self._open.move_to_end(agent_id)
            found.users += 1
        return found

    def _room(self) -> bool:
        """Whether one more agent may be opened, after closing the least recently used idle one if need be."""
        return len(self._open) < self.max_open or (self._close_idle() and len(self._open) < self.max_open)

    def _close_idle(self) -> bool:
        """Close the least recently used agent no one holds (one without unindexed retains if there is one);
        False when every open agent is in use. Called under the lock, which is released while it closes."""
        idle = [a for a in self._open.values() if a is not None and a.users == 0]
        if not idle:
            return False
        victim = next((a for a in idle if not a.dirty), idle[0])
        del self._open[victim.config.id]
        self.closed_idle += 1
        self._lock.release()
        try:
            self._close_agent(victim, sync=victim.dirty)
        finally:
            self._lock.acquire()
        return True

    def opened(self) -> list[str]:
        """The ids of the agents open now (``held`` each to use it)."""
        with self._lock:
            return [k for k, v in self._open.items() if v is not None]

    def failed(self, agent_id: str, exc: BaseException) -> None:
        """A request for the agent failed for want of something (its index, a file, the database): ``health``
        reports it until a request for it succeeds or ``FAILURE_SECONDS`` pass."""
        now = time.monotonic()
        with self._lock:
            self._failures[agent_id] = (now, _reason(exc))
            for old in [k for k, (when, _) in self._failures.items() if now - when >= FAILURE_SECONDS]:
                del self._failures[old]

    def succeeded(self, agent_id: str) -> None:
        if agent_id in self._failures:
            with self._lock:
                self._failures.pop(agent_id, None)

    def health(self) -> list[str]:
        """Why the service is degraded as far as agents go: agents that failed to open, or whose last request
        failed, within ``FAILURE_SECONDS``."""
        now = time.monotonic()
        with self._lock:
            failing = [(a, when, why) for a, (when, why) in self._failures.items() if now - when < FAILURE_SECONDS]
        shown = [f"agent {a!r} failing since {now - when:.0f} s: {why}" for a, when, why in failing[:10]]
        return shown + ([f"and {len(failing) - 10} more agents failing"] if len(failing) > 10 else [])

    def shared_choice(self, agent_id: str) -> Any:
        """The provider choice an agent with ``agent_id``'s embedding settings uses here, if one exists yet
        (the command-line socket answers with it: a local model is loaded once per process)."""
        config = next((a for a in self.config.agents if a.id == agent_id), None)
        with self._lock:
            opened = self._open.get(agent_id)
            if opened is not None:
                return opened.memory.current_choice
            return self.providers.for_agent(config) if config is not None else None

    def limit_threads(self, threads: int) -> None:
        """Every provider of this process computes on at most ``threads`` threads from now on (its
        indexing shares the machine with the recall workers)."""
        with self._lock:
            self._threads = threads
        for choice in self.providers.choices():
            if choice.provider is not None:
                choice.provider.limit_threads(threads)

    def config_of(self, agent_id: str, create: bool = True) -> AgentConfig:
        if self.served is not None and agent_id not in self.served:
            raise UnknownAgent(
                f"agent {agent_id!r} is not served here: this service was started for {', '.join(sorted(self.served))} "
                "(serve --agent). Fix: call the service that serves it, or start this one without --agent"
            )
        for agent in self.config.agents:
            if agent.id == agent_id:
                return agent
        if not self.config.service.auto_agents:
            raise UnknownAgent(
                f"unknown agent {agent_id!r}; configured agents: {', '.join(self.ids())}. Fix: add it to "
                "agents.list, or set service.autoAgents to create agents on first use"
            )
        return self._create(agent_id, create)

    def _create(self, agent_id: str, create: bool) -> AgentConfig:
        """An autoAgents agent, ``agent_id`` or a pod's own ``<id>@<pod>``, with the default agent's settings."""
        plain, _ = split_id(agent_id)
        base = self.config.agent()
        root = (self.config.home / "agents").resolve()
        workspace = (root / agent_id).resolve()
        if workspace.parent != root:  # ids and pods are never "." or ".."; never leave the root
            raise UnknownAgent(f"agent id {agent_id!r} names a path outside {root}")
        twin = self._case_twin(agent_id, root)
        if twin is not None:
            raise InvalidArgumentError(
                f"agent_id: {agent_id!r} cannot be created: it differs from agent {twin!r} only by case, and on a "
                "case-insensitive file system (macOS, Windows) both would be one folder and one index. Fix: send "
                f"{twin!r}, or choose another id"
            )
        owner = self._owner(workspace)
        if owner is not None:
            raise InvalidArgumentError(
                f"agent_id: {agent_id!r} cannot be created: its workspace {workspace} would share the files of "
                f"agent {owner.id!r} (workspace {owner.workspace}), which would then read and write that agent's "
                f"memory. Fix: choose another id, or move agent {owner.id!r}'s workspace out of {root}"
            )
        template = base.memory_search.store.path
        if "{agentId}" not in template:
            template = DEFAULT_STORE_PATH
        clash = store_path_clash(template, str(self.config.home), agent_id)
        if clash is not None:
            raise InvalidArgumentError(
                f"agent_id: {agent_id!r} cannot be created: with memorySearch.store.path {template!r} its index file "
                f"would be taken for one of the files beside agent {clash!r}'s index. Fix: choose another id"
            )
        store = Path(template.replace("{agentId}", agent_id).replace("{home}", str(self.config.home))).absolute()
        here = not (is_remote(agent_id, self.remote) or is_remote(plain, self.remote))
        if not create and not (workspace.is_dir() or store.exists()):
            raise UnknownAgent(
                f"unknown agent {agent_id!r}: it has retained nothing here yet (service.autoAgents creates it on its "
                "first retain or recall, not on a status request)"
            )
        if here and not workspace.exists():
            root.mkdir(parents=True, exist_ok=True)
            if TEMPLATE.is_dir():
                shutil.copytree(TEMPLATE, workspace)
            else:
                (workspace / "memory").mkdir(parents=True)
                (workspace / "MEMORY.md").write_text("# Long-term memory\n", encoding="utf-8")
        return replace(
            base, id=agent_id, workspace=workspace, store_path=store, default=False, files_here=here, pod=None
        )

    def _case_twin(self, agent_id: str, root: Path) -> str | None:
        """A configured or existing agent whose id differs from ``agent_id`` by case only, unless ``agent_id``
        has a folder of its own already (made before, on a case-sensitive file system: it keeps working)."""
        folded = agent_id.casefold()
        names = [a.id for a in self.config.agents]
        with contextlib.suppress(OSError):
            names += os.listdir(root)
        if agent_id in names:
            return None
        return next((n for n in names if n.casefold() == folded), None)

    def _owner(self, workspace: Path) -> AgentConfig | None:
        """The configured agent whose memory an auto-created agent at ``workspace`` would share: the same
        folder, one inside its ``memory/`` or ``sessions/``, or one holding its workspace."""
        for other in self.config.agents:
            theirs = Path(other.workspace).resolve()
            inside = workspace.is_relative_to(theirs) and workspace != theirs
            if workspace == theirs or theirs.is_relative_to(workspace):
                return other
            if inside and workspace.relative_to(theirs).parts[0] in (MEMORY_DIR, SESSIONS_DIR):
                return other
        return None

    def _open_agent(self, agent_id: str, create: bool) -> Agent:
        """Open the agent (outside the lock); an open that runs out of file descriptors closes an idle agent
        and tries once more. A system error is an ``AgentUnavailable`` naming the file."""
        for attempt in (1, 2):
            try:
                return self._open_config(self.config_of(agent_id, create))
            except (UnknownAgent, InvalidArgumentError):
                raise
            except (OSError, MdMemoryError) as exc:
                exhausted = isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)
                if exhausted and attempt == 1:
                    with self._lock:
                        self._close_idle()
                    continue
                if isinstance(exc, OSError):
                    where = f" ({exc.filename})" if exc.filename else ""
                    raise AgentUnavailable(f"agent {agent_id!r} could not be opened: {exc.strerror}{where}") from exc
                raise
        raise AssertionError("unreachable")

    def _open_config(self, agent: AgentConfig) -> Agent:
        agent = with_sessions(agent)
        log: SessionLog | RemoteLog
        drainer = None
        if not agent.files_here:  # on another host (service.remoteAgents): the shared store's entries
            if agent.memory_search.store.backend != "postgres":  # an autoAgents agent (the file's are checked)
                raise ConfigError(f"agent {agent.id!r} is in service.remoteAgents but not in the shared store")
            log = RemoteLog(agent)
        else:
            if Path(agent.workspace).is_dir():  # a missing workspace is never created (an unmounted volume)
                with contextlib.suppress(MdMemoryError, OSError):  # a refused sessions/: each retain says why
                    Folder(agent.workspace, [SESSIONS_DIR], create=True).close()  # never through a symlink
            shared = agent.memory_search.store.backend == "postgres"
            log = LocalLog(agent) if shared else SessionLog(agent)
            log.repair()  # before the first recall indexes the files: a crash's leftovers go first
            if shared:
                drainer = Drainer(agent, on_drained=lambda _: None, on_error=lambda _: None, log=log)
        with self._opening:  # two agents with the same settings opened at once must not load two models
            memory = Memory(agent, self.config, choice=self.providers.for_agent(agent), env=self.env)
            memory.catch_up_interval = CATCH_UP_SECONDS
            memory.catch_up_budgeted = True  # text only, within the recall's budget: vectors follow
            memory.background = "owner"  # the background indexer (mdmem.service.server) embeds them
            if (
                self.providers.for_agent(agent) is None
                and self._threads is not None
                and memory.choice.provider is not None
            ):
                memory.choice.provider.limit_threads(self._threads)
            self.providers.remember(agent, memory.choice)  # the index opens on first use (a retain needs only files)
        return Agent(agent, memory, log, threading.Lock(), Readers(memory), drainer=drainer)

    def _close_agent(self, agent: Agent, sync: bool = False) -> None:
        """Close the agent's readers and index; its provider only when no other agent shares it."""
        shared = self.providers.for_agent(agent.config)
        with agent.lock:
            if sync:
                with contextlib.suppress(MdMemoryError, OSError):
                    agent.memory.sync()  # its retains indexed before it closes (else: at its next open)
            agent.readers.close()
            if agent.embedder is not None:
                agent.embedder.close(provider=False)
            agent.memory.close(provider=agent.memory.current_choice is not shared)

    def close(self) -> None:
        with self._lock:
            agents = [a for a in self._open.values() if a is not None]
            self._open.clear()
        for a in agents:
            self._close_agent(a)
        self.providers.close()


def _reason(exc: BaseException) -> str:
    """Why an open failed, without paths or text: the error type and, for an OSError, the system's words."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"
    return type(exc).__name__
