"""Vector search on PostgreSQL: pgvector HNSW (cosine), one partial index per (agent, generation, dims).

``vectors.embedding`` has no fixed dimension (agents may use different models), so each index is over the
expression ``embedding::vector(d)`` and only the rows of one agent's generation with those dimensions: a
query names the same expression and predicate, so the planner uses that index (never a scan of the table)
and every neighbour it returns is the agent's own. A retired generation's indexes are dropped with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mdmem.config.store import HnswConfig
from mdmem.store.pg import codec

if TYPE_CHECKING:
    import numpy as np

MAX_WINDOWS_PER_CHUNK = 8
EF_PER_WANTED = 2  # candidates HNSW keeps per vector a search asks for, at least (see knn)
MAX_EF_SEARCH = 1000  # pgvector's limit
BUILD_MEMORY_MAX_MB = 1024  # the most maintenance_work_mem an index build asks for (see build_index)
# A generation gets its HNSW index once it holds this many vectors. Below, a search compares the query with
# each of them (read through the (agent, generation) btree: a few ms, and exact), and a fleet's many small
# agents cost no index each: building one reads the whole shared table, and every index on it adds to the
# planning of every vector query.
HNSW_MIN_VECTORS = 2000

DEFAULT_HNSW = HnswConfig()


def index_name(agent_id: str, gen: int, dims: int) -> str:
    digest = hashlib.sha1(f"{agent_id}\0{gen}\0{dims}".encode()).hexdigest()[:20]
    return f"vectors_hnsw_{digest}"


def _predicate(agent_id: str, gen: int, dims: int) -> Any:
    from psycopg import sql

    return sql.SQL("agent_id = {} AND gen = {} AND dims = {}").format(
        sql.Literal(agent_id), sql.Literal(int(gen)), sql.Literal(int(dims))
    )


def _expression(dims: int) -> Any:
    from psycopg import sql

    return sql.SQL("(embedding::vector({}))").format(sql.Literal(int(dims)))


def _create(schema: str, agent_id: str, gen: int, dims: int, params: HnswConfig, concurrently: bool) -> Any:
    from psycopg import sql

    return sql.SQL(
        "CREATE INDEX {how} IF NOT EXISTS {name} ON {s}.vectors USING hnsw ({expr} vector_cosine_ops) "
        "WITH (m = {m}, ef_construction = {ef}) WHERE {p}"
    ).format(
        how=sql.SQL("CONCURRENTLY" if concurrently else ""),
        name=sql.Identifier(index_name(agent_id, gen, dims)),
        s=sql.Identifier(schema),
        expr=_expression(dims),
        m=sql.Literal(int(params.m)),
        ef=sql.Literal(int(params.ef_construction)),
        p=_predicate(agent_id, gen, dims),
    )


def ensure_index(cur: Any, schema: str, agent_id: str, gen: int, dims: int, params: HnswConfig = DEFAULT_HNSW) -> None:
    """Create the HNSW index of an agent's generation for ``dims``-dimensional vectors, if missing, in the
    caller's transaction (it holds a SHARE lock on ``vectors`` until it commits: ``build_index`` does not)."""
    cur.execute(_create(schema, agent_id, gen, dims, params, concurrently=False))


def index_state(cur: Any, schema: str, agent_id: str, gen: int, dims: int) -> str | None:
    """``"valid"``, ``"invalid"`` (a concurrent build that failed or is still running) or None (no index)."""
    cur.execute(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s",
        (schema, index_name(agent_id, gen, dims)),
    )
    row = cur.fetchone()
    return None if row is None else ("valid" if row[0] else "invalid")


def build_index(conn: Any, schema: str, agent_id: str, gen: int, dims: int, params: HnswConfig = DEFAULT_HNSW) -> bool:
    """Build the generation's HNSW index over the vectors it holds, ``CONCURRENTLY``: other agents' writers
    and this agent's readers go on meanwhile (readers search exactly, without it, until it is valid).

    The caller holds the agent's index lock (no one else builds it) and ``conn`` is in no transaction. An
    index left invalid by a build that died is dropped and built again. ``maintenance_work_mem`` is raised
    for the build, up to ``BUILD_MEMORY_MAX_MB``, when the graph would not fit (pgvector then builds on disk,
    several times slower). Returns True when it built one: the rows came in bulk, so the caller refreshes
    the planner's statistics (else it may think the generation holds one vector and sort it through a
    btree instead of asking the new index)."""
    from psycopg import sql

    with conn.cursor() as cur:
        state = index_state(cur, schema, agent_id, gen, dims)
        vectors = generation_vectors(cur, schema, agent_id, gen)
        cur.execute("SELECT setting::bigint / 1024 FROM pg_settings WHERE name = 'maintenance_work_mem'")
        current_mb = int(cur.fetchone()[0])
    conn.commit()
    if state == "valid":
        return False
    want_mb = min(build_memory_mb(vectors, dims, params), BUILD_MEMORY_MAX_MB)
    autocommit, conn.autocommit = conn.autocommit, True
    try:
        if state == "invalid":
            conn.execute(
                sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}.{}").format(
                    sql.Identifier(schema), sql.Identifier(index_name(agent_id, gen, dims))
                )
            )
        if want_mb > current_mb:
            conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(f"{want_mb}MB")))
        try:
            conn.execute(_create(schema, agent_id, gen, dims, params, concurrently=True))
        finally:
            if want_mb > current_mb:
                conn.execute("RESET maintenance_work_mem")
    finally:
        conn.autocommit = autocommit
    return True


