"""Keyword search on PostgreSQL, scored exactly as SQLite's FTS5 ``bm25(chunks_fts, 1.0, 0.5)``.

Each chunk's text and heading are cut into FTS5's own terms (``mdmem.store.terms``); ``postings`` holds,
per (term, chunk), how often the term occurs in the text and in the heading, and ``chunks.tokens`` the
chunk's length in tokens; ``token_totals`` keeps each generation's chunk and token counts. BM25 then
follows FTS5 (``fts5_aux.c``): k1 = 1.2, b = 0.75; a term's IDF is ``ln((N - n + 0.5) / (n + 0.5))``,
floored at 1e-6, over the N chunks of which n hold it; its frequency in a chunk is ``in_text * 1.0 +
in_heading * 0.5`` (the column weights); the length normalisation uses the chunk's tokens over the
generation's mean. Ranks are negative, best first, like FTS5's.

A query term of several FTS5 terms (``nimbus-14``, ``v2.3.1``) is a phrase, as FTS5 reads a quoted string:
held where its terms stand adjacent and in order within one column. Each posting keeps its term's token
positions in the chunk (the heading's from ``HEADING_BASE`` on, so no phrase spans text and heading), and
a phrase's frequency in a chunk is its count of such runs, weighted by column like a term's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from mdmem.store.pg import termkeys
from mdmem.store.pg import vectors as vector_sql
from mdmem.store.terms import text_terms
from mdmem.util.tokens import CJK_RUN

K1 = 1.2
B = 0.75
IDF_FLOOR = 1e-6
MAX_KEYS = 63  # terms of one query (a chunk's matched terms come back as the bits of a bigint)
TEXT_WEIGHT = 1.0
HEADING_WEIGHT = 0.5
HEADING_BASE = 1 << 30  # a heading token's position: HEADING_BASE + its index in the heading


class Posting(NamedTuple):
    """A term's occurrences in one chunk: how often in the text and in the heading, and at which positions."""

    in_text: int
    in_heading: int
    positions: list[int]


def postings_of(text: str, heading: str | None) -> tuple[dict[str, Posting], int]:
    """Each term's ``Posting`` in a chunk, and the chunk's length in tokens (text and heading)."""
    text_part, heading_part = text_terms([text, heading or ""])
    found: dict[str, list[int]] = {}
    for i, term in enumerate(text_part):
        found.setdefault(term, []).append(i)
    for i, term in enumerate(heading_part):
        found.setdefault(term, []).append(HEADING_BASE + i)
    postings = {}
    for term, at in found.items():
        in_text = sum(1 for p in at if p < HEADING_BASE)
        postings[term] = Posting(in_text, len(at) - in_text, at)
    return postings, len(text_part) + len(heading_part)


def cjk_trigrams(text: str) -> tuple[dict[str, int], int]:
    """The character trigrams of ``text``'s CJK runs, with their counts, and how many trigrams FTS5's trigram
    tokenizer cuts the whole text into (every 3 consecutive characters). Only CJK trigrams can match a query
    (``search.cjk_match``), but the length normalisation counts them all."""
    grams: dict[str, int] = {}
    for run in CJK_RUN.findall(text):
        for i in range(len(run) - 2):
            grams[run[i : i + 3]] = grams.get(run[i : i + 3], 0) + 1
    return grams, max(len(text) - 2, 0)


@dataclass
class Postings:
    """What the keyword index holds for some chunks: each chunk's length in tokens and in trigrams, its
    postings rows (agent, gen, term, chunk, in text, in heading, the chunk's tokens) and its CJK trigram
    rows, the totals to add to the generation's, and each chunk's ``term_keys`` and ``term_freqs``
    (``termkeys``)."""

    lengths: list[tuple[int, int]] = field(default_factory=list)
    keys: list[tuple[list[int], list[float]]] = field(default_factory=list)
    postings: list[tuple[str, int, str, int, int, int, int, list[int]]] = field(default_factory=list)
    grams: list[tuple[str, int, str, int, int]] = field(default_factory=list)
    tokens: int = 0
    trigrams: int = 0


