"""An index's vectors held in memory for exact KNN with one matrix product.

sqlite-vec's exact scan computes each cosine distance in SQL (~0.5 us a vector of 384 dimensions); a
normalised float32 matrix answers the same query with one BLAS product (~0.05 us a vector) that releases
the GIL, so a long-running reader (the service's recalls) pays for the scan ten times less. The matrix
follows the ``vectors`` table incrementally: ids there are AUTOINCREMENT, never reused, so rows with an id
above the largest one held are the new ones, and a count that differs after those are added means rows
were deleted (their ids are then looked up and masked). Only indexes up to ``MAX_BYTES`` are held: above
that, the store's own KNN paths answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import sqlean

MAX_BYTES = 64 * 1024 * 1024  # a store holds its vectors in memory up to this size (float32)
_DTYPE = "<f4"


class VectorMatrix:
    """The rows of ``vectors`` (id, chunk id, normalised embedding) of one connection's index."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.size = 0  # rows used in the buffers, dead ones included
        self.live_count = 0
        self.max_id = 0
        self.ids = np.empty(0, dtype=np.int64)
        self.owners = np.empty(0, dtype=np.int64)
        self.rows = np.empty((0, dims), dtype=np.float32)
        self.live = np.empty(0, dtype=bool)

    @staticmethod
    def fits(count: int, dims: int) -> bool:
        return count * dims * 4 <= MAX_BYTES

    def sync(self, conn: sqlean.Connection) -> None:
        """Catch up with the ``vectors`` table: append new rows, mask deleted ones, compact when half dead."""
        max_id, count = conn.execute("SELECT coalesce(max(id), 0), count(*) FROM vectors").fetchone()
        if max_id > self.max_id:
            new = conn.execute(
                "SELECT id, chunk_id, embedding FROM vectors WHERE id > ? ORDER BY id", (self.max_id,)
            ).fetchall()
            self._append(new)
        if self.live_count != count:
            present = np.fromiter((r[0] for r in conn.execute("SELECT id FROM vectors")), dtype=np.int64)
            alive = np.isin(self.ids[: self.size], present, assume_unique=True)
            self.live[: self.size] &= alive
            self.live_count = int(self.live[: self.size].sum())
        if self.size > 64 and self.live_count < self.size // 2:
            self._compact()

    def _append(self, new: list[Any]) -> None:
        if not new:
            return
        n = len(new)
        block = np.frombuffer(b"".join(r[2] for r in new), dtype=_DTYPE).reshape(n, self.dims)
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        block = block / np.maximum(norms, 1e-12)
        need = self.size + n
        if need > len(self.ids):  # grow the buffers geometrically: appends stay amortised O(rows added)
            cap = max(need, int(len(self.ids) * 1.5) + 64)
            self.ids = _grown(self.ids, cap)
            self.owners = _grown(self.owners, cap)
            self.live = _grown(self.live, cap)
            rows = np.empty((cap, self.dims), dtype=np.float32)
            rows[: self.size] = self.rows[: self.size]
            self.rows = rows
        s = slice(self.size, need)
        self.ids[s] = [int(r[0]) for r in new]
        self.owners[s] = [int(r[1]) for r in new]
        self.rows[s] = block
        self.live[s] = True
        self.size = need
        self.live_count += n
        self.max_id = max(self.max_id, int(new[-1][0]))

    def _compact(self) -> None:
        keep = np.flatnonzero(self.live[: self.size])
        self.ids, self.owners = self.ids[keep], self.owners[keep]
        self.rows = np.ascontiguousarray(self.rows[keep])
        self.live = np.ones(len(keep), dtype=bool)
        self.size = self.live_count = len(keep)

    def nearest(self, query: np.ndarray, want: int) -> list[tuple[int, float]]:
        """The ``want`` nearest vectors as (chunk id, cosine distance), nearest first."""
        if self.live_count == 0 or want <= 0:
            return []
        q = np.asarray(query, dtype=np.float32)
        q = q / (float(np.linalg.norm(q)) or 1.0)
        sims = self.rows[: self.size] @ q
        if self.live_count < self.size:
            sims[~self.live[: self.size]] = -np.inf
        want = min(want, self.live_count)
        top = np.argpartition(-sims, want - 1)[:want] if want < self.size else np.arange(self.size)
        top = top[np.isfinite(sims[top])]
        order = top[np.lexsort((self.ids[top], -sims[top]))]
        return [(int(self.owners[i]), 1.0 - float(sims[i])) for i in order]


def _grown(a: np.ndarray, cap: int) -> np.ndarray:
    out = np.empty(cap, dtype=a.dtype)
    out[: len(a)] = a
    return out
