"""The generations of one agent's PostgreSQL index: the live one, a rebuild's ``building`` one, the retired
ones kept a while for the searches still reading them, and the HNSW index of each (see mdmem.store.pg.store).
A part of ``PgStore``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from mdmem.store.pg import claims, keyword
from mdmem.store.pg import vectors as vector_sql
from mdmem.store.pg.connection import borrows, try_lock, unlock
from mdmem.store.pg.view import PgIndexView, lock_key
from mdmem.util.errors import StoreError

RETIRED_KEEP_SECONDS = 60.0  # a retired generation outlives the searches that were reading it by far


class PgGenerations:
    """The generations of ``view``'s agent; ``guard`` checks the workspace claim read with the live one,
    ``vec_dims`` says the dimensions of the generation's vectors (None: none yet)."""

    def __init__(self, view: PgIndexView, guard: claims.Guard, vec_dims: Callable[[], int | None]) -> None:
        self.view = view
        self.claims = guard
        self.vec_dims = vec_dims

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return self.view.session()

    # -- generations ------------------------------------------------------------------------------
    @borrows
    def live_generation(self) -> int:
        """The live generation (the first one is created live, empty)."""
        s = self.view.schema
        with self.view.conn.transaction(), self.view.conn.cursor() as cur:
            cur.execute(  # the first generation of an agent that has none yet
                f"INSERT INTO {s}.generations (agent_id, gen, state) SELECT %s, 1, 'live' WHERE NOT EXISTS "
                f"(SELECT 1 FROM {s}.generations WHERE agent_id = %s) ON CONFLICT DO NOTHING",
                (self.view.agent_id, self.view.agent_id),
            )
            cur.execute(
                f"SELECT gen FROM {s}.generations WHERE agent_id = %s AND state = 'live'", (self.view.agent_id,)
            )
            return int(cur.fetchone()[0])

    @borrows
    def refresh(self) -> bool:
        """Follow a switch another process made, and read the live generation's totals with it (one round
        trip; see mdmem.store.pg.view); True when the live generation changed."""
        if self.view.building:
            return False
        s = self.view.schema
        columns = ", ".join(f"t.{c}" for c in keyword.TOTALS_COLUMNS.split(", "))
        row = self.view.conn.execute(
            f"SELECT g.gen, {columns}, {claims.COLUMNS} FROM {s}.generations g LEFT JOIN {s}.token_totals t "
            f"ON t.agent_id = g.agent_id AND t.gen = g.gen LEFT JOIN {s}.workspaces w ON w.agent_id = g.agent_id "
            "WHERE g.agent_id = %s AND g.state = 'live'",
            (self.view.agent_id,),
        ).fetchone()
        if row is not None:  # (no live generation yet: nothing to read)
            self.claims.check(claims.Claim.from_row(row[-4:]))
        live = int(row[0]) if row else self.live_generation()
        changed, self.view.gen = live != self.view.gen, live
        self.view.remembered = keyword.Totals(live, *(int(x or 0) for x in row[1:-4])) if row else None
        return changed

    @borrows
    def tidy(self, keep_seconds: float = RETIRED_KEEP_SECONDS) -> None:
        """Drop the generations retired more than ``keep_seconds`` ago (an abandoned ``building`` one is
        dropped by the next ``begin_rebuild``), and index the vectors a killed writer left without one."""
        s = self.view.schema
        with self.view.conn.transaction(), self.view.conn.cursor() as cur:
            cur.execute(
                f"SELECT gen FROM {s}.generations WHERE agent_id = %s AND state = 'retired' AND retired_at < %s",
                (self.view.agent_id, time.time() - keep_seconds),
            )
            for (old,) in cur.fetchall():
                self._drop_generation(cur, int(old))
        self.settle()

    @borrows
    def settle(self) -> None:
        """Build the HNSW index of the generation's vectors if it has none and holds ``HNSW_MIN_VECTORS``
        (see ``vectors.add_vectors``: a first index or a rebuild is loaded without one, then indexed at
        once, ~4x cheaper than vector by vector). One process builds it (an advisory lock per agent); the
        others go on without waiting."""
        dims = self.vec_dims()
        if dims is None or (self.view.gen, dims) in self.view.indexed:
            return
        with self.view.conn.cursor() as cur:
            small = (
                vector_sql.generation_vectors(cur, self.view.schema, self.view.agent_id, self.view.gen)
                < vector_sql.HNSW_MIN_VECTORS
            )
        if small:
            return
        key = lock_key(f"{self.view.agent_id}\0{self.view.gen}", "index")
        if not try_lock(self.view.url, key):
            return
        try:
            if vector_sql.build_index(
                self.view.conn, self.view.schema, self.view.agent_id, self.view.gen, dims, self.view.hnsw
            ):
                self.analyze()  # a bulk load: the planner's statistics and the visibility map after it
            self.view.indexed.add((self.view.gen, dims))
        finally:
            unlock(self.view.url, key)

    def finish_rebuild(self, built: PgGenerations) -> None:
        """Index the built generation's vectors, make it live, refresh the planner's statistics."""
        built.settle()
        self.switch_live(built.view.gen)
        self.analyze()

    @borrows
    def abandon_rebuild(self, built: PgGenerations) -> None:
        """Drop the generation being built; if the server cannot be asked now (the failure that ended the
        rebuild may be a lost connection), the next ``begin_rebuild`` drops it: no reader ever sees it."""
        import psycopg

        with contextlib.suppress(psycopg.Error):
            with self.view.conn.transaction(), self.view.conn.cursor() as cur:
                self._drop_generation(cur, built.view.gen)

    @borrows
    def begin_generation(self, identity: dict[str, Any] | None = None) -> int:
        """A new, empty ``building`` generation for a rebuild (an abandoned one is dropped first)."""
        s = self.view.schema
        with self.view.conn.transaction(), self.view.conn.cursor() as cur:
            cur.execute(
                f"SELECT gen FROM {s}.generations WHERE agent_id = %s AND state = 'building'", (self.view.agent_id,)
            )
            for (old,) in cur.fetchall():
                self._drop_generation(cur, int(old))
            cur.execute(
                f"SELECT coalesce(max(gen), 0) + 1 FROM {s}.generations WHERE agent_id = %s", (self.view.agent_id,)
            )
            gen = int(cur.fetchone()[0])
            cur.execute(
                f"INSERT INTO {s}.generations (agent_id, gen, state, identity) VALUES (%s, %s, 'building', %s)",
                (self.view.agent_id, gen, json.dumps(identity) if identity is not None else None),
            )
        return gen

    @borrows
    def switch_live(self, gen: int) -> None:
        """Make ``gen`` live and retire the old live generation, in one transaction (see ``tidy``)."""
        s = self.view.schema
        with self.view.conn.transaction(), self.view.conn.cursor() as cur:
            cur.execute(
                f"SELECT gen FROM {s}.generations WHERE agent_id = %s AND state = 'live' FOR UPDATE",
                (self.view.agent_id,),
            )
            cur.execute(
                f"UPDATE {s}.generations SET state = 'live' WHERE agent_id = %s AND gen = %s AND state = 'building'",
                (self.view.agent_id, gen),
            )
            if cur.rowcount != 1:
                raise StoreError(f"generation {gen} of agent {self.view.agent_id!r} is not being built", kind="error")
            cur.execute(
                f"UPDATE {s}.generations SET state = 'retired', retired_at = %s WHERE agent_id = %s AND state = 'live' "
                "AND gen <> %s",
                (time.time(), self.view.agent_id, gen),
            )
        self.view.gen = gen

    @borrows
    def analyze(self) -> None:
        """Refresh the planner's statistics after a bulk load (a copy, a rebuild): without them PostgreSQL
        plans the keyword queries as if every table were empty (LoCoMo: 390 ms a search instead of 54)."""
        for table in ("chunks", "postings", "grams", "vectors", "token_totals"):
            # postings vacuumed too: BM25 reads them index-only once their pages are marked all-visible
            self.view.conn.execute(
                f"{'VACUUM (ANALYZE)' if table == 'postings' else 'ANALYZE'} {self.view.schema}.{table}"
            )

    def _drop_generation(self, cur: Any, gen: int) -> None:
        s, a = self.view.schema, self.view.agent_id
        cur.execute(f"SELECT DISTINCT dims FROM {s}.vectors WHERE agent_id = %s AND gen = %s", (a, gen))
        dims = [int(r[0]) for r in cur.fetchall()]
        for table in (
            "vectors",
            "postings",
            "grams",
            "chunks",
            "supersessions",
            "files",
            "meta",
            "token_totals",
            "generations",
        ):
            cur.execute(f"DELETE FROM {s}.{table} WHERE agent_id = %s AND gen = %s", (a, gen))
        vector_sql.drop_indexes(cur, s, a, gen, dims)