def postings_for(agent_id: str, gen: int, chunks: Iterable[tuple[int, str, str | None]]) -> Postings:
    """The keyword rows of ``(chunk id, text, heading)`` chunks (``write_postings`` stores them)."""
    out = Postings()
    for chunk_id, text, heading in chunks:
        postings, tokens = postings_of(text, heading)
        grams, trigrams = cjk_trigrams(text)
        out.lengths.append((tokens, trigrams))
        freqs = {t: n.in_text * TEXT_WEIGHT + n.in_heading * HEADING_WEIGHT for t, n in postings.items()}
        out.keys.append(termkeys.chunk_terms(agent_id, gen, freqs))
        out.postings.extend(
            (agent_id, gen, term, chunk_id, n.in_text, n.in_heading, tokens, n.positions)
            for term, n in postings.items()
        )
        out.grams.extend((agent_id, gen, gram, chunk_id, tf) for gram, tf in grams.items())
        out.tokens += tokens
        out.trigrams += trigrams
    return out


def write_postings(cur: Any, schema: str, agent_id: str, gen: int, rows: Postings) -> None:
    """COPY the postings and trigrams of chunks just written (with their lengths) and count them into
    ``token_totals``. Call inside the transaction that wrote the chunks."""
    if rows.postings:
        with cur.copy(
            f"COPY {schema}.postings (agent_id, gen, term, chunk_id, in_text, in_heading, tokens, positions) FROM STDIN"
        ) as copy:
            for row in rows.postings:
                copy.write_row(row)
    if rows.grams:
        with cur.copy(f"COPY {schema}.grams (agent_id, gen, gram, chunk_id, tf) FROM STDIN") as copy:
            for gram_row in rows.grams:
                copy.write_row(gram_row)
    _count(cur, schema, agent_id, gen, len(rows.lengths), rows.tokens, rows.trigrams)


def add_postings(cur: Any, schema: str, agent_id: str, gen: int, chunks: Iterable[tuple[int, str, str | None]]) -> int:
    """Index ``(chunk id, text, heading)`` rows of chunks already inserted (with no lengths yet); returns the
    tokens added. The store writes new chunks with their lengths at once instead (``PgStore.replace_file``)."""
    listed = list(chunks)
    rows = postings_for(agent_id, gen, listed)
    cur.executemany(
        f"UPDATE {schema}.chunks SET tokens = %s, trigrams = %s, term_keys = %s, term_freqs = %s WHERE id = %s",
        [
            (tokens, trigrams, keys, freqs, cid)
            for (cid, _, _), (tokens, trigrams), (keys, freqs) in zip(listed, rows.lengths, rows.keys, strict=True)
        ],
    )
    write_postings(cur, schema, agent_id, gen, rows)
    return rows.tokens


def remove_chunks(cur: Any, schema: str, agent_id: str, gen: int, chunk_ids: Sequence[int]) -> None:
    """Delete chunks with their postings, trigrams and vectors, and take them out of the totals."""
    if not chunk_ids:
        return
    ids = list(chunk_ids)
    where = "agent_id = %s AND gen = %s AND chunk_id = ANY(%s)"
    for table in ("postings", "grams"):
        cur.execute(f"DELETE FROM {schema}.{table} WHERE {where}", (agent_id, gen, ids))
    cur.execute(f"DELETE FROM {schema}.vectors WHERE {where} RETURNING chunk_id", (agent_id, gen, ids))
    vectors = [int(r[0]) for r in cur.fetchall()]
    cur.execute(
        f"DELETE FROM {schema}.chunks WHERE agent_id = %s AND gen = %s AND id = ANY(%s) RETURNING tokens, trigrams",
        (agent_id, gen, ids),
    )
    gone = cur.fetchall()
    _count(cur, schema, agent_id, gen, -len(gone), -sum(int(r[0]) for r in gone), -sum(int(r[1]) for r in gone))
    if vectors:
        vector_sql.count(cur, schema, agent_id, gen, -len(vectors), -len(set(vectors)))


def _count(cur: Any, schema: str, agent_id: str, gen: int, chunks: int, tokens: int, trigrams: int) -> None:
    t = f"{schema}.token_totals"
    cur.execute(
        f"INSERT INTO {t} (agent_id, gen, chunks, tokens, trigrams) VALUES (%s, %s, %s, %s, %s) "
        f"ON CONFLICT (agent_id, gen) DO UPDATE SET chunks = {t}.chunks + EXCLUDED.chunks, "
        f"tokens = {t}.tokens + EXCLUDED.tokens, trigrams = {t}.trigrams + EXCLUDED.trigrams, "
        f"version = {t}.version + 1",
        (agent_id, gen, chunks, tokens, trigrams),
    )


