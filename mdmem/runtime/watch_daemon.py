"""``mdmem watch``: keep every configured agent's index fresh from one process.

Per agent: a watch lock beside the index (one daemon per agent), a ``SyncService`` with its own
connection, a ``MemoryWatcher``, and a small state file (``<index>.watch.json``: pid, watcher mode,
whether it is armed or waiting for a missing workspace, heartbeat) so ``status`` in another process can
tell whether the watcher is really alive and watching. A supervisor loop restarts a watcher whose observer
thread died and logs it, and logs every change between ``watching`` and ``waiting``. A missing workspace
does not stop the daemon: the watcher waits for it, then arms and resyncs. Events are reported through
``emit`` as dicts; the CLI prints them as JSON lines.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from filelock import FileLock, Timeout

from mdmem.config.load import AgentConfig, Config, with_sessions
from mdmem.engine.background import SyncService
from mdmem.engine.drain import Drainer
from mdmem.engine.lifecycle_schedule import Schedule
from mdmem.engine.watchstate import state_path
from mdmem.memory import Memory
from mdmem.runtime.file_watcher import MemoryWatcher
from mdmem.runtime.ipc_server import CommandLine, IpcServer
from mdmem.util.errors import LockError, StoreError
from mdmem.util.statefile import write_state_file

HEARTBEAT_SECONDS = 2.0
Emit = Callable[[dict[str, Any]], None]


@dataclass
class AgentWatch:
    agent: AgentConfig
    lock: FileLock
    service: SyncService
    watcher: MemoryWatcher
    started: float
    memory: Memory  # what the service syncs; its provider is the one the command-line socket shares
    reported: tuple[bool, str | None, int] | None = None  # (armed, waitingFor, rearms) last logged
    state_lock: threading.Lock = field(default_factory=threading.Lock)  # the loop and the watcher's guard write
    state_error: str | None = None
    socket: str | None = None  # where it answers the command line (mdmem.runtime.ipc_server), if it does
    drainer: Drainer | None = None  # writes what replicas without the files retained (shared store only)
    lifecycle: Schedule | None = None  # ``lifecycle.schedule`` (mdmem.engine.lifecycle_schedule)

    def write_state(self) -> None:
        state = {
            "pid": os.getpid(),
            "agent": self.agent.id,
            **self.watcher.state(),
            "since": self.started,
            "heartbeat": time.time(),
            "syncs": self.service.state.runs,
            "lastError": self.service.state.last_error,
            **({"socket": self.socket} if self.socket else {}),
        }
        with self.state_lock:
            write_state_file(state_path(self.agent), state)  # in place when the disk is full


def start_agent(agent: AgentConfig, config: Config | None, emit: Emit, *, polling: bool | None = None) -> AgentWatch:
    """Take the agent's watch lock, start its sync service and watcher, and request the initial sync.

    An agent in the shared store also gets a ``Drainer`` (what replicas without its files retained goes into
    them) and its ``sessions/`` folder indexed, as ``mdmem serve`` indexes it (``with_sessions``)."""
    shared = agent.memory_search.store.backend == "postgres"
    if shared:
        agent = with_sessions(agent)
    lock = FileLock(f"{agent.store_path}.watch.lock")
    agent.store_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        lock.acquire(timeout=0)
    except Timeout as exc:
        raise LockError(
            f"another `mdmem watch` is already running for agent {agent.id!r} (lock {lock.lock_file}); "
            "stop it first, or run this one for other agents with --agent"
        ) from exc
    except OSError as exc:
        raise StoreError(f"cannot take the watch lock {lock.lock_file}: {exc}; make the index folder writable") from exc
    sync = agent.memory_search.sync

    def on_report(report: dict[str, Any]) -> None:
        emit(
            {
                "event": "sync",
                "agent": agent.id,
                "files": report["files"],
                "indexed": report["indexed"],
                "removed": report["removed"],
                "chunks": report["chunks"],
                "embedded": report["embedded"],
                "fromCache": report["fromCache"],
                "pending": report["pending"],
                "errors": report["errors"],
                "rebuilt": report["rebuilt"],
                **({"repaired": report["repaired"]} if report.get("repaired") else {}),
                "ms": round(report["seconds"] * 1000),
            }
        )
        for err in report["errors"]:
            emit({"event": "error", "agent": agent.id, "path": err["path"], "error": err["error"]})

    def on_error(exc: BaseException, retry_in: float) -> None:
        emit(
            {
                "event": "error",
                "agent": agent.id,
                "error": f"{type(exc).__name__}: {exc}",
                "retryInSeconds": round(retry_in, 1),
            }
        )

    memory = Memory(agent, config)
    try:
        service = SyncService(
            memory,
            debounce_seconds=sync.watch_debounce_ms / 1000,
            interval_seconds=sync.interval_minutes * 60,
            on_report=on_report,
            on_error=on_error,
            name=f"mdmemory-sync-{agent.id}",
        )
        watcher = MemoryWatcher(memory.workspace, service.mark_dirty, polling=polling, on_armed=service.request_sync)
        service.start()
        watcher.start()
    except BaseException:
        lock.release()
        raise
    service.request_sync()
    watch = AgentWatch(agent, lock, service, watcher, time.time(), memory)
    if shared:
        watch.drainer = start_drainer(agent, service, emit)
    with contextlib.suppress(OSError):  # retried every heartbeat, which reports a failure
        watch.write_state()
    report_watcher(watch, emit)

    def on_state() -> None:  # the guard armed or lost the workspace: say so now, not at the next heartbeat
        report_watcher(watch, emit)
        with contextlib.suppress(OSError):
            watch.write_state()

    watcher.on_state = on_state
    return watch


def start_drainer(agent: AgentConfig, service: SyncService, emit: Emit) -> Drainer:
    """Write the entries replicas without this host's files retained (and their forgets) into the files."""

    def drained(report: dict[str, Any]) -> None:
        emit({"event": "drained", "agent": agent.id, **report})
        service.request_sync()

    def failed(exc: BaseException) -> None:
        emit({"event": "error", "agent": agent.id, "error": f"retained entries not written yet: {exc}"})

    drainer = Drainer(agent, drained, failed)
    drainer.start()
    return drainer


