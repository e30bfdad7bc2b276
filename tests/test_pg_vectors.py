"""Vector search on a real PostgreSQL + pgvector: HNSW per agent generation, never a scan, the agent's own."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mdmem.store.pg import vectors


def clustered(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    centres = rng.normal(size=(40, dims))
    vecs = centres[rng.integers(0, 40, size=n)] + rng.normal(scale=0.3, size=(n, dims))
    return (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)


def chunks(cur: Any, schema: str, agent: str, gen: int, n: int) -> list[int]:
    ids = []
    for i in range(n):
        cur.execute(
            f"INSERT INTO {schema}.chunks (agent_id, gen, path, source, start_line, end_line, hash, embed_hash, "
            "text, tokens) VALUES (%s, %s, 'memory/x.md', 'memory', %s, %s, 'h', 'e', 't', 1) RETURNING id",
            (agent, gen, i + 1, i + 1),
        )
        ids.append(int(cur.fetchone()[0]))
    return ids


def test_hnsw_finds_the_exact_neighbours_of_the_agents_own_generation(pg: tuple[Any, str]) -> None:
    conn, schema = pg
    rng = np.random.default_rng(7)
    mine, other, old = clustered(rng, 1500, 64), clustered(rng, 1500, 64), clustered(rng, 300, 64)
    with conn.transaction(), conn.cursor() as cur:
        ids = chunks(cur, schema, "a1", 2, len(mine))
        vectors.add_vectors(cur, schema, "a1", 2, [(cid, f"h{cid}", v) for cid, v in zip(ids, mine, strict=True)])
        others = chunks(cur, schema, "a2", 1, len(other))  # another agent, same dimensions
        vectors.add_vectors(cur, schema, "a2", 1, [(c, "x", v) for c, v in zip(others, other, strict=True)])
        olds = chunks(cur, schema, "a1", 1, len(old))  # the agent's previous generation
        vectors.add_vectors(cur, schema, "a1", 1, [(c, "y", v) for c, v in zip(olds, old, strict=True)])
    for agent, gen in (("a1", 2), ("a2", 1), ("a1", 1)):  # built after the load, as a first sync does
        assert vectors.build_index(conn, schema, agent, gen, 64)
    assert not vectors.build_index(conn, schema, "a1", 2, 64)  # there already
    conn.execute(f"ANALYZE {schema}.vectors")  # as the store does after a bulk load
    conn.commit()
    hits = 0
    with conn.cursor() as cur:
        for _ in range(30):
            q = mine[rng.integers(len(mine))] + rng.normal(scale=0.1, size=64).astype(np.float32)
            q /= np.linalg.norm(q)
            got = vectors.knn(cur, schema, "a1", 2, q, 10)
            conn.rollback()
            assert {cid for cid, _ in got} <= set(ids)  # never another agent's or generation's rows
            truth = {ids[i] for i in np.argsort(-(mine @ q))[:10]}
            hits += len({cid for cid, _ in got} & truth)
            dists = [d for _, d in got]
            assert dists == sorted(dists) and len(got) == 10
        assert hits / 300 >= 0.95  # recall@10 of HNSW with the default ef_search

        from psycopg import sql

        cur.execute(sql.SQL("EXPLAIN ") + vectors.knn_query(schema, "a1", 2, mine[0], 10))  # what knn runs
        plan = "\n".join(r[0] for r in cur.fetchall())
        assert vectors.index_name("a1", 2, 64) in plan and "Seq Scan" not in plan


def test_a_chunk_with_several_windows_counts_once_at_its_nearest(pg: tuple[Any, str]) -> None:
    conn, schema = pg
    rng = np.random.default_rng(3)
    base = clustered(rng, 200, 32)
    with conn.transaction(), conn.cursor() as cur:
        ids = chunks(cur, schema, "a1", 1, 100)
        rows = [(ids[i // 2], f"w{i}", base[i]) for i in range(200)]  # two vectors per chunk
        vectors.add_vectors(cur, schema, "a1", 1, rows)
    with conn.cursor() as cur:
        got = vectors.knn(cur, schema, "a1", 1, base[17], 5, per_chunk=2.0)
    assert len({cid for cid, _ in got}) == len(got) == 5
    assert got[0] == (ids[8], pytest.approx(0.0, abs=1e-5))  # vector 17 belongs to chunk 8


def test_retired_generation_indexes_are_dropped(pg: tuple[Any, str]) -> None:
    conn, schema = pg
    rng = np.random.default_rng(5)
    with conn.transaction(), conn.cursor() as cur:
        ids = chunks(cur, schema, "a1", 1, 10)
        vectors.add_vectors(
            cur, schema, "a1", 1, [(c, "h", v) for c, v in zip(ids, clustered(rng, 10, 16), strict=True)]
        )
        vectors.ensure_index(cur, schema, "a1", 1, 16)
        assert vectors.index_state(cur, schema, "a1", 1, 16) == "valid"
        vectors.drop_indexes(cur, schema, "a1", 1, [16])
        cur.execute(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
            (schema, vectors.index_name("a1", 1, 16)),
        )
        assert cur.fetchone()[0] == 0