def query_terms(words: Sequence[str]) -> list[str]:
    """FTS5's terms for the words of a keyword query (a word of several tokens counts each of them)."""
    out: dict[str, None] = {}
    for terms in text_terms(list(words)):
        for term in terms:
            out.setdefault(term, None)
    return list(out)


@dataclass(frozen=True)
class Totals:
    """A generation's ``token_totals`` row: what BM25, the vector search and the document-frequency memo
    need (``version`` counts its writes)."""

    gen: int
    chunks: int = 0
    tokens: int = 0
    trigrams: int = 0
    vectors: int = 0
    vector_chunks: int = 0
    version: int = 0

    @property
    def per_chunk(self) -> float:
        """Vectors per chunk that has some (windows), on average; 1 when there are none."""
        return self.vectors / self.vector_chunks if self.vector_chunks else 1.0


TOTALS_COLUMNS = "chunks, tokens, trigrams, vectors, vector_chunks, version"


def totals(cur: Any, schema: str, agent_id: str, gen: int) -> Totals:
    cur.execute(f"SELECT {TOTALS_COLUMNS} FROM {schema}.token_totals WHERE agent_id = %s AND gen = %s", (agent_id, gen))
    row = cur.fetchone()
    return Totals(gen, *(int(x) for x in row)) if row else Totals(gen)


def bm25(
    cur: Any,
    schema: str,
    agent_id: str,
    gen: int,
    terms: Sequence[str],
    k: int,
    known: Totals | None = None,
    df: Mapping[str, int] | None = None,
    phrases: Sequence[Sequence[str]] = (),
) -> list[tuple[int, float, set[str]]]:
    """The ``k`` best chunks for ``terms`` and ``phrases`` (an OR of them; a phrase is its terms in order):
    ``(chunk id, rank, the terms and phrase keys it holds)``, rank negative as FTS5's ``bm25(chunks_fts,
    1.0, 0.5)``. ``known``: the generation's totals, if read already; ``df``: how many chunks hold each term
    (and phrase, by ``phrase_key``), if known (else counted here). Without phrases, one index-only pass over
    the terms' postings, which carry their chunk's length: no join with the chunks."""
    freq = f"p.in_text * {TEXT_WEIGHT}::float8 + p.in_heading * {HEADING_WEIGHT}::float8"
    if phrases:
        return _bm25_phrases(cur, schema, agent_id, gen, terms, phrases, k, known, df)
    return _bm25(cur, schema, ("postings", "term", freq, "tokens", ""), agent_id, gen, terms, k, known, df)


def phrase_key(phrase: Sequence[str]) -> str:
    """A phrase's key among a query's keys: its terms space-joined (a term never holds a space)."""
    return " ".join(phrase)


def _phrase_rows(schema: str, name: str, length: int) -> str:
    """SQL of the chunks holding a phrase of ``length`` terms (parameters ``%(name_0)s``...): ``(chunk_id,
    v, tokens)``, ``v`` its runs in the text and heading weighted as a term's occurrences are. The terms'
    postings are joined by chunk first (one pass over each), then each chunk's positions are compared."""
    joins = "".join(
        f" JOIN {schema}.postings {name}_{j} ON {name}_{j}.agent_id = {name}_0.agent_id AND {name}_{j}.gen = "
        f"{name}_0.gen AND {name}_{j}.term = %({name}_{j})s AND {name}_{j}.chunk_id = {name}_0.chunk_id"
        for j in range(1, length)
    )
    adjacent = " AND ".join(f"x.pos + {j} = ANY({name}_{j}.positions)" for j in range(1, length)) or "true"
    return f"""SELECT {name}_0.chunk_id, m.v, {name}_0.tokens
        FROM {schema}.postings {name}_0{joins}
        CROSS JOIN LATERAL (
            SELECT (count(*) FILTER (WHERE x.pos < {HEADING_BASE}) * {TEXT_WEIGHT}::float8
                + count(*) FILTER (WHERE x.pos >= {HEADING_BASE}) * {HEADING_WEIGHT}::float8) AS v
            FROM unnest({name}_0.positions) AS x(pos) WHERE {adjacent}) m
        WHERE {name}_0.agent_id = %(agent)s AND {name}_0.gen = %(gen)s AND {name}_0.term = %({name}_0)s AND m.v > 0"""


