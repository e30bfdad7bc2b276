"""The keyword half of a search on a large PostgreSQL generation: the chunks holding most of the query's terms
first, as the SQLite store ranks a large index (``mdmem.store.fts``, "most terms first").

A question keeps 2-4 terms after the search drops the most frequent ones, and at a million chunks each can
still be in tens of thousands of them: ``keyword.bm25`` then sums every posting of every term (a hash
aggregate of ~150,000 rows) to rank a few dozen. Here the chunks holding all the terms come first, from
an intersection of the GIN posting lists of their ``term_keys`` (``mdmem.store.pg.termkeys``), then those
holding all but one, and so on while fewer than ``WIDEN * k`` are found; only those are scored, each from
its own row (its length and ``term_freqs``: no posting is read), with ``keyword.bm25``'s BM25 (to the last
bits of a sum taken in another order) and term set. What is approximate is leaving out the chunks
holding fewer terms, which a chunk with many occurrences of few terms in a short text could beat; so the
plan is for queries whose terms are all common (``fts.split_rare_common`` finds no rare one: a rare term's
chunks would score above any chunk of common terms only, and the exact ranking answers those), on
generations of ``fts.MOST_TERMS_MIN_CHUNKS`` chunks or more. Measured against the exact ranking in
docs/performance.md ("PostgreSQL store", "The keyword half at 1M").
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from mdmem.store.fts import MOST_TERMS_MAX, MOST_TERMS_MIN_CHUNKS, MOST_TERMS_WIDEN, split_rare_common
from mdmem.store.pg.keyword import IDF_FLOOR, K1, B, Totals
from mdmem.store.pg.termkeys import keys_of, term_key

MIN_CHUNKS = MOST_TERMS_MIN_CHUNKS  # smaller generations: the exact BM25 (as the SQLite store)
SCORED_MAX_SHARE = 0.1  # more candidates than this share of the terms' postings: the exact BM25 (as quick)


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
    (``MIN_CHUNKS``) chunks, fewer than 2 or more than ``MOST_TERMS_MAX`` terms in it, a rare term among
    them, or too many chunks to score) and the caller's exact BM25 should answer."""
    present = [t for t in dict.fromkeys(terms) if df.get(t, 0) > 0]  # a term in no chunk adds nothing
    if known.chunks < (MIN_CHUNKS if min_chunks is None else min_chunks) or not 2 <= len(present) <= MOST_TERMS_MAX:
        return None
    if k <= 0 or split_rare_common({t: df[t] for t in present}, known.chunks) is not None:
        return None
    cap = int(SCORED_MAX_SHARE * sum(df[t] for t in present))
    total, mean = known.chunks, max(known.tokens / known.chunks, 1e-9)
    args: dict[str, Any] = {"agent": agent_id, "gen": gen, "limit": cap + 1, "mean": mean}
    parts = []
    for i, term in enumerate(present):  # each term's BM25 share, from the row's own frequency of it (0: not held)
        args[f"q{i}"] = term_key(agent_id, gen, term)
        args[f"w{i}"] = max(math.log((total - df.get(term, 0) + 0.5) / (df.get(term, 0) + 0.5)), IDF_FLOOR)
        parts.append(f"coalesce(term_freqs[array_position(term_keys, %(q{i})s::int8)], 0)::float8 AS f{i}")
    rank = " + ".join(
        f"%(w{i})s::float8 * (f{i} * {K1 + 1}::float8) / (f{i} + {K1}::float8 * ({1 - B}::float8 + {B}::float8 "
        "* tokens / %(mean)s::float8))"
        for i in range(len(present))
    )
    held_mask = " + ".join(f"(f{i} > 0)::int * {1 << i}" for i in range(len(present)))
    scores: dict[int, tuple[float, int]] = {}
    for size in range(len(present), 1, -1):  # chunks holding one term only: the exact BM25
        groups = list(itertools.combinations(present, size))
        args.update({f"s{j}": keys_of(agent_id, gen, group) for j, group in enumerate(groups)})
        where = " OR ".join(f"term_keys @> %(s{j})s::int8[]" for j in range(len(groups)))
        cur.execute(
            f"""SELECT id, -({rank}), {held_mask} FROM (
                SELECT id, tokens, {", ".join(parts)} FROM {schema}.chunks
                WHERE agent_id = %(agent)s AND gen = %(gen)s AND ({where}) LIMIT %(limit)s) c""",
            args,
        )
        rows = cur.fetchall()
        if len(rows) > cap:
            return None
        scores.update((int(r[0]), (float(r[1]), int(r[2]))) for r in rows)  # a row's score is the same at any level
        if len(scores) >= MOST_TERMS_WIDEN * k:
            top = heapq.nsmallest(k, ((s, cid) for cid, (s, _) in scores.items()))  # best first, ties by id
            return [(cid, s, {t for i, t in enumerate(present) if scores[cid][1] >> i & 1}) for s, cid in top]
    return None