def report_watcher(watch: AgentWatch, emit: Emit) -> None:
    """Log ``watching`` when the watcher (re-)armed and ``waiting`` when it lost its workspace, once each."""
    w = watch.watcher
    now = (w.armed, w.waiting_for, w.rearms)
    with watch.state_lock:
        if now == watch.reported:
            return
        watch.reported = now
    event: dict[str, Any] = {"agent": watch.agent.id, "workspace": str(w.workspace.root)}
    if w.armed:
        event.update(event="watching", mode=w.mode, fallbackReason=w.fallback_reason, rearms=w.rearms)
    elif w.waiting_for is None:
        event.update(event="error", error=f"the file watcher could not be armed ({w.last_error}); retrying")
    else:
        event.update(
            event="waiting",
            waitingFor=w.waiting_for,
            reason=f"{w.waiting_for} is missing: waiting for it to return, then watching and syncing",
        )
    emit(event)


def run_lifecycle(watch: AgentWatch, config: Config | None, emit: Emit) -> None:
    """``lifecycle apply`` for the agent when ``lifecycle.schedule`` says it is due (docs/lifecycle.md), on a
    ``Memory`` of its own (the sync service's is busy on its thread); one ``lifecycle`` event with the counts."""
    if watch.lifecycle is None:
        watch.lifecycle = Schedule(watch.agent)

    def apply() -> dict[str, Any]:
        with Memory(watch.agent, config) as memory:
            return memory.lifecycle("apply")

    event = watch.lifecycle.run_if_due(apply)
    if event is not None:
        emit(event)


def stop_agent(watch: AgentWatch) -> None:
    if watch.drainer is not None:
        watch.drainer.stop()
    watch.watcher.stop()
    watch.service.stop()
    with contextlib.suppress(OSError):
        state_path(watch.agent).unlink()
    watch.lock.release()


def run(
    config: Config,
    agent_ids: Sequence[str],
    emit: Emit,
    stop: threading.Event,
    *,
    polling: bool | None = None,
    fingerprint: str | None = None,
    commands: CommandLine | None = None,
) -> None:
    """Watch the given agents (all configured agents when empty) until ``stop`` is set.

    With the ``fingerprint`` of ``config`` (mdmem.runtime.ipc_server.load_pinned) and the ``commands`` to run
    (mdmem.cli.commands.SocketCommands), the watched agents also answer the command line's
    ``search``/``get``/``pack`` on their sockets (mdmem.runtime.ipc_server)."""
    agents = [config.agent(a) for a in agent_ids] if agent_ids else list(config.agents)
    watches: list[AgentWatch] = []
    server: IpcServer | None = None
    try:
        for agent in agents:
            if not agent.memory_search.enabled:
                emit({"event": "skipped", "agent": agent.id, "reason": "memorySearch.enabled is false"})
                continue
            if not agent.files_here:
                reason = "its files are on another host (service.remoteAgents): watch it there"
                emit({"event": "skipped", "agent": agent.id, "reason": reason})
                continue
            watches.append(start_agent(agent, config, emit, polling=polling))
        if fingerprint is not None and commands is not None and watches:
            by_id = {w.agent.id: w for w in watches}
            server = IpcServer(
                config,
                fingerprint,
                [w.agent for w in watches],
                emit,
                commands,
                shared_choice=lambda agent_id: by_id[agent_id].memory.current_choice,
            )
            server.start()
            for watch in watches:
                watch.socket = server.socket_of(watch.agent.id)
                with contextlib.suppress(OSError):  # else the next heartbeat writes it
                    watch.write_state()
        while not stop.wait(HEARTBEAT_SECONDS):
            for watch in watches:
                run_lifecycle(watch, config, emit)
                if not watch.watcher.is_alive():
                    emit({"event": "error", "agent": watch.agent.id, "error": "file watcher stopped; restarting it"})
                    try:
                        watch.watcher.restart()
                    except Exception as exc:  # noqa: BLE001 - keep the other agents running and say why
                        emit({"event": "error", "agent": watch.agent.id, "error": f"restart failed: {exc}"})
                report_watcher(watch, emit)
                try:
                    watch.write_state()
                except OSError as exc:  # a full or read-only disk: keep watching and syncing, say so once
                    if str(exc) != watch.state_error:
                        emit({"event": "error", "agent": watch.agent.id, "error": f"cannot write the state: {exc}"})
                    watch.state_error = str(exc)
                else:
                    watch.state_error = None
    finally:
        if server is not None:
            server.stop()  # before the agents: its memories share their providers
        for watch in watches:
            stop_agent(watch)
        emit({"event": "stopped", "agents": [w.agent.id for w in watches]})
