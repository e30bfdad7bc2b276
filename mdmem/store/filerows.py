"""The rows of files and their chunks in the SQLite index: a part of ``Store``. A file's chunks, vectors,
supersessions and links are replaced or deleted together, in one transaction; chunks are read by id, by file,
and by the text they hold."""

from __future__ import annotations

import time
from collections.abc import Sequence

from mdmem.files.links import Link
from mdmem.files.supersession import Supersession
from mdmem.store.links import SqliteLinks
from mdmem.store.rows import ChunkRow, ChunkVectors, FileRow
from mdmem.store.sql import rows_in
from mdmem.store.sqlite_db import SqliteDb
from mdmem.store.supersessions import SqliteSupersessions
from mdmem.store.vecwrite import VectorWrites
from mdmem.util.errors import StoreError


class SqliteFiles:
    def __init__(
        self, db: SqliteDb, vector_writes: VectorWrites, supersessions: SqliteSupersessions, links: SqliteLinks
    ) -> None:
        self.db = db
        self.vector_writes = vector_writes
        self.supersessions = supersessions
        self.links = links

    def files(self) -> dict[str, FileRow]:
        rows = self.db.conn.execute(
            "SELECT path, source, hash, mtime, size, encoding_errors, chunks, indexed_at FROM files"
        ).fetchall()
        return {r[0]: FileRow(*r) for r in rows}

    def touch_file(self, path: str, mtime: float, size: int) -> None:
        """Record a new mtime/size for a file whose content hash did not change."""
        self.db.conn.execute("UPDATE files SET mtime = ?, size = ? WHERE path = ?", (mtime, size, path))

    def replace_file(
        self,
        file: FileRow,
        chunks: Sequence[ChunkRow],
        vectors: Sequence[ChunkVectors | None] | None,
        supersessions: Sequence[Supersession] = (),
        links: Sequence[Link] = (),
    ) -> list[int]:
        """Replace every row of ``file.path`` with ``chunks`` and their vectors in one transaction.

        ``vectors[i]`` holds chunk i's vectors: one per embedded window, each with the hash of its input.
        ``vectors[i] is None`` writes the chunk without vectors and marks it pending (keyword search finds
        it at once; ``add_vectors`` fills it in later). ``vectors`` None means an index without vectors.
        ``supersessions`` and ``links``: those the file holds (mdmem.files). Returns the new chunk ids.
        """
        if vectors is not None and len(vectors) != len(chunks):
            raise StoreError(f"{file.path}: vectors for {len(vectors)} chunks, but {len(chunks)} chunks")
        with self.db.tx():
            self._delete_rows(file.path)
            self.supersessions.write(file.path, supersessions)
            self.links.add(file.path, links)
            ids: list[int] = []
            for c in chunks:
                cur = self.db.conn.execute(
                    "INSERT INTO chunks(path, source, start_line, end_line, hash, embed_hash, heading, text) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (file.path, file.source, c.start_line, c.end_line, c.hash, c.embed_hash, c.heading, c.text),
                )
                ids.append(int(cur.lastrowid))
            if vectors is not None and len(ids):
                known = [(cid, cv) for cid, cv in zip(ids, vectors, strict=True) if cv is not None]
                self.vector_writes.insert_vectors([cid for cid, _ in known], [cv for _, cv in known])
                self.db.conn.executemany(
                    "INSERT INTO pending_embeddings(chunk_id) VALUES (?)",
                    [(cid,) for cid, cv in zip(ids, vectors, strict=True) if cv is None],
                )
            self.db.conn.execute(
                "INSERT OR REPLACE INTO files(path, source, hash, mtime, size, encoding_errors, chunks, indexed_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (file.path, file.source, file.hash, file.mtime, file.size, file.encoding_errors, len(ids), time.time()),
            )
        return ids

    def delete_file(self, path: str) -> None:
        """Remove a file and every row derived from it, in one transaction."""
        with self.db.tx():
            self._delete_rows(path)
            self.db.conn.execute("DELETE FROM files WHERE path = ?", (path,))

    def _delete_rows(self, path: str) -> None:
        if self.vector_writes.vec_dims() is not None:
            ids = [
                (r[0],)
                for r in self.db.conn.execute(
                    "SELECT v.id FROM vectors v JOIN chunks c ON c.id = v.chunk_id WHERE c.path = ?", (path,)
                )
            ]
            # one statement per rowid: vec0 resolves `rowid = ?` directly but scans for `rowid IN (...)`
            self.db.conn.executemany("DELETE FROM chunks_vec WHERE rowid = ?", ids)
            if self.vector_writes.has_bits():
                self.db.conn.executemany("DELETE FROM chunks_vec_bits WHERE rowid = ?", ids)
            self.db.conn.executemany("DELETE FROM vectors WHERE id = ?", ids)
        self.db.conn.execute(
            "DELETE FROM pending_embeddings WHERE chunk_id IN (SELECT id FROM chunks WHERE path = ?)", (path,)
        )
        self.db.conn.execute("DELETE FROM chunks WHERE path = ?", (path,))
        self.db.conn.execute("DELETE FROM supersessions WHERE path = ?", (path,))
        self.links.delete(path)

    def chunk_count(self) -> int:
        return int(
            self.db.memoised("chunks", lambda: self.db.conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
        )

    def chunks_by_ids(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        sql = (
            "SELECT id, path, source, start_line, end_line, hash, embed_hash, heading, text FROM chunks "
            "WHERE id IN ({marks})"
        )
        return {
            int(r[0]): ChunkRow(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], id=int(r[0]))
            for r in rows_in(self.db.conn, sql, ids)
        }

    def chunks_of(self, path: str) -> list[ChunkRow]:
        rows = self.db.conn.execute(
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
        return [r[0] for r in self.db.conn.execute(sql, (source, *needles)).fetchall()]
