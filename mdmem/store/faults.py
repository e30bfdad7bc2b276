"""What went wrong with the index, as a ``StoreError`` that names the path and the fix.

SQLite reports a full disk, a read-only file, a damaged file or an I/O error through its own error codes;
the operating system reports the same through ``errno`` when mdmem touches files beside the index (the
writer lock, a generation symlink, a state file). Both map to one ``StoreError.kind``: ``full``,
``read-only``, ``corrupt``, ``io`` or ``error``. The memory files are the truth and the index can always be
rebuilt from them, so every message says what to do, never just what failed.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

from mdmem.util.errors import StoreError
from mdmem.util.redaction.credentials import scrub

NEARLY_FULL_BYTES = 1 << 20  # an I/O error with less free space than this is treated as a full disk

_SQLITE_KINDS = {
    3: "read-only",  # SQLITE_PERM
    8: "read-only",  # SQLITE_READONLY
    10: "io",  # SQLITE_IOERR
    11: "corrupt",  # SQLITE_CORRUPT
    13: "full",  # SQLITE_FULL
    14: "cantopen",  # SQLITE_CANTOPEN: a missing or unwritable folder, or no room for the -wal/-shm files
    26: "corrupt",  # SQLITE_NOTADB
}
_SQLITE_TEXT = (
    ("disk is full", "full"),
    ("malformed", "corrupt"),
    ("not a database", "corrupt"),
    ("readonly", "read-only"),
    ("unable to open", "cantopen"),
    ("disk i/o error", "io"),
)
_ERRNO_KINDS = {
    errno.ENOSPC: "full",
    errno.EDQUOT: "full",
    errno.EROFS: "read-only",
    errno.EACCES: "read-only",
    errno.EPERM: "read-only",
    errno.EIO: "io",
}


def fault_kind(exc: BaseException) -> str:
    """``full``, ``read-only``, ``corrupt``, ``cantopen``, ``io`` or ``error`` for a SQLite or OS error."""
    if isinstance(exc, StoreError):
        return exc.kind
    sqlean = sys.modules.get("sqlean")  # a SQLite error means it is loaded; a command without an index never is
    if sqlean is not None and isinstance(exc, sqlean.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int) and (code & 0xFF) in _SQLITE_KINDS:
            return _SQLITE_KINDS[code & 0xFF]
        text = str(exc).lower()
        return next((kind for needle, kind in _SQLITE_TEXT if needle in text), "error")
    if isinstance(exc, OSError) and exc.errno is not None:
        return _ERRNO_KINDS.get(exc.errno, "error")
    return "error"


def free_bytes(path: Path) -> int | None:
    """Space this process may still write on the file system holding ``path`` (None when unknown)."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        st = os.statvfs(probe)
    except OSError:
        return None
    blocks = st.f_bfree if os.geteuid() == 0 else st.f_bavail  # root may use the reserved blocks
    return int(blocks * st.f_frsize)


def unwritable_reason(path: Path) -> str | None:
    """Why the index at ``path`` cannot be written (folder, file or its journal), or None if it can."""
    path = Path(path)
    live = Path(os.path.realpath(path))
    folder = live.parent
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if _read_only_fs(probe):
        return f"{probe} is on a read-only file system"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"the folder {probe} is not writable"
    for name in (live, Path(f"{live}-wal"), Path(f"{live}-shm")):
        if name.exists() and not os.access(name, os.W_OK):
            return f"{name} is not writable"
    return None


def store_errors(*more: type[BaseException]) -> tuple[type[BaseException], ...]:
    """The database errors of the stores in use (and ``more``): SQLite's once it was used, and psycopg's once
    PostgreSQL was (none can happen before its module is imported, and importing it for nothing costs
    start-up: ``mdmem get`` opens no index)."""
    sqlean, psycopg = sys.modules.get("sqlean"), sys.modules.get("psycopg")  # likewise for SQLite
    return (
        *more,
        *((sqlean.DatabaseError,) if sqlean is not None else ()),
        *((psycopg.Error,) if psycopg is not None else ()),
    )


def store_fault(exc: BaseException, path: Path) -> StoreError:
    """A ``StoreError`` for ``exc`` (raised while using the index at ``path``) that says how to fix it."""
    if isinstance(exc, StoreError):
        return exc
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(exc, psycopg.Error):  # the PostgreSQL store: not about ``path``
        lost = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
        detail = scrub((str(exc).strip().splitlines() or [type(exc).__name__])[0])
        fix = "check that the server runs and is reachable; searches answer again once it is" if lost else ""
        return StoreError(
            f"PostgreSQL failed ({detail}){'; ' + fix if fix else ''}", kind="unavailable" if lost else "error"
        )
    path = Path(path)
    kind = fault_kind(exc)
    detail = _detail(exc)
    free = free_bytes(path)
    if kind in ("io", "cantopen", "error") and free is not None and free < NEARLY_FULL_BYTES:
        kind = "full"
    if kind == "cantopen":
        reason = unwritable_reason(path)
        if reason is not None:
            kind, detail = "read-only", f"{reason}; {detail}"
        else:
            kind = "error"
    return StoreError(fault_message(kind, path, detail, free), kind=kind)


def fault_message(kind: str, path: Path, detail: str, free: int | None = None) -> str:
    if kind == "full":
        room = f", {human_size(free)} free there" if free is not None else ""
        return (
            f"no space left for the index {path} ({detail}{room}): free some space on that disk, or move the "
            "index with memorySearch.store.path; searches keep answering from the last complete index and the "
            "next sync (or `mdmem index`) catches up"
        )
    if kind == "read-only":
        return (
            f"the index {path} cannot be written ({detail}): make its folder and files writable, or set "
            "memorySearch.store.path to a writable place; searches still answer from it"
        )
    if kind == "corrupt":
        return (
            f"the index {path} is corrupt ({detail}); the memory files are the truth: run `mdmem index` to "
            "move it aside and rebuild it from them (embeddings are computed again)"
        )
    if kind == "io":
        return (
            f"disk I/O error on the index {path} ({detail}): check the disk that holds it; "
            "`mdmem index --force` rebuilds the index from the memory files"
        )
    return f"cannot use the index {path}: {detail}"


def _detail(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def human_size(n: int | None) -> str:
    if n is None:
        return "unknown"
    if n < 1024:
        return f"{n} bytes"
    value = float(n)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1024
        if value < 1024 or unit == "TB":
            break
    return f"{value:.1f} {unit}"
