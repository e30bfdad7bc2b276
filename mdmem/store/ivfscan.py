"""KNN over the inverted file of a large SQLite index (``mdmem.store.ivf``), held in memory.

A query scores the centroids, takes the ``probes`` nearest lists, scores their vectors by their int8 codes
(``approximate``: one block a list, converted and multiplied in cache, about ``probes / lists`` of the
index; it reads only memory, so it may run in another thread), then ``pick`` keeps the
best ``want + max(16, want / 2)`` and rescores those with their exact float vectors read from ``vectors``:
the distances returned are exact, and a vector deleted since it was loaded is not found there, so it is
masked and never returned (the selection runs again without it).

The rows follow the ``vector_lists`` table incrementally, as ``mdmem.store.matrix`` follows ``vectors``:
ids are never reused, so rows above the largest id held are new ones (appended, and scanned in full until
the next grouping by list); their chunk ids are read apart, from the ``vectors`` index that holds both (its
rows are large). Deleted ones are found when they come up as candidates, or by a recount when the table
holds fewer rows than the live ones held by more than a tenth. A new training (another ``stamp`` in the
meta record) drops everything held.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import sqlean

FETCH = 50_000  # rows read per fetch while loading
Rescore = Callable[[Sequence[int]], dict[int, tuple[int, float]]]  # vector ids -> {id: (chunk id, cosine)}
Approximate = tuple[np.ndarray, np.ndarray]  # rows of the held arrays, their approximate similarities


class ListScan:
    """The vectors of one connection's index by list: ids, owners (chunk ids), lists, scales and int8 codes."""

    def __init__(self, dims: int, stamp: Any, cents: np.ndarray) -> None:
        self.dims, self.stamp, self.cents = dims, stamp, np.ascontiguousarray(cents, dtype=np.float32)
        self.size = self.live_count = self.max_id = 0
        self.ids = np.empty(0, dtype=np.int64)
        self.owners = np.empty(0, dtype=np.int64)
        self.lists = np.empty(0, dtype=np.int32)
        self.scales = np.empty(0, dtype=np.float32)
        self.codes = np.empty((0, dims), dtype=np.int8)
        self.live = np.empty(0, dtype=bool)
        self.sorted_upto = 0  # rows below it are grouped by list (``starts``); the rest are scanned in full
        self.starts = np.zeros(len(cents) + 1, dtype=np.int64)

    def sync(self, conn: sqlean.Connection, table_count: int) -> None:
        """Catch up with ``vector_lists``: append new rows, recount when deletions went unseen."""
        first, start = self.size == 0, self.size
        if first:
            self._reserve(table_count + 1024)
        cur = conn.execute("SELECT id, list, scale, code FROM vector_lists WHERE id > ? ORDER BY id", (self.max_id,))
        while rows := cur.fetchmany(FETCH):
            self._append(rows)
        if self.size > start:
            self._own(conn, start, first)
        if self.live_count - table_count > max(16, self.live_count // 10):
            present = np.fromiter((r[0] for r in conn.execute("SELECT id FROM vector_lists")), dtype=np.int64)
            self.live[: self.size] &= np.isin(self.ids[: self.size], present, assume_unique=True)
            self.live_count = int(self.live[: self.size].sum())
        if first or self.size - self.sorted_upto > max(4096, self.size // 64):
            self._sort()

    def _own(self, conn: sqlean.Connection, start: int, first: bool) -> None:
        """The chunk ids of the rows from ``start`` on: read apart (the ``vectors`` rows are large; their
        chunk index holds both ids), a row whose vector is gone meanwhile is dead."""
        sql = "SELECT id, chunk_id FROM vectors" + ("" if first else " WHERE id >= ?")
        got = conn.execute(sql, () if first else (int(self.ids[start]),)).fetchall()
        pairs = np.array(got, dtype=np.int64).reshape(-1, 2)
        pairs = pairs[np.argsort(pairs[:, 0])]
        ids = self.ids[start : self.size]
        at = np.minimum(np.searchsorted(pairs[:, 0], ids), max(len(pairs) - 1, 0))
        found = (pairs[at, 0] == ids) if len(pairs) else np.zeros(len(ids), dtype=bool)
        self.owners[start : self.size] = np.where(found, pairs[at, 1] if len(pairs) else 0, -1)
        self.live[start : self.size] &= found
        self.live_count -= int((~found).sum())

    def _reserve(self, cap: int) -> None:
        self.ids, self.owners, self.lists = _grown(self.ids, cap), _grown(self.owners, cap), _grown(self.lists, cap)
        self.scales, self.live, self.codes = _grown(self.scales, cap), _grown(self.live, cap), _grown(self.codes, cap)

    def _append(self, rows: list[Any]) -> None:
        n = len(rows)
        need = self.size + n
        if need > len(self.ids):  # grow geometrically: appends stay amortised O(rows added)
            self._reserve(max(need, int(len(self.ids) * 1.25) + 1024))
        s = slice(self.size, need)
        self.ids[s] = [r[0] for r in rows]
        self.lists[s] = [r[1] for r in rows]
        self.scales[s] = [r[2] for r in rows]
        self.codes[s] = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.int8).reshape(n, self.dims)
        self.live[s] = True
        self.size, self.live_count, self.max_id = need, self.live_count + n, int(rows[-1][0])

    def _sort(self) -> None:
        """Hold the rows grouped by list (a contiguous block each), the dead ones dropped."""
        keep = np.flatnonzero(self.live[: self.size])
        keep = keep[np.argsort(self.lists[keep], kind="stable")]
        self.ids, self.owners, self.lists = self.ids[keep], self.owners[keep], self.lists[keep]
        self.scales, self.codes = self.scales[keep], self.codes[keep]
        self.live = np.ones(len(keep), dtype=bool)
        self.size = self.live_count = self.sorted_upto = len(keep)
        self.starts = np.searchsorted(self.lists, np.arange(len(self.cents) + 1))

    def approximate(self, query: np.ndarray, probes: int) -> Approximate:
        """The rows of the ``probes`` lists nearest ``query`` (and the rows not yet grouped) with their
        approximate similarities from the int8 codes. Reads only what is held in memory, never the index: it
        may run in another thread while the connection answers the keyword search (numpy releases the GIL)."""
        if self.live_count == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        q = np.asarray(query, dtype=np.float32)
        q = q / (float(np.linalg.norm(q)) or 1.0)
        near = self.cents @ q
        probes = max(1, min(probes, len(near)))
        lists = np.argpartition(-near, probes - 1)[:probes] if probes < len(near) else np.arange(len(near))
        blocks = [(int(self.starts[li]), int(self.starts[li + 1])) for li in lists]
        blocks.append((self.sorted_upto, self.size))
        rows = np.concatenate([np.arange(a, b) for a, b in blocks])
        # block by block: an int8 block converted to float32 stays in the cache for its product
        approx = np.concatenate([self.codes[a:b].astype(np.float32) @ q for a, b in blocks]) * self.scales[rows]
        return rows, approx

    def pick(self, found_rows: Approximate, want: int, rescore: Rescore) -> list[tuple[int, float]]:
        """The ``want`` best of ``approximate``'s rows, rescored exactly (``rescore`` reads the index: in the
        connection's thread); a row deleted since it was loaded is masked and the selection runs again."""
        rows, approx = found_rows
        if want <= 0 or not len(rows):
            return []
        alive = self.live[rows]
        if not alive.all():
            rows, approx = rows[alive], approx[alive]
        found: dict[int, tuple[int, float]] = {}
        while len(rows):
            pick = min(len(rows), want + max(16, want // 2))
            top = np.argpartition(-approx, pick - 1)[:pick] if pick < len(rows) else np.arange(len(rows))
            got = rescore([int(i) for i in self.ids[rows[top]]])
            found.update(got)
            dead = [p for p in top if int(self.ids[rows[p]]) not in got]
            if not dead:
                break
            self.live[rows[dead]] = False  # deleted since loaded: never a candidate again
            self.live_count -= len(dead)
            keep = np.ones(len(rows), dtype=bool)
            keep[top] = False
            rows, approx = rows[keep], approx[keep]
        ranked = sorted(found.items(), key=lambda item: (-item[1][1], item[0]))[:want]
        return [(cid, 1.0 - sim) for _, (cid, sim) in ranked]


def _grown(a: np.ndarray, cap: int) -> np.ndarray:
    out = np.empty((cap, *a.shape[1:]), dtype=a.dtype)
    out[: len(a)] = a
    return out
