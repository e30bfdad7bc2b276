"""The per-agent index: files, chunks (+ FTS5 via triggers), vectors (vec0) and the embedding cache."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sqlean

from mdmemory.errors import StoreError
from mdmemory.store.connection import connect, transaction
from mdmemory.store.schema import migrate
from mdmemory.store.vectors import decode_vector, encode_vector

_SQL_VARS = 900  # stay well under SQLite's bound-parameter limit in IN (...) lists


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


def _batched(items: Sequence[Any], size: int = _SQL_VARS) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class Store:
    """One agent's SQLite index. Every write to a file's rows happens in one transaction."""

    def __init__(self, path: Path | str, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.conn = connect(self.path, readonly=readonly)
        if not readonly:
            try:
                migrate(self.conn)
            except sqlean.Error as exc:
                self.conn.close()
                raise StoreError(f"cannot prepare index {self.path}: {exc}") from exc

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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

    def replace_file(self, file: FileRow, chunks: Sequence[ChunkRow], vectors: np.ndarray | None) -> None:
        """Replace every row of ``file.path`` with ``chunks`` (and their vectors) in one transaction."""
        if vectors is not None and len(vectors) != len(chunks):
            raise StoreError(f"{file.path}: {len(vectors)} vectors for {len(chunks)} chunks")
        with transaction(self.conn):
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
                self._ensure_vec_table(int(vectors.shape[1]))
                self.conn.executemany(
                    "INSERT INTO chunks_vec(rowid, embedding) VALUES (?, ?)",
                    [(i, encode_vector(v)) for i, v in zip(ids, vectors, strict=True)],
                )
            self.conn.execute(
                "INSERT OR REPLACE INTO files(path, source, hash, mtime, size, encoding_errors, chunks, indexed_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (file.path, file.source, file.hash, file.mtime, file.size, file.encoding_errors, len(ids),
                 time.time()),
            )

    def delete_file(self, path: str) -> None:
        """Remove a file and every row derived from it, in one transaction."""
        with transaction(self.conn):
            self._delete_rows(path)
            self.conn.execute("DELETE FROM files WHERE path = ?", (path,))

    def clear(self) -> None:
        """Remove every file, chunk and vector (the embedding cache is kept)."""
        with transaction(self.conn):
            self.conn.execute("DELETE FROM chunks")
            self.conn.execute("DELETE FROM files")
            self.conn.execute("DROP TABLE IF EXISTS chunks_vec")
            self.conn.execute("DELETE FROM meta WHERE key = 'vec_dims'")

    def _delete_rows(self, path: str) -> None:
        if self.vec_dims() is not None:
            self.conn.execute("DELETE FROM chunks_vec WHERE rowid IN (SELECT id FROM chunks WHERE path = ?)", (path,))
        self.conn.execute("DELETE FROM chunks WHERE path = ?", (path,))

    # -- vectors ----------------------------------------------------------------------------------
    def vec_dims(self) -> int | None:
        dims = self.get_meta("vec_dims")
        return int(dims) if dims is not None else None

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
        self.set_meta("vec_dims", dims)

    def knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` nearest chunks by cosine distance, through sqlite-vec's KNN index form."""
        if self.vec_dims() is None or k <= 0:
            return []
        rows = self.conn.execute(
            "WITH knn AS (SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?) "
            "SELECT rowid, distance FROM knn ORDER BY distance",
            (encode_vector(query), int(k)),
        ).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def vectors_for(self, ids: Sequence[int]) -> dict[int, np.ndarray]:
        if self.vec_dims() is None or not ids:
            return {}
        out: dict[int, np.ndarray] = {}
        for part in _batched(list(ids)):
            marks = ",".join("?" * len(part))
            for rid, blob in self.conn.execute(
                f"SELECT rowid, embedding FROM chunks_vec WHERE rowid IN ({marks})", tuple(part)
            ):
                out[int(rid)] = decode_vector(blob)
        return out

    # -- keyword ----------------------------------------------------------------------------------
    def keyword(self, match: str, k: int) -> list[tuple[int, float]]:
        """FTS5 unicode61 matches for an already-escaped MATCH expression: (chunk id, bm25) best first."""
        rows = self.conn.execute(
            "SELECT rowid, bm25(chunks_fts, 1.0, 0.5) AS rank FROM chunks_fts WHERE chunks_fts MATCH ? "
            "ORDER BY rank LIMIT ?",
            (match, int(k)),
        ).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def trigram(self, match: str, k: int) -> list[tuple[int, float]]:
        """FTS5 trigram matches (CJK and substrings): (chunk id, bm25) best first."""
        rows = self.conn.execute(
            "SELECT rowid, bm25(chunks_trigram) AS rank FROM chunks_trigram WHERE chunks_trigram MATCH ? "
            "ORDER BY rank LIMIT ?",
            (match, int(k)),
        ).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def substring(self, needles: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Chunks containing any needle (CJK words shorter than a trigram), best first.

        Score is negative like bm25: more distinct needles, then more occurrences, rank first.
        """
        if not needles:
            return []
        where = " OR ".join("text LIKE ? ESCAPE '\\'" for _ in needles)
        params = [f"%{_like_escape(n)}%" for n in needles]
        rows = self.conn.execute(
            f"SELECT rowid, text FROM chunks_trigram WHERE {where} LIMIT ?", (*params, int(k) * 8)
        ).fetchall()
        scored = []
        for rid, text in rows:
            distinct = sum(1 for n in needles if n in text)
            occurrences = sum(text.count(n) for n in needles)
            scored.append((int(rid), -(distinct + min(occurrences, 99) / 100)))
        scored.sort(key=lambda r: r[1])
        return scored[:k]

    # -- chunks -----------------------------------------------------------------------------------
    def chunks_by_ids(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        out: dict[int, ChunkRow] = {}
        for part in _batched(list(ids)):
            marks = ",".join("?" * len(part))
            for r in self.conn.execute(
                "SELECT id, path, source, start_line, end_line, hash, embed_hash, heading, text FROM chunks "
                f"WHERE id IN ({marks})",
                tuple(part),
            ):
                out[int(r[0])] = ChunkRow(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], id=int(r[0]))
        return out

    def chunks_of(self, path: str) -> list[ChunkRow]:
        rows = self.conn.execute(
            "SELECT id, path, source, start_line, end_line, hash, embed_hash, heading, text FROM chunks "
            "WHERE path = ? ORDER BY start_line, id",
            (path,),
        ).fetchall()
        return [ChunkRow(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], id=int(r[0])) for r in rows]

    def counts(self) -> dict[str, int]:
        one = lambda sql: int(self.conn.execute(sql).fetchone()[0])  # noqa: E731
        vectors = one("SELECT count(*) FROM chunks_vec") if self.vec_dims() is not None else 0
        return {
            "files": one("SELECT count(*) FROM files"),
            "chunks": one("SELECT count(*) FROM chunks"),
            "vectors": vectors,
            "cacheEntries": one("SELECT count(*) FROM embedding_cache"),
        }

    # -- embedding cache --------------------------------------------------------------------------
    def cache_get(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(hashes))
        for part in _batched(unique):
            marks = ",".join("?" * len(part))
            for h, blob in self.conn.execute(
                "SELECT hash, embedding FROM embedding_cache WHERE provider = ? AND model = ? AND provider_key = ? "
                f"AND hash IN ({marks})",
                (provider, model, key, *part),
            ):
                out[h] = decode_vector(blob)
        return out

    def cache_put(self, provider: str, model: str, key: str, items: dict[str, np.ndarray]) -> None:
        now = time.time()
        with transaction(self.conn):
            self.conn.executemany(
                "INSERT OR REPLACE INTO embedding_cache(provider, model, provider_key, hash, dims, embedding, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(provider, model, key, h, int(v.shape[0]), encode_vector(v), now) for h, v in items.items()],
            )

    def cache_touch(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> None:
        """Mark cache entries as recently used so pruning keeps them."""
        now = time.time()
        with transaction(self.conn):
            self.conn.executemany(
                "UPDATE embedding_cache SET updated_at = ? WHERE provider = ? AND model = ? AND provider_key = ? "
                "AND hash = ?",
                [(now, provider, model, key, h) for h in dict.fromkeys(hashes)],
            )

    def cache_prune(self, max_entries: int) -> int:
        """Delete the oldest cache entries beyond ``max_entries``; returns how many were removed."""
        total = int(self.conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0])
        excess = total - max_entries
        if excess <= 0:
            return 0
        with transaction(self.conn):
            self.conn.execute(
                "DELETE FROM embedding_cache WHERE (provider, model, provider_key, hash) IN "
                "(SELECT provider, model, provider_key, hash FROM embedding_cache ORDER BY updated_at LIMIT ?)",
                (excess,),
            )
        return excess


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
