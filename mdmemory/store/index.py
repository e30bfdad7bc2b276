"""The per-agent index: files, chunks (+ FTS5 via triggers), vectors (vec0) and the embedding cache."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlean

from mdmemory.errors import StoreError
from mdmemory.store.cache import EmbeddingCache
from mdmemory.store.connection import connect, transaction
from mdmemory.store.faults import fault_message, store_fault, unwritable_reason
from mdmemory.store.fts import FtsSearch
from mdmemory.store.knn import VectorReads
from mdmemory.store.lifecycle import SqliteLifecycle
from mdmemory.store.schema import check_ours, check_readable_schema, migrate
from mdmemory.store.sql import rows_in
from mdmemory.store.vectors import encode_vector

if TYPE_CHECKING:
    import numpy as np

    from mdmemory.store.matrix import VectorMatrix

WRITE_RETRY_SECONDS = 5.0  # a writer opened read-only checks this often whether it can write again
_SHORT_REASONS = {  # why a writer fell back to read-only, for messages that already name the index
    "read-only": "it cannot be opened for writing",
    "full": "no space left on its disk",
    "io": "a disk I/O error when opening it for writing",
}


@dataclass(frozen=True)
class FileRow:
    path: str
    source: str
    hash: str
    mtime: float
    size: int
    encoding_errors: int = 0
    chunks: int = 0
    indexed_at: float = 0.0


ChunkVectors = tuple[Sequence[str], "np.ndarray"]
"""One chunk's vectors: the hashes of the embedded inputs and a (n, dims) array, row per input."""


@dataclass(frozen=True)
class ChunkRow:
    path: str
    source: str
    start_line: int
    end_line: int
    hash: str
    embed_hash: str
    heading: str
    text: str
    id: int | None = None


