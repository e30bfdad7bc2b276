"""One generation of one agent's index in the shared schema, as the parts of ``PgStore`` share it.

Where it is (the URL and the pool's size, the schema, the agent id, the generation read and written), the
HNSW settings, and what is remembered until the next write or ``refresh``: the generation's totals (a search
asks for them several times: BM25, the vector search, the document-frequency memo; they are read with the
live generation by ``refresh``, forgotten by a write through the store, and follow other processes' writes at
the next ``refresh``), document frequencies, and the generations known to have a valid HNSW index.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

from mdmem.config.store import HnswConfig
from mdmem.store.pg import keyword
from mdmem.store.pg.connection import session, session_connection


def lock_key(agent_id: str, purpose: str = "writer") -> int:
    """A signed 64-bit advisory lock key for the agent's writer (or embedding, or index) lock."""
    digest = hashlib.sha256(f"mdmemory-{purpose}\0{agent_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PgIndexView:
    """What the store's parts (``PgIndexing``, ``PgSearching``, ``PgGenerations``) read and remember."""

    def __init__(
        self, url: str, max_connections: int, agent_id: str, schema: str, hnsw: HnswConfig, building: bool
    ) -> None:
        self.url = url
        self.max_connections = max_connections
        self.agent_id = agent_id
        self.schema = schema
        self.hnsw = hnsw
        self.building = building  # a rebuild's writer: it never follows the live generation
        self.gen = 0
        self.remembered: keyword.Totals | None = None  # the generation's totals, until a write or refresh
        # document frequencies by (word, limit), kept while the generation's write counter stays the same
        self.df: tuple[tuple[int, int], dict[tuple[str, int], int]] = ((0, -1), {})
        self.df_terms: tuple[int, dict[str, tuple[int, int, int]]] = (0, {})  # gen, term -> (df, chunks, version)
        self.indexed: set[tuple[int, int]] = set()  # (generation, dims) known to have a valid HNSW index

    def session(self) -> contextlib.AbstractContextManager[Any]:
        """Hold one connection for a series of calls (each call borrows one otherwise)."""
        return session(self.url, self.max_connections)

    @property
    def conn(self) -> Any:
        """The connection of the ``session`` block this thread is in."""
        return session_connection(self.url)

    def totals(self) -> keyword.Totals:
        """The generation's totals (remembered since the last ``refresh`` or write here, else read now)."""
        if self.remembered is None or self.remembered.gen != self.gen:
            with self.session() as conn, conn.cursor() as cur:
                self.remembered = keyword.totals(cur, self.schema, self.agent_id, self.gen)
        return self.remembered
