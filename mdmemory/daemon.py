"""``mdmemory watch``: keep every configured agent's index fresh from one process.

Per agent: a watch lock beside the index (one daemon per agent), a ``SyncService`` with its own
connection, a ``MemoryWatcher``, and a small state file (``<index>.watch.json``: pid, watcher mode,
heartbeat) so ``status`` in another process can tell whether the watcher is really alive. A supervisor
loop restarts a watcher whose observer thread died and logs it. Events are reported through ``emit`` as
dicts; the CLI prints them as JSON lines.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from filelock import FileLock, Timeout

from mdmemory.config import AgentConfig, Config
from mdmemory.errors import LockError
from mdmemory.memory import Memory
from mdmemory.sync import SyncService
from mdmemory.watcher import MemoryWatcher
from mdmemory.watchstate import state_path

HEARTBEAT_SECONDS = 2.0
Emit = Callable[[dict[str, Any]], None]


@dataclass
class AgentWatch:
    agent: AgentConfig
    lock: FileLock
    service: SyncService
    watcher: MemoryWatcher
    started: float

    def write_state(self) -> None:
        state = {
            "pid": os.getpid(),
            "agent": self.agent.id,
            "mode": self.watcher.mode,
            "fallbackReason": self.watcher.fallback_reason,
            "since": self.started,
            "heartbeat": time.time(),
            "syncs": self.service.state.syncs,
            "lastError": self.service.state.last_error,
        }
        path = state_path(self.agent)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, path)


def start_agent(agent: AgentConfig, config: Config | None, emit: Emit, *, polling: bool | None = None) -> AgentWatch:
    """Take the agent's watch lock, start its sync service and watcher, and request the initial sync."""
    lock = FileLock(f"{agent.store_path}.watch.lock")
    agent.store_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        lock.acquire(timeout=0)
    except Timeout as exc:
        raise LockError(
            f"another `mdmemory watch` is already running for agent {agent.id!r} (lock {lock.lock_file}); "
            "stop it first, or run this one for other agents with --agent"
        ) from exc
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
                "fromCache": report["from_cache"],
                "pending": report["pending"],
                "errors": report["errors"],
                "rebuilt": report["rebuilt"],
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

    try:
        service = SyncService(
            Memory(agent, config),
            debounce_seconds=sync.watch_debounce_ms / 1000,
            interval_seconds=sync.interval_minutes * 60,
            on_report=on_report,
            on_error=on_error,
            name=f"mdmemory-sync-{agent.id}",
        )
        watcher = MemoryWatcher(service.memory.workspace, service.mark_dirty, polling=polling)
        service.start()
        watcher.start()
    except BaseException:
        lock.release()
        raise
    service.request_sync()
    watch = AgentWatch(agent, lock, service, watcher, time.time())
    watch.write_state()
    emit(
        {
            "event": "watching",
            "agent": agent.id,
            "workspace": str(watcher.workspace.root),
            "mode": watcher.mode,
            "fallbackReason": watcher.fallback_reason,
        }
    )
    return watch


def stop_agent(watch: AgentWatch) -> None:
    watch.watcher.stop()
    watch.service.stop()
    with contextlib.suppress(FileNotFoundError):
        state_path(watch.agent).unlink()
    watch.lock.release()


def run(
    config: Config,
    agent_ids: Sequence[str],
    emit: Emit,
    stop: threading.Event,
    *,
    polling: bool | None = None,
) -> None:
    """Watch the given agents (all configured agents when empty) until ``stop`` is set."""
    agents = [config.agent(a) for a in agent_ids] if agent_ids else list(config.agents)
    watches: list[AgentWatch] = []
    try:
        for agent in agents:
            if not agent.memory_search.enabled:
                emit({"event": "skipped", "agent": agent.id, "reason": "memorySearch.enabled is false"})
                continue
            watches.append(start_agent(agent, config, emit, polling=polling))
        while not stop.wait(HEARTBEAT_SECONDS):
            for watch in watches:
                if not watch.watcher.is_alive():
                    emit({"event": "error", "agent": watch.agent.id, "error": "file watcher stopped; restarting it"})
                    try:
                        watch.watcher.restart()
                    except Exception as exc:  # noqa: BLE001 - keep the other agents running and say why
                        emit({"event": "error", "agent": watch.agent.id, "error": f"restart failed: {exc}"})
                watch.write_state()
    finally:
        for watch in watches:
            stop_agent(watch)
        emit({"event": "stopped", "agents": [w.agent.id for w in watches]})
