"""The SQLite store's inverted file of vectors (IVF) for large indexes: each vector is filed under its
nearest centroid (a "list"), with an 8-bit code of itself, so a KNN search scores the vectors of the few
lists nearest the query instead of every vector (see ``mdmem.store.ivfscan``).

Persisted in the index, beside ``vectors``:

- ``vector_centroids(list, centroid)``: k-means centroids (unit float32), trained on a sample of the vectors;
- ``vector_lists(id, list, scale, code)``: one row per vector (``id`` is ``vectors.id``): its list and its
  int8 code, ``vector ~= scale * code``; a trigger deletes it with its vector, in the same transaction;
- ``meta['vector_lists']``: ``{"lists": L, "trained": N, "complete": bool}``.

``build`` (from ``settle``, at the end of a sync, when the index holds ``exact_below`` vectors or more) trains
the centroids and files every vector in batches of one transaction each; a build that is killed leaves
``complete`` false and the next ``settle`` goes on where it stopped. Once complete, the writer files every
new vector in the transaction that inserts it (``add``), so the lists always cover the vectors: a reader
checks the two counts and searches exactly while they differ (an older mdmem may have written vectors
without lists). When the index has grown ``RETRAIN_GROWTH`` times since training, the next ``settle``
trains again.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from mdmem.store.sqlite_db import SqliteDb

if TYPE_CHECKING:
    import numpy as np

META = "vector_lists"
RETRAIN_GROWTH = 4  # train again (and re-file every vector) when the index has grown this much since
SAMPLE_PER_LIST = 40  # k-means trains on this many sampled vectors per centroid
KMEANS_ROUNDS = 8
BATCH = 20_000  # vectors filed per transaction by a build

_TABLES = (
    "CREATE TABLE IF NOT EXISTS vector_centroids (list INTEGER PRIMARY KEY, centroid BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS vector_lists (id INTEGER PRIMARY KEY, list INTEGER NOT NULL, "
    "scale REAL NOT NULL, code BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS vector_lists_list ON vector_lists(list)",
    "CREATE TRIGGER IF NOT EXISTS vectors_lists_ad AFTER DELETE ON vectors BEGIN "
    "DELETE FROM vector_lists WHERE id = old.id; END",
)


def list_count(vectors: int) -> int:
    """How many lists an index of ``vectors`` vectors is split into: about their square root."""
    return max(16, int(round(vectors**0.5)))


def state(db: SqliteDb) -> dict[str, Any] | None:
    """The lists' meta record, or None when the index has none."""
    got = db.memoised(META, lambda: db.get_meta(META))
    return got if isinstance(got, dict) else None


def centroids(db: SqliteDb) -> np.ndarray | None:
    """The trained centroids, (L, dims) unit float32, or None."""
    if state(db) is None:
        return None

    def read() -> Any:
        import numpy as np

        rows = db.conn.execute("SELECT centroid FROM vector_centroids ORDER BY list").fetchall()
        return np.frombuffer(b"".join(r[0] for r in rows), dtype="<f4").reshape(len(rows), -1) if rows else None

    return db.memoised("vector_centroids", read)  # type: ignore[no-any-return]


