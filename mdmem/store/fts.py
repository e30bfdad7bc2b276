"""Keyword search on the SQLite store: FTS5 queries built from escaped terms, ranked by ``bm25()``.

``keyword_matches`` answers what the search needs of a keyword query: the best ``k`` chunks by FTS5's BM25
and which query terms each holds. BM25 is a sum over the query's phrases, each term's part depending only
on that term's count in the row, the row's length and index-wide figures, so a query can be scored term by
term with exactly the values the OR query gives. Two plans use that:

- **Term by term** (the general one): one statement whose arms are the single-term queries, summed and
  ranked inside SQLite (``UNION ALL`` ... ``GROUP BY``); the arms say which terms each row holds. It costs
  about what the OR query costs to rank, and replaces the second pass that highlighting took (marking every
  matching row, or re-running the query to mark the kept ones).
- **Rare terms first**, when the query mixes rare and common terms: the rows holding a rare term are scored
  term by term (one statement per rare term, and one per common term over those rows only: ``(rare OR
  ...) AND common``), and a row holding common terms only can score at most ``sum(idf(common) * (k1 +
  1))``. When the ``k``-th best row holding a rare term beats that bound, those ``k`` rows are exactly the
  top ``k``, found without scoring every row that holds a common term (a query whose terms are in
  thousands of chunks). Otherwise the general plan answers.
- **Most terms first**, in an index of ``MOST_TERMS_MIN_CHUNKS`` chunks or more, when every term is common
  (a million chunks: each of a question's 2-4 kept terms held by 25,000-70,000 of them, and the general plan
  scoring all ~150,000 rows, ~200 ms): the rows holding all the terms are scored (one ``AND`` query, only
  its rows ranked), then those holding all but one, and so on while fewer than ``MOST_TERMS_WIDEN * k`` rows
  are found. Each row's score is its exact BM25 (an ``AND`` query of exactly the terms a row holds gives that
  row the OR query's value); what is approximate is leaving out rows holding fewer terms, which a row with
  many occurrences of few terms in a short text could beat. At 1M chunks it found .988 of the exact top 24
  (docs/performance.md, "Large SQLite indexes"); smaller indexes keep the exact plans.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from typing import Any

from mdmem.store.sqlite_db import SqliteDb

MAX_REMEMBERED_TERMS = 4096  # document frequencies kept between searches (cleared when the index changes)
BM25_K1 = 1.2  # FTS5's bm25() constants (fts5_aux.c): its idf floor and k1
IDF_FLOOR = 1e-6
RARE_SHARE = 0.5  # the common terms' bound must stay under this share of the rarest rare term's idf
MOST_TERMS_MIN_CHUNKS = 200_000  # smaller indexes rank every matching row (exact)
MOST_TERMS_WIDEN = 4  # rows scored before the most-terms plan stops: this many times k
MOST_TERMS_MAX = 5  # more distinct terms than this: the general plan (the AND queries would be too many)
_SCORED = "SELECT rowid AS r, bm25(chunks_fts, 1.0, 0.5) AS s,"
_WHERE = "FROM chunks_fts WHERE chunks_fts MATCH ?"
_RANKED = "SELECT rowid, bm25(chunks_fts, 1.0, 0.5) AS rank FROM chunks_fts WHERE chunks_fts MATCH ?"


def fts_match(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: each term a double-quoted string, OR-joined. No FTS syntax survives. A term
    of several tokens (``nimbus 14``: an identifier's parts, mdmem.search.query) is a phrase: its tokens
    adjacent, in order, in one column; BM25 scores it as one more term, so both plans stay exact."""
    quoted = ['"' + t.replace('"', '""') + '"' for t in terms if t]
    return " OR ".join(quoted) if quoted else None


