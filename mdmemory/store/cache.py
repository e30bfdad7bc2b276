"""The SQLite store's embedding cache: vectors by (provider, model, provider key, input hash), kept across
rebuilds so a provider's work is not redone. Mixed into ``Store``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mdmemory.store.sql import rows_in
from mdmemory.store.vectors import decode_vector, encode_vector

if TYPE_CHECKING:
    import numpy as np


class EmbeddingCache:
    """Needs ``conn`` and ``_tx`` (a write transaction) of ``Store``."""

    conn: Any

    def _tx(self) -> Any:  # provided by Store
        raise NotImplementedError

    def cache_get(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        sql = (
            "SELECT hash, embedding FROM embedding_cache WHERE provider = ? AND model = ? AND provider_key = ? "
            "AND hash IN ({marks})"
        )
        return {h: decode_vector(blob) for h, blob in rows_in(self.conn, sql, hashes, (provider, model, key))}

    def cache_put(self, provider: str, model: str, key: str, items: dict[str, np.ndarray]) -> None:
        now = time.time()
        with self._tx():
            self.conn.executemany(
                "INSERT OR REPLACE INTO embedding_cache(provider, model, provider_key, hash, dims, embedding, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(provider, model, key, h, int(v.shape[0]), encode_vector(v), now) for h, v in items.items()],
            )

    def cache_touch(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> None:
        """Mark cache entries as recently used so pruning keeps them."""
        now = time.time()
        with self._tx():
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
        with self._tx():
            self.conn.execute(
                "DELETE FROM embedding_cache WHERE (provider, model, provider_key, hash) IN "
                "(SELECT provider, model, provider_key, hash FROM embedding_cache ORDER BY updated_at LIMIT ?)",
                (excess,),
            )
        return excess