def _phrase_args(name: str, phrase: Sequence[str]) -> dict[str, str]:
    return {f"{name}_{j}": term for j, term in enumerate(phrase)}


def phrase_frequency(cur: Any, schema: str, agent_id: str, gen: int, phrase: Sequence[str], limit: int) -> int:
    """How many chunks hold ``phrase`` (its terms adjacent, in order, in one column), counting no further than
    ``limit``."""
    if not phrase or limit <= 0:
        return 0
    args: dict[str, Any] = {"agent": agent_id, "gen": gen, "limit": int(limit), **_phrase_args("q", phrase)}
    cur.execute(f"SELECT count(*) FROM ({_phrase_rows(schema, 'q', len(phrase))} LIMIT %(limit)s) hits", args)
    return int(cur.fetchone()[0])


def _bm25_phrases(
    cur: Any,
    schema: str,
    agent_id: str,
    gen: int,
    terms: Sequence[str],
    phrases: Sequence[Sequence[str]],
    k: int,
    known: Totals | None,
    df: Mapping[str, int] | None,
) -> list[tuple[int, float, set[str]]]:
    """``bm25`` of a query with phrases: the terms' postings and each phrase's runs summed per chunk, in one
    statement, in the keys' order (as SQLite sums a query's terms: chunks that tie there tie here, to the
    last bit, and the search breaks the tie the same way)."""
    listed = [list(p) for p in dict.fromkeys(tuple(p) for p in phrases if p)]
    keys = list(dict.fromkeys([*terms, *(phrase_key(p) for p in listed)]))[:MAX_KEYS]
    listed = [p for p in listed if phrase_key(p) in keys]
    single = [t for t in dict.fromkeys(terms) if t in keys]
    if not keys or k <= 0:
        return []
    known = known if known is not None and known.gen == gen else totals(cur, schema, agent_id, gen)
    total = known.chunks
    if total <= 0:
        return []
    counts = dict(df or {})
    missing = [t for t in single if t not in counts]
    if missing:
        cur.execute(
            f"SELECT term, count(*) FROM {schema}.postings WHERE agent_id = %s AND gen = %s AND term = ANY(%s) "
            "GROUP BY term",
            (agent_id, gen, missing),
        )
        found = {str(t): int(n) for t, n in cur.fetchall()}
        counts.update({t: found.get(t, 0) for t in missing})
    for phrase in listed:
        if phrase_key(phrase) not in counts:
            counts[phrase_key(phrase)] = phrase_frequency(cur, schema, agent_id, gen, phrase, total + 1)
    args: dict[str, Any] = {
        "keys": keys,
        "weights": [max(math.log((total - counts[t] + 0.5) / (counts[t] + 0.5)), IDF_FLOOR) for t in keys],
        "terms": single,
        "agent": agent_id,
        "gen": gen,
        "mean": max(known.tokens / total, 1e-9),
        "k": int(k),
    }
    arms = [
        f"SELECT p.chunk_id, p.term AS key, (p.in_text * {TEXT_WEIGHT}::float8 + p.in_heading * "
        f"{HEADING_WEIGHT}::float8)::float8 AS v, p.tokens FROM {schema}.postings p "
        "WHERE p.agent_id = %(agent)s AND p.gen = %(gen)s AND p.term = ANY(%(terms)s::text[])"
    ]
    for i, phrase in enumerate(listed):
        args.update(_phrase_args(f"f{i}", phrase))
        args[f"key{i}"] = phrase_key(phrase)
        arms.append(
            f"SELECT f.chunk_id, %(key{i})s::text, f.v, f.tokens FROM ({_phrase_rows(schema, f'f{i}', len(phrase))}) f"
        )
    cur.execute(
        f"""
        WITH idf AS (SELECT * FROM unnest(%(keys)s::text[], %(weights)s::float8[]) WITH ORDINALITY AS i(key, w, n)),
        hits AS ({" UNION ALL ".join(arms)})
        SELECT h.chunk_id, -sum(idf.w * (h.v * {K1 + 1}::float8)
                / (h.v + {K1}::float8 * ({1 - B}::float8 + {B}::float8 * h.tokens / %(mean)s::float8))
                ORDER BY idf.n) AS rank,
            bit_or(1::bigint << (idf.n::int - 1))
        FROM hits h JOIN idf ON idf.key = h.key
        GROUP BY h.chunk_id ORDER BY rank, h.chunk_id LIMIT %(k)s
        """,
        args,
    )
    return [(int(r[0]), float(r[1]), {t for i, t in enumerate(keys) if int(r[2]) >> i & 1}) for r in cur.fetchall()]


