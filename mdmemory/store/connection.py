"""The one connection factory. Every connection loads sqlite-vec through sqlean.

CPython's own ``sqlite3`` often cannot load extensions (``enable_load_extension`` is missing on many
builds, macOS system Python too), so mdmemory uses ``sqlean.py``: the same DB-API as ``sqlite3`` with a
recent SQLite that loads extensions and ships FTS5 with the trigram tokenizer.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import sqlean
import sqlite_vec

from mdmemory.errors import StoreError

BUSY_TIMEOUT_MS = 15_000
MMAP_BYTES = 1 << 30

DatabaseError = sqlean.DatabaseError
OperationalError = sqlean.OperationalError
Connection = sqlean.Connection


def connect(path: Path | str, *, readonly: bool = False) -> sqlean.Connection:
    """Open ``path`` with sqlite-vec loaded, WAL journal, busy timeout and autocommit mode.

    Writes go through ``transaction(conn)``, which opens ``BEGIN IMMEDIATE`` so a writer never
    deadlocks on upgrade and readers keep reading the last committed state.
    """
    path = Path(path)
    if not readonly:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if readonly:
            conn = sqlean.connect(
                f"file:{path}?mode=ro",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_MS / 1000,
            )
        else:
            conn = sqlean.connect(
                str(path), isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
            )
    except sqlean.Error as exc:
        raise StoreError(f"cannot open index {path}: {exc}; check the folder exists and is writable") from exc
    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
    except (AttributeError, sqlean.Error) as exc:
        conn.close()
        raise StoreError(
            f"cannot load sqlite-vec into {path}: {exc}; reinstall with `pip install --force-reinstall "
            "sqlean.py sqlite-vec`"
        ) from exc
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if not readonly:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlean.Error as exc:
            conn.close()
            raise StoreError(f"cannot open index {path}: {exc}") from exc
        if str(mode).lower() != "wal":
            conn.close()
            raise StoreError(f"cannot switch {path} to WAL mode (got {mode}); is it on a network filesystem?")
        conn.execute("PRAGMA synchronous = NORMAL")
    # Vector and FTS pages are read on every query: map the file instead of copying through the page cache.
    conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
    return conn


@contextlib.contextmanager
def transaction(conn: sqlean.Connection) -> Iterator[sqlean.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception (including KeyboardInterrupt)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")


def remove_database(path: Path) -> None:
    """Delete a database file and its WAL/SHM companions, if present."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")