def like_escape(text: str) -> str:
    """``text`` as a literal inside a LIKE pattern whose escape character is a backslash."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def rank_needle_hits(rows: Sequence[tuple[int, str]], needles: Sequence[str], k: int) -> list[tuple[int, float]]:
    """Score ``(chunk id, text)`` rows holding substring needles, negative like bm25: more distinct needles,
    then more occurrences, rank first (ties keep the rows' order); the best ``k``."""
    scored = []
    for rid, text in rows:
        distinct = sum(1 for n in needles if n in text)
        occurrences = sum(text.count(n) for n in needles)
        scored.append((int(rid), -(distinct + min(occurrences, 99) / 100)))
    scored.sort(key=lambda r: r[1])
    return scored[:k]


def idf(rows: int, holding: int) -> float:
    """FTS5's bm25() idf of a phrase held by ``holding`` of ``rows`` rows."""
    return max(math.log((rows - holding + 0.5) / (holding + 0.5)), IDF_FLOOR)


def split_rare_common(counts: dict[str, int], rows: int) -> tuple[list[str], list[str]] | None:
    """The rare-first plan's terms: (rare, common), or None when the query has no such split.

    Common terms are taken from the most frequent down while their bound (``sum(idf * (k1 + 1))``) stays
    under ``RARE_SHARE`` of the idf of the rarest term left; terms in no row are dropped (they score 0)."""
    present = sorted((t for t in counts if counts[t] > 0), key=lambda t: (-counts[t], t))
    common: list[str] = []
    bound = 0.0
    while len(present) - len(common) > 1:
        term = present[len(common)]
        rest = present[len(common) + 1 :]
        added = bound + idf(rows, counts[term]) * (BM25_K1 + 1)
        if added >= RARE_SHARE * min(idf(rows, counts[t]) for t in rest):
            break
        common.append(term)
        bound = added
    if not common:
        return None
    return present[len(common) :], common


class FtsSearch:
    """The SQLite store's keyword search, on its open index ``db``; ``chunk_count`` counts the index's chunks."""

    def __init__(self, db: SqliteDb, chunk_count: Callable[[], int]) -> None:
        self.db = db
        self.chunk_count = chunk_count

    @property
    def conn(self) -> Any:
        return self.db.conn

    def keyword(self, terms: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Chunks holding any of ``terms`` (FTS5, porter unicode61): (chunk id, bm25) best first."""
        match = fts_match(terms)
        if match is None:
            return []
        rows = self.conn.execute(f"{_RANKED} ORDER BY rank LIMIT ?", (match, int(k))).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def keyword_matches(self, terms: Sequence[str], k: int) -> list[tuple[int, float, set[str]]]:
        """Like ``keyword``, plus which of ``terms`` each chunk holds. See the module docstring for the plans."""
        unique = [t for t in dict.fromkeys(terms) if t]
        if not unique:
            return []
        if len(unique) == 1:  # (one arm would be flattened into the aggregate, where bm25() cannot run)
            return [(rid, rank, {unique[0]}) for rid, rank in self.keyword(unique, k)]
        quick = self.rare_first(unique, k)
        if quick is None and self.chunk_count() >= MOST_TERMS_MIN_CHUNKS:
            quick = self.most_terms_first(unique, k)
        if quick is not None:
            return quick
        arms = " UNION ALL ".join(f"{_SCORED} {i} AS t {_WHERE}" for i in range(len(unique)))
        rows = self.conn.execute(
            f"SELECT r, sum(s) AS rank, group_concat(t) FROM ({arms}) GROUP BY r ORDER BY rank, r LIMIT ?",
            (*(fts_match([t]) for t in unique), int(k)),
        ).fetchall()
        return [(int(r[0]), float(r[1]), {unique[int(i)] for i in str(r[2]).split(",")}) for r in rows]

    def rare_first(self, terms: list[str], k: int) -> list[tuple[int, float, set[str]]] | None:
        """The rare-first plan (module docstring); None when it does not apply or cannot prove its answer."""
        rows = self.chunk_count()
        counts = {t: self._rows_matching(fts_match([t]) or "", rows + 1) for t in terms}
        split = split_rare_common(counts, rows)
        if split is None:
            return None
        rare, common = split
        if sum(counts[t] for t in rare) < k:
            return None  # rows with common terms only would make the top k: the full ranking is needed
        scores: dict[int, float] = {}
        held: dict[int, set[str]] = {}
        with self._snapshot():
            for term in rare:
                for rid, rank in self.conn.execute(_RANKED, (fts_match([term]),)):
                    scores[rid] = scores.get(rid, 0.0) + rank
                    held.setdefault(rid, set()).add(term)
            if len(scores) < k:
                return None  # rows with common terms only would make the top k: the full ranking is needed
            rare_match = f"({fts_match(rare)})"
            base = dict(scores)
            for term in common:
                for rid, rank in self.conn.execute(_RANKED, (f"{rare_match} AND {fts_match([term])}",)):
                    scores[rid] += rank - base[rid]  # this row's part of the term: the rest is the rare terms'
                    held[rid].add(term)
        top = sorted(scores, key=lambda rid: (scores[rid], rid))[:k]
        # a row holding only common terms scores at best -bound (bm25 is negative); with a little margin for
        # the rounding of sums and for counts read a statement apart
        bound = sum(idf(rows, counts[t]) for t in common) * (BM25_K1 + 1) * 1.001 + 1e-9
        if scores[top[-1]] >= -bound:
            return None
        return [(rid, scores[rid], held[rid]) for rid in top]

    def most_terms_first(self, terms: list[str], k: int) -> list[tuple[int, float, set[str]]] | None:
        """The most-terms-first plan (module docstring); None when the general plan should answer."""
        from itertools import combinations

        rows = self.chunk_count()
        present = [t for t in terms if self._rows_matching(fts_match([t]) or "", rows + 1) > 0]
        if not 2 <= len(present) <= MOST_TERMS_MAX:
            return None
        scores: dict[int, float] = {}
        held: dict[int, set[str]] = {}
        with self._snapshot():
            for size in range(len(present), 1, -1):  # rows holding one term only: the general plan
                for group in combinations(present, size):
                    match = " AND ".join(fts_match([t]) or "" for t in group)
                    for rid, rank in self.conn.execute(_RANKED, (match,)):
                        if rid not in scores:  # found first by the query of every term it holds
                            scores[rid], held[rid] = float(rank), set(group)
                if len(scores) >= MOST_TERMS_WIDEN * k:
                    top = heapq.nsmallest(k, ((s, rid) for rid, s in scores.items()))  # best first, ties by id
                    return [(int(rid), s, held[rid]) for s, rid in top]
        return None

    def _snapshot(self) -> Any:
        """A read transaction: the statements of one plan see one state of the index."""
        import contextlib

        @contextlib.contextmanager
        def snapshot() -> Any:
            if self.conn.in_transaction:
                yield
                return
            self.conn.execute("BEGIN")
            try:
                yield
            finally:
                self.conn.execute("COMMIT")

        return snapshot()

    def term_frequency_at_least(self, term: str, limit: int) -> int:
        """How many chunks hold ``term``, counting no further than ``limit`` (0 for an empty term)."""
        match = fts_match([term])
        return 0 if match is None else self._rows_matching(match, limit)

    def _rows_matching(self, term_match: str, limit: int) -> int:
        """How many chunks match an FTS5 expression, counting no further than ``limit`` (no scoring, cheap;
        remembered until the index changes: a common term costs a scan of its whole posting list)."""
        counts: dict[tuple[str, int], int] = self.db.memoised("term_counts", dict)
        found = counts.get((term_match, limit))
        if found is None:
            row = self.conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?)",
                (term_match, int(limit)),
            ).fetchone()
            if len(counts) >= MAX_REMEMBERED_TERMS:
                counts.clear()
            found = counts[(term_match, limit)] = int(row[0])
        return found

    def trigram(self, grams: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Chunks holding any of the character trigrams ``grams`` (CJK): (chunk id, bm25) best first."""
        match = fts_match(grams)
        if match is None:
            return []
        rows = self.conn.execute(
            "SELECT rowid, bm25(chunks_trigram) AS rank FROM chunks_trigram WHERE chunks_trigram MATCH ? "
            "ORDER BY rank LIMIT ?",
            (match, int(k)),
        ).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def substring(self, needles: Sequence[str], k: int) -> list[tuple[int, float]]:
        """Chunks containing any needle (CJK words shorter than a trigram), best first.

        Score is negative like bm25: more distinct needles, then more occurrences, rank first.
        """
        if not needles:
            return []
        where = " OR ".join("text LIKE ? ESCAPE '\\'" for _ in needles)
        params = [f"%{like_escape(n)}%" for n in needles]
        rows = self.conn.execute(
            f"SELECT rowid, text FROM chunks_trigram WHERE {where} LIMIT ?", (*params, int(k) * 8)
        ).fetchall()
        return rank_needle_hits(rows, needles, k)
