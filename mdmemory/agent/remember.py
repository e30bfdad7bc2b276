"""``remember``: append one timestamped line to today's log (or ``MEMORY.md``), safely under concurrency.

The line goes in with a single ``write`` on a file opened ``O_APPEND`` (never through a symlink), then
``fsync``, all under a file lock beside the file (``.mdmemory.lock`` in the same folder, shared by every
mdmemory process whatever its ``MDMEMORY_HOME``), so concurrent ``remember`` calls never interleave or
lose lines. The folder and the file are created when missing; a new file starts with a heading.

The index needs no flag: the indexer compares each memory file's size and mtime (then content hash) with
what it indexed, so the next search (``sync.onSearch``), the watcher or ``mdmemory index`` picks the line up.
"""

from __future__ import annotations

import errno
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from mdmemory.agent import clock
from mdmemory.agent.fsutil import fsync_dir
from mdmemory.config import AgentConfig
from mdmemory.errors import ConfigError, LockError, WorkspaceError
from mdmemory.workspace import ROOT_FILES, Workspace

LOCK_NAME = ".mdmemory.lock"
LOCK_TIMEOUT_SECONDS = 30.0
LONG_TERM_HEADING = "# Long-term memory"


def remember(
    agent: AgentConfig,
    text: str,
    *,
    long_term: bool = False,
    at: datetime | None = None,
    timeout: float = LOCK_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """Append ``text`` as one timestamped list item and return ``{path, line, created, indexed}``.

    Daily log (default): ``- [HH:MM] text`` in ``memory/YYYY-MM-DD.md`` (today in ``userTimezone``).
    ``long_term``: ``- [YYYY-MM-DD HH:MM] text`` in ``MEMORY.md`` (or an existing ``memory.md``).
    Further lines of a multi-line ``text`` are indented so the entry stays one list item.
    ``indexed`` is always False: the next search or sync indexes the line.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("nothing to remember: the text is empty. Fix: pass the note to store.")
    moment = clock.now(agent, at)
    workspace = Workspace(agent.workspace, agent.memory_search.extra_paths)
    if long_term:
        rel = next((n for n in ROOT_FILES if os.path.lexists(workspace.root / n)), ROOT_FILES[0])
        stamp, heading = moment.strftime("%Y-%m-%d %H:%M"), LONG_TERM_HEADING
    else:
        rel = clock.daily_log(moment.date())
        stamp, heading = moment.strftime("%H:%M"), f"# {moment.date().isoformat()}"
    try:  # first, so that a workspace that cannot exist is reported as such
        (workspace.root / rel).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(workspace.root / rel, exc) from None
    target = workspace.resolve_for_read(rel)  # refuses symlinked folders and files
    line = f"- [{stamp}] " + "\n  ".join(part.rstrip() for part in text.strip().splitlines())
    created = append_line(target, line, heading=heading, timeout=timeout)
    return {"path": rel, "line": line, "created": created, "indexed": False}


def append_line(path: Path, line: str, *, heading: str, timeout: float = LOCK_TIMEOUT_SECONDS) -> bool:
    """Append ``line`` (plus a newline) to ``path`` atomically; True when the file was created.

    A new or empty file gets ``heading`` and a blank line first; a file whose last line has no newline
    gets one before ``line``.
    """
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(path, exc) from None
    try:
        with FileLock(str(folder / LOCK_NAME), timeout=timeout):
            return _append(path, line, heading)
    except Timeout:
        raise LockError(
            f"{folder / LOCK_NAME} stayed locked by another process for {timeout:g} s. Fix: retry."
        ) from None
    except OSError as exc:
        raise _unwritable(path, exc) from None


def _append(path: Path, line: str, heading: str) -> bool:
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    existed = os.path.lexists(path)
    fd = os.open(path, flags, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            prefix = f"{heading}\n\n"
        else:
            prefix = "" if os.pread(fd, 1, size - 1) == b"\n" else "\n"
        data = (prefix + line + "\n").encode("utf-8")
        written = os.write(fd, data)
        while written < len(data):  # a regular file takes it whole; this only guards odd file systems
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
    if not existed:
        fsync_dir(path.parent)
    return not existed


def _unwritable(path: Path, exc: OSError) -> WorkspaceError:
    if exc.errno == errno.ELOOP:
        return WorkspaceError(f"{path} is a symlink: mdmemory never writes through symlinks")
    reason = exc.strerror or str(exc)
    return WorkspaceError(
        f"cannot write {path} ({reason}). Fix: make the workspace writable, or store the note elsewhere."
    )
