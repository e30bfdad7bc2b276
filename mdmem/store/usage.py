"""Use counts (``UsageRow``) as the SQLite index holds them: a part of ``Store``, in its own table beside the
index's rows. Not derived from the files (a rebuild carries them over: copied when it begins,
``SqliteLifecycle.begin_rebuild``, and what was written meanwhile when it ends, ``rows.uses_since``), and
written in batches by the engine's accumulator (mdmem.engine.usage), never once per search."""

from __future__ import annotations

from collections.abc import Sequence

from mdmem.store.rows import UsageRow
from mdmem.store.sqlite_db import SqliteDb

_COLUMNS = "path, chunk, kind, uses, last_used_at"


class SqliteUsage:
    def __init__(self, db: SqliteDb) -> None:
        self.db = db

    def add(self, rows: Sequence[UsageRow], *, replace: bool = False) -> None:
        """Add ``rows``' uses to the counts (one transaction); the latest use time wins. ``replace``: the counts
        become ``rows`` (a copy from another store)."""
        with self.db.tx():
            if replace:
                self.db.conn.execute("DELETE FROM usage")
            self.db.conn.executemany(
                f"INSERT INTO usage({_COLUMNS}) VALUES (?, ?, ?, ?, ?) ON CONFLICT(path, chunk, kind) DO UPDATE "
                "SET uses = uses + excluded.uses, last_used_at = max(last_used_at, excluded.last_used_at)",
                [(r.path, r.chunk, r.kind, r.uses, r.last_used_at) for r in rows],
            )

    def rows(self, path: str | None = None) -> list[UsageRow]:
        """Every count, or those of ``path``, by path, chunk and kind."""
        where, params = ("WHERE path = ?", (path,)) if path is not None else ("", ())
        found = self.db.conn.execute(f"SELECT {_COLUMNS} FROM usage {where} ORDER BY path, chunk, kind", params)
        return [UsageRow(r[0], r[1], r[2], int(r[3]), float(r[4])) for r in found.fetchall()]

    def move(self, old: str, new: str) -> None:
        """The counts of ``old`` become ``new``'s (added to any it has): a file renamed by the lifecycle."""
        with self.db.tx():
            self.db.conn.execute(
                f"INSERT INTO usage({_COLUMNS}) SELECT ?, chunk, kind, uses, last_used_at FROM usage WHERE path = ? "
                "AND true ON CONFLICT(path, chunk, kind) DO UPDATE SET uses = uses + excluded.uses, "
                "last_used_at = max(last_used_at, excluded.last_used_at)",
                (new, old),
            )
            self.db.conn.execute("DELETE FROM usage WHERE path = ?", (old,))
