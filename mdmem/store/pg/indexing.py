"""What the indexer, status and the pack read and write on PostgreSQL besides search: chunks, pending
chunks and their vectors, vectors by input hash, and the agent's embedding cache: a part of ``PgStore``.

The embedding cache belongs to the agent, not to a generation: a rebuild (a new generation) finds every
vector embedded before, as the SQLite store's rebuild does by copying its cache into the new file.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from mdmem.store.pg import codec
from mdmem.store.pg import vectors as vector_sql
from mdmem.store.pg.connection import borrows
from mdmem.store.pg.view import PgIndexView
from mdmem.store.rows import ChunkRow, ChunkVectors

if TYPE_CHECKING:
    import numpy as np

_CHUNK_COLUMNS = "id, path, source, start_line, end_line, hash, embed_hash, heading, text"


def _chunk(r: Sequence[Any]) -> ChunkRow:
    return ChunkRow(r[1], r[2], r[3], r[4], r[5], r[6], r[7] or "", r[8], id=int(r[0]))


class PgIndexing:
    """Chunks, vectors and the embedding cache of the generation ``view`` reads and writes."""

    def __init__(self, view: PgIndexView) -> None:
        self.view = view

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return self.view.session()

    @borrows
    def _rows(self, sql: str, params: Sequence[Any]) -> list[Any]:
        rows = self.view.conn.execute(sql, params).fetchall()
        return list(rows)

    # -- meta and chunks --------------------------------------------------------------------------
    @borrows
    def delete_meta(self, key: str) -> None:
        with self.view.conn.transaction():
            self.view.conn.execute(
                f"DELETE FROM {self.view.schema}.meta WHERE agent_id = %s AND gen = %s AND key = %s",
                (self.view.agent_id, self.view.gen, key),
            )

    @borrows
    def touch_file(self, path: str, mtime: float, size: int) -> None:
        """Record a new mtime/size for a file whose content hash did not change."""
        with self.view.conn.transaction():
            self.view.conn.execute(
                f"UPDATE {self.view.schema}.files SET mtime = %s, size = %s "
                "WHERE agent_id = %s AND gen = %s AND path = %s",
                (mtime, size, self.view.agent_id, self.view.gen, path),
            )

    def chunk_count(self) -> int:
        """Chunks of the generation, as of the last ``refresh`` or write through this store."""
        return self.view.totals().chunks

    def pending_count(self) -> int:
        sql = f"SELECT count(*) FROM {self.view.schema}.chunks WHERE agent_id = %s AND gen = %s AND pending"
        return int(self._rows(sql, (self.view.agent_id, self.view.gen))[0][0])

    def chunks_by_ids(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        sql = (
            f"SELECT {_CHUNK_COLUMNS} FROM {self.view.schema}.chunks WHERE agent_id = %s AND gen = %s AND id = ANY(%s)"
        )
        return {int(r[0]): _chunk(r) for r in self._rows(sql, (self.view.agent_id, self.view.gen, list(ids)))}

    def chunks_of(self, path: str) -> list[ChunkRow]:
        sql = (
            f"SELECT {_CHUNK_COLUMNS} FROM {self.view.schema}.chunks WHERE agent_id = %s AND gen = %s AND path = %s "
            "ORDER BY start_line, id"
        )
        return [_chunk(r) for r in self._rows(sql, (self.view.agent_id, self.view.gen, path))]

    def paths_with_text(self, needles: Sequence[str], source: str) -> list[str]:
        sql = (
            f"SELECT DISTINCT path FROM {self.view.schema}.chunks c WHERE agent_id = %s AND gen = %s AND source = %s "
            "AND EXISTS (SELECT 1 FROM unnest(%s::text[]) n WHERE strpos(c.text, n) > 0) ORDER BY path"
        )
        return (
            [r[0] for r in self._rows(sql, (self.view.agent_id, self.view.gen, source, list(needles)))]
            if needles
            else []
        )

    def counts(self) -> dict[str, int]:
        s, a, g = self.view.schema, self.view.agent_id, self.view.gen
        row = self._rows(
            f"SELECT (SELECT count(*) FROM {s}.files WHERE agent_id = %s AND gen = %s), "
            f"(SELECT count(*) FROM {s}.chunks WHERE agent_id = %s AND gen = %s), "
            f"(SELECT count(*) FROM {s}.vectors WHERE agent_id = %s AND gen = %s), "
            f"(SELECT count(*) FROM {s}.embedding_cache WHERE agent_id = %s)",
            (a, g, a, g, a, g, a),
        )[0]
        return {"files": int(row[0]), "chunks": int(row[1]), "vectors": int(row[2]), "cacheEntries": int(row[3])}

    # -- vectors ----------------------------------------------------------------------------------
    def vec_dims(self) -> int | None:
        """The dimension of the generation's vectors (None before the first one is stored)."""
        rows = self._rows(
            f"SELECT dims FROM {self.view.schema}.vectors WHERE agent_id = %s AND gen = %s LIMIT 1",
            (self.view.agent_id, self.view.gen),
        )
        return int(rows[0][0]) if rows else None

    def pending_chunks(self, limit: int, after_id: int = 0) -> list[ChunkRow]:
        """Up to ``limit`` pending chunks with ids above ``after_id``, in id order."""
        sql = (
            f"SELECT {_CHUNK_COLUMNS} FROM {self.view.schema}.chunks WHERE agent_id = %s AND gen = %s AND pending "
            "AND id > %s ORDER BY id LIMIT %s"
        )
        return [_chunk(r) for r in self._rows(sql, (self.view.agent_id, self.view.gen, int(after_id), int(limit)))]

    @borrows
    def add_vectors(self, items: Sequence[tuple[ChunkRow, ChunkVectors]]) -> int:
        """Write the vectors of pending chunks in one transaction and clear their pending marks; a chunk no
        longer pending with the same text (re-indexed meanwhile) is skipped. Returns how many got vectors."""
        rows: list[tuple[int, str, np.ndarray]] = []
        done = 0
        with self.view.conn.transaction(), self.view.conn.cursor() as cur:
            for chunk, (hashes, matrix) in items:
                cur.execute(
                    f"UPDATE {self.view.schema}.chunks SET pending = false "
                    "WHERE id = %s AND agent_id = %s AND gen = %s AND embed_hash = %s AND pending",
                    (chunk.id, self.view.agent_id, self.view.gen, chunk.embed_hash),
                )
                if cur.rowcount == 1 and chunk.id is not None:  # (their vectors change the generation's totals)
                    rows.extend((chunk.id, digest, row) for digest, row in zip(hashes, matrix, strict=True))
                    done += 1
            vector_sql.add_vectors(cur, self.view.schema, self.view.agent_id, self.view.gen, rows)
        self.view.remembered = None
        return done

    def chunk_vectors(self, chunk_ids: Sequence[int]) -> dict[int, ChunkVectors]:
        """Each chunk's stored vectors, as ``replace_file`` takes them, in the order they were embedded."""
        import numpy as np

        sql = (
            f"SELECT chunk_id, hash, vector_send(embedding) FROM {self.view.schema}.vectors WHERE agent_id = %s "
            "AND gen = %s AND chunk_id = ANY(%s) ORDER BY id"
        )
        grouped: dict[int, tuple[list[str], list[np.ndarray]]] = {}
        for cid, digest, values in self._rows(sql, (self.view.agent_id, self.view.gen, list(chunk_ids))):
            hashes, vecs = grouped.setdefault(int(cid), ([], []))
            hashes.append(str(digest))
            vecs.append(codec.array(values))
        return {cid: (hashes, np.stack(vecs)) for cid, (hashes, vecs) in grouped.items()}

    def vectors_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors for embedding-input hashes (reuse without the cache, e.g. after a rename)."""
        if not hashes:
            return {}
        sql = (
            f"SELECT DISTINCT ON (hash) hash, vector_send(embedding) FROM {self.view.schema}.vectors "
            "WHERE agent_id = %s AND gen = %s AND hash = ANY(%s)"
        )
        return {str(h): codec.array(v) for h, v in self._rows(sql, (self.view.agent_id, self.view.gen, list(hashes)))}

    def chunk_similarities(self, chunk_ids: Sequence[int], query: np.ndarray) -> dict[int, float]:
        """Cosine similarity of each chunk's best vector to ``query`` (for candidates found by keyword)."""
        if not chunk_ids:
            return {}
        sql = (
            f"SELECT chunk_id, max(1 - (embedding <=> %s::vector)) FROM {self.view.schema}.vectors "
            "WHERE agent_id = %s AND gen = %s AND dims = %s AND chunk_id = ANY(%s) GROUP BY chunk_id"
        )
        params = (codec.param(query), self.view.agent_id, self.view.gen, len(query), list(chunk_ids))
        return {int(r[0]): float(r[1]) for r in self._rows(sql, params)}

    def vector_similarities(self, chunk_ids: Sequence[int], query: np.ndarray) -> dict[int, dict[str, float]]:
        """For each chunk, the cosine similarity to ``query`` of each of its vectors, by embedded-input hash."""
        if not chunk_ids:
            return {}
        sql = (
            f"SELECT chunk_id, hash, 1 - (embedding <=> %s::vector) FROM {self.view.schema}.vectors "
            "WHERE agent_id = %s AND gen = %s AND dims = %s AND chunk_id = ANY(%s)"
        )
        out: dict[int, dict[str, float]] = {}
        params = (codec.param(query), self.view.agent_id, self.view.gen, len(query), list(chunk_ids))
        for cid, digest, sim in self._rows(sql, params):
            out.setdefault(int(cid), {})[str(digest)] = float(sim)
        return out

    # -- the embedding cache ----------------------------------------------------------------------
    def cache_get(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        if not hashes:
            return {}
        sql = (
            f"SELECT hash, vector_send(embedding) FROM {self.view.schema}.embedding_cache WHERE agent_id = %s "
            "AND provider = %s AND model = %s AND provider_key = %s AND hash = ANY(%s)"
        )
        params = (self.view.agent_id, provider, model, key, list(dict.fromkeys(hashes)))
        return {str(h): codec.array(v) for h, v in self._rows(sql, params)}

    @borrows
    def cache_put(self, provider: str, model: str, key: str, items: dict[str, np.ndarray]) -> None:
        now = time.time()
        with self.view.conn.transaction(), self.view.conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {self.view.schema}.embedding_cache (agent_id, provider, model, provider_key, hash, dims, "
                "embedding, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s::vector, %s) ON CONFLICT (agent_id, "
                "provider, model, provider_key, hash) DO UPDATE SET dims = EXCLUDED.dims, embedding = "
                "EXCLUDED.embedding, updated_at = EXCLUDED.updated_at",
                [(self.view.agent_id, provider, model, key, h, len(v), codec.param(v), now) for h, v in items.items()],
            )

    @borrows
    def cache_touch(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> None:
        """Mark cache entries as recently used so pruning keeps them."""
        with self.view.conn.transaction():
            self.view.conn.execute(
                f"UPDATE {self.view.schema}.embedding_cache SET updated_at = %s WHERE agent_id = %s AND provider = %s "
                "AND model = %s AND provider_key = %s AND hash = ANY(%s)",
                (time.time(), self.view.agent_id, provider, model, key, list(dict.fromkeys(hashes))),
            )

    @borrows
    def cache_prune(self, max_entries: int) -> int:
        """Delete the agent's oldest cache entries beyond ``max_entries``; returns how many were removed."""
        t = f"{self.view.schema}.embedding_cache"
        total = int(self._rows(f"SELECT count(*) FROM {t} WHERE agent_id = %s", (self.view.agent_id,))[0][0])
        excess = total - max_entries
        if excess <= 0:
            return 0
        with self.view.conn.transaction():
            self.view.conn.execute(
                f"DELETE FROM {t} WHERE agent_id = %s AND (provider, model, provider_key, hash) IN (SELECT provider, "
                f"model, provider_key, hash FROM {t} WHERE agent_id = %s ORDER BY updated_at LIMIT %s)",
                (self.view.agent_id, self.view.agent_id, excess),
            )
        return excess

    def cache_entries(self) -> Iterator[tuple[tuple[str, str, str], dict[str, np.ndarray]]]:
        """The agent's whole embedding cache, grouped by (provider, model, provider key)."""
        groups = self._rows(
            f"SELECT DISTINCT provider, model, provider_key FROM {self.view.schema}.embedding_cache "
            "WHERE agent_id = %s",
            (self.view.agent_id,),
        )
        for provider, model, key in groups:
            rows = self._rows(
                f"SELECT hash, vector_send(embedding) FROM {self.view.schema}.embedding_cache WHERE agent_id = %s AND "
                "provider = %s AND model = %s AND provider_key = %s",
                (self.view.agent_id, provider, model, key),
            )
            yield (str(provider), str(model), str(key)), {str(h): codec.array(v) for h, v in rows}