def encode(vectors: np.ndarray, cents: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each vector's list (nearest centroid by cosine), scale and int8 code (of the unit vector)."""
    import numpy as np

    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    lists = np.argmax(unit @ cents.T, axis=1)
    peak = np.maximum(np.abs(unit).max(axis=1), 1e-12)
    codes = np.rint(unit * (127.0 / peak[:, None])).astype(np.int8)
    return lists, (peak / 127.0).astype(np.float64), codes


def add(db: SqliteDb, ids: list[int], vectors: np.ndarray) -> None:
    """File newly inserted vectors (the caller's transaction) when the index has lists."""
    cents = centroids(db)
    if cents is None or not ids:
        return
    _write(db, ids, vectors, cents)


def _write(db: SqliteDb, ids: list[int], vectors: np.ndarray, cents: np.ndarray) -> None:
    lists, scales, codes = encode(vectors, cents)
    db.conn.executemany(
        "INSERT OR REPLACE INTO vector_lists(id, list, scale, code) VALUES (?, ?, ?, ?)",
        [(i, int(li), float(s), c.tobytes()) for i, li, s, c in zip(ids, lists, scales, codes, strict=True)],
    )


def listed(db: SqliteDb) -> int:
    """How many vectors the lists hold (remembered until the index changes)."""
    count = db.memoised("listed", lambda: db.conn.execute("SELECT count(*) FROM vector_lists").fetchone()[0])
    return int(count)


def needs_settle(db: SqliteDb, exact_below: int, vectors: int) -> bool:
    """Whether ``settle`` has work: a large index without complete lists, grown since training, or with
    vectors the lists miss. Cheap (remembered counts): a sync asks it every time."""
    if vectors < exact_below or vectors == 0:
        return False
    meta = state(db)
    if meta is None or not meta.get("complete") or vectors >= RETRAIN_GROWTH * int(meta.get("trained", 0)):
        return True
    return listed(db) != vectors


def settle(db: SqliteDb, exact_below: int, vectors: int) -> bool:
    """Build, go on building or retrain the lists when the index is large enough; True when it wrote."""
    if not needs_settle(db, exact_below, vectors):
        return False
    meta = state(db)
    if meta is not None and meta.get("complete") and vectors < RETRAIN_GROWTH * int(meta.get("trained", 0)):
        return _file_unlisted(db)
    build(db, vectors, fresh=meta is None or bool(meta.get("complete")))
    return True


def _file_unlisted(db: SqliteDb) -> bool:
    """File the vectors an older mdmem wrote without lists (the lists' count falls short); True if any."""
    listed = int(db.conn.execute("SELECT count(*) FROM vector_lists").fetchone()[0])
    if listed == int(db.conn.execute("SELECT count(*) FROM vectors").fetchone()[0]):
        return False
    cents = centroids(db)
    assert cents is not None
    with db.tx():
        db.conn.execute("DELETE FROM vector_lists WHERE id NOT IN (SELECT id FROM vectors)")
        rows = db.conn.execute(
            "SELECT id, embedding FROM vectors WHERE id NOT IN (SELECT id FROM vector_lists)"
        ).fetchall()
        for part in range(0, len(rows), BATCH):
            chunk = rows[part : part + BATCH]
            _write(db, [int(r[0]) for r in chunk], _matrix([r[1] for r in chunk]), cents)
    return True


def build(db: SqliteDb, vectors: int, *, fresh: bool = True) -> None:
    """Train centroids on a sample and file every vector (``fresh``), or go on filing after a killed build."""
    if fresh:
        trained = train(db, list_count(vectors))
        with db.tx():
            for sql in _TABLES:
                db.conn.execute(sql)
            db.conn.execute("DELETE FROM vector_centroids")
            db.conn.execute("DELETE FROM vector_lists")
            db.conn.executemany(
                "INSERT INTO vector_centroids(list, centroid) VALUES (?, ?)",
                [(i, c.astype("<f4").tobytes()) for i, c in enumerate(trained)],
            )
            db.set_meta(
                META, {"lists": len(trained), "trained": vectors, "complete": False, "filed": 0, "stamp": time.time()}
            )
    cents = centroids(db)
    assert cents is not None
    while True:
        with db.tx():
            meta = state(db) or {}
            done = int(meta.get("filed", 0))  # vectors above it written meanwhile are filed by ``add`` too
            rows = db.conn.execute(
                "SELECT id, embedding FROM vectors WHERE id > ? ORDER BY id LIMIT ?", (done, BATCH)
            ).fetchall()
            if rows:
                _write(db, [int(r[0]) for r in rows], _matrix([r[1] for r in rows]), cents)
            db.set_meta(META, {**meta, "filed": int(rows[-1][0]) if rows else done, "complete": not rows})
        if not rows:
            return


def train(db: SqliteDb, lists: int, seed: int = 0) -> np.ndarray:
    """k-means (spherical: cosine) centroids of ``lists`` lists on a sample of the index's vectors."""
    import numpy as np

    ids = [int(r[0]) for r in db.conn.execute("SELECT id FROM vectors")]
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(ids), size=min(len(ids), lists * SAMPLE_PER_LIST), replace=False)
    from mdmem.store.sql import rows_in

    blobs = [
        r[0] for r in rows_in(db.conn, "SELECT embedding FROM vectors WHERE id IN ({marks})", [ids[i] for i in picked])
    ]
    sample = _matrix(blobs)
    sample /= np.maximum(np.linalg.norm(sample, axis=1, keepdims=True), 1e-12)
    return kmeans(sample, min(lists, len(sample)), rng)


def kmeans(sample: np.ndarray, lists: int, rng: np.random.Generator) -> np.ndarray:
    """Spherical k-means: ``lists`` unit centroids; an empty list takes a random sample vector."""
    import numpy as np

    cents = sample[rng.choice(len(sample), size=lists, replace=False)].copy()
    for _ in range(KMEANS_ROUNDS):
        nearest = np.argmax(sample @ cents.T, axis=1)
        order = np.argsort(nearest, kind="stable")
        counts = np.bincount(nearest, minlength=lists)
        sums = sample[rng.choice(len(sample), size=lists, replace=False)]  # kept by the lists left empty
        used = np.flatnonzero(counts)
        starts = np.concatenate(([0], np.cumsum(counts[used])[:-1]))
        sums[used] = np.add.reduceat(sample[order], starts, axis=0)
        cents = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
    return cents.astype(np.float32)


def _matrix(blobs: list[bytes]) -> np.ndarray:
    import numpy as np

    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1).astype(np.float32)