def generation_vectors(cur: Any, schema: str, agent_id: str, gen: int) -> int:
    """How many vectors the generation holds (its count in ``token_totals``)."""
    cur.execute(f"SELECT vectors FROM {schema}.token_totals WHERE agent_id = %s AND gen = %s", (agent_id, gen))
    row = cur.fetchone()
    return int(row[0]) if row else 0


def build_memory_mb(vectors: int, dims: int, params: HnswConfig) -> int:
    """About what pgvector's in-memory HNSW build of ``vectors`` needs: each element's vector and its
    neighbour lists (2m on the ground layer, fewer above), with a margin."""
    per_element = 4 * dims + 8 + 3 * params.m * 10 + 64
    return int(vectors * per_element * 1.3 / 2**20) + 16


def add_vectors(cur: Any, schema: str, agent_id: str, gen: int, rows: Sequence[tuple[int, str, np.ndarray]]) -> int:
    """Store ``(chunk id, embedded-input hash, vector)`` rows and count them into ``token_totals`` (every
    vector of a chunk comes in one call). The generation's HNSW index takes them as they come when it exists;
    a generation without one yet (a first index, a rebuild) gets it built once, after the bulk load
    (``build_index``)."""
    if not rows:
        return 0
    cur.executemany(
        f"INSERT INTO {schema}.vectors (agent_id, gen, chunk_id, hash, dims, embedding) "
        "VALUES (%s, %s, %s, %s, %s, %s::vector)",
        [(agent_id, gen, cid, digest, len(v), codec.param(v)) for cid, digest, v in rows],
    )
    count(cur, schema, agent_id, gen, len(rows), len({cid for cid, _, _ in rows}))
    return len(rows)


def count(cur: Any, schema: str, agent_id: str, gen: int, vectors: int, chunks: int) -> None:
    """Add to the generation's vector totals (``knn`` reads how many vectors a chunk has on average)."""
    cur.execute(
        f"UPDATE {schema}.token_totals SET vectors = vectors + %s, vector_chunks = vector_chunks + %s "
        "WHERE agent_id = %s AND gen = %s",
        (vectors, chunks, agent_id, gen),
    )


def knn(
    cur: Any,
    schema: str,
    agent_id: str,
    gen: int,
    query: np.ndarray,
    k: int,
    per_chunk: float = 1.0,
    ef_search: int = DEFAULT_HNSW.ef_search,
) -> list[tuple[int, float]]:
    """The ``k`` nearest chunks by cosine distance, best first; a chunk with several vectors (windows) is as
    near as its nearest one, so ``k`` times ``per_chunk`` vectors are fetched (at most 8 per chunk).
    HNSW keeps ``ef_search`` candidates, and at least ``EF_PER_WANTED`` per vector asked for (the recall of
    the top k falls as k nears ef: at 1M vectors, ef 100 found .92 of the top 96, ef 200 .97); it is set for
    the connection's session in the same round trip (every search sets its own first)."""
    from psycopg import sql

    if k <= 0:
        return []
    want = int(k * min(max(per_chunk, 1.0), MAX_WINDOWS_PER_CHUNK) + 0.999)
    ef = min(max(int(ef_search), EF_PER_WANTED * want), MAX_EF_SEARCH)
    statement = sql.SQL("SET hnsw.ef_search = {}").format(sql.Literal(ef))
    cur.execute(sql.SQL("; ").join([statement, knn_query(schema, agent_id, gen, query, want)]))  # one round trip
    cur.nextset()
    best: dict[int, float] = {}
    for cid, distance in cur.fetchall():
        if float(distance) < best.get(int(cid), float("inf")):
            best[int(cid)] = float(distance)
    return sorted(best.items(), key=lambda r: (r[1], r[0]))[:k]


def knn_query(schema: str, agent_id: str, gen: int, query: np.ndarray | Sequence[float], n: int) -> Any:
    """The statement ``knn`` runs: the ``n`` nearest vectors of the agent's generation, through its index."""
    from psycopg import sql

    dims = len(query)
    return sql.SQL(
        "SELECT chunk_id, {expr} <=> {q}::vector({d}) AS distance FROM {s}.vectors WHERE {p} "
        "ORDER BY {expr} <=> {q}::vector({d}) LIMIT {n}"
    ).format(
        expr=_expression(dims),
        q=sql.Literal(codec.literal(query)),
        d=sql.Literal(dims),
        s=sql.Identifier(schema),
        p=_predicate(agent_id, gen, dims),
        n=sql.Literal(int(n)),
    )


def drop_indexes(cur: Any, schema: str, agent_id: str, gen: int, dims: Sequence[int]) -> None:
    from psycopg import sql

    for d in dims:
        cur.execute(
            sql.SQL("DROP INDEX IF EXISTS {}.{}").format(
                sql.Identifier(schema), sql.Identifier(index_name(agent_id, gen, d))
            )
        )
