"""Search on one agent's PostgreSQL index: what ``mdmem.search.hybrid`` asks of a store (``SearchStore``), over
the generation the store reads: a part of ``PgStore``; BM25 and the vector SQL live in ``keyword`` and
``vectors``."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mdmem.store.fts import like_escape, rank_needle_hits
from mdmem.store.pg import keyword, mostterms
from mdmem.store.pg import vectors as vector_sql
from mdmem.store.pg.connection import borrows, current, give_back, spare
from mdmem.store.pg.view import PgIndexView
from mdmem.store.terms import text_terms
from mdmem.util.threads import shared_pool

if TYPE_CHECKING:
    import numpy as np


DF_EXACT_BELOW = 20_000  # chunks; below, document frequencies are counted again after any write
KNN_THREADS = 8  # threads running vector searches started ahead (start_knn), shared by the process's stores
DF_DRIFT = 0.01  # above, a remembered count holds while the chunk count moves less than this share


class PgSearching:
    """Search on the generation ``view`` reads.

    A search asks many small questions; each is one round trip to the server: the generation's totals
    (chunks, tokens, vectors per chunk, write counter) are read with the live generation by ``refresh``
    rather than by each question, and the terms a chunk holds come with its BM25 score."""

    def __init__(self, view: PgIndexView) -> None:
        self.view = view

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return self.view.session()

    def keyword(self, words: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Chunks holding any of ``words`` (FTS5's terms of them): ``(chunk id, bm25)`` best first."""
        return [(cid, rank) for cid, rank, _ in self.keyword_matches(words, k)]

    @borrows
    def keyword_matches(self, words: Sequence[str], k: int) -> list[tuple[int, float, set[str]]]:
        """Like ``keyword``, plus which of ``words`` each chunk holds, lower-cased: what the SQLite store's
        highlighted words tell the search. A word of several terms (``nimbus 14``, ``v2.3.1``) is a phrase,
        as FTS5 reads a quoted string: its terms adjacent and in order."""
        listed = [w for w in dict.fromkeys(w.lower() for w in words if w)]
        keys = {w: ts for w, ts in zip(listed, text_terms(listed), strict=True) if ts}
        terms = list(dict.fromkeys(ts[0] for ts in keys.values() if len(ts) == 1))
        phrases = [ts for ts in keys.values() if len(ts) > 1]
        totals, df = self.view.totals(), self.document_frequencies(terms)
        df.update({keyword.phrase_key(p): self.phrase_frequency(p, totals.chunks + 1) for p in phrases})
        s, a, g = self.view.schema, self.view.agent_id, self.view.gen
        with self.view.conn.cursor() as cur:
            # a large generation: the chunks holding most of the terms, when all are common (else every posting)
            ranked = None if phrases else mostterms.top_k(cur, s, a, g, terms, k, totals, df)
            if ranked is None:
                ranked = keyword.bm25(cur, s, a, g, terms, k, totals, df, phrases)
        return [
            (cid, rank, {w for w, ts in keys.items() if keyword.phrase_key(ts) in found}) for cid, rank, found in ranked
        ]

    @borrows
    def term_frequency_at_least(self, word: str, limit: int) -> int:
        """How many chunks hold ``word`` (a word of several terms as a phrase), counting no further than
        ``limit``."""
        terms = text_terms([word])[0]
        if not terms:
            return 0
        if len(terms) == 1:
            return min(self.document_frequencies(terms)[terms[0]], int(limit))
        return self.phrase_frequency(terms, limit)

    @borrows
    def phrase_frequency(self, phrase: Sequence[str], limit: int) -> int:
        """How many chunks hold ``phrase`` (FTS5 terms), counting no further than ``limit``. Counted in full
        once (the search asks with two limits: pruning, then BM25) and remembered until the generation is
        written to."""
        key = (self.view.gen, self.view.totals().version)
        if self.view.df[0] != key:
            self.view.df = (key, {})
        memo_key = (keyword.phrase_key(phrase), -1)
        known = self.view.df[1].get(memo_key)
        if known is None:
            every = self.view.totals().chunks + 1
            with self.view.conn.cursor() as cur:
                known = keyword.phrase_frequency(
                    cur, self.view.schema, self.view.agent_id, self.view.gen, phrase, every
                )
            self.view.df[1][memo_key] = known
        return min(known, int(limit))

    @borrows
    def document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        """How many chunks hold each term. Counted once and remembered: until the generation changes at
        all while it is small, and while its chunk count stays within ``DF_DRIFT`` of what it was when
        counted once it holds ``DF_EXACT_BELOW`` chunks (an IDF moves by less than 0.01 then, and counting
        a frequent term's postings again after every write would cost more than the search)."""
        totals = self.view.totals()
        memo = self.view.df_terms if self.view.df_terms[0] == self.view.gen else (self.view.gen, {})
        self.view.df_terms = memo
        out: dict[str, int] = {}
        missing = []
        for term in dict.fromkeys(terms):
            seen = memo[1].get(term)
            if seen is not None and (
                seen[2] == totals.version
                or (totals.chunks >= DF_EXACT_BELOW and abs(totals.chunks - seen[1]) <= DF_DRIFT * seen[1])
            ):
                out[term] = seen[0]
            else:
                missing.append(term)
        if missing:
            rows = self.view.conn.execute(
                f"SELECT term, count(*) FROM {self.view.schema}.postings WHERE agent_id = %s AND gen = %s "
                "AND term = ANY(%s) GROUP BY term",
                (self.view.agent_id, self.view.gen, missing),
            ).fetchall()
            counted = {str(t): int(n) for t, n in rows}
            for term in missing:
                out[term] = counted.get(term, 0)
                memo[1][term] = (out[term], totals.chunks, totals.version)
        return out

    @borrows
    def trigram(self, grams: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Chunks holding any of the CJK character trigrams ``grams``: ``(chunk id, bm25)`` best first."""
        totals = self.view.totals()
        with self.view.conn.cursor() as cur:
            return keyword.trigram_bm25(cur, self.view.schema, self.view.agent_id, self.view.gen, grams, k, totals)

    @borrows
    def substring(self, needles: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Chunks containing any needle (CJK words shorter than a trigram), scored as the SQLite store does:
        more distinct needles, then more occurrences, first (negative scores)."""
        if not needles:
            return []
        patterns = [f"%{like_escape(n)}%" for n in needles]
        rows = self.view.conn.execute(
            f"SELECT id, text FROM {self.view.schema}.chunks WHERE agent_id = %s AND gen = %s AND text LIKE ANY(%s) "
            "ORDER BY id LIMIT %s",
            (self.view.agent_id, self.view.gen, patterns, int(k) * 8),
        ).fetchall()
        return rank_needle_hits(rows, needles, k)

    def start_knn(self, query: np.ndarray, k: int) -> Callable[[], list[tuple[int, float]]]:
        """``knn`` started now on a second connection, in the snapshot of the search's (``reading``), while
        this thread goes on with the keyword search: the server answers both on two cores. Without a read
        snapshot to share (a writer's block, no ``reading``) or a spare connection at hand, the vector
        search runs when its answer is asked for, on this thread's connection."""
        from psycopg import pq

        later = functools.partial(self.knn, query, k)
        conn = current(self.view.url)
        if conn is None or conn.read_only is not True or conn.info.transaction_status != pq.TransactionStatus.INTRANS:
            return later
        args = (
            self.view.schema,
            self.view.agent_id,
            self.view.gen,
            query,
            k,
            self.view.totals().per_chunk,
            self.view.hnsw.ef_search,
        )
        second = spare(self.view.url, self.view.max_connections)
        if second is None:
            return later
        try:
            snapshot = str(conn.execute("SELECT pg_export_snapshot()").fetchone()[0])
            threads = shared_pool("mdmemory-knn", KNN_THREADS)
            future = threads.submit(_knn_in_snapshot, self.view.url, second, snapshot, args)
        except BaseException:
            give_back(self.view.url, second)  # (once submitted, the thread gives it back)
            raise
        return future.result

    @borrows
    def knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` nearest chunks of the live generation by cosine distance, through its HNSW index."""
        per_chunk = self.view.totals().per_chunk
        with self.view.conn.cursor() as cur:
            return vector_sql.knn(
                cur,
                self.view.schema,
                self.view.agent_id,
                self.view.gen,
                query,
                k,
                per_chunk=per_chunk,
                ef_search=self.view.hnsw.ef_search,
            )


def _knn_in_snapshot(url: str, conn: Any, snapshot: str, args: tuple[Any, ...]) -> list[tuple[int, float]]:
    """``vectors.knn`` on ``conn`` in the exported ``snapshot`` (a read-only REPEATABLE READ transaction
    that imports it), then the connection goes back to the pool."""
    from psycopg import IsolationLevel, sql

    schema, agent_id, gen, query, k, per_chunk, ef_search = args
    try:
        conn.isolation_level, conn.read_only = IsolationLevel.REPEATABLE_READ, True
        with conn.transaction():
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
            with conn.cursor() as cur:
                return vector_sql.knn(cur, schema, agent_id, gen, query, k, per_chunk=per_chunk, ef_search=ef_search)
    finally:
        if not conn.broken:
            conn.isolation_level, conn.read_only = None, None
        give_back(url, conn)
