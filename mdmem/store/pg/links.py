"""Links between memory files and front-matter aliases (mdmem.files.links) on PostgreSQL: written with a
file's chunks in the store's transaction, per generation; read by search, packs, ``links`` and status."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from mdmem.files.links import Link
from mdmem.store.pg.connection import borrows
from mdmem.store.pg.view import PgIndexView

_COLUMNS = "path, line, target, name, heading, kind"


def delete(cur: Any, s: str, agent: str, gen: int, path: str) -> None:
    cur.execute(f"DELETE FROM {s}.links WHERE agent_id = %s AND gen = %s AND path = %s", (agent, gen, path))


def add(cur: Any, s: str, agent: str, gen: int, path: str, links: Sequence[Link]) -> None:
    if links:
        cur.executemany(
            f"INSERT INTO {s}.links (agent_id, gen, {_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [(agent, gen, path, k.line, k.target, k.name, k.heading, k.kind) for k in links],
        )


class PgLinks:
    """The links of the generation ``view`` reads."""

    def __init__(self, view: PgIndexView) -> None:
        self.view = view

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return self.view.session()

    @borrows
    def find(
        self, paths: Sequence[str] | None = None, targets: Sequence[str] = (), names: Sequence[str] = ()
    ) -> list[Link]:
        v = self.view
        every = paths is None and not targets and not names
        where = "" if every else " AND (path = ANY(%s) OR target = ANY(%s) OR name = ANY(%s))"
        params: tuple[Any, ...] = (v.agent_id, v.gen)
        if not every:
            params += (list(paths or ()), list(targets), list(names))
        rows = v.conn.execute(
            f"SELECT {_COLUMNS} FROM {v.schema}.links WHERE agent_id = %s AND gen = %s{where} ORDER BY path, line",
            params,
        ).fetchall()
        return [Link(r[0], int(r[1]), r[2], r[3], r[4], r[5]) for r in rows]
