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

if TYPE_CHECKING:
    import numpy as np

DEFAULT_EF_SEARCH = 100  # candidates HNSW keeps while searching: recall of the exact top-k, see the tests
MAX_WINDOWS_PER_CHUNK = 8


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


def ensure_index(cur: Any, schema: str, agent_id: str, gen: int, dims: int) -> None:
    """Create the HNSW index of an agent's generation for ``dims``-dimensional vectors, if missing."""
    from psycopg import sql

    cur.execute(
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {}.vectors USING hnsw ({} vector_cosine_ops) WHERE {}").format(
            sql.Identifier(index_name(agent_id, gen, dims)),
            sql.Identifier(schema),
            _expression(dims),
            _predicate(agent_id, gen, dims),
        )
    )


def literal(vector: np.ndarray | Sequence[float]) -> str:
    """pgvector's text form of a vector."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def add_vectors(cur: Any, schema: str, agent_id: str, gen: int, rows: Sequence[tuple[int, str, np.ndarray]]) -> int:
    """Store ``(chunk id, embedded-input hash, vector)`` rows (an index per dimension is made as needed)."""
    for dims in {len(v) for _, _, v in rows}:
        ensure_index(cur, schema, agent_id, gen, dims)
    cur.executemany(
        f"INSERT INTO {schema}.vectors (agent_id, gen, chunk_id, hash, dims, embedding) "
        "VALUES (%s, %s, %s, %s, %s, %s::vector)",
        [(agent_id, gen, cid, digest, len(v), literal(v)) for cid, digest, v in rows],
    )
    return len(rows)


def knn(
    cur: Any,
    schema: str,
    agent_id: str,
    gen: int,
    query: np.ndarray,
    k: int,
    per_chunk: float = 1.0,
    ef_search: int = DEFAULT_EF_SEARCH,
) -> list[tuple[int, float]]:
    """The ``k`` nearest chunks by cosine distance, best first; a chunk with several vectors (windows) is as
    near as its nearest one, so ``k`` times ``per_chunk`` vectors are fetched (at most 8 per chunk)."""
    from psycopg import sql

    if k <= 0:
        return []
    want = int(k * min(max(per_chunk, 1.0), MAX_WINDOWS_PER_CHUNK) + 0.999)
    cur.execute(sql.SQL("SET LOCAL hnsw.ef_search = {}").format(sql.Literal(max(int(ef_search), want))))
    cur.execute(knn_query(schema, agent_id, gen, query, want))
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
        q=sql.Literal(literal(query)),
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
