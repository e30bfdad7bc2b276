"""Move a corrupt index aside so the next sync rebuilds it from the memory files (they are the truth).

The damaged database (the file the store path points at, with its write-ahead log) is renamed to
``<name>.corrupt-<UTC time>`` beside it, for inspection; only the newest ``KEEP_CORRUPT`` are kept. The
store path then no longer exists, so the next open creates an empty index and a sync fills it. The
embedding cache lived in the damaged file, so the rebuild computes the embeddings again.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from mdmem.store.connection import remove_database
from mdmem.store.generations import live_file, remove_orphans
from mdmem.store.health import KEEP_CORRUPT, MAX_MESSAGE_CHARS, live_inode, read_health, update_health
from mdmem.util.errors import LockError, StoreError

_CORRUPT = re.compile(r"\.corrupt-(\d{8}T\d{6}Z)(?:-(\d+))?")


def repair_corrupt(path: Path, reason: str, seen: int | None, *, wait: float) -> dict[str, Any]:
    """Under the writer lock, move the damaged database ``seen`` (an inode) aside and record it.

    Returns ``{path, at, reason}``; ``path`` is None when another process already replaced that file.
    Raises ``LockError`` when another writer holds the lock longer than ``wait`` seconds, ``StoreError``
    when the folder cannot be written.
    """
    lock = FileLock(f"{path}.lock")
    try:
        lock.acquire(timeout=wait)
    except Timeout as exc:
        raise LockError(f"another mdmem process is writing {path}; it will repair the corrupt index") from exc
    except OSError as exc:
        raise StoreError(f"{reason} It cannot be moved aside: {exc}", kind="corrupt") from exc
    try:
        if seen is None or live_inode(path) != seen:
            return {"path": None, "at": time.time(), "reason": "already replaced by another process"}
        moved = move_aside(path)
    except OSError as exc:
        raise StoreError(
            f"{reason} It cannot be moved aside ({exc.strerror}: {exc.filename}): make its folder writable, or "
            "delete the file",
            kind="corrupt",
        ) from exc
    finally:
        lock.release()
    record = {"path": str(moved), "at": time.time(), "reason": reason[:MAX_MESSAGE_CHARS]}
    history = [*read_health(path).get("movedAside", []), record][-KEEP_CORRUPT:]
    update_health(path, corrupt=None, movedAside=history)
    return record


def move_aside(path: Path, *, keep: int = KEEP_CORRUPT) -> Path:
    """Rename the live database of ``path`` (and its WAL) to a ``.corrupt-<time>`` file; return its path.

    The caller holds the writer lock. Raises ``OSError`` when the folder cannot be written.
    """
    live = live_file(path)
    target = _free_name(path)
    os.replace(live, target)
    wal = Path(f"{live}-wal")
    if wal.exists():
        os.replace(wal, f"{target}-wal")
    for suffix in ("-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{live}{suffix}")
    if path.is_symlink():
        path.unlink()
    remove_orphans(path)
    for old in corrupt_copies(path)[:-keep] if keep > 0 else corrupt_copies(path):
        remove_database(old)
    return target


def corrupt_copies(path: Path) -> list[Path]:
    """The corrupt databases moved aside for ``path``, oldest first."""
    return [p for _, p in _copies(path)]


def _copies(path: Path) -> list[tuple[tuple[str, int], Path]]:
    found = []
    for sibling in path.parent.glob(f"{path.name}.corrupt-*"):
        m = _CORRUPT.fullmatch(sibling.name[len(path.name) :])
        if m:
            found.append(((m.group(1), int(m.group(2) or 0)), sibling))
    return sorted(found)


def _free_name(path: Path) -> Path:
    """``<name>.corrupt-<UTC time>``, with ``-N`` after the newest copy of the same second, so names sort by age."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    same = [n for (when, n), _ in _copies(path) if when == stamp]
    if not same:
        return path.with_name(f"{path.name}.corrupt-{stamp}")
    return path.with_name(f"{path.name}.corrupt-{stamp}-{max(same) + 1}")
