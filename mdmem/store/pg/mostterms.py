"""The keyword half of a search on a large PostgreSQL generation: the chunks holding most of the query's terms
first, as the SQLite store ranks a large index (``mdmem.store.fts``, "most terms first").

A question keeps 2-4 terms after the search drops the most frequent ones, and at a million chunks each can
still be in tens of thousands of them: ``keyword.bm25`` then sums every posting of every term (a hash
aggregate of ~150,000 rows) to rank a few dozen. Here the chunks holding all the terms come first, from
an intersection of the GIN posting lists of their ``term_keys`` (``mdmem.store.pg.termkeys``), then those
holding all but one, and so on while fewer than ``WIDEN * k`` are found; only those are scored, each by
its postings of the query's terms (a primary-key probe a term), with exactly ``keyword.bm25``'s BM25 and
term set. What is approximate is leaving out the chunks holding fewer terms, which a chunk with many
occurrences of few terms in a short text could beat; so the plan is for queries whose terms are all
common (``fts.split_rare_common`` finds no rare one: a rare term's chunks would score above any chunk of
common terms only, and the exact ranking answers those), on generations of ``fts.MOST_TERMS_MIN_CHUNKS``
chunks or more. Measured against the exact ranking in docs/performance.md ("PostgreSQL keyword half at
1M").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from mdmem.store.fts import MOST_TERMS_MAX, MOST_TERMS_MIN_CHUNKS, MOST_TERMS_WIDEN, split_rare_common
from mdmem.store.pg.keyword import HEADING_WEIGHT, IDF_FLOOR, K1, TEXT_WEIGHT, B, Totals
from mdmem.store.pg.termkeys import chunk_keys

MIN_CHUNKS = MOST_TERMS_MIN_CHUNKS  # smaller generations: the exact BM25 (as the SQLite store)
SCORED_MAX_SHARE = 0.25  # more candidates than this share of the terms' postings: the exact BM25 is as quick


def top_k(
    cur: Any,
    schema: str,
    agent_id: str,
    gen: int,
    terms: Sequence[str],
    k: int,
    known: Totals,
    df: Mapping[str, int],
    min_chunks: int | None = None,
) -> list[tuple[int, float, set[str]]] | None:
    """The best ``k`` chunks holding most of ``terms`` (single terms, no phrases), ranked and attributed as
    ``keyword.bm25`` ranks them; None when the plan does not apply (a generation under ``min_chunks``
    (``MIN_CHUNKS``) chunks, fewer than 2 or more than ``MOST_TERMS_MAX`` terms in it, a rare term among them, or too many
    chunks to score) and the caller's exact BM25 should answer."""
    keys = list(dict.fromkeys(terms))
    present = [t for t in keys if df.get(t, 0) > 0]
    if known.chunks < (MIN_CHUNKS if min_chunks is None else min_chunks) or not 2 <= len(present) <= MOST_TERMS_MAX or k <= 0:
        return None
    if split_rare_common({t: df[t] for t in present}, known.chunks) is not None:
        return None
    cap = int(SCORED_MAX_SHARE * sum(df[t] for t in present))
    found: dict[int, None] = {}
    for size in range(len(present), 1, -1):  # chunks holding one term only: the exact BM25
        held = [chunk_keys(agent_id, gen, group) for group in itertools.combinations(present, size)]
        where = " OR ".join(f"term_keys @> %(s{i})s::int4[]" for i in range(len(held)))
        cur.execute(
            f"SELECT id FROM {schema}.chunks WHERE agent_id = %(agent)s AND gen = %(gen)s AND ({where}) "
            "LIMIT %(limit)s",
            {"agent": agent_id, "gen": gen, "limit": cap + 1, **{f"s{i}": h for i, h in enumerate(held)}},
        )
        found.update((int(r[0]), None) for r in cur.fetchall())
        if len(found) > cap:
            return None
        if len(found) >= MOST_TERMS_WIDEN * k:
            return _score(cur, schema, agent_id, gen, keys, known, df, list(found), k)
    return None


def _score(
    cur: Any,
    schema: str,
    agent_id: str,
    gen: int,
    keys: list[str],
    known: Totals,
    df: Mapping[str, int],
    ids: list[int],
    k: int,
) -> list[tuple[int, float, set[str]]]:
    """The best ``k`` of the chunks ``ids`` by ``keyword.bm25``'s BM25 over ``keys``, each scored from its
    postings of the keys (a primary-key probe a key), not from every posting of them."""
    total, mean = known.chunks, max(known.tokens / max(known.chunks, 1), 1e-9)
    weights = [max(math.log((total - df.get(t, 0) + 0.5) / (df.get(t, 0) + 0.5)), IDF_FLOOR) for t in keys]
    cur.execute(
        f"""
        WITH idf AS (SELECT * FROM unnest(%(keys)s::text[], %(weights)s::float8[]) WITH ORDINALITY AS i(key, w, n))
        SELECT p.chunk_id, -sum(idf.w * (p.v * {K1 + 1}::float8)
                / (p.v + {K1}::float8 * ({1 - B}::float8 + {B}::float8 * p.tokens / %(mean)s::float8))) AS rank,
            bit_or(1::bigint << (idf.n::int - 1))
        FROM unnest(%(ids)s::bigint[]) AS cand(id)
        CROSS JOIN LATERAL (
            SELECT q.chunk_id, q.term, q.tokens,
                (q.in_text * {TEXT_WEIGHT}::float8 + q.in_heading * {HEADING_WEIGHT}::float8) AS v
            FROM {schema}.postings q WHERE q.agent_id = %(agent)s AND q.gen = %(gen)s
                AND q.term = ANY(%(keys)s::text[]) AND q.chunk_id = cand.id) p
        JOIN idf ON idf.key = p.term
        GROUP BY p.chunk_id ORDER BY rank, p.chunk_id LIMIT %(k)s
        """,
        {"agent": agent_id, "gen": gen, "keys": keys, "weights": weights, "mean": mean, "ids": ids, "k": int(k)},
    )
    return [(int(r[0]), float(r[1]), {t for i, t in enumerate(keys) if int(r[2]) >> i & 1}) for r in cur.fetchall()]
