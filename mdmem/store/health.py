"""``<index>.health.json``: what went wrong with an index, readable when the index itself is not.

The index cannot record its own failures when it is full, read-only or corrupt, so they are kept in a
small file beside it (see ``mdmem.util.statefile``, which stays writable on a full disk):

- ``lastError``: ``{at, error, kind}`` of the last failed sync or search, cleared by a successful sync;
- ``corrupt``: ``{inode, at, error}`` when a read found the database damaged; the next writer moves that
  file (the same inode) aside and rebuilds the index from the memory files;
- ``movedAside``: the last ``KEEP_CORRUPT`` corrupt files moved aside ``{path, at, reason}``.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from mdmem.util.statefile import read_state_file, write_state_file

KEEP_CORRUPT = 2
MAX_MESSAGE_CHARS = 1000


def health_path(store_path: Path) -> Path:
    return Path(f"{store_path}.health.json")


def read_health(store_path: Path) -> dict[str, Any]:
    return read_state_file(health_path(store_path))


def update_health(store_path: Path, **changes: Any) -> bool:
    """Set (or with None, remove) top-level keys; False when the file could not be written.

    The file is made on the first call, so that its reserved room exists before the disk fills up.
    """
    path = health_path(store_path)
    data = read_state_file(path)
    new = {k: v for k, v in {**data, **changes}.items() if v is not None}
    if new == data and path.exists():
        return True
    try:
        write_state_file(path, new)
    except OSError:
        return False
    return True


def error_entry(message: str, kind: str | None, at: float | None = None) -> dict[str, Any]:
    return {"at": time.time() if at is None else at, "error": message[:MAX_MESSAGE_CHARS], "kind": kind}


def live_inode(store_path: Path) -> int | None:
    with contextlib.suppress(OSError):
        return os.stat(store_path).st_ino
    return None