def trigram_bm25(
    cur: Any, schema: str, agent_id: str, gen: int, grams: Sequence[str], k: int, known: Totals | None = None
) -> list[tuple[int, float]]:
    """The ``k`` best chunks for CJK trigrams ``grams``, ranked as FTS5's ``bm25(chunks_trigram)``."""
    join = f"JOIN {schema}.chunks c ON c.id = p.chunk_id"
    found = _bm25(cur, schema, ("grams", "gram", "p.tf", "trigrams", join), agent_id, gen, grams, k, known, None)
    return [(cid, rank) for cid, rank, _ in found]


def _bm25(
    cur: Any,
    schema: str,
    index: tuple[str, str, str, str, str],
    agent_id: str,
    gen: int,
    keys: Sequence[str],
    k: int,
    known: Totals | None,
    df: Mapping[str, int] | None,
) -> list[tuple[int, float, set[str]]]:
    """BM25 over ``index`` = (postings table, its key column, the frequency expression, the chunk length:
    a column of ``token_totals`` and of the rows, or of ``chunks`` when ``join`` brings them), in one
    statement."""
    table, key, freq, length, join = index
    keys = list(dict.fromkeys(keys))[:MAX_KEYS]
    if not keys or k <= 0:
        return []
    known = known if known is not None and known.gen == gen else totals(cur, schema, agent_id, gen)
    total, tokens = known.chunks, getattr(known, length)
    if total <= 0:
        return []
    mean = max(tokens / total, 1e-9)
    args: dict[str, Any] = {"keys": list(keys), "agent": agent_id, "gen": gen, "mean": mean, "k": int(k)}
    if df is None:
        idf = f"""idf AS MATERIALIZED (
            SELECT {key} AS key, array_position(%(keys)s::text[], {key}) AS n,
                greatest(ln(({total} - count(*) + 0.5) / (count(*) + 0.5)), {IDF_FLOOR}) AS w
            FROM {schema}.{table} WHERE agent_id = %(agent)s AND gen = %(gen)s AND {key} = ANY(%(keys)s::text[])
            GROUP BY {key})"""
    else:
        args["weights"] = [max(math.log((total - df.get(t, 0) + 0.5) / (df.get(t, 0) + 0.5)), IDF_FLOOR) for t in keys]
        idf = "idf AS (SELECT * FROM unnest(%(keys)s::text[], %(weights)s::float8[]) WITH ORDINALITY AS i(key, w, n))"
    size = f"{'c' if join else 'p'}.{length}"
    # float8 throughout, as FTS5 computes; which keys a chunk holds as a bit mask (array_agg was a third of
    # the time at 100k chunks)
    cur.execute(
        f"""
        WITH {idf}
        SELECT p.chunk_id, -sum(idf.w * (f.v * {K1 + 1}::float8)
                / (f.v + {K1}::float8 * ({1 - B}::float8 + {B}::float8 * {size} / %(mean)s::float8))) AS rank,
            bit_or(1::bigint << (idf.n::int - 1))
        FROM {schema}.{table} p
        JOIN idf ON idf.key = p.{key}
        {join}
        CROSS JOIN LATERAL (SELECT ({freq})::float8 AS v) f
        WHERE p.agent_id = %(agent)s AND p.gen = %(gen)s AND p.{key} = ANY(%(keys)s::text[])
        GROUP BY p.chunk_id ORDER BY rank, p.chunk_id LIMIT %(k)s
        """,
        args,
    )
    listed = list(keys)
    return [(int(r[0]), float(r[1]), {t for i, t in enumerate(listed) if int(r[2]) >> i & 1}) for r in cur.fetchall()]
