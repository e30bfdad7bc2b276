"""Keyword search on PostgreSQL, scored exactly as SQLite's FTS5 ``bm25(chunks_fts, 1.0, 0.5)``.

Each chunk's text and heading are cut into FTS5's own terms (``mdmemory.store.terms``); ``postings`` holds,
per (term, chunk), how often the term occurs in the text and in the heading, and ``chunks.tokens`` the
chunk's length in tokens; ``token_totals`` keeps each generation's chunk and token counts. BM25 then
follows FTS5 (``fts5_aux.c``): k1 = 1.2, b = 0.75; a term's IDF is ``ln((N - n + 0.5) / (n + 0.5))``,
floored at 1e-6, over the N chunks of which n hold it; its frequency in a chunk is ``in_text * 1.0 +
in_heading * 0.5`` (the column weights); the length normalisation uses the chunk's tokens over the
generation's mean. Ranks are negative, best first, like FTS5's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from mdmemory.store.terms import text_terms

K1 = 1.2
B = 0.75
IDF_FLOOR = 1e-6
TEXT_WEIGHT = 1.0
HEADING_WEIGHT = 0.5


def postings_of(text: str, heading: str | None) -> tuple[dict[str, tuple[int, int]], int]:
    """``{term: (in_text, in_heading)}`` and the chunk's length in tokens (text and heading)."""
    text_part, heading_part = text_terms([text, heading or ""])
    found: dict[str, list[int]] = {}
    for term in text_part:
        found.setdefault(term, [0, 0])[0] += 1
    for term in heading_part:
        found.setdefault(term, [0, 0])[1] += 1
    return {t: (n[0], n[1]) for t, n in found.items()}, len(text_part) + len(heading_part)


def add_postings(cur: Any, schema: str, agent_id: str, gen: int, chunks: Iterable[tuple[int, str, str | None]]) -> int:
    """Write the postings of ``(chunk id, text, heading)`` rows and count them into ``token_totals``;
    returns the tokens added. Call inside the transaction that wrote the chunks."""
    rows: list[tuple[str, int, str, int, int, int]] = []
    added_chunks = 0
    added_tokens = 0
    for chunk_id, text, heading in chunks:
        postings, tokens = postings_of(text, heading)
        cur.execute(f"UPDATE {schema}.chunks SET tokens = %s WHERE id = %s", (tokens, chunk_id))
        rows.extend((agent_id, gen, term, chunk_id, n[0], n[1]) for term, n in postings.items())
        added_chunks += 1
        added_tokens += tokens
    if rows:
        cur.executemany(
            f"INSERT INTO {schema}.postings (agent_id, gen, term, chunk_id, in_text, in_heading) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            rows,
        )
    _count(cur, schema, agent_id, gen, added_chunks, added_tokens)
    return added_tokens


def remove_chunks(cur: Any, schema: str, agent_id: str, gen: int, chunk_ids: Sequence[int]) -> None:
    """Delete chunks (their postings and vectors go with them) and take them out of ``token_totals``."""
    if not chunk_ids:
        return
    cur.execute(
        f"DELETE FROM {schema}.chunks WHERE agent_id = %s AND gen = %s AND id = ANY(%s) RETURNING tokens",
        (agent_id, gen, list(chunk_ids)),
    )
    gone = cur.fetchall()
    _count(cur, schema, agent_id, gen, -len(gone), -sum(int(r[0]) for r in gone))


def _count(cur: Any, schema: str, agent_id: str, gen: int, chunks: int, tokens: int) -> None:
    cur.execute(
        f"INSERT INTO {schema}.token_totals (agent_id, gen, chunks, tokens) VALUES (%s, %s, %s, %s) "
        f"ON CONFLICT (agent_id, gen) DO UPDATE SET chunks = {schema}.token_totals.chunks + EXCLUDED.chunks, "
        f"tokens = {schema}.token_totals.tokens + EXCLUDED.tokens",
        (agent_id, gen, chunks, tokens),
    )


def query_terms(words: Sequence[str]) -> list[str]:
    """FTS5's terms for the words of a keyword query (a word of several tokens counts each of them)."""
    out: dict[str, None] = {}
    for terms in text_terms(list(words)):
        for term in terms:
            out.setdefault(term, None)
    return list(out)


def bm25(cur: Any, schema: str, agent_id: str, gen: int, terms: Sequence[str], k: int) -> list[tuple[int, float]]:
    """The ``k`` best chunks for ``terms`` (an OR of them): ``(chunk id, rank)``, rank negative as FTS5's."""
    if not terms or k <= 0:
        return []
    cur.execute(f"SELECT chunks, tokens FROM {schema}.token_totals WHERE agent_id = %s AND gen = %s", (agent_id, gen))
    row = cur.fetchone()
    if row is None or int(row[0]) <= 0:
        return []
    total, tokens = int(row[0]), int(row[1])
    mean = max(tokens / total, 1e-9)
    cur.execute(
        f"""
        WITH idf AS MATERIALIZED (
            SELECT term, greatest(ln((%(total)s - count(*) + 0.5) / (count(*) + 0.5)), {IDF_FLOOR}) AS w
            FROM {schema}.postings
            WHERE agent_id = %(agent)s AND gen = %(gen)s AND term = ANY(%(terms)s::text[])
            GROUP BY term)
        SELECT p.chunk_id, -sum(idf.w * (f.v * {K1 + 1}) / (f.v + {K1} * (1 - {B} + {B} * c.tokens / %(mean)s))) AS rank
        FROM {schema}.postings p
        JOIN idf ON idf.term = p.term
        JOIN {schema}.chunks c ON c.id = p.chunk_id
        CROSS JOIN LATERAL (SELECT p.in_text * {TEXT_WEIGHT} + p.in_heading * {HEADING_WEIGHT} AS v) f
        WHERE p.agent_id = %(agent)s AND p.gen = %(gen)s AND p.term = ANY(%(terms)s::text[])
        GROUP BY p.chunk_id ORDER BY rank, p.chunk_id LIMIT %(k)s
        """,
        {"terms": list(terms), "agent": agent_id, "gen": gen, "total": float(total), "mean": mean, "k": int(k)},
    )
    return [(int(r[0]), float(r[1])) for r in cur.fetchall()]
