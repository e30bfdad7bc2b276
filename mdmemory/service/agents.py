"""The agents one service process serves: each with its ``Memory`` (kept open) and ``SessionLog``.

Every configured agent is served; an unknown id is refused (``UnknownAgent``) unless ``service.autoAgents``,
which creates ``{home}/agents/{id}/`` from the workspace template. Agents whose embedding settings are equal
share one provider (a local model is loaded once per process, and its computations run on one thread of
its own: ``mdmemory.providers.runner``); each agent serialises only its own index work.

An agent in ``service.remoteAgents`` is served without its files (mdmemory.service.remote): retains go to the
shared store's entries, recalls read file text from the index.

The service always searches the retained turns: the ``sessions`` source (``memorySearch.sources``) is
switched on for every agent it serves (pack items from them have kind ``session``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mdmemory.config import DEFAULT_STORE_PATH, AgentConfig, Config, is_remote, remote_agents
from mdmemory.errors import ConfigError, MdMemoryError
from mdmemory.filewrite import Folder
from mdmemory.memory import Memory
from mdmemory.service.contract import check_agent_id
from mdmemory.service.drain import Drainer
from mdmemory.service.readers import Readers
from mdmemory.service.remote import LocalLog, RemoteLog
from mdmemory.service.sessionlog import SessionLog
from mdmemory.workspace import SESSIONS_DIR

TEMPLATE = Path(__file__).resolve().parents[2] / "workspace-template"
# A recall catches up with hand edits at most this often (a stat of every file each time costs more than the
# search under load); a retain or forget through the service makes the next recall catch up at once.
CATCH_UP_SECONDS = 0.5


class UnknownAgent(MdMemoryError):
    """No such agent is configured (HTTP 404)."""


@dataclass
class Agent:
    config: AgentConfig
    memory: Memory
    log: SessionLog | RemoteLog  # LocalLog (a SessionLog) for an agent in the shared store whose files are here
    lock: threading.Lock  # around the writes of ``memory``: sync, forget, catching up
    readers: Readers  # what recalls search with, side by side
    dirty: bool = field(default=False)
    drainer: Drainer | None = None  # writes what replicas without the files retained (shared store, files here)

    def catch_up(self) -> None:
        """Bring the index up to date with the files before a recall: at once after a retain or forget
        through the service (``Memory.changed``), else at most every ``CATCH_UP_SECONDS`` and only when no
        sync is running already (the one that is catches up)."""
        mem = self.memory
        if mem.change_announced:
            with self.lock:
                mem.catch_up()
        elif mem.catch_up_due() and self.lock.acquire(blocking=False):
            try:
                mem.catch_up()
            finally:
                self.lock.release()


def with_sessions(agent: AgentConfig) -> AgentConfig:
    """``agent`` searching its ``sessions/`` folder too (see the module docstring)."""
    ms = agent.memory_search
    if "sessions" in ms.sources:
        return agent
    return replace(agent, memory_search=replace(ms, sources=(*ms.sources, "sessions")))


def provider_key(agent: AgentConfig) -> str:
    ms = agent.memory_search
    parts = (ms.enabled, ms.provider, ms.model, ms.fallback, asdict(ms.local), asdict(ms.remote))
    return json.dumps(parts, sort_keys=True, default=str)


class Agents:
    """Opened lazily, kept open until ``close``."""

    def __init__(self, config: Config, env: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.env = env
        self._agents: dict[str, Agent] = {}
        self._choices: dict[str, Any] = {}  # provider key -> the provider choice agents with it share
        self._lock = threading.Lock()
        self.remote = remote_agents(config.service.remote_agents, os.environ if env is None else env)  # autoAgents

    def ids(self) -> list[str]:
        return [a.id for a in self.config.agents]

    def get(self, agent_id: str) -> Agent:
        check_agent_id(agent_id)
        with self._lock:
            found = self._agents.get(agent_id)
            if found is None:
                found = self._agents[agent_id] = self._open(self.config_of(agent_id))
            return found

    def shared_choice(self, agent_id: str) -> Any:
        """The provider choice an agent with ``agent_id``'s embedding settings uses here, if one exists yet
        (the command-line socket answers with it: a local model is loaded once per process)."""
        config = next((a for a in self.config.agents if a.id == agent_id), None)
        with self._lock:
            opened = self._agents.get(agent_id)
            if opened is not None:
                return opened.memory._choice
            return self._choices.get(provider_key(config)) if config is not None else None

    def opened(self) -> list[Agent]:
        with self._lock:
            return list(self._agents.values())

    def config_of(self, agent_id: str) -> AgentConfig:
        for agent in self.config.agents:
            if agent.id == agent_id:
                return agent
        if not self.config.service.auto_agents:
            raise UnknownAgent(
                f"unknown agent {agent_id!r}; configured agents: {', '.join(self.ids())}. Fix: add it to "
                "agents.list, or set service.autoAgents to create agents on first use"
            )
        return self._create(agent_id)

    def _create(self, agent_id: str) -> AgentConfig:
        base = self.config.agent()
        root = (self.config.home / "agents").resolve()
        workspace = (root / agent_id).resolve()
        if workspace.parent != root:  # check_agent_id already refuses "." and ".."; never leave the root
            raise UnknownAgent(f"agent id {agent_id!r} names a path outside {root}")
        if not workspace.exists() and not is_remote(agent_id, self.remote):
            root.mkdir(parents=True, exist_ok=True)
            if TEMPLATE.is_dir():
                shutil.copytree(TEMPLATE, workspace)
            else:
                (workspace / "memory").mkdir(parents=True)
                (workspace / "MEMORY.md").write_text("# Long-term memory\n", encoding="utf-8")
        template = base.memory_search.store.path
        if "{agentId}" not in template:
            template = DEFAULT_STORE_PATH
        store = Path(template.replace("{agentId}", agent_id).replace("{home}", str(self.config.home)))
        here = not is_remote(agent_id, self.remote)
        return replace(
            base, id=agent_id, workspace=workspace, store_path=store.absolute(), default=False, files_here=here
        )

    def _open(self, agent: AgentConfig) -> Agent:
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
            if shared:
                drainer = Drainer(agent, on_drained=lambda _: None, on_error=lambda _: None, log=log)
        key = provider_key(agent)
        memory = Memory(agent, self.config, choice=self._choices.get(key), env=self.env)
        memory.catch_up_interval = CATCH_UP_SECONDS
        self._choices.setdefault(key, memory.choice)
        return Agent(agent, memory, log, threading.Lock(), Readers(memory), drainer=drainer)

    def close(self) -> None:
        with self._lock:
            agents, self._agents = list(self._agents.values()), {}
        closed: set[int] = set()
        for a in agents:
            choice = a.memory._choice
            provider = choice.provider if choice is not None else None
            if provider is not None and id(provider) in closed:
                a.memory._choice = None  # already closed through the agent that shares it
            elif provider is not None:
                closed.add(id(provider))
            a.readers.close()
            with a.lock:
                a.memory.close()
