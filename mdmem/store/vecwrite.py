"""The SQLite store's vector writes: the vec0 tables (float vectors for KNN, bit codes for the coarse pass),
vectors inserted with their chunks or later, and the chunks still waiting for theirs. A part of ``Store``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlean

from mdmem.store import ivf
from mdmem.store.rows import ChunkRow, ChunkVectors
from mdmem.store.sqlite_db import SqliteDb
from mdmem.store.vectors import encode_vector
from mdmem.util.errors import StoreError


class VectorWrites:
    """Writes of the SQLite store's vectors, on its open index ``db``."""

    def __init__(self, db: SqliteDb) -> None:
        self.db = db

    @property
    def conn(self) -> Any:
        return self.db.conn

    # -- vectors ----------------------------------------------------------------------------------
    def vec_dims(self) -> int | None:
        dims = self.db.memoised("vec_dims", lambda: self.db.get_meta("vec_dims"))
        return int(dims) if dims is not None else None

    def has_bits(self) -> bool:
        dims = self.vec_dims()
        return dims is not None and dims % 8 == 0

    def _ensure_vec_table(self, dims: int) -> None:
        current = self.vec_dims()
        if current == dims:
            return
        if current is not None:
            raise StoreError(
                f"index {self.db.path} holds {current}-dim vectors but the provider returned {dims}; "
                "run `mdmem index --force` to rebuild"
            )
        self.conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec USING vec0(embedding float[{int(dims)}] "
            "distance_metric=cosine)"
        )
        if dims % 8 == 0:
            self.conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec_bits USING vec0(embedding bit[{dims}])")
        self.db.set_meta("vec_dims", dims)

    def insert_vectors(self, chunk_ids: list[int], vectors: Sequence[ChunkVectors]) -> None:
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
        if self.has_bits():
            codes = np.packbits(matrix > 0, axis=1)
            self.conn.executemany(
                "INSERT INTO chunks_vec_bits(rowid, embedding) VALUES (?, vec_bit(?))",
                [(i, c.tobytes()) for i, c in zip(ids, codes, strict=True)],
            )
        ivf.add(self.db, ids, matrix)

    def needs_settle(self, exact_below: int) -> bool:
        return self.vec_dims() is not None and ivf.needs_settle(self.db, exact_below, self.vector_count())

    def settle(self, exact_below: int) -> bool:
        """Build or extend the inverted file of a large index (mdmem.store.ivf); True when it wrote."""
        if self.vec_dims() is None:
            return False
        return ivf.settle(self.db, exact_below, self.vector_count())

    def vector_count(self) -> int:
        if self.vec_dims() is None:
            return 0
        return int(self.db.memoised("vectors", lambda: self.conn.execute("SELECT count(*) FROM vectors").fetchone()[0]))

    # -- pending embeddings -----------------------------------------------------------------------
    def pending_count(self) -> int:
        """How many chunks are indexed for keywords but still wait for their vectors."""

        def count() -> int:
            try:
                return int(self.conn.execute("SELECT count(*) FROM pending_embeddings").fetchone()[0])
            except sqlean.OperationalError:  # an index older than migration 3, opened read-only
                return 0

        return int(self.db.memoised("pending", count))

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
        with self.db.tx():
            ready: list[tuple[int, ChunkVectors]] = []
            for chunk, vectors in items:
                cur = self.conn.execute(
                    "DELETE FROM pending_embeddings WHERE chunk_id = ? "
                    "AND EXISTS (SELECT 1 FROM chunks WHERE id = ? AND embed_hash = ?)",
                    (chunk.id, chunk.id, chunk.embed_hash),
                )
                if cur.rowcount == 1 and chunk.id is not None:
                    ready.append((chunk.id, vectors))
            self.insert_vectors([cid for cid, _ in ready], [cv for _, cv in ready])
        return len(ready)
