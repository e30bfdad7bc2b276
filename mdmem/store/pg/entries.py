"""One agent's retained entries and tombstones in the shared PostgreSQL schema (``mdmem.store.api.EntryLog``).

What lets ``mdmem serve`` replicas that do not hold an agent's files retain and forget for it (README
"Service replicas"): a retain there commits a ``pending`` row holding the rendered block before it answers;
the host that holds the files writes the block into ``sessions/<day>.md`` and marks it ``written`` (the block
is dropped then: the files are the truth). A forget commits a tombstone, ``applied`` once that host removed
the block from its files. Each call is one transaction; ``retain`` checks the tombstone and inserts in the
same one, and an entry with a tombstone is never returned as pending, whatever order two replicas commit in.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

from mdmem.files.pending import PendingEntry, Tombstone
from mdmem.store.api import EntryStatus
from mdmem.store.pg.connection import DEFAULT_MAX_CONNECTIONS, Borrowing, borrows


class PgEntryLog(Borrowing):
    """The entries of ``agent_id`` in ``schema``: on ``conn`` when given (with ``url``: this log's, given back
    or closed by ``close``), else each call on a connection borrowed from the pool for ``url`` (or the one
    the calling thread's block holds: a store's log, ``PgStore.entry_log``)."""

    def __init__(
        self,
        conn: Any,
        schema: str,
        agent_id: str,
        *,
        url: str | None = None,
        pooled: bool = True,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self._own = conn
        self.schema = schema
        self.agent_id = agent_id
        self.url = url or ""
        self.max_connections = max_connections
        self._pooled = pooled

    @property
    def conn(self) -> Any:
        return self._own if self._own is not None else super().conn

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext(self._own) if self._own is not None else super().session()

    def close(self) -> None:
        if self._own is not None and self.url:
            from mdmem.store.pg.connection import give_back

            if self._pooled:
                give_back(self.url, self._own)
            else:
                self._own.close()
            self._own = None

    def __enter__(self) -> PgEntryLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @borrows
    def _one(self, sql: str, params: Sequence[Any]) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        self.conn.commit()
        return row

    # -- retaining ------------------------------------------------------------------------------------
    @borrows
    def retain(self, entry_id: str, day: str, block: str) -> EntryStatus:
        s, a = self.schema, self.agent_id
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {s}.tombstones WHERE agent_id = %s AND entry_id = %s", (a, entry_id))
            if cur.fetchone() is not None:
                return "forgotten"
            cur.execute(
                f"INSERT INTO {s}.entries (agent_id, entry_id, day, block, state, received_at) "
                "VALUES (%s, %s, %s, %s, 'pending', %s) ON CONFLICT DO NOTHING RETURNING seq",
                (a, entry_id, day, block, time.time()),
            )
            if cur.fetchone() is not None:
                return "retained"
            cur.execute(f"SELECT state FROM {s}.entries WHERE agent_id = %s AND entry_id = %s", (a, entry_id))
            row = cur.fetchone()
        return "forgotten" if row is not None and row[0] == "forgotten" else "duplicate"

    @borrows
    def record(self, entry_id: str, day: str) -> None:
        with self.conn.transaction():
            self.conn.execute(
                f"INSERT INTO {self.schema}.entries (agent_id, entry_id, day, state, received_at, written_at) "
                "VALUES (%s, %s, %s, 'written', %s, %s) ON CONFLICT DO NOTHING",
                (self.agent_id, entry_id, day, time.time(), time.time()),
            )

    def known(self, entry_id: str) -> EntryStatus | None:
        s = self.schema
        row = self._one(
            f"SELECT EXISTS (SELECT 1 FROM {s}.tombstones WHERE agent_id = %s AND entry_id = %s), "
            f"(SELECT state FROM {s}.entries WHERE agent_id = %s AND entry_id = %s)",
            (self.agent_id, entry_id, self.agent_id, entry_id),
        )
        if row[0] or row[1] == "forgotten":
            return "forgotten"
        return "duplicate" if row[1] is not None else None

    # -- what the files' host does --------------------------------------------------------------------
    @borrows
    def pending(self, limit: int = 1000) -> list[PendingEntry]:
        s = self.schema
        rows = self.conn.execute(
            f"SELECT e.entry_id, e.day, e.block FROM {s}.entries e WHERE e.agent_id = %s AND e.state = 'pending' AND "
            f"NOT EXISTS (SELECT 1 FROM {s}.tombstones t WHERE t.agent_id = e.agent_id AND t.entry_id = e.entry_id) "
            "ORDER BY e.seq LIMIT %s",
            (self.agent_id, int(limit)),
        ).fetchall()
        self.conn.commit()
        return [PendingEntry(r[0], r[1], r[2] or "") for r in rows]

    @borrows
    def written(self, entry_ids: Sequence[str]) -> None:
        if not entry_ids:
            return
        with self.conn.transaction():
            self.conn.execute(
                f"UPDATE {self.schema}.entries SET state = 'written', block = NULL, written_at = %s "
                "WHERE agent_id = %s AND entry_id = ANY(%s) AND state = 'pending'",
                (time.time(), self.agent_id, list(entry_ids)),
            )

    @borrows
    def forget(self, entry_ids: Sequence[str], reason: str | None, *, applied: bool) -> int:
        ids = list(dict.fromkeys(entry_ids))
        if not ids:
            return 0
        s, now = self.schema, time.time()
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {s}.tombstones (agent_id, entry_id, reason, forgotten_at, applied) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (agent_id, entry_id) "
                f"DO UPDATE SET applied = {s}.tombstones.applied OR EXCLUDED.applied",
                [(self.agent_id, i, reason, now, applied) for i in ids],
            )
            cur.execute(
                f"UPDATE {s}.entries SET state = 'forgotten', block = NULL "
                "WHERE agent_id = %s AND entry_id = ANY(%s) AND state <> 'forgotten'",
                (self.agent_id, ids),
            )
            return int(cur.rowcount)

    @borrows
    def unapplied(self) -> list[Tombstone]:
        rows = self.conn.execute(
            f"SELECT entry_id, reason FROM {self.schema}.tombstones WHERE agent_id = %s AND NOT applied ORDER BY seq",
            (self.agent_id,),
        ).fetchall()
        self.conn.commit()
        return [Tombstone(r[0], r[1]) for r in rows]

    @borrows
    def applied(self, entry_ids: Sequence[str]) -> None:
        if not entry_ids:
            return
        with self.conn.transaction():
            self.conn.execute(
                f"UPDATE {self.schema}.tombstones SET applied = true WHERE agent_id = %s AND entry_id = ANY(%s)",
                (self.agent_id, list(entry_ids)),
            )

    def has_work(self) -> bool:
        s = self.schema
        row = self._one(
            f"SELECT EXISTS (SELECT 1 FROM {s}.entries e WHERE e.agent_id = %s AND e.state = 'pending' AND NOT EXISTS "
            f"(SELECT 1 FROM {s}.tombstones t WHERE t.agent_id = e.agent_id AND t.entry_id = e.entry_id)) "
            f"OR EXISTS (SELECT 1 FROM {s}.tombstones WHERE agent_id = %s AND NOT applied)",
            (self.agent_id, self.agent_id),
        )
        return bool(row[0])

    def version(self) -> tuple[int, int]:
        s = self.schema
        row = self._one(
            f"SELECT (SELECT coalesce(max(seq), 0) FROM {s}.entries WHERE agent_id = %s), "
            f"(SELECT coalesce(max(seq), 0) FROM {s}.tombstones WHERE agent_id = %s)",
            (self.agent_id, self.agent_id),
        )
        return int(row[0]), int(row[1])

    def stats(self) -> dict[str, int]:
        s = self.schema
        row = self._one(
            f"SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'written'), "
            f"(SELECT count(*) FROM {s}.tombstones WHERE agent_id = %s), "
            f"(SELECT count(*) FROM {s}.tombstones WHERE agent_id = %s AND NOT applied) "
            f"FROM {s}.entries WHERE agent_id = %s",
            (self.agent_id, self.agent_id, self.agent_id),
        )
        return {"pending": int(row[0]), "written": int(row[1]), "tombstones": int(row[2]), "unapplied": int(row[3])}

    # -- which pod the agent serves (mdmem.service.pods) ----------------------------------------------
    @borrows
    def claim_pod(self, pod: str) -> tuple[str, float]:
        s, a = self.schema, self.agent_id
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute(
                f"INSERT INTO {s}.pods (agent_id, pod, claimed_at) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (a, pod, time.time()),
            )
            cur.execute(f"SELECT pod, claimed_at FROM {s}.pods WHERE agent_id = %s", (a,))
            row = cur.fetchone()
        return str(row[0]), float(row[1])

    def pod_claim(self) -> tuple[str, float] | None:
        row = self._one(f"SELECT pod, claimed_at FROM {self.schema}.pods WHERE agent_id = %s", (self.agent_id,))
        return (str(row[0]), float(row[1])) if row is not None else None
