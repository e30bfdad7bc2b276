"""Search on one agent's PostgreSQL index: what ``mdmemory.search`` asks of a store (``SearchStore``), over
the generation the store reads. Mixed into ``PgStore``; BM25 and the vector SQL live in ``keyword`` and
``vectors``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mdmemory.store.index import like_escape, rank_needle_hits
from mdmemory.store.pg import keyword
from mdmemory.store.pg import vectors as vector_sql
from mdmemory.store.pg.connection import borrows
from mdmemory.storeconfig import HnswConfig

if TYPE_CHECKING:
    import numpy as np


class PgSearching(keyword.RemembersTotals):
    """Needs ``schema``, ``agent_id``, ``gen`` and ``_df`` (remembered document frequencies).

    A search asks many small questions; each is one round trip to the server: the generation's totals
    (chunks, tokens, vectors per chunk, write counter) are read with the live generation by ``refresh``
    rather than by each question, and the terms a chunk holds come with its BM25 score."""

    hnsw: HnswConfig
    _df: tuple[tuple[int, int], dict[tuple[str, int], int]]

    def keyword(self, words: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Chunks holding any of ``words`` (FTS5's terms of them): ``(chunk id, bm25)`` best first."""
        return [(cid, rank) for cid, rank, _ in self.keyword_matches(words, k)]

    @borrows
    def keyword_matches(self, words: Sequence[str], k: int) -> list[tuple[int, float, set[str]]]:
        """Like ``keyword``, plus which of ``words`` each chunk holds (all of a word's terms), lower-cased:
        what the SQLite store's highlighted words tell the search."""
        parts = {w.lower(): keyword.query_terms([w]) for w in words if w}
        terms = list(dict.fromkeys(t for ts in parts.values() for t in ts))
        totals = self.totals()
        with self.conn.cursor() as cur:
            ranked = keyword.bm25(cur, self.schema, self.agent_id, self.gen, terms, k, totals)
        return [(cid, rank, {w for w, ts in parts.items() if ts and set(ts) <= found}) for cid, rank, found in ranked]

    @borrows
    def term_frequency_at_least(self, word: str, limit: int) -> int:
        """How many chunks hold ``word`` (every one of its terms), counting no further than ``limit``."""
        terms = keyword.query_terms([word])
        if not terms:
            return 0
        key = (self.gen, self.totals().version)
        if self._df[0] != key:
            self._df = (key, {})
        known = self._df[1].get((word, limit))
        if known is not None:
            return known
        row = self.conn.execute(
            f"SELECT count(*) FROM (SELECT chunk_id FROM {self.schema}.postings WHERE agent_id = %s AND gen = %s "
            "AND term = ANY(%s) GROUP BY chunk_id HAVING count(*) = %s LIMIT %s) hits",
            (self.agent_id, self.gen, terms, len(terms), int(limit)),
        ).fetchone()
        self._df[1][(word, limit)] = int(row[0])
        return int(row[0])

    @borrows
    def trigram(self, grams: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Chunks holding any of the CJK character trigrams ``grams``: ``(chunk id, bm25)`` best first."""
        totals = self.totals()
        with self.conn.cursor() as cur:
            return keyword.trigram_bm25(cur, self.schema, self.agent_id, self.gen, grams, k, totals)

    @borrows
    def substring(self, needles: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Chunks containing any needle (CJK words shorter than a trigram), scored as the SQLite store does:
        more distinct needles, then more occurrences, first (negative scores)."""
        if not needles:
            return []
        patterns = [f"%{like_escape(n)}%" for n in needles]
        rows = self.conn.execute(
            f"SELECT id, text FROM {self.schema}.chunks WHERE agent_id = %s AND gen = %s AND text LIKE ANY(%s) "
            "ORDER BY id LIMIT %s",
            (self.agent_id, self.gen, patterns, int(k) * 8),
        ).fetchall()
        return rank_needle_hits(rows, needles, k)

    @borrows
    def knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` nearest chunks of the live generation by cosine distance, through its HNSW index."""
        per_chunk = self.totals().per_chunk
        with self.conn.cursor() as cur:
            return vector_sql.knn(
                cur, self.schema, self.agent_id, self.gen, query, k, per_chunk=per_chunk, ef_search=self.hnsw.ef_search
            )
