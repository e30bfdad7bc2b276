"""Keyword search on a real PostgreSQL scores exactly as SQLite's FTS5 bm25 does, on the same chunks."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
import sqlean

from mdmem.store.pg import keyword
from mdmem.store.pg.connection import connect, shown_url
from mdmem.store.pg.schema import SCHEMA_VERSION, check_schema_name, migrate
from mdmem.store.schema import FTS_TOKENIZE
from mdmem.store.terms import text_terms
from mdmem.util.errors import StoreError

WORDS = (
    "backup server deploy database index search meeting budget travel flight hotel dinner birthday doctor "
    "garden coffee release bug benchmark latency recall vector keyword embedding provider config watcher "
    "agent session running runs ran connection connections connected café naïve Zürich résumé 東京 会議"
).split()


def corpus(n: int, seed: int = 3) -> list[tuple[str, str | None]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 60)))
        heading = None if i % 4 == 0 else " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
        out.append((text, heading))
    return out


def load(conn: Any, schema: str, chunks: list[tuple[str, str | None]], agent: str = "a1", gen: int = 1) -> list[int]:
    ids = []
    with conn.transaction(), conn.cursor() as cur:
        for i, (text, heading) in enumerate(chunks):
            cur.execute(
                f"INSERT INTO {schema}.chunks (agent_id, gen, path, source, start_line, end_line, hash, embed_hash, "
                "heading, text, tokens) VALUES (%s, %s, 'memory/x.md', 'memory', %s, %s, 'h', 'e', %s, %s, 0) "
                "RETURNING id",
                (agent, gen, i + 1, i + 1, heading, text),
            )
            ids.append(int(cur.fetchone()[0]))
        keyword.add_postings(cur, schema, agent, gen, [(cid, t, h) for cid, (t, h) in zip(ids, chunks, strict=True)])
    return ids


def fts5_bm25(chunks: list[tuple[str, str | None]], terms: list[str], k: int) -> list[tuple[int, float]]:
    """SQLite's own answer: the same chunks in an FTS5 table shaped like the index's."""
    db = sqlean.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE f USING fts5(text, heading, tokenize='{FTS_TOKENIZE}')")
    rows = [(i, text, heading) for i, (text, heading) in enumerate(chunks)]
    db.executemany("INSERT INTO f(rowid, text, heading) VALUES (?, ?, ?)", rows)
    match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
    found = db.execute(
        "SELECT rowid, bm25(f, 1.0, 0.5) AS r FROM f WHERE f MATCH ? ORDER BY r, rowid LIMIT ?", (match, k)
    ).fetchall()
    return [(int(r[0]), float(r[1])) for r in found]


@pytest.mark.parametrize(
    "query",
    [["backup"], ["deploy", "meeting"], ["running", "connection"], ["cafe", "zurich"], ["東京"], ["agent", "nothing"]],
)
def test_bm25_on_postgres_equals_fts5_on_the_same_chunks(pg: tuple[Any, str], query: list[str]) -> None:
    conn, schema = pg
    chunks = corpus(120)
    ids = load(conn, schema, chunks)
    load(conn, schema, corpus(40, seed=9), agent="other")  # another agent's rows change nothing
    terms = keyword.query_terms(query)
    with conn.cursor() as cur:
        got = [(cid, rank) for cid, rank, _ in keyword.bm25(cur, schema, "a1", 1, terms, 200)]
    expected = fts5_bm25(chunks, query, 200)
    assert expected, "the query must match something in the corpus"
    position = {cid: i for i, cid in enumerate(ids)}
    assert [position[cid] for cid, _ in got] == [rid for rid, _ in expected]
    for (_, mine), (_, theirs) in zip(got, expected, strict=True):
        assert mine == pytest.approx(theirs, rel=1e-9, abs=1e-12)


def test_removing_chunks_updates_the_statistics_bm25_uses(pg: tuple[Any, str]) -> None:
    conn, schema = pg
    chunks = corpus(60)
    ids = load(conn, schema, chunks)
    with conn.transaction(), conn.cursor() as cur:
        keyword.remove_chunks(cur, schema, "a1", 1, ids[:20])
        got = [(cid, rank) for cid, rank, _ in keyword.bm25(cur, schema, "a1", 1, keyword.query_terms(["backup"]), 100)]
    expected = fts5_bm25(chunks[20:], ["backup"], 100)
    assert [cid - ids[20] for cid, _ in got] == [rid for rid, _ in expected]
    assert [r for _, r in got] == pytest.approx([r for _, r in expected], rel=1e-9)


def test_terms_are_the_terms_fts5_indexes() -> None:
    db = sqlean.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE f USING fts5(x, tokenize='{FTS_TOKENIZE}')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(f, 'instance')")
    texts = ["Running connections, connected; Café NAÏVE Zürich!", "", "東京 会議 meeting", "a b c don't"]
    db.executemany("INSERT INTO f(rowid, x) VALUES (?, ?)", list(enumerate(texts)))
    vocab: dict[int, list[str]] = {}
    for doc, term in db.execute("SELECT doc, term FROM v ORDER BY doc, offset"):
        vocab.setdefault(int(doc), []).append(str(term))
    assert text_terms(texts) == [vocab.get(i, []) for i in range(len(texts))]
    assert text_terms(texts)[0][:3] == ["run", "connect", "connect"]


def test_migrations_run_once_and_refuse_a_newer_schema(pg: tuple[Any, str]) -> None:
    conn, schema = pg
    assert migrate(conn, schema) == SCHEMA_VERSION  # again: nothing to do
    with conn.transaction():
        conn.execute(f"INSERT INTO {schema}.migrations (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match="newer than this mdmem"):
        migrate(conn, schema)
    with pytest.raises(StoreError, match="store.schema"):
        check_schema_name("Robert'); DROP TABLE x;--")


def test_an_index_written_before_postings_carried_lengths_is_searched_the_same_after_migrating(
    pg: tuple[Any, str],
) -> None:
    from mdmem.store.pg.schema import MIGRATIONS

    conn, _ = pg
    old = "m_" + uuid.uuid4().hex[:10]
    with conn.transaction(), conn.cursor() as cur:  # a schema as version 4 left it, with rows
        cur.execute(f"CREATE SCHEMA {old}")
        cur.execute(
            f"CREATE TABLE {old}.migrations (version integer PRIMARY KEY, applied_at timestamptz DEFAULT now())"
        )
        for number in (1, 2, 3, 4):
            MIGRATIONS[number](cur, old)
            cur.execute(f"INSERT INTO {old}.migrations (version) VALUES (%s)", (number,))
        chunks = corpus(30)
        for i, (text, heading) in enumerate(chunks):
            postings, tokens = keyword.postings_of(text, heading)
            cur.execute(
                f"INSERT INTO {old}.chunks (id, agent_id, gen, path, source, start_line, end_line, hash, embed_hash, "
                "heading, text, tokens) VALUES (%s, 'a1', 1, 'memory/x.md', 'memory', 1, 1, 'h', 'e', %s, %s, %s)",
                (i + 1, heading, text, tokens),
            )
            cur.executemany(
                f"INSERT INTO {old}.postings (agent_id, gen, term, chunk_id, in_text, in_heading) "
                "VALUES ('a1', 1, %s, %s, %s, %s)",
                [(term, i + 1, n[0], n[1]) for term, n in postings.items()],
            )
        total = sum(keyword.postings_of(t, h)[1] for t, h in chunks)
        cur.execute(
            f"INSERT INTO {old}.token_totals (agent_id, gen, chunks, tokens) VALUES ('a1', 1, 30, %s)", (total,)
        )
    try:
        assert migrate(conn, old) == SCHEMA_VERSION
        with conn.cursor() as cur:
            got = keyword.bm25(cur, old, "a1", 1, keyword.query_terms(["backup"]), 100)
        expected = fts5_bm25(chunks, ["backup"], 100)
        assert [cid - 1 for cid, _, _ in got] == [rid for rid, _ in expected]
        assert [r for _, r, _ in got] == pytest.approx([r for _, r in expected], rel=1e-9)
    finally:
        conn.rollback()
        with conn.transaction():
            conn.execute(f"DROP SCHEMA {old} CASCADE")


def test_a_password_is_never_shown(pg_url: str) -> None:
    assert shown_url("postgresql://app:s3cret@db.example:5432/mem") == "postgresql://app:[REDACTED]@db.example:5432/mem"
    assert (
        shown_url("postgresql://db/mem?user=app&password=s3cret") == "postgresql://db/mem?user=app&password=[REDACTED]"
    )
    bad = pg_url.replace("postgres:@", "nobody:hunter2@").replace("host=", "connect_timeout=2&host=")
    with pytest.raises(StoreError) as info:
        connect(bad)
    assert "hunter2" not in str(info.value) and "[REDACTED]" in str(info.value)
