"""The detached index worker: background indexing for runtimes that only use the command line.

A ``mdmem search`` process exits right after answering, so a thread it started would die with it. When
a search leaves work behind (embeddings, changed files beyond its time budget, a rebuild for a new
identity) the command line starts this worker instead::

    python -m mdmem index --worker --json --agent ID [--config FILE]

in a new session with stdin from /dev/null and its output appended to ``<index>.worker.log``, so it
outlives the search. It syncs (taking the writer lock for the text, the embedding lock for the vectors),
retrying a failing provider or a busy writer lock with backoff for up to ``PATIENCE_SECONDS``, then
exits. ``<index>.worker.lock`` is held for its whole life and ``<index>.worker.json`` names its pid, so
at most one worker runs per index and a search can say truthfully which process is doing the work.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mdmem.config.load import AgentConfig
from mdmem.engine.background import settle
from mdmem.engine.watchstate import pid_alive
from mdmem.util.errors import LockError

PATIENCE_SECONDS = 300.0  # how long a worker keeps retrying a failing provider before it exits
STARTUP_SECONDS = 10.0  # a just-spawned worker counts as running before it has taken its lock
LOG_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class WorkerInfo:
    pid: int
    purpose: str  # "index" (text and embeddings) or "rebuild"
    started: float

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "purpose": self.purpose, "started": self.started}


def _file(store_path: Path, suffix: str) -> Path:
    return Path(f"{store_path}.worker{suffix}")


def running(store_path: Path) -> WorkerInfo | None:
    """The worker indexing ``store_path`` now, if any: its state file names a live process that holds the
    worker lock (or was started moments ago and is about to take it)."""
    try:
        state = json.loads(_file(store_path, ".json").read_text())
        info = WorkerInfo(int(state["pid"]), str(state.get("purpose", "index")), float(state.get("started", 0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not pid_alive(info.pid):
        return None
    if _held(_file(store_path, ".lock")) or time.time() - info.started < STARTUP_SECONDS:
        return info
    return None  # a worker killed before it could remove its state file (and its pid reused since)


def _held(path: Path) -> bool:
    from filelock import FileLock, Timeout  # here, not at the top: a search that leaves no work never needs it

    probe = FileLock(str(path))
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return True
    probe.release()
    return False


def spawn(agent: AgentConfig, config_source: Path | None, purpose: str, env: Mapping[str, str]) -> WorkerInfo:
    """Start a detached worker for ``agent`` unless one is running already; returns the one doing the work."""
    import subprocess

    from filelock import FileLock

    store_path = agent.store_path
    store_path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(_file(store_path, ".spawn.lock")), timeout=10):
        current = running(store_path)
        if current is not None:
            return current
        cmd = [sys.executable, "-m", "mdmem", "index", "--worker", "--json", "--agent", agent.id]
        if config_source is not None:
            cmd += ["--config", str(Path(config_source).resolve())]
        log = _file(store_path, ".log")
        with contextlib.suppress(OSError):
            if log.stat().st_size > LOG_MAX_BYTES:
                log.unlink()
        with open(log, "ab") as out:
            out.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} starting {purpose} worker\n".encode())
            out.flush()
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # not killed with the search's terminal or process group
                close_fds=True,
                env=dict(env),
            )
        info = WorkerInfo(proc.pid, purpose, time.time())
        _write_state(store_path, info)
        return info


def _write_state(store_path: Path, info: WorkerInfo) -> None:
    path = _file(store_path, ".json")
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(info.to_dict()))
    os.replace(tmp, path)


def run(agent: AgentConfig, sync: Callable[[], dict[str, Any]], patience: float = PATIENCE_SECONDS) -> dict[str, Any]:
    """The worker's body (``mdmem index --worker``): take the worker lock, sync until done or out of
    patience, remove the state file. Raises LockError when another worker is running."""
    from filelock import FileLock, Timeout

    store_path = agent.store_path
    store_path.parent.mkdir(parents=True, exist_ok=True)
    life = FileLock(str(_file(store_path, ".lock")))
    try:
        life.acquire(timeout=5)  # patient with a search probing the lock at this moment
    except Timeout as exc:
        other = running(store_path)
        raise LockError(
            f"another index worker (pid {other.pid if other else '?'}) is already running for {store_path}"
        ) from exc
    try:
        with FileLock(str(_file(store_path, ".spawn.lock")), timeout=30):  # the spawner has written our state
            state = running(store_path)
            if state is None or state.pid != os.getpid():
                _write_state(store_path, WorkerInfo(os.getpid(), "index", time.time()))

        def pause(seconds: float) -> bool:
            time.sleep(seconds)
            return False

        return settle(sync, patience, pause)
    finally:
        with contextlib.suppress(OSError, ValueError):
            path = _file(store_path, ".json")
            if int(json.loads(path.read_text())["pid"]) == os.getpid():
                path.unlink()
        life.release()
