"""The terms SQLite's FTS5 indexes a text under, for a store without FTS5 (PostgreSQL).

Keyword search must rank the same on every store, so a store that keeps its own postings needs the very
terms FTS5 would: ``porter unicode61 remove_diacritics 2`` (case and diacritics folded, Unicode token
classes as SQLite knows them, Porter stems). Rather than re-implement that tokenizer (a port agreed on
99.99% of real text but not on rare Unicode), FTS5 itself is asked: texts go into an in-memory FTS5 table
(one per thread) and ``fts5vocab`` gives back each text's terms in order.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import sqlean

from mdmem.store.schema import FTS_TOKENIZE

_LOCAL = threading.local()
MAX_BATCH = 500


def _connection() -> sqlean.Connection:
    conn = getattr(_LOCAL, "conn", None)
    if conn is None:
        conn = sqlean.connect(":memory:")
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(x, tokenize='{FTS_TOKENIZE}')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        _LOCAL.conn = conn
    return conn


def text_terms(texts: Sequence[str]) -> list[list[str]]:
    """For each text, the terms FTS5 indexes it under, in order (a term per token, repeats kept)."""
    out: list[list[str]] = [[] for _ in texts]
    conn = _connection()
    for start in range(0, len(texts), MAX_BATCH):
        part = texts[start : start + MAX_BATCH]
        with conn:
            conn.executemany("INSERT INTO t(rowid, x) VALUES (?, ?)", [(i, text) for i, text in enumerate(part)])
            rows = conn.execute("SELECT doc, term FROM v ORDER BY doc, offset").fetchall()
            conn.execute("DELETE FROM t")
        for doc, term in rows:
            out[start + int(doc)].append(str(term))
    return out


def term_counts(text: str) -> dict[str, int]:
    """How often each term occurs in ``text`` (FTS5's tokens, as ``text_terms``)."""
    counts: dict[str, int] = {}
    for term in text_terms([text])[0]:
        counts[term] = counts.get(term, 0) + 1
    return counts
