"""Which lines supersede which (mdmem.files.supersession) on PostgreSQL: written with a file's chunks in
the store's transaction, per generation like every derived row; read by search, packs and ``truth``."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from mdmem.files.supersession import Supersession
from mdmem.store.pg.connection import borrows
from mdmem.store.pg.view import PgIndexView

_COLUMNS = "path, line, old_path, old_line, new_path, new_line, date"


def delete(cur: Any, s: str, agent: str, gen: int, path: str) -> None:
    """Drop the supersessions ``path`` declares, on the caller's cursor (inside its transaction)."""
    cur.execute(f"DELETE FROM {s}.supersessions WHERE agent_id = %s AND gen = %s AND path = %s", (agent, gen, path))


def add(cur: Any, s: str, agent: str, gen: int, path: str, items: Sequence[Supersession]) -> None:
    """Add the supersessions ``path`` declares, after its rows were deleted (``delete``)."""
    if items:
        cur.executemany(
            f"INSERT INTO {s}.supersessions (agent_id, gen, {_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [(agent, gen, path, r.line, r.old_path, r.old_line, r.new_path, r.new_line, r.date) for r in items],
        )


class PgSupersessions:
    """The supersessions of the generation ``view`` reads."""

    def __init__(self, view: PgIndexView) -> None:
        self.view = view

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return self.view.session()

    @borrows
    def touching(self, paths: Sequence[str]) -> list[Supersession]:
        v = self.view
        rows = v.conn.execute(
            f"SELECT {_COLUMNS} FROM {v.schema}.supersessions WHERE agent_id = %s AND gen = %s "
            "AND (old_path = ANY(%s) OR new_path = ANY(%s))",
            (v.agent_id, v.gen, list(paths), list(paths)),
        ).fetchall()
        found = {Supersession(r[0], int(r[1]), r[2], int(r[3]), r[4], int(r[5]), r[6]): None for r in rows}
        return list(found)
