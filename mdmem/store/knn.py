"""Reads of the SQLite store's vectors: KNN through sqlite-vec (or the vectors held in memory), and the
similarities a search and a pack ask for. A part of ``Store``; ``VectorWrites`` writes them."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mdmem.config.store import IvfConfig
from mdmem.store.sql import rows_in
from mdmem.store.sqlite_db import SqliteDb
from mdmem.store.vectors import cosine_similarities, decode_vector, encode_vector
from mdmem.store.vecwrite import VectorWrites
from mdmem.util.threads import shared_pool

if TYPE_CHECKING:
    import numpy as np

    from mdmem.store.ivfscan import ListScan
    from mdmem.store.matrix import VectorMatrix
    from mdmem.store.rows import ChunkVectors

EXACT_KNN_MAX_ROWS = 5_000  # above this, KNN runs on 1-bit codes and rescores candidates exactly
COARSE_FACTOR = 4  # binary KNN fetches max(k * COARSE_FACTOR, COARSE_MIN) candidates to rescore
COARSE_MIN = 96  # sqlite-vec's top-k selection slows sharply above ~100 candidates
EXACT_ROWS_PER_CANDIDATE = 40  # with fewer vectors than this per coarse candidate, the exact scan is cheaper
VEC_K_MAX = 4096  # sqlite-vec refuses a KNN query with k above this
SCAN_THREADS = 4  # threads scanning inverted files ahead of a search's keyword half (start_knn), per process


class VectorReads:
    """Reads of the SQLite store's vectors, on its open index ``db``; ``writes`` knows their dimensions and
    count, ``chunk_count`` counts the chunks. ``matrix`` is the vectors held in memory, once loaded."""

    def __init__(
        self, db: SqliteDb, writes: VectorWrites, chunk_count: Callable[[], int], ivf: IvfConfig | None = None
    ) -> None:
        self.db = db
        self.writes = writes
        self.chunk_count = chunk_count
        self.ivf = ivf or IvfConfig()
        self.matrix: VectorMatrix | None = None  # the vectors in memory for KNN, opened on first use
        self.matrix_key: tuple[int, int] | None = None
        self.scan: ListScan | None = None  # the inverted file in memory (large indexes), opened on first use
        self.scan_key: tuple[int, int] | None = None
        self.knn_calls = 0
        db.on_reset(self.forget_matrix)

    @property
    def conn(self) -> Any:
        return self.db.conn

    def forget_matrix(self) -> None:
        self.matrix = None
        self.scan = None

    def vec_dims(self) -> int | None:
        return self.writes.vec_dims()

    def vector_count(self) -> int:
        return self.writes.vector_count()

    def knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` nearest chunks by cosine distance, best first, through sqlite-vec's KNN index form.

        A chunk may own several vectors (one per embedded window); its distance is its best window's.
        Up to ``EXACT_KNN_MAX_ROWS`` vectors the float index answers exactly. Above that, sqlite-vec finds
        the nearest 1-bit codes (Hamming distance on the signs, 32x less data to scan), and those
        candidates are rescored with their exact float vectors; unless that many candidates cost more than
        the exact scan (sqlite-vec's top-k selection costs ~20 us a candidate, the float scan ~0.6 us a
        vector): a wide net of candidates (a context pack's) stays exact up to ``EXACT_ROWS_PER_CANDIDATE``
        vectors per candidate. A process that searches again holds the vectors in memory (``_vector_matrix``)
        or, in an index of ``store.ivf.exactBelow`` vectors or more, its inverted file (``_list_scan``).
        """
        return self._knn(query, k, ahead=False)()

    def start_knn(self, query: np.ndarray, k: int) -> Callable[[], list[tuple[int, float]]]:
        """``knn``, answered when the search asks for it. When the inverted file answers, its scan of the
        lists held in memory starts now in a worker thread (it reads nothing from the index; numpy releases
        the GIL, and so does SQLite while the keyword search runs on this thread's connection), and the
        exact rescoring, which reads the index, runs on this thread when the answer is asked for. Otherwise
        all of it runs then, on this thread (one SQLite connection answers one statement at a time)."""
        return self._knn(query, k, ahead=True)

    def _knn(self, query: np.ndarray, k: int, ahead: bool) -> Callable[[], list[tuple[int, float]]]:
        if self.vec_dims() is None or k <= 0:
            return list
        import numpy as np

        query = np.asarray(query, dtype=np.float32)
        self.knn_calls += 1
        stored = self.vector_count()
        per_chunk = max(1.0, stored / max(1, self.chunk_count()))
        want = min(VEC_K_MAX, int(k * min(per_chunk, 8) + 0.999))  # enough vectors to cover k distinct chunks
        scan = self._list_scan(stored)
        if scan is None:
            return lambda: _best_per_chunk(self._nearest_vectors(query, want, stored), k)
        approximate = functools.partial(scan.approximate, query, self.ivf.probes)
        found = shared_pool("mdmem-ivf", SCAN_THREADS).submit(approximate).result if ahead else approximate
        rescore = functools.partial(self._rescore, query)
        return lambda: _best_per_chunk(scan.pick(found(), want, rescore), k)

    def _nearest_vectors(self, query: np.ndarray, want: int, stored: int) -> list[tuple[int, float]]:
        """The ``want`` nearest vectors as (chunk id, cosine distance) without the inverted file: held in
        memory, sqlite-vec's exact KNN, or its 1-bit codes rescored (``knn``)."""
        import numpy as np

        coarse = min(VEC_K_MAX, max(want * COARSE_FACTOR, COARSE_MIN))
        matrix = self._vector_matrix(stored)
        if matrix is not None:
            return matrix.nearest(query, want)
        if not self.writes.has_bits() or stored <= max(EXACT_KNN_MAX_ROWS, coarse * EXACT_ROWS_PER_CANDIDATE):
            rows = self.conn.execute(
                "WITH knn AS (SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?) "
                "SELECT knn.rowid, knn.distance, v.chunk_id FROM knn JOIN vectors v ON v.id = knn.rowid "
                "ORDER BY knn.distance",
                (encode_vector(query), want),
            ).fetchall()
            return [(int(r[2]), float(r[1])) for r in rows]
        ids = [
            int(r[0])
            for r in self.conn.execute(
                "WITH knn AS (SELECT rowid FROM chunks_vec_bits WHERE embedding MATCH vec_bit(?) AND k = ?) "
                "SELECT rowid FROM knn",
                (np.packbits(query > 0).tobytes(), coarse),
            )
        ]
        return [(cid, 1.0 - sim) for cid, sim in self._similarities("id", ids, query)]

    def _vector_matrix(self, stored: int) -> VectorMatrix | None:
        """The vectors in memory (mdmem.store.matrix), caught up with the table; None when too large, and
        on a connection's first KNN: a one-shot command (a CLI search) would read every vector to answer
        once, so only a store that searches again (a server, a daemon, a benchmark) holds them."""
        from mdmem.store import matrix

        dims = self.vec_dims()
        if dims is None or self.knn_calls < 2 or not matrix.VectorMatrix.fits(stored, int(dims)):
            self.matrix = None
            return None
        key = self.db.version()
        if self.matrix is None or self.matrix.dims != int(dims):
            self.matrix, self.matrix_key = matrix.VectorMatrix(int(dims)), None
        if self.matrix_key != key:
            self.matrix.sync(self.conn)
            self.matrix_key = key
        return self.matrix

    def _list_scan(self, stored: int) -> ListScan | None:
        """The inverted file in memory (mdmem.store.ivfscan), caught up with the index, for an index of
        ``exactBelow`` vectors or more whose lists are complete and cover every vector; else None (exact
        search, or the 1-bit coarse pass while a first build is under way). Not on a connection's first KNN
        (see ``_vector_matrix``): loading it costs a few seconds at a million vectors."""
        from mdmem.store import ivf
        from mdmem.store.ivfscan import ListScan

        meta = ivf.state(self.db)
        if stored < self.ivf.exact_below or meta is None or not meta.get("complete") or self.knn_calls < 2:
            self.scan = None
            return None
        key = self.db.version()
        if self.scan is not None and self.scan_key == key:
            return self.scan
        listed = ivf.listed(self.db)
        cents = ivf.centroids(self.db)
        if listed != stored or cents is None:  # vectors written without lists (an older mdmem): exact until settled
            self.scan = None
            return None
        if self.scan is None or self.scan.stamp != meta.get("stamp") or self.scan.dims != cents.shape[1]:
            self.scan = ListScan(int(cents.shape[1]), meta.get("stamp"), cents)
        self.scan.sync(self.conn, listed)
        self.scan_key = key
        return self.scan

    def _rescore(self, query: np.ndarray, ids: Sequence[int]) -> dict[int, tuple[int, float]]:
        """{vector id: (chunk id, exact cosine similarity)} for the ``ids`` still in ``vectors``."""
        rows = list(rows_in(self.conn, "SELECT id, chunk_id, embedding FROM vectors WHERE id IN ({marks})", ids))
        if not rows:
            return {}
        sims = cosine_similarities([r[2] for r in rows], query)
        return {int(r[0]): (int(r[1]), float(sim)) for r, sim in zip(rows, sims, strict=True)}

    def chunk_similarities(self, chunk_ids: Sequence[int], query: np.ndarray) -> dict[int, float]:
        """Cosine similarity of each chunk's best vector to ``query`` (for candidates found by keyword)."""
        best: dict[int, float] = {}
        for cid, sim in self._similarities("chunk_id", chunk_ids, query):
            best[cid] = max(best.get(cid, -1.0), sim)
        return best

    def _similarities(self, column: str, keys: Sequence[int], query: np.ndarray) -> list[tuple[int, float]]:
        """(chunk id, cosine similarity) for every stored vector whose ``column`` is in ``keys``."""
        if self.vec_dims() is None or not keys:
            return []
        owners: list[int] = []
        blobs: list[bytes] = []
        for cid, blob in rows_in(
            self.conn, f"SELECT chunk_id, embedding FROM vectors WHERE {column} IN ({{marks}})", keys
        ):
            owners.append(int(cid))
            blobs.append(blob)
        if not owners:
            return []
        sims = cosine_similarities(blobs, query)
        return [(cid, float(sim)) for cid, sim in zip(owners, sims, strict=True)]

    def vector_similarities(self, chunk_ids: Sequence[int], query: np.ndarray) -> dict[int, dict[str, float]]:
        """For each chunk, the cosine similarity to ``query`` of each of its vectors, by embedded-input hash
        (the whole chunk's and its windows'): what a ContextPack locates a chunk's best lines with."""
        if self.vec_dims() is None or not chunk_ids:
            return {}
        rows = list(
            rows_in(self.conn, "SELECT chunk_id, hash, embedding FROM vectors WHERE chunk_id IN ({marks})", chunk_ids)
        )
        if not rows:
            return {}
        sims = cosine_similarities([r[2] for r in rows], query)
        out: dict[int, dict[str, float]] = {}
        for (cid, digest, _), sim in zip(rows, sims, strict=True):
            out.setdefault(int(cid), {})[str(digest)] = float(sim)
        return out

    def chunk_vectors(self, chunk_ids: Sequence[int]) -> dict[int, ChunkVectors]:
        """Each chunk's stored vectors, as ``replace_file`` takes them: (input hashes, (n, dims) array)."""
        if self.vec_dims() is None or not chunk_ids:
            return {}
        import numpy as np

        sql = "SELECT id, chunk_id, hash, embedding FROM vectors WHERE chunk_id IN ({marks})"
        rows = sorted(rows_in(self.conn, sql, chunk_ids))  # by vector id: the order they were embedded in
        grouped: dict[int, tuple[list[str], list[np.ndarray]]] = {}
        for _, cid, digest, blob in rows:
            hashes, vecs = grouped.setdefault(int(cid), ([], []))
            hashes.append(str(digest))
            vecs.append(decode_vector(blob))
        return {cid: (hashes, np.stack(vecs)) for cid, (hashes, vecs) in grouped.items()}

    def vectors_by_hash(self, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored vectors for embedding-input hashes (reuse without the cache, e.g. after a rename)."""
        if self.vec_dims() is None or not hashes:
            return {}
        sql = "SELECT hash, embedding FROM vectors WHERE hash IN ({marks})"
        return {h: decode_vector(blob) for h, blob in rows_in(self.conn, sql, hashes)}


def _best_per_chunk(hits: list[tuple[int, float]], k: int) -> list[tuple[int, float]]:
    """(chunk id, distance) of the ``k`` nearest chunks, each at its nearest vector's distance."""
    best: dict[int, float] = {}
    for cid, dist in hits:
        if cid not in best or dist < best[cid]:
            best[cid] = dist
    return sorted(best.items(), key=lambda r: (r[1], r[0]))[:k]
