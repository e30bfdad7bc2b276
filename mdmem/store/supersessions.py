"""Which lines supersede which (mdmem.files.supersession), as the SQLite index holds them: a part of
``Store``. Written with a file's chunks, in the same transaction; read by search, packs and ``truth``."""

from __future__ import annotations

from collections.abc import Sequence

from mdmem.files.supersession import Supersession
from mdmem.store.sql import rows_in
from mdmem.store.sqlite_db import SqliteDb

_COLUMNS = "path, line, old_path, old_line, new_path, new_line, date"


class SqliteSupersessions:
    def __init__(self, db: SqliteDb) -> None:
        self.db = db

    def write(self, path: str, rows: Sequence[Supersession]) -> None:
        """Add the supersessions ``path`` declares (inside the caller's transaction, after its rows went)."""
        self.db.conn.executemany(
            f"INSERT INTO supersessions({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(path, r.line, r.old_path, r.old_line, r.new_path, r.new_line, r.date) for r in rows],
        )

    def touching(self, paths: Sequence[str]) -> list[Supersession]:
        """The supersessions whose old or new line is in one of ``paths``."""
        found: dict[Supersession, None] = {}
        for column in ("old_path", "new_path"):
            sql = f"SELECT {_COLUMNS} FROM supersessions WHERE {column} IN ({{marks}})"
            for r in rows_in(self.db.conn, sql, paths):
                found.setdefault(Supersession(r[0], int(r[1]), r[2], int(r[3]), r[4], int(r[5]), r[6]))
        return list(found)
