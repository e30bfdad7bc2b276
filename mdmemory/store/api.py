"""What searching asks of a store: the part of the index interface both stores (SQLite, PostgreSQL) offer.

``mdmemory.search`` is written against this, so it runs unchanged on either; keyword arguments are plain
query terms (each store turns them into its own query: an FTS5 MATCH, or its postings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from mdmemory.store.index import ChunkRow


class SearchStore(Protocol):
    def chunk_count(self) -> int: ...

    def pending_count(self) -> int: ...

    def keyword(self, terms: Sequence[str], k: int) -> list[tuple[int, float]]: ...

    def keyword_matches(self, terms: Sequence[str], k: int) -> list[tuple[int, float, set[str]]]: ...

    def term_frequency_at_least(self, term: str, limit: int) -> int: ...

    def trigram(self, grams: Sequence[str], k: int) -> list[tuple[int, float]]: ...

    def substring(self, needles: Sequence[str], k: int) -> list[tuple[int, float]]: ...

    def knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]: ...

    def chunk_similarities(self, chunk_ids: Sequence[int], query: np.ndarray) -> dict[int, float]: ...

    def chunks_by_ids(self, ids: Sequence[int]) -> dict[int, ChunkRow]: ...
