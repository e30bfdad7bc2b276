"""The SQLite store's embedding cache: vectors by (provider, model, provider key, input hash), kept across
rebuilds so a provider's work is not redone. A part of ``Store``."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from mdmem.store.sql import rows_in
from mdmem.store.sqlite_db import SqliteDb
from mdmem.store.vectors import decode_vector, encode_vector

if TYPE_CHECKING:
    import numpy as np


class EmbeddingCache:
    """The SQLite store's embedding cache, on its open index ``db``."""

    def __init__(self, db: SqliteDb) -> None:
        self.db = db

    @property
    def conn(self) -> Any:
        return self.db.conn

    def cache_get(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        sql = (
            "SELECT hash, embedding FROM embedding_cache WHERE provider = ? AND model = ? AND provider_key = ? "
            "AND hash IN ({marks})"
        )
        return {h: decode_vector(blob) for h, blob in rows_in(self.conn, sql, hashes, (provider, model, key))}

    def cache_put(self, provider: str, model: str, key: str, items: dict[str, np.ndarray]) -> None:
        now = time.time()
        with self.db.tx():
            self.conn.executemany(
                "INSERT OR REPLACE INTO embedding_cache(provider, model, provider_key, hash, dims, embedding, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(provider, model, key, h, int(v.shape[0]), encode_vector(v), now) for h, v in items.items()],
            )

    def cache_touch(self, provider: str, model: str, key: str, hashes: Sequence[str]) -> None:
        """Mark cache entries as recently used so pruning keeps them."""
        now = time.time()
        with self.db.tx():
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
        with self.db.tx():
            self.conn.execute(
                "DELETE FROM embedding_cache WHERE (provider, model, provider_key, hash) IN "
                "(SELECT provider, model, provider_key, hash FROM embedding_cache ORDER BY updated_at LIMIT ?)",
                (excess,),
            )
        return excess

    def entries(self) -> Iterator[tuple[tuple[str, str, str], dict[str, np.ndarray]]]:
        """The whole cache, in groups: ((provider, model, provider key), {input hash: vector})."""
        group: tuple[str, str, str] | None = None
        items: dict[str, np.ndarray] = {}
        rows = self.conn.execute(
            "SELECT provider, model, provider_key, hash, embedding FROM embedding_cache "
            "ORDER BY provider, model, provider_key, hash"
        )
        for provider, model, key, digest, blob in rows:
            if group != (provider, model, key) and items:
                assert group is not None
                yield group, items
                items = {}
            group = (provider, model, key)
            items[str(digest)] = decode_vector(blob)
        if items and group is not None:
            yield group, items
