"""Links between memory files and front-matter aliases (mdmem.files.links), as the SQLite index holds them: a
part of ``Store``. Written with a file's chunks, in the same transaction; read by search, packs, ``links`` and
status."""

from __future__ import annotations

from collections.abc import Sequence

from mdmem.files.links import Link
from mdmem.store.sql import rows_in
from mdmem.store.sqlite_db import SqliteDb

_COLUMNS = "path, line, target, name, heading, kind"


class SqliteLinks:
    def __init__(self, db: SqliteDb) -> None:
        self.db = db

    def add(self, path: str, links: Sequence[Link]) -> None:
        """Add the links ``path`` holds (inside the caller's transaction, after its rows went)."""
        self.db.conn.executemany(
            f"INSERT INTO links({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            [(path, k.line, k.target, k.name, k.heading, k.kind) for k in links],
        )

    def delete(self, path: str) -> None:
        self.db.conn.execute("DELETE FROM links WHERE path = ?", (path,))

    def find(
        self, paths: Sequence[str] | None = None, targets: Sequence[str] = (), names: Sequence[str] = ()
    ) -> list[Link]:
        """The links and aliases held by one of ``paths``, or to one of ``targets``, or naming one of ``names``
        (all of them when ``paths`` is None and nothing else is asked), by file and line."""
        if paths is None and not targets and not names:
            rows = self.db.conn.execute(f"SELECT {_COLUMNS} FROM links ORDER BY path, line").fetchall()
            return [Link(r[0], int(r[1]), r[2], r[3], r[4], r[5]) for r in rows]
        found: dict[Link, None] = {}
        for column, keys in (("path", paths or ()), ("target", targets), ("name", names)):
            for r in rows_in(self.db.conn, f"SELECT {_COLUMNS} FROM links WHERE {column} IN ({{marks}})", keys):
                found.setdefault(Link(r[0], int(r[1]), r[2], r[3], r[4], r[5]))
        return sorted(found, key=lambda k: (k.path, k.line))
