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
  its first write and refuses writes and searches from any other workspace (mdmem.store.pg.claims).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from mdmem.config.store import HnswConfig
from mdmem.files.links import Link
from mdmem.files.supersession import Supersession
from mdmem.store.pg import claims
from mdmem.store.pg import links as link_sql
from mdmem.store.pg import supersessions as supersession_sql
from mdmem.store.pg import vectors as vector_sql
from mdmem.store.pg.connection import DEFAULT_MAX_CONNECTIONS, borrows, shown_url, try_lock, unlock
from mdmem.store.pg.entries import PgEntryLog
from mdmem.store.pg.filerows import PgFiles
from mdmem.store.pg.generations import RETIRED_KEEP_SECONDS, PgGenerations
from mdmem.store.pg.indexing import PgIndexing
from mdmem.store.pg.schema import check_schema_name, ensure_migrated
from mdmem.store.pg.searching import PgSearching
from mdmem.store.pg.usage import PgUsage
from mdmem.store.pg.view import PgIndexView, lock_key
from mdmem.store.rows import ChunkRow, ChunkVectors, FileRow, UsageRow
from mdmem.util.errors import LockError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import numpy as np

    from mdmem.store.api import IndexStore

LOCK_POLL_SECONDS = 0.05


class PgStore:
    """The index of ``agent_id`` in schema ``schema`` of the database at ``url``; ``generation`` opens a
    generation being built instead of the live one (a rebuild's writer). With a ``workspace`` (the agent's
    files are on this host), only that workspace may write or search the index (see ``claims``).

    It holds the writer lock itself; the rest is done by its parts over one ``PgIndexView`` — meta and files'
    rows (``filerows``), chunks, vectors and the embedding cache (``indexing``), search (``searching``), the
    generations (``generations``), supersessions, links and uses — and it hands each ``IndexStore`` call to
    its part."""

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
        schema = check_schema_name(schema)
        self.view = PgIndexView(url, max_connections, agent_id, schema, hnsw, building=generation is not None)
        self.claims = claims.Guard(workspace, agent_id, schema)
        self.path = f"{shown_url(url)} (schema {schema}, agent {agent_id})"
        self.indexing = PgIndexing(self.view)
        self.searching = PgSearching(self.view)
        self.generations = PgGenerations(self.view, self.claims, self.indexing.vec_dims)
        self.supersessions = supersession_sql.PgSupersessions(self.view)
        self.links = link_sql.PgLinks(self.view)
        self.usage = PgUsage(self.view)
        self.file_rows = PgFiles(self.view)
        with self.session() as conn:
            ensure_migrated(conn, url, schema)
            self.view.gen = self.generations.live_generation() if generation is None else generation

    @property
    def url(self) -> str:
        return self.view.url

    @property
    def agent_id(self) -> str:
        return self.view.agent_id

    @property
    def schema(self) -> str:
        return self.view.schema

    @property
    def gen(self) -> int:
        """The generation this store reads and writes."""
        return self.view.gen

    def session(self) -> contextlib.AbstractContextManager[Any]:
        """Hold one connection for a series of calls (each call borrows one otherwise)."""
        return self.view.session()

    @property
    def conn(self) -> Any:
        """The connection of the ``session`` block this thread is in."""
        return self.view.conn

    def close(self) -> None:
        """Nothing to give back: a store holds a connection only while a call (or ``session``) runs."""

    def entry_log(self) -> PgEntryLog:
        """The agent's retained entries and tombstones: each call on a connection from the pool, or on the
        one the calling thread's block holds (the writer's, under its lock: ``mdmem.index.entries.snapshot``)."""
        return PgEntryLog(None, self.schema, self.agent_id, url=self.url, max_connections=self.view.max_connections)

    def reopen(self) -> None:
        """Follow the live generation (the next call borrows a connection the server has not dropped)."""
        if not self.view.building:
            self.view.gen = self.generations.live_generation()

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

    @borrows
    def claim_workspace(self) -> dict[str, Any] | None:
        """Make this store's workspace the one the agent's index belongs to, whatever workspace had it
        (``mdmem index --take-over``, which then rebuilds the index from it); the claim it replaced."""
        with self.writer(wait=60.0, claiming=False):
            return self.claims.take(self.view.conn)

    # -- what the indexer asks of a store (mdmem.store.api.IndexStore) -------------------------
    def writing(self, wait: float) -> contextlib.AbstractContextManager[None]:
        return self.writer(wait)

    @contextlib.contextmanager
    def embedding_turn(self) -> Iterator[bool]:
        key = lock_key(self.view.agent_id, "embed")
        with self.session():  # phase 2 writes on the connection that holds the lock
            got = try_lock(self.view.url, key)
            try:
                yield got
            finally:
                if got:
                    unlock(self.view.url, key)

    # -- the writer lock --------------------------------------------------------------------------
    @contextlib.contextmanager
    def writer(self, wait: float = 0.0, *, claiming: bool = True) -> Iterator[None]:
        """Hold the agent's writer lock (every host, every process) for the block, on a connection borrowed
        for the block: everything the block does on this thread goes through it, and it goes back to the
        pool when the block ends. With a workspace, the index is claimed for it or refused (``claims.hold``)
        first, unless ``claiming`` is False (a take-over)."""
        key = lock_key(self.view.agent_id)
        deadline = time.monotonic() + wait
        with self.session():
            while not try_lock(self.view.url, key):
                if time.monotonic() >= deadline:
                    raise LockError(
                        f"another process is writing the index of agent {self.view.agent_id!r}; wait for it"
                    )
                time.sleep(LOCK_POLL_SECONDS)
            try:
                if claiming:
                    self.claims.hold(self.view.conn)
                yield
            finally:
                unlock(self.view.url, key)

    # -- meta and files (mdmem.store.pg.filerows) -----------------------------------------------
    def get_meta(self, key: str, default: Any = None, gen: int | None = None) -> Any:
        return self.file_rows.get_meta(key, default, gen)

    def set_meta(self, key: str, value: Any, gen: int | None = None) -> None:
        self.file_rows.set_meta(key, value, gen)

    def files(self, gen: int | None = None) -> dict[str, FileRow]:
        return self.file_rows.files(gen)

    def replace_file(
        self,
        file: FileRow,
        chunks: Sequence[ChunkRow],
        vectors: Sequence[ChunkVectors | None] | None,
        supersessions: Sequence[Supersession] = (),
        links: Sequence[Link] = (),
        gen: int | None = None,
    ) -> list[int]:
        """Replace every row of ``file.path`` in one transaction (``PgFiles.replace_file``)."""
        return self.file_rows.replace_file(file, chunks, vectors, supersessions, links, gen)

    def delete_file(self, path: str, gen: int | None = None) -> None:
        """Remove a file and every row derived from it, in one transaction."""
        self.file_rows.delete_file(path, gen)

    # -- generations (mdmem.store.pg.generations) ----------------------------------------------
    def begin_rebuild(self) -> PgStore:
        """A new ``building`` generation, written through a store of its own; the embedding cache is the
        agent's, not a generation's, so the rebuild finds every vector embedded before."""
        v = self.view
        gen = self.generations.begin_generation()
        return PgStore(v.url, v.agent_id, v.schema, generation=gen, max_connections=v.max_connections, hnsw=v.hnsw)

    def finish_rebuild(self, built: IndexStore) -> None:
        assert isinstance(built, PgStore)
        built.close()
        self.generations.finish_rebuild(built.generations)

    def abandon_rebuild(self, built: IndexStore) -> None:
        """Drop the generation being built (see ``PgGenerations.abandon_rebuild``)."""
        assert isinstance(built, PgStore)
        built.close()
        self.generations.abandon_rebuild(built.generations)

    # -- the parts' calls -------------------------------------------------------------------------
    def delete_meta(self, key: str) -> None:
        return self.indexing.delete_meta(key)

    def touch_file(self, path: str, mtime: float, size: int) -> None:
        return self.indexing.touch_file(path, mtime, size)

    def chunk_count(self) -> int:
        return self.indexing.chunk_count()

    def pending_count(self) -> int:
        return self.indexing.pending_count()

    def chunks_by_ids(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        return self.indexing.chunks_by_ids(ids)

    def supersessions_touching(self, paths: Sequence[str]) -> list[Supersession]:
        return self.supersessions.touching(paths)

    def find_links(
        self, paths: Sequence[str] | None = None, targets: Sequence[str] = (), names: Sequence[str] = ()
    ) -> list[Link]:
        return self.links.find(paths, targets, names)

    def add_usage(self, rows: Sequence[UsageRow], *, replace: bool = False) -> None:
        self.usage.add(rows, replace=replace)

    def usage_rows(self, path: str | None = None) -> list[UsageRow]:
        return self.usage.rows(path)

    def move_usage(self, old: str, new: str) -> None:
        self.usage.move(old, new)

    def chunks_of(self, path: str) -> list[ChunkRow]:
        return self.indexing.chunks_of(path)

    def paths_with_text(self, needles: Sequence[str], source: str) -> list[str]:
        return self.indexing.paths_with_text(needles, source)

    def counts(self) -> dict[str, int]:
        return self.indexing.counts()

    def vec_dims(self) -> int | None:
        return self.indexing.vec_dims()

    def pending_chunks(self, limit: int, after_id: int = 0) -> list[ChunkRow]:
        return self.indexing.pending_chunks(limit, after_id)

    def add_vectors(self, items: Sequence[tuple[ChunkRow, ChunkVectors]]) -> int:
        return self.indexing.add_vectors(items)

    def chunk_vectors(self, chunk_ids: Sequence[int]) -> dict[int, ChunkVectors]:
        return self.indexing.chunk_vectors(chunk_ids)

    def vectors_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        return self.indexing.vectors_by_hash(hashes)

    def chunk_similarities(self, chunk_ids: Sequence[int], query: np.ndarray) -> dict[int, float]:
        return self.indexing.chunk_similarities(chunk_ids, query)

    def vector_similarities(self, chunk_ids: Sequence[int], query: np.ndarray) -> dict[int, dict[str, float]]:
        return self.indexing.vector_similarities(chunk_ids, query)

    def cache_get(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        return self.indexing.cache_get(provider, model, key, hashes)

    def cache_put(self, provider: str, model: str, key: str, items: dict[str, np.ndarray]) -> None:
        return self.indexing.cache_put(provider, model, key, items)

    def cache_touch(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> None:
        return self.indexing.cache_touch(provider, model, key, hashes)

    def cache_prune(self, max_entries: int) -> int:
        return self.indexing.cache_prune(max_entries)

    def cache_entries(self) -> Iterator[tuple[tuple[str, str, str], dict[str, np.ndarray]]]:
        return self.indexing.cache_entries()

    def keyword(self, words: Sequence[str], k: int) -> list[tuple[int, float]]:
        return self.searching.keyword(words, k)

    def keyword_matches(self, words: Sequence[str], k: int) -> list[tuple[int, float, set[str]]]:
        return self.searching.keyword_matches(words, k)

    def term_frequency_at_least(self, word: str, limit: int) -> int:
        return self.searching.term_frequency_at_least(word, limit)

    def document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        return self.searching.document_frequencies(terms)

    def trigram(self, grams: Sequence[str], k: int) -> list[tuple[int, float]]:
        return self.searching.trigram(grams, k)

    def substring(self, needles: Sequence[str], k: int) -> list[tuple[int, float]]:
        return self.searching.substring(needles, k)

    def start_knn(self, query: np.ndarray, k: int) -> Callable[[], list[tuple[int, float]]]:
        return self.searching.start_knn(query, k)

    def knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        return self.searching.knn(query, k)

    def refresh(self) -> bool:
        return self.generations.refresh()

    def tidy(self, keep_seconds: float = RETIRED_KEEP_SECONDS) -> None:
        return self.generations.tidy(keep_seconds)

    def settle(self) -> None:
        return self.generations.settle()

    def begin_generation(self, identity: dict[str, Any] | None = None) -> int:
        return self.generations.begin_generation(identity)

    def switch_live(self, gen: int) -> None:
        return self.generations.switch_live(gen)

    def analyze(self) -> None:
        return self.generations.analyze()