class Store(FtsSearch, VectorReads, EmbeddingCache, SqliteLifecycle):
    """One agent's SQLite index. Every write to a file's rows happens in one transaction."""

    def __init__(self, path: Path | str, *, readonly: bool = False) -> None:
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
        self._memo: dict[str, tuple[tuple[int, int], Any]] = {}
        self._matrix: VectorMatrix | None = None  # the vectors in memory for KNN, opened on first use
        self._matrix_key: tuple[int, int] | None = None
        self._knn_calls = 0
        self._write_retry_at = 0.0
        self.conn = self._open()

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
        self._memo.clear()
        self._matrix = None
        self.conn = self._open()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[None]:
        """A write transaction; memoised values are dropped if it rolls back."""
        try:
            with transaction(self.conn):
                yield
        except BaseException:
            self._memo.clear()
            self._matrix = None
            raise

    def _version(self) -> tuple[int, int]:
        """Changes whenever this or another connection commits a change to the index."""
        return (int(self.conn.execute("PRAGMA data_version").fetchone()[0]), self.conn.total_changes)

    def _memoised(self, name: str, compute: Any) -> Any:
        """Cache a value until this or another connection commits a change."""
        key = self._version()
        hit = self._memo.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = compute()
        self._memo[name] = (key, value)
        return value

    # -- meta -------------------------------------------------------------------------------------
    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_meta(self, key: str, value: Any) -> None:
        self.conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, json.dumps(value, sort_keys=True)),
        )

    # -- files ------------------------------------------------------------------------------------
    def files(self) -> dict[str, FileRow]:
        rows = self.conn.execute(
            "SELECT path, source, hash, mtime, size, encoding_errors, chunks, indexed_at FROM files"
        ).fetchall()
        return {r[0]: FileRow(*r) for r in rows}

    def touch_file(self, path: str, mtime: float, size: int) -> None:
        """Record a new mtime/size for a file whose content hash did not change."""
        self.conn.execute("UPDATE files SET mtime = ?, size = ? WHERE path = ?", (mtime, size, path))

    def replace_file(
        self, file: FileRow, chunks: Sequence[ChunkRow], vectors: Sequence[ChunkVectors | None] | None
    ) -> list[int]:
        """Replace every row of ``file.path`` with ``chunks`` and their vectors in one transaction.

        ``vectors[i]`` holds chunk i's vectors: one per embedded window, each with the hash of its input.
        ``vectors[i] is None`` writes the chunk without vectors and marks it pending (keyword search finds
        it at once; ``add_vectors`` fills it in later). ``vectors`` None means an index without vectors.
        Returns the new chunk ids, in order.
        """
        if vectors is not None and len(vectors) != len(chunks):
            raise StoreError(f"{file.path}: vectors for {len(vectors)} chunks, but {len(chunks)} chunks")
        with self._tx():
            self._delete_rows(file.path)
            ids: list[int] = []
            for c in chunks:
                cur = self.conn.execute(
                    "INSERT INTO chunks(path, source, start_line, end_line, hash, embed_hash, heading, text) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (file.path, file.source, c.start_line, c.end_line, c.hash, c.embed_hash, c.heading, c.text),
                )
                ids.append(int(cur.lastrowid))
            if vectors is not None and len(ids):
                known = [(cid, cv) for cid, cv in zip(ids, vectors, strict=True) if cv is not None]
                self._insert_vectors([cid for cid, _ in known], [cv for _, cv in known])
                self.conn.executemany(
                    "INSERT INTO pending_embeddings(chunk_id) VALUES (?)",
                    [(cid,) for cid, cv in zip(ids, vectors, strict=True) if cv is None],
                )
            self.conn.execute(
                "INSERT OR REPLACE INTO files(path, source, hash, mtime, size, encoding_errors, chunks, indexed_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (file.path, file.source, file.hash, file.mtime, file.size, file.encoding_errors, len(ids), time.time()),
            )
        return ids

    def delete_file(self, path: str) -> None:
        """Remove a file and every row derived from it, in one transaction."""
        with self._tx():
            self._delete_rows(path)
            self.conn.execute("DELETE FROM files WHERE path = ?", (path,))

    def _delete_rows(self, path: str) -> None:
        if self.vec_dims() is not None:
            ids = [
                (r[0],)
                for r in self.conn.execute(
                    "SELECT v.id FROM vectors v JOIN chunks c ON c.id = v.chunk_id WHERE c.path = ?", (path,)
                )
            ]
            # one statement per rowid: vec0 resolves `rowid = ?` directly but scans for `rowid IN (...)`
            self.conn.executemany("DELETE FROM chunks_vec WHERE rowid = ?", ids)
            if self._has_bits():
                self.conn.executemany("DELETE FROM chunks_vec_bits WHERE rowid = ?", ids)
            self.conn.executemany("DELETE FROM vectors WHERE id = ?", ids)
        self.conn.execute(
            "DELETE FROM pending_embeddings WHERE chunk_id IN (SELECT id FROM chunks WHERE path = ?)", (path,)
        )
        self.conn.execute("DELETE FROM chunks WHERE path = ?", (path,))

    # -- vectors ----------------------------------------------------------------------------------
    def vec_dims(self) -> int | None:
        dims = self._memoised("vec_dims", lambda: self.get_meta("vec_dims"))
        return int(dims) if dims is not None else None

    def _has_bits(self) -> bool:
        dims = self.vec_dims()
        return dims is not None and dims % 8 == 0

    def _ensure_vec_table(self, dims: int) -> None:
        current = self.vec_dims()
        if current == dims:
            return
        if current is not None:
            raise StoreError(
                f"index {self.path} holds {current}-dim vectors but the provider returned {dims}; "
                "run `mdmemory index --force` to rebuild"
            )
        self.conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec USING vec0(embedding float[{int(dims)}] "
            "distance_metric=cosine)"
        )
        if dims % 8 == 0:
            self.conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec_bits USING vec0(embedding bit[{dims}])")
        self.set_meta("vec_dims", dims)

    def _insert_vectors(self, chunk_ids: list[int], vectors: Sequence[ChunkVectors]) -> None:
        rows = [(cid, h, v) for cid, cv in zip(chunk_ids, vectors, strict=True) for h, v in zip(*cv, strict=True)]
        if not rows:
            return
        import numpy as np

        matrix = np.stack([v for _, _, v in rows]).astype(np.float32)
        self._ensure_vec_table(int(matrix.shape[1]))
        blobs = [encode_vector(v) for v in matrix]
        ids = []
        for (cid, h, _), blob in zip(rows, blobs, strict=True):
            cur = self.conn.execute("INSERT INTO vectors(chunk_id, hash, embedding) VALUES (?, ?, ?)", (cid, h, blob))
            ids.append(int(cur.lastrowid))
        self.conn.executemany(
            "INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)", list(zip(ids, blobs, strict=True))
        )
        if self._has_bits():
            codes = np.packbits(matrix > 0, axis=1)
            self.conn.executemany(
                "INSERT INTO chunks_vec_bits(rowid, embedding) VALUES (?, vec_bit(?))",
                [(i, c.tobytes()) for i, c in zip(ids, codes, strict=True)],
            )

    def vector_count(self) -> int:
        if self.vec_dims() is None:
            return 0
        return int(self._memoised("vectors", lambda: self.conn.execute("SELECT count(*) FROM vectors").fetchone()[0]))

    # -- pending embeddings -----------------------------------------------------------------------
    def pending_count(self) -> int:
        """How many chunks are indexed for keywords but still wait for their vectors."""

        def count() -> int:
            try:
                return int(self.conn.execute("SELECT count(*) FROM pending_embeddings").fetchone()[0])
            except sqlean.OperationalError:  # an index older than migration 3, opened read-only
                return 0

        return int(self._memoised("pending", count))

    def pending_chunks(self, limit: int, after_id: int = 0) -> list[ChunkRow]:
        """Up to ``limit`` pending chunks with ids above ``after_id``, in id order."""
        rows = self.conn.execute(
            "SELECT c.id, c.path, c.source, c.start_line, c.end_line, c.hash, c.embed_hash, c.heading, c.text "
            "FROM pending_embeddings p JOIN chunks c ON c.id = p.chunk_id WHERE p.chunk_id > ? "
            "ORDER BY p.chunk_id LIMIT ?",
            (int(after_id), int(limit)),
        ).fetchall()
        return [ChunkRow(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], id=int(r[0])) for r in rows]

    def add_vectors(self, items: Sequence[tuple[ChunkRow, ChunkVectors]]) -> int:
        """Write the vectors of pending chunks in one transaction and clear their pending marks.

        A chunk that is no longer pending with the same text (its file was re-indexed meanwhile by another
        process) is skipped. Returns how many chunks got their vectors.
        """
        with self._tx():
            ready: list[tuple[int, ChunkVectors]] = []
            for chunk, vectors in items:
                cur = self.conn.execute(
                    "DELETE FROM pending_embeddings WHERE chunk_id = ? "
                    "AND EXISTS (SELECT 1 FROM chunks WHERE id = ? AND embed_hash = ?)",
                    (chunk.id, chunk.id, chunk.embed_hash),
                )
                if cur.rowcount == 1 and chunk.id is not None:
                    ready.append((chunk.id, vectors))
            self._insert_vectors([cid for cid, _ in ready], [cv for _, cv in ready])
        return len(ready)

    def chunk_count(self) -> int:
        return int(self._memoised("chunks", lambda: self.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]))

    # -- chunks -----------------------------------------------------------------------------------
    def chunks_by_ids(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        sql = (
            "SELECT id, path, source, start_line, end_line, hash, embed_hash, heading, text FROM chunks "
            "WHERE id IN ({marks})"
        )
        return {
            int(r[0]): ChunkRow(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], id=int(r[0]))
            for r in rows_in(self.conn, sql, ids)
        }

    def chunks_of(self, path: str) -> list[ChunkRow]:
        rows = self.conn.execute(
            "SELECT id, path, source, start_line, end_line, hash, embed_hash, heading, text FROM chunks "
            "WHERE path = ? ORDER BY start_line, id",
            (path,),
        ).fetchall()
        return [ChunkRow(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], id=int(r[0])) for r in rows]

    def paths_with_text(self, needles: Sequence[str], source: str) -> list[str]:
        if not needles:
            return []
        found = " OR ".join("instr(text, ?) > 0" for _ in needles)
        sql = f"SELECT DISTINCT path FROM chunks WHERE source = ? AND ({found}) ORDER BY path"
        return [r[0] for r in self.conn.execute(sql, (source, *needles)).fetchall()]

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


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"cannot use index path {path}: {exc.strerror}; fix memorySearch.store.path") from exc
