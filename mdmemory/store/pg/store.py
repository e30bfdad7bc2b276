"""One agent's index in the shared PostgreSQL schema: generations, the writer lock, files and their rows.

- **Generations.** Every row belongs to a generation of the agent's index. Readers use the ``live`` one; a
  rebuild writes a ``building`` one beside it and ``switch_live`` makes it live and retires the old one in
  one transaction, so a reader sees the whole old index or the whole new one, never half of each. A
  retired generation is kept ``RETIRED_KEEP_SECONDS`` for the searches still reading it (a reader follows
  the switch at its next ``refresh``), then dropped by a writer (``tidy``); a writer killed mid-rebuild
  leaves a ``building`` generation no reader looks at (the next rebuild drops it).
- **One writer per agent,** across hosts: a session-level advisory lock keyed by the agent id, held by
  ``writer()``; a second writer gets ``LockError`` at once (or after ``wait`` seconds), as with SQLite.
- **Each file's rows are replaced in one transaction** (chunks, keyword postings, vectors, the file row).
- **One workspace per agent**: opened with the agent's ``workspace``, the store claims the index for it at
  its first write and refuses writes and searches from any other workspace (mdmemory.store.pg.claims).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from mdmemory.config.store import HnswConfig
from mdmemory.store.pg import claims, keyword, rows
from mdmemory.store.pg import vectors as vector_sql
from mdmemory.store.pg.connection import DEFAULT_MAX_CONNECTIONS, borrows, shown_url, try_lock, unlock
from mdmemory.store.pg.entries import PgEntryLog
from mdmemory.store.pg.indexing import PgIndexing
from mdmemory.store.pg.schema import check_schema_name, ensure_migrated
from mdmemory.store.pg.searching import PgSearching
from mdmemory.store.rows import ChunkRow, ChunkVectors, FileRow
from mdmemory.util.errors import LockError, StoreError

if TYPE_CHECKING:
    from pathlib import Path

    from mdmemory.store.api import IndexStore

LOCK_POLL_SECONDS = 0.05
RETIRED_KEEP_SECONDS = 60.0  # a retired generation outlives the searches that were reading it by far


def _lock_key(agent_id: str, purpose: str = "writer") -> int:
    """A signed 64-bit advisory lock key for the agent's writer (or embedding) lock."""
    digest = hashlib.sha256(f"mdmemory-{purpose}\0{agent_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PgStore(PgIndexing, PgSearching):
    """The index of ``agent_id`` in schema ``schema`` of the database at ``url``; ``generation`` opens a
    generation being built instead of the live one (a rebuild's writer). With a ``workspace`` (the agent's
    files are on this host), only that workspace may write or search the index (see ``claims``)."""

    write_fault: StoreError | None = None  # a PostgreSQL index has no read-only fallback: a fault is raised
    inode: int | None = None  # not a file

    def __init__(
        self,
        url: str,
        agent_id: str,
        schema: str = "mdmemory",
        *,
        generation: int | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        hnsw: HnswConfig = vector_sql.DEFAULT_HNSW,
        workspace: Path | None = None,
    ) -> None:
        self.url = url
        self.max_connections = max_connections
        self.hnsw = hnsw
        self.agent_id = agent_id
        self.schema = check_schema_name(schema)
        self.claims = claims.Guard(workspace, agent_id, self.schema)
        self.path = f"{shown_url(url)} (schema {self.schema}, agent {agent_id})"
        with self.session() as conn:
            ensure_migrated(conn, url, self.schema)
            self.gen = self._live_generation() if generation is None else generation
        self._building = generation is not None
        # document frequencies by (word, limit), kept while the generation's write counter stays the same
        self._df: tuple[tuple[int, int], dict[tuple[str, int], int]] = ((0, -1), {})
        self._df_terms: tuple[int, dict[str, tuple[int, int, int]]] = (0, {})  # see document_frequencies
        self._indexed: set[tuple[int, int]] = set()  # (generation, dims) known to have a valid HNSW index

    def close(self) -> None:
        """Nothing to give back: a store holds a connection only while a call (or ``session``) runs."""

    def entry_log(self) -> PgEntryLog:
        """The agent's retained entries and tombstones: each call on a connection from the pool, or on the
        one the calling thread's block holds (the writer's, under its lock: ``mdmemory.index.entries.snapshot``)."""
        return PgEntryLog(None, self.schema, self.agent_id, url=self.url, max_connections=self.max_connections)

    def reopen(self) -> None:
        """Follow the live generation (the next call borrows a connection the server has not dropped)."""
        if not self._building:
            self.gen = self._live_generation()

    @contextlib.contextmanager
    def reading(self) -> Iterator[Any]:
        """The calls of a search on one connection and one snapshot (a read-only REPEATABLE READ
        transaction): the chunks its vector and keyword searches found are still there when it reads them,
        whatever a writer commits meanwhile (each call would otherwise see the latest commit)."""
        from psycopg import IsolationLevel, pq

        with self.session() as conn:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:  # a block in a transaction: it decides
                yield conn
                return
            conn.isolation_level, conn.read_only = IsolationLevel.REPEATABLE_READ, True
            try:
                with conn.transaction():
                    yield conn
            finally:
                if not conn.broken:  # (a broken one is discarded by the pool)
                    conn.isolation_level, conn.read_only = None, None

    def ensure_writable(self) -> None:
        """Nothing to check ahead: PostgreSQL reports a write it refuses when it happens."""

    def __enter__(self) -> PgStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- generations ------------------------------------------------------------------------------
    @borrows
    def _live_generation(self) -> int:
        """The live generation (the first one is created live, empty)."""
        s = self.schema
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute(  # the first generation of an agent that has none yet
                f"INSERT INTO {s}.generations (agent_id, gen, state) SELECT %s, 1, 'live' WHERE NOT EXISTS "
                f"(SELECT 1 FROM {s}.generations WHERE agent_id = %s) ON CONFLICT DO NOTHING",
                (self.agent_id, self.agent_id),
            )
            cur.execute(f"SELECT gen FROM {s}.generations WHERE agent_id = %s AND state = 'live'", (self.agent_id,))
            return int(cur.fetchone()[0])

    @borrows
    def refresh(self) -> bool:
        """Follow a switch another process made, and read the live generation's totals with it (one round
        trip; see ``keyword.RemembersTotals``); True when the live generation changed."""
        if self._building:
            return False
        s = self.schema
        columns = ", ".join(f"t.{c}" for c in keyword.TOTALS_COLUMNS.split(", "))
        row = self.conn.execute(
            f"SELECT g.gen, {columns}, {claims.COLUMNS} FROM {s}.generations g LEFT JOIN {s}.token_totals t "
            f"ON t.agent_id = g.agent_id AND t.gen = g.gen LEFT JOIN {s}.workspaces w ON w.agent_id = g.agent_id "
            "WHERE g.agent_id = %s AND g.state = 'live'",
            (self.agent_id,),
        ).fetchone()
        if row is not None:  # (no live generation yet: nothing to read)
            self.claims.check(claims.Claim.from_row(row[-4:]))
        live = int(row[0]) if row else self._live_generation()
        changed, self.gen = live != self.gen, live
        self._totals = keyword.Totals(live, *(int(x or 0) for x in row[1:-4])) if row else None
        return changed

    @borrows
    def claim_workspace(self) -> dict[str, Any] | None:
        """Make this store's workspace the one the agent's index belongs to, whatever workspace had it
        (``mdmemory index --take-over``, which then rebuilds the index from it); the claim it replaced."""
        with self.writer(wait=60.0, claiming=False):
            return self.claims.take(self.conn)

    # -- what the indexer asks of a store (mdmemory.store.api.IndexStore) -------------------------
    def writing(self, wait: float) -> contextlib.AbstractContextManager[None]:
        return self.writer(wait)

    @contextlib.contextmanager
    def embedding_turn(self) -> Iterator[bool]:
        key = _lock_key(self.agent_id, "embed")
        with self.session():  # phase 2 writes on the connection that holds the lock
            got = try_lock(self.url, key)
            try:
                yield got
            finally:
                if got:
                    unlock(self.url, key)

    @borrows
    def tidy(self, keep_seconds: float = RETIRED_KEEP_SECONDS) -> None:
        """Drop the generations retired more than ``keep_seconds`` ago (an abandoned ``building`` one is
        dropped by the next ``begin_rebuild``), and index the vectors a killed writer left without one."""
        s = self.schema
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute(
                f"SELECT gen FROM {s}.generations WHERE agent_id = %s AND state = 'retired' AND retired_at < %s",
                (self.agent_id, time.time() - keep_seconds),
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
        if dims is None or (self.gen, dims) in self._indexed:
            return
        with self.conn.cursor() as cur:
            small = (
                vector_sql.generation_vectors(cur, self.schema, self.agent_id, self.gen) < vector_sql.HNSW_MIN_VECTORS
            )
        if small:
            return
        key = _lock_key(f"{self.agent_id}\0{self.gen}", "index")
        if not try_lock(self.url, key):
            return
        try:
            if vector_sql.build_index(self.conn, self.schema, self.agent_id, self.gen, dims, self.hnsw):
                self.analyze()  # a bulk load: the planner's statistics and the visibility map after it
            self._indexed.add((self.gen, dims))
        finally:
            unlock(self.url, key)

    def begin_rebuild(self) -> PgStore:
        """A new ``building`` generation, written through a store of its own; the embedding cache is the
        agent's, not a generation's, so the rebuild finds every vector embedded before."""
        gen = self.begin_generation()
        return PgStore(
            self.url, self.agent_id, self.schema, generation=gen, max_connections=self.max_connections, hnsw=self.hnsw
        )

    def finish_rebuild(self, built: IndexStore) -> None:
        assert isinstance(built, PgStore)
        built.settle()
        built.close()
        self.switch_live(built.gen)
        self.analyze()

    @borrows
    def abandon_rebuild(self, built: IndexStore) -> None:
        """Drop the generation being built; if the server cannot be asked now (the failure that ended the
        rebuild may be a lost connection), the next ``begin_rebuild`` drops it: no reader ever sees it."""
        import psycopg

        assert isinstance(built, PgStore)
        built.close()
        with contextlib.suppress(psycopg.Error):
            with self.conn.transaction(), self.conn.cursor() as cur:
                self._drop_generation(cur, built.gen)

    @borrows
    def begin_generation(self, identity: dict[str, Any] | None = None) -> int:
        """A new, empty ``building`` generation for a rebuild (an abandoned one is dropped first)."""
        s = self.schema
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute(f"SELECT gen FROM {s}.generations WHERE agent_id = %s AND state = 'building'", (self.agent_id,))
            for (old,) in cur.fetchall():
                self._drop_generation(cur, int(old))
            cur.execute(f"SELECT coalesce(max(gen), 0) + 1 FROM {s}.generations WHERE agent_id = %s", (self.agent_id,))
            gen = int(cur.fetchone()[0])
            cur.execute(
                f"INSERT INTO {s}.generations (agent_id, gen, state, identity) VALUES (%s, %s, 'building', %s)",
                (self.agent_id, gen, json.dumps(identity) if identity is not None else None),
            )
        return gen

    @borrows
    def switch_live(self, gen: int) -> None:
        """Make ``gen`` live and retire the old live generation, in one transaction (see ``tidy``)."""
        s = self.schema
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.execute(
                f"SELECT gen FROM {s}.generations WHERE agent_id = %s AND state = 'live' FOR UPDATE", (self.agent_id,)
            )
            cur.execute(
                f"UPDATE {s}.generations SET state = 'live' WHERE agent_id = %s AND gen = %s AND state = 'building'",
                (self.agent_id, gen),
            )
            if cur.rowcount != 1:
                raise StoreError(f"generation {gen} of agent {self.agent_id!r} is not being built", kind="error")
            cur.execute(
                f"UPDATE {s}.generations SET state = 'retired', retired_at = %s WHERE agent_id = %s AND state = 'live' "
                "AND gen <> %s",
                (time.time(), self.agent_id, gen),
            )
        self.gen = gen

    @borrows
    def analyze(self) -> None:
        """Refresh the planner's statistics after a bulk load (a copy, a rebuild): without them PostgreSQL
        plans the keyword queries as if every table were empty (LoCoMo: 390 ms a search instead of 54)."""
        for table in ("chunks", "postings", "grams", "vectors", "token_totals"):
            # postings vacuumed too: BM25 reads them index-only once their pages are marked all-visible
            self.conn.execute(f"{'VACUUM (ANALYZE)' if table == 'postings' else 'ANALYZE'} {self.schema}.{table}")

    def _drop_generation(self, cur: Any, gen: int) -> None:
        s, a = self.schema, self.agent_id
        cur.execute(f"SELECT DISTINCT dims FROM {s}.vectors WHERE agent_id = %s AND gen = %s", (a, gen))
        dims = [int(r[0]) for r in cur.fetchall()]
        for table in ("vectors", "postings", "grams", "chunks", "files", "meta", "token_totals", "generations"):
            cur.execute(f"DELETE FROM {s}.{table} WHERE agent_id = %s AND gen = %s", (a, gen))
        vector_sql.drop_indexes(cur, s, a, gen, dims)

    # -- the writer lock --------------------------------------------------------------------------
    @contextlib.contextmanager
    def writer(self, wait: float = 0.0, *, claiming: bool = True) -> Iterator[None]:
        """Hold the agent's writer lock (every host, every process) for the block, on a connection borrowed
        for the block: everything the block does on this thread goes through it, and it goes back to the
        pool when the block ends. With a workspace, the index is claimed for it or refused (``claims.hold``)
        first, unless ``claiming`` is False (a take-over)."""
        key = _lock_key(self.agent_id)
        deadline = time.monotonic() + wait
        with self.session():
            while not try_lock(self.url, key):
                if time.monotonic() >= deadline:
                    raise LockError(f"another process is writing the index of agent {self.agent_id!r}; wait for it")
                time.sleep(LOCK_POLL_SECONDS)
            try:
                if claiming:
                    self.claims.hold(self.conn)
                yield
            finally:
                unlock(self.url, key)

    # -- meta and files ---------------------------------------------------------------------------
    @borrows
    def get_meta(self, key: str, default: Any = None, gen: int | None = None) -> Any:
        row = self.conn.execute(
            f"SELECT value FROM {self.schema}.meta WHERE agent_id = %s AND gen = %s AND key = %s",
            (self.agent_id, self.gen if gen is None else gen, key),
        ).fetchone()
        return row[0] if row else default

    @borrows
    def set_meta(self, key: str, value: Any, gen: int | None = None) -> None:
        with self.conn.transaction():
            self.conn.execute(
                f"INSERT INTO {self.schema}.meta (agent_id, gen, key, value) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (agent_id, gen, key) DO UPDATE SET value = EXCLUDED.value",
                (self.agent_id, self.gen if gen is None else gen, key, json.dumps(value)),
            )

    @borrows
    def files(self, gen: int | None = None) -> dict[str, FileRow]:
        rows = self.conn.execute(
            f"SELECT f.path, f.source, f.hash, f.mtime, f.size, f.encoding_errors, (SELECT count(*) FROM "
            f"{self.schema}.chunks c WHERE c.agent_id = f.agent_id AND c.gen = f.gen AND c.path = f.path), "
            f"f.indexed_at FROM {self.schema}.files f WHERE f.agent_id = %s AND f.gen = %s",
            (self.agent_id, self.gen if gen is None else gen),
        ).fetchall()
        return {
            r[0]: FileRow(r[0], r[1], r[2], float(r[3]), int(r[4]), int(r[5]), int(r[6]), float(r[7])) for r in rows
        }

    @borrows
    def replace_file(
        self,
        file: FileRow,
        chunks: Sequence[ChunkRow],
        vectors: Sequence[ChunkVectors | None] | None,
        gen: int | None = None,
    ) -> list[int]:
        """Replace every row of ``file.path`` with ``chunks`` (and their vectors: see the SQLite store's
        ``replace_file``; None for a chunk marks it pending) in one transaction. Returns the chunk ids."""
        if vectors is not None and len(vectors) != len(chunks):
            raise StoreError(f"{file.path}: vectors for {len(vectors)} chunks, but {len(chunks)} chunks")
        s, a, g = self.schema, self.agent_id, self.gen if gen is None else gen
        with self.conn.transaction(), self.conn.cursor() as cur:
            self._delete_rows(cur, file.path, g)
            pending = [vectors is not None and vectors[i] is None for i in range(len(chunks))]
            ids = rows.insert_chunks(cur, s, a, g, file, chunks, pending)
            if vectors is not None:
                stored = [
                    (cid, digest, row)
                    for cid, cv in zip(ids, vectors, strict=True)
                    if cv is not None
                    for digest, row in zip(cv[0], cv[1], strict=True)
                ]
                vector_sql.add_vectors(cur, s, a, g, stored)
            cur.execute(
                f"INSERT INTO {s}.files (agent_id, gen, path, source, hash, mtime, size, encoding_errors, indexed_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (agent_id, gen, path) DO UPDATE SET "
                "source = EXCLUDED.source, hash = EXCLUDED.hash, mtime = EXCLUDED.mtime, size = EXCLUDED.size, "
                "encoding_errors = EXCLUDED.encoding_errors, indexed_at = EXCLUDED.indexed_at",
                (a, g, file.path, file.source, file.hash, file.mtime, file.size, file.encoding_errors, time.time()),
            )
        self._totals = None
        return ids

    @borrows
    def delete_file(self, path: str, gen: int | None = None) -> None:
        """Remove a file and every row derived from it, in one transaction."""
        g = self.gen if gen is None else gen
        with self.conn.transaction(), self.conn.cursor() as cur:
            self._delete_rows(cur, path, g)
            cur.execute(
                f"DELETE FROM {self.schema}.files WHERE agent_id = %s AND gen = %s AND path = %s",
                (self.agent_id, g, path),
            )
        self._totals = None

    def _delete_rows(self, cur: Any, path: str, gen: int) -> None:
        cur.execute(
            f"SELECT id FROM {self.schema}.chunks WHERE agent_id = %s AND gen = %s AND path = %s",
            (self.agent_id, gen, path),
        )
        keyword.remove_chunks(cur, self.schema, self.agent_id, gen, [int(r[0]) for r in cur.fetchall()])

    # -- reading ----------------------------------------------------------------------------------
