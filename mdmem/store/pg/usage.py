"""Use counts (``UsageRow``) on PostgreSQL: one agent's rows of the shared ``usage`` table, per agent and not
per generation (a rebuild keeps them), written in batches by the engine's accumulator (mdmem.engine.usage)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from mdmem.store.pg.connection import borrows
from mdmem.store.pg.view import PgIndexView
from mdmem.store.rows import UsageRow

_COLUMNS = "path, chunk, kind, uses, last_used_at"
_UPSERT = (
    "ON CONFLICT (agent_id, path, chunk, kind) DO UPDATE SET uses = {s}.usage.uses + EXCLUDED.uses, "
    "last_used_at = greatest({s}.usage.last_used_at, EXCLUDED.last_used_at)"
)


class PgUsage:
    def __init__(self, view: PgIndexView) -> None:
        self.view = view

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return self.view.session()

    @borrows
    def add(self, rows: Sequence[UsageRow], *, replace: bool = False) -> None:
        """Add ``rows``' uses to the agent's counts (one transaction); the latest use time wins. ``replace``:
        the agent's counts become ``rows`` (a copy from another store)."""
        v = self.view
        with v.conn.transaction(), v.conn.cursor() as cur:
            if replace:
                cur.execute(f"DELETE FROM {v.schema}.usage WHERE agent_id = %s", (v.agent_id,))
            cur.executemany(
                f"INSERT INTO {v.schema}.usage (agent_id, {_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) "
                + _UPSERT.format(s=v.schema),
                [(v.agent_id, r.path, r.chunk, r.kind, r.uses, r.last_used_at) for r in rows],
            )

    @borrows
    def rows(self, path: str | None = None) -> list[UsageRow]:
        v = self.view
        where, params = (" AND path = %s", (v.agent_id, path)) if path is not None else ("", (v.agent_id,))
        found = v.conn.execute(
            f"SELECT {_COLUMNS} FROM {v.schema}.usage WHERE agent_id = %s{where} ORDER BY path, chunk, kind", params
        ).fetchall()
        return [UsageRow(r[0], r[1], r[2], int(r[3]), float(r[4])) for r in found]

    @borrows
    def move(self, old: str, new: str) -> None:
        """The counts of ``old`` become ``new``'s (added to any it has): a file renamed by the lifecycle."""
        v = self.view
        with v.conn.transaction():
            v.conn.execute(
                f"INSERT INTO {v.schema}.usage (agent_id, {_COLUMNS}) SELECT agent_id, %s, chunk, kind, uses, "
                f"last_used_at FROM {v.schema}.usage WHERE agent_id = %s AND path = %s " + _UPSERT.format(s=v.schema),
                (new, v.agent_id, old),
            )
            v.conn.execute(f"DELETE FROM {v.schema}.usage WHERE agent_id = %s AND path = %s", (v.agent_id, old))
