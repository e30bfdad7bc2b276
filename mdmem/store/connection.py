"""The one connection factory. Every connection loads sqlite-vec through sqlean.

CPython's own ``sqlite3`` often cannot load extensions (``enable_load_extension`` is missing on many
builds, macOS system Python too), so mdmem uses ``sqlean.py``: the same DB-API as ``sqlite3`` with a
recent SQLite that loads extensions and ships FTS5 with the trigram tokenizer.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import sqlean

from mdmem.store.faults import fault_kind, store_fault
from mdmem.util.errors import StoreError

BUSY_TIMEOUT_MS = 15_000
MMAP_BYTES = 1 << 30

DatabaseError = sqlean.DatabaseError
OperationalError = sqlean.OperationalError
Connection = sqlean.Connection


def connect(path: Path | str, *, readonly: bool = False) -> sqlean.Connection:
    """Open ``path`` with sqlite-vec loaded, WAL journal, busy timeout and autocommit mode.

    Writes go through ``transaction(conn)``, which opens ``BEGIN IMMEDIATE`` so a writer never
    deadlocks on upgrade and readers keep reading the last committed state. A read-only connection to an
    index in a folder it cannot write (no ``-shm`` file can be made: a read-only mount, a 0555 folder)
    reads the file as immutable, which is exact when no write-ahead log is left beside it. Failures raise
    ``StoreError`` naming the fix.
    """
    path = Path(path)
    try:
        if not readonly:
            path.parent.mkdir(parents=True, exist_ok=True)
            return _configure(_open(str(path), uri=False), path, readonly=False)
        try:
            return _configure(_open(f"file:{quote(str(path))}?mode=ro", uri=True), path, readonly=True)
        except sqlean.OperationalError as exc:
            # no -shm can be made beside it: "unable to open" or (a WAL-mode file) "attempt to write a
            # readonly database" (SQLITE_READONLY_CANTINIT), though nothing is written
            if fault_kind(exc) not in ("cantopen", "read-only") or not path.exists() or _has_wal(path):
                raise
        return _configure(_open(f"file:{quote(str(path))}?mode=ro&immutable=1", uri=True), path, readonly=True)
    except StoreError:
        raise
    except (sqlean.Error, OSError) as exc:
        raise store_fault(exc, path) from exc


@functools.cache
def vec_extension_path() -> str:
    """sqlite-vec's loadable extension (``sqlite_vec.loadable_path()``), found without importing the
    ``sqlite_vec`` package: its ``__init__`` imports numpy, which a keyword-only command never needs."""
    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or spec.origin is None:
        raise StoreError("sqlite-vec is not installed: pip install sqlite-vec (a dependency of mdmem)")
    return os.path.normpath(os.path.join(os.path.dirname(spec.origin), "vec0"))


def _open(target: str, *, uri: bool) -> sqlean.Connection:
    return sqlean.connect(
        target, uri=uri, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
    )


def _configure(conn: sqlean.Connection, path: Path, *, readonly: bool) -> sqlean.Connection:
    try:
        try:
            conn.enable_load_extension(True)
            conn.load_extension(vec_extension_path())
            conn.enable_load_extension(False)
        except (AttributeError, sqlean.Error) as exc:
            raise StoreError(
                f"cannot load sqlite-vec into {path}: {exc}; reinstall with `pip install --force-reinstall "
                "sqlean.py sqlite-vec`"
            ) from exc
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if readonly:
            conn.execute("PRAGMA user_version").fetchone()  # reads the header: a bad file fails here, not later
        else:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"cannot switch {path} to WAL mode (got {mode}); is it on a network filesystem?")
            conn.execute("PRAGMA synchronous = NORMAL")
        # Vector and FTS pages are read on every query: map the file instead of copying through the page cache.
        conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
    except BaseException:
        conn.close()
        raise
    return conn


def _has_wal(path: Path) -> bool:
    try:
        return os.path.getsize(f"{os.path.realpath(path)}-wal") > 0
    except OSError:
        return False


@contextlib.contextmanager
def transaction(conn: sqlean.Connection) -> Iterator[sqlean.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception (including KeyboardInterrupt).

    SQLite may already have rolled the transaction back itself (a full disk, an I/O error, a failed
    COMMIT): then there is nothing to roll back, and the error that caused it is the one raised.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlean.Error):
                conn.execute("ROLLBACK")
        raise


def remove_database(path: Path) -> None:
    """Delete a database file and its WAL/SHM companions, if present."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")
