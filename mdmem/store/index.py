"""The per-agent index: files, chunks (+ FTS5 via triggers), vectors (vec0) and the embedding cache.

``Store`` is the SQLite ``IndexStore``: it opens the file (read-only when it cannot write); the rest is done
by its parts over the one open index (``SqliteDb``), each in its own module — files and chunks
(``filerows``), keyword search (``fts``), vector writes and reads (``vecwrite``, ``knn``), the embedding cache
(``cache``), supersessions, links, uses, locks and rebuilds (``lifecycle``) — and ``Store`` hands each
``IndexStore`` call to its part.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlean

from mdmem.files.links import Link
from mdmem.files.supersession import Supersession
from mdmem.store.cache import EmbeddingCache
from mdmem.store.connection import connect
from mdmem.store.faults import fault_message, store_fault, unwritable_reason
from mdmem.store.filerows import SqliteFiles
from mdmem.store.fts import FtsSearch
from mdmem.store.knn import VectorReads
from mdmem.store.lifecycle import SqliteLifecycle
from mdmem.store.links import SqliteLinks
from mdmem.store.rows import ChunkRow, ChunkVectors, FileRow, UsageRow
from mdmem.store.schema import check_ours, check_readable_schema, migrate
from mdmem.store.sqlite_db import SqliteDb
from mdmem.store.supersessions import SqliteSupersessions
from mdmem.store.usage import SqliteUsage
from mdmem.store.vecwrite import VectorWrites
from mdmem.util.errors import StoreError

if TYPE_CHECKING:
    import numpy as np

    from mdmem.config.store import IvfConfig
    from mdmem.store.api import IndexStore

WRITE_RETRY_SECONDS = 5.0  # a writer opened read-only checks this often whether it can write again
_SHORT_REASONS = {  # why a writer fell back to read-only, for messages that already name the index
    "read-only": "it cannot be opened for writing",
    "full": "no space left on its disk",
    "io": "a disk I/O error when opening it for writing",
}


class Store:
    """One agent's SQLite index. Every write to a file's rows happens in one transaction."""

    def __init__(self, path: Path | str, *, readonly: bool = False, ivf: IvfConfig | None = None) -> None:
        """Open (creating and migrating as needed) the index at ``path``.

        A writer whose file or folder cannot be written (permissions, an immutable or read-only file
        system, no room for the journal) still opens, read-only: searches answer and ``readonly_reason``
        says why; ``ensure_writable()`` raises that reason as a ``StoreError`` before any write.
        """
        self.path = Path(path)
        self.wants_write = not readonly
        self.readonly = readonly
        self.readonly_reason: str | None = None
        self.write_fault: StoreError | None = None
        self._write_retry_at = 0.0
        self.db = SqliteDb(self.path)
        self.keyword_search = FtsSearch(self.db, self.chunk_count)
        self.vector_writes = VectorWrites(self.db)
        self.vectors = VectorReads(self.db, self.vector_writes, self.chunk_count, ivf)
        self.cache = EmbeddingCache(self.db)
        self.supersessions = SqliteSupersessions(self.db)
        self.links = SqliteLinks(self.db)
        self.file_rows = SqliteFiles(self.db, self.vector_writes, self.supersessions, self.links)
        self.usage = SqliteUsage(self.db)
        self.lifecycle = SqliteLifecycle(self.path, functools.partial(Store, ivf=ivf), self.reopen)
        self.db.conn = self._open()

    @property
    def conn(self) -> Any:
        """The connection to the index (a new one after ``reopen``)."""
        return self.db.conn

    @property
    def inode(self) -> int | None:
        """The inode of the database file this store opened (the store path's target)."""
        return self._inode

    def _open(self) -> sqlean.Connection:
        self._inode = _inode(self.path)
        self._write_retry_at = time.monotonic() + WRITE_RETRY_SECONDS
        conn = None
        if self.wants_write:
            fault = None
            why = unwritable_reason(self.path)
            if why is not None:
                if not self.path.exists():
                    why = f"cannot create it: {why}"
                fault = StoreError(fault_message("read-only", self.path, why), kind="read-only")
                if not self.path.exists():
                    raise fault
            else:
                try:
                    conn = self._open_writer()
                except StoreError as exc:
                    if exc.kind not in _SHORT_REASONS or not self.path.exists():
                        raise
                    fault, why = exc, _SHORT_REASONS[exc.kind]
            self.write_fault = fault
            self.readonly = fault is not None
            self.readonly_reason = why if fault is not None else None
        if conn is None:
            conn = connect(self.path, readonly=True)
            try:
                check_readable_schema(conn, self.path, self.readonly_reason)
            except BaseException:
                conn.close()
                raise
        self._inode = _inode(self.path)
        return conn

    def _open_writer(self) -> sqlean.Connection:
        conn = connect(self.path)
        try:
            check_ours(conn, self.path)
            migrate(conn)
        except StoreError:
            conn.close()
            raise
        except sqlean.Error as exc:
            conn.close()
            raise store_fault(exc, self.path) from exc
        return conn

    def claim_workspace(self) -> dict[str, Any] | None:
        """Nothing to claim: the index file is this host's workspace's alone (see ``IndexStore``)."""
        return None

    def ensure_writable(self) -> None:
        """Raise ``StoreError`` (kind ``read-only`` or ``full``) when this store cannot be written now.

        A store that fell back to read-only is reopened first, so a fixed folder or a freed disk is used
        again without restarting the process.
        """
        if not self.wants_write:
            raise StoreError(f"the index {self.path} was opened read-only", kind="read-only")
        if self.readonly:
            self.reopen()
        if self.write_fault is not None:
            raise self.write_fault

    def refresh(self) -> bool:
        """Reopen when a rebuild swapped a new index in (the store path points at another file), and now and
        then when a writer that fell back to read-only may be able to write again."""
        if _inode(self.path) != self._inode:
            self.reopen()
            return True
        if self.readonly and self.wants_write and time.monotonic() >= self._write_retry_at:
            if unwritable_reason(self.path) is None:
                self.reopen()
                return True
            self._write_retry_at = time.monotonic() + WRITE_RETRY_SECONDS
        return False

    def reopen(self) -> None:
        self.conn.close()
        self.db.reset()
        self.db.conn = self._open()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- files and chunks (``SqliteFiles``) ---------------------------------------------------------
    def files(self) -> dict[str, FileRow]:
        return self.file_rows.files()

    def touch_file(self, path: str, mtime: float, size: int) -> None:
        """Record a new mtime/size for a file whose content hash did not change."""
        self.file_rows.touch_file(path, mtime, size)

    def replace_file(
        self,
        file: FileRow,
        chunks: Sequence[ChunkRow],
        vectors: Sequence[ChunkVectors | None] | None,
        supersessions: Sequence[Supersession] = (),
        links: Sequence[Link] = (),
    ) -> list[int]:
        """Replace every row of ``file.path`` in one transaction (``SqliteFiles.replace_file``)."""
        return self.file_rows.replace_file(file, chunks, vectors, supersessions, links)

    def delete_file(self, path: str) -> None:
        """Remove a file and every row derived from it, in one transaction."""
        self.file_rows.delete_file(path)

    def chunk_count(self) -> int:
        return self.file_rows.chunk_count()

    def chunks_by_ids(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        return self.file_rows.chunks_by_ids(ids)

    def chunks_of(self, path: str) -> list[ChunkRow]:
        return self.file_rows.chunks_of(path)

    def paths_with_text(self, needles: Sequence[str], source: str) -> list[str]:
        return self.file_rows.paths_with_text(needles, source)

    def supersessions_touching(self, paths: Sequence[str]) -> list[Supersession]:
        return self.supersessions.touching(paths)

    def find_links(
        self, paths: Sequence[str] | None = None, targets: Sequence[str] = (), names: Sequence[str] = ()
    ) -> list[Link]:
        return self.links.find(paths, targets, names)

    def add_usage(self, rows: Sequence[UsageRow], *, replace: bool = False) -> None:
        if self.readonly:  # no reopen here: the engine's accumulator drops what a read-only index cannot keep
            raise StoreError(f"the index {self.path} is read-only: uses are not recorded", kind="read-only")
        try:
            self.usage.add(rows, replace=replace)
        except sqlean.Error as exc:
            raise store_fault(exc, self.path) from exc

    def usage_rows(self, path: str | None = None) -> list[UsageRow]:
        return self.usage.rows(path)

    def move_usage(self, old: str, new: str) -> None:
        self.usage.move(old, new)

    def entry_log(self) -> None:
        """SQLite keeps no entries: a replica without an agent's files needs the shared PostgreSQL store."""
        return None

    def counts(self) -> dict[str, int]:
        one = lambda sql: int(self.conn.execute(sql).fetchone()[0])  # noqa: E731
        vectors = self.vector_count()
        return {
            "files": one("SELECT count(*) FROM files"),
            "chunks": one("SELECT count(*) FROM chunks"),
            "vectors": vectors,
            "cacheEntries": one("SELECT count(*) FROM embedding_cache"),
        }

    # -- handed to the parts ------------------------------------------------------------------------
    def get_meta(self, key: str, default: Any = None) -> Any:
        return self.db.get_meta(key, default)

    def set_meta(self, key: str, value: Any) -> None:
        self.db.set_meta(key, value)

    def delete_meta(self, key: str) -> None:
        self.db.delete_meta(key)

    def keyword(self, terms: Sequence[str], k: int) -> list[tuple[int, float]]:
        return self.keyword_search.keyword(terms, k)

    def keyword_matches(self, terms: Sequence[str], k: int) -> list[tuple[int, float, set[str]]]:
        return self.keyword_search.keyword_matches(terms, k)

    def term_frequency_at_least(self, term: str, limit: int) -> int:
        return self.keyword_search.term_frequency_at_least(term, limit)

    def trigram(self, grams: Sequence[str], k: int) -> list[tuple[int, float]]:
        return self.keyword_search.trigram(grams, k)

    def substring(self, needles: Sequence[str], k: int) -> list[tuple[int, float]]:
        return self.keyword_search.substring(needles, k)

    def vec_dims(self) -> int | None:
        return self.vector_writes.vec_dims()

    def vector_count(self) -> int:
        return self.vector_writes.vector_count()

    def pending_count(self) -> int:
        return self.vector_writes.pending_count()

    def pending_chunks(self, limit: int, after_id: int = 0) -> list[ChunkRow]:
        return self.vector_writes.pending_chunks(limit, after_id)

    def add_vectors(self, items: Sequence[tuple[ChunkRow, ChunkVectors]]) -> int:
        return self.vector_writes.add_vectors(items)

    def knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        return self.vectors.knn(query, k)

    def start_knn(self, query: np.ndarray, k: int) -> Callable[[], list[tuple[int, float]]]:
        return self.vectors.start_knn(query, k)

    def chunk_similarities(self, chunk_ids: Sequence[int], query: np.ndarray) -> dict[int, float]:
        return self.vectors.chunk_similarities(chunk_ids, query)

    def vector_similarities(self, chunk_ids: Sequence[int], query: np.ndarray) -> dict[int, dict[str, float]]:
        return self.vectors.vector_similarities(chunk_ids, query)

    def chunk_vectors(self, chunk_ids: Sequence[int]) -> dict[int, ChunkVectors]:
        return self.vectors.chunk_vectors(chunk_ids)

    def vectors_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        return self.vectors.vectors_by_hash(hashes)

    def cache_get(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        return self.cache.cache_get(provider, model, key, hashes)

    def cache_put(self, provider: str, model: str, key: str, items: dict[str, np.ndarray]) -> None:
        self.cache.cache_put(provider, model, key, items)

    def cache_touch(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> None:
        self.cache.cache_touch(provider, model, key, hashes)

    def cache_prune(self, max_entries: int) -> int:
        return self.cache.cache_prune(max_entries)

    def cache_entries(self) -> Iterator[tuple[tuple[str, str, str], dict[str, np.ndarray]]]:
        return self.cache.entries()

    def reading(self) -> contextlib.AbstractContextManager[None]:
        return self.lifecycle.reading()

    def writing(self, wait: float) -> contextlib.AbstractContextManager[None]:
        return self.lifecycle.writing(wait)

    def embedding_turn(self) -> contextlib.AbstractContextManager[bool]:
        return self.lifecycle.embedding_turn()

    def tidy(self) -> None:
        self.lifecycle.tidy()

    def settle(self) -> None:
        """File the vectors of a large index into lists (mdmem.store.ivf), one process at a time."""
        self.lifecycle.settle()
        if self.readonly or not self.vector_writes.needs_settle(self.vectors.ivf.exact_below):
            return  # nothing to do: no lock taken (a sync on every search asks)
        with self.lifecycle.embedding_turn() as mine:
            if mine and not self.readonly:
                self.vector_writes.settle(self.vectors.ivf.exact_below)

    def begin_rebuild(self) -> Store:
        fresh = self.lifecycle.begin_rebuild()
        assert isinstance(fresh, Store)
        return fresh

    def finish_rebuild(self, built: IndexStore) -> None:
        built.settle()  # the new generation's lists, before it answers searches
        self.lifecycle.finish_rebuild(built)

    def abandon_rebuild(self, built: IndexStore) -> None:
        self.lifecycle.abandon_rebuild(built)


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"cannot use index path {path}: {exc.strerror}; fix memorySearch.store.path") from exc
