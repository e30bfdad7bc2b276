"""The most-terms plan of large PostgreSQL generations (mdmem.store.pg.mostterms) on a real PostgreSQL: the
chunks it returns carry exactly ``keyword.bm25``'s scores and term sets, it finds the exact top k of the
chunks holding all the terms and nearly all of the exact top k, it leaves queries with a rare term to the
exact ranking, writes keep each chunk's ``term_keys`` in step, and a schema 11 database gets them by
migrating."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from mdmem.store.pg import keyword, mostterms, termkeys
from mdmem.store.pg.schema import MIGRATIONS, SCHEMA_VERSION, migrate
from mdmem.store.pg.store import PgStore
from mdmem.store.rows import ChunkRow, FileRow

# words in 5-40% of the chunks (the plan's case: no rare one), and a tail of rare ones
COMMON = "note team plan backup deploy budget travel flight hotel dinner doctor garden coffee release".split()
RARE = [f"w{i}x" for i in range(300)]


def text(rng: random.Random) -> str:
    words = [rng.choice(COMMON) if rng.random() < 0.35 else rng.choice(RARE) for _ in range(rng.randint(3, 40))]
    return " ".join(words)


@pytest.fixture(autouse=True)
def any_number_of_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan scores however many chunks hold the terms (here most chunks hold several common words; the
    cap that hands a wide query to the exact ranking is a cost rule, tested on its own)."""
    monkeypatch.setattr(mostterms, "SCORED_MAX_SHARE", 10.0)


def chunk_terms(gen: int, body: str, agent: str = "a1") -> tuple[list[int], list[float]]:
    """What a chunk of ``body`` (no heading) must hold: its terms' keys, sorted, and their frequencies."""
    freqs = {t: float(n.in_text) for t, n in keyword.postings_of(body, None)[0].items()}
    return termkeys.chunk_terms(agent, gen, freqs)


def load(conn: Any, schema: str, chunks: list[str], agent: str = "a1", gen: int = 1) -> list[int]:
    ids = []
    with conn.transaction(), conn.cursor() as cur:
        for i, body in enumerate(chunks):
            cur.execute(
                f"INSERT INTO {schema}.chunks (agent_id, gen, path, source, start_line, end_line, hash, embed_hash, "
                "heading, text, tokens) VALUES (%s, %s, 'memory/x.md', 'memory', %s, %s, 'h', 'e', NULL, %s, 0) "
                "RETURNING id",
                (agent, gen, i + 1, i + 1, body),
            )
            ids.append(int(cur.fetchone()[0]))
        keyword.add_postings(cur, schema, agent, gen, [(cid, t, None) for cid, t in zip(ids, chunks, strict=True)])
    return ids


def frequencies(cur: Any, schema: str, agent: str, gen: int, terms: list[str]) -> dict[str, int]:
    cur.execute(
        f"SELECT term, count(*) FROM {schema}.postings WHERE agent_id = %s AND gen = %s AND term = ANY(%s) "
        "GROUP BY term",
        (agent, gen, terms),
    )
    return {str(t): int(n) for t, n in cur.fetchall()}


def both(conn: Any, schema: str, terms: list[str], k: int, agent: str = "a1", gen: int = 1) -> tuple[Any, Any, Any]:
    """(every chunk holding a term, exactly ranked; the exact top k; the plan's top k or None), with the same
    totals and document frequencies."""
    with conn.cursor() as cur:
        known = keyword.totals(cur, schema, agent, gen)
        df = frequencies(cur, schema, agent, gen, terms)
        every = keyword.bm25(cur, schema, agent, gen, terms, 1_000_000, known, df)
        exact = keyword.bm25(cur, schema, agent, gen, terms, k, known, df)
        plan = mostterms.top_k(cur, schema, agent, gen, terms, k, known, df, min_chunks=0)
    return every, exact, plan


def test_the_plan_scores_as_bm25_and_finds_the_best_chunks_holding_most_terms(pg: tuple[Any, str]) -> None:
    conn, schema = pg
    rng = random.Random(11)
    load(conn, schema, [text(rng) for _ in range(3000)])
    answered, overlap, asked = 0, 0, 0
    for _ in range(40):
        terms = keyword.query_terms(rng.sample(COMMON, rng.randint(2, 4)))
        for k in (1, 6, 24):
            every, exact, plan = both(conn, schema, terms, k)
            if plan is None:
                continue
            answered += 1
            by_id = {c: (r, held) for c, r, held in every}
            assert len(plan) == k
            for c, r, held in plan:  # exactly bm25's score and term set
                assert r == pytest.approx(by_id[c][0], rel=1e-12) and held == by_id[c][1]
            assert [(r, c) for c, r, _ in plan] == sorted((r, c) for c, r, _ in plan)
            # every chunk holding all the terms is weighed: one left out scores no better than the k-th
            got = {c for c, _, _ in plan}
            assert all(r >= plan[-1][1] - 1e-12 for c, r, held in every if held == set(terms) and c not in got)
            overlap += len(got & {c for c, _, _ in exact})
            asked += k
    assert answered >= 60
    assert overlap / asked >= 0.9  # what leaving out chunks of fewer terms costs here


def test_a_rare_term_a_small_generation_or_too_many_terms_leave_it_to_the_exact_ranking(pg: tuple[Any, str]) -> None:
    conn, schema = pg
    rng = random.Random(5)
    load(conn, schema, [text(rng) for _ in range(1500)])
    assert both(conn, schema, ["backup", "w7x"], 6)[2] is None  # a rare term (fts.split_rare_common): it may lead
    assert both(conn, schema, ["backup", "nosuchword"], 6)[2] is None  # one term in the index
    assert both(conn, schema, keyword.query_terms(COMMON[:6]), 6)[2] is None  # more than MOST_TERMS_MAX terms
    with conn.cursor() as cur:
        known = keyword.totals(cur, schema, "a1", 1)
        df = frequencies(cur, schema, "a1", 1, ["backup", "budget"])
        assert mostterms.top_k(cur, schema, "a1", 1, ["backup", "budget"], 6, known, df) is None  # < MIN_CHUNKS
        assert mostterms.top_k(cur, schema, "a1", 1, ["backup", "budget"], 6, known, df, min_chunks=0) is not None
    # words in no chunk add nothing, however many (a long question): the plan answers for the two present
    many = ["backup", "budget"] + [f"absent{i}" for i in range(40)]
    _, _, plan = both(conn, schema, many, 6)
    assert plan is not None and [c for c, _, _ in plan] == [c for c, _, _ in both(conn, schema, many[:2], 6)[2]]


def test_a_query_whose_chunks_are_too_many_to_score_is_left_to_the_exact_ranking(
    pg: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """More chunks holding the terms than ``SCORED_MAX_SHARE`` of their postings: scoring them would cost
    about what the exact ranking costs, so the plan declines as soon as it has seen that many."""
    conn, schema = pg
    load(conn, schema, ["backup budget"] * 300 + ["backup"] * 100 + ["budget"] * 100)
    _, exact, plan = both(conn, schema, ["backup", "budget"], 6)
    assert plan is not None and [c for c, _, _ in plan] == [c for c, _, _ in exact]  # equal scores: by id
    monkeypatch.setattr(mostterms, "SCORED_MAX_SHARE", 0.1)  # the default: 300 > 0.1 * 800
    assert both(conn, schema, ["backup", "budget"], 6)[2] is None
    monkeypatch.setattr(mostterms, "SCORED_MAX_SHARE", 0.4)  # 300 <= 320
    assert both(conn, schema, ["backup", "budget"], 6)[2] is not None


def note(path: str, *texts: str) -> tuple[FileRow, list[ChunkRow]]:
    rows = [ChunkRow(path, "memory", i + 1, i + 1, f"h{path}{i}", f"e{i}", None, t) for i, t in enumerate(texts)]
    return FileRow(path, "memory", f"f{path}{len(texts)}", 0.0, 0), rows


def test_the_store_uses_it_and_writes_keep_the_keys_in_step(
    pg_url: str, pg: tuple[Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, schema = pg
    monkeypatch.setattr(mostterms, "MIN_CHUNKS", 0)  # at any size
    used: list[bool] = []
    original = mostterms.top_k

    def spy(*args: Any, **kwargs: Any) -> Any:
        got = original(*args, **kwargs)
        used.append(got is not None)
        return got

    monkeypatch.setattr(mostterms, "top_k", spy)
    rng = random.Random(3)
    with PgStore(pg_url, "a1", schema) as store:
        for i in range(20):
            store.replace_file(*note(f"memory/{i:02d}.md", *(text(rng) for _ in range(10))), None)
        store.replace_file(*note("memory/hot.md", "budget backup budget backup", "travel budget backup"), None)
        hot = store.keyword_matches(["budget", "backup"], 3)
        assert used[-1] and store.chunks_by_ids([hot[0][0]])[hot[0][0]].path == "memory/hot.md"
        with store.session() as conn, conn.cursor() as cur:
            cur.execute(
                f"SELECT text, term_keys, term_freqs FROM {schema}.chunks WHERE agent_id = 'a1' AND gen = %s",
                (store.gen,),
            )
            for body, keys, freqs in cur.fetchall():
                assert (keys, freqs) == chunk_terms(store.gen, body)

        store.delete_file("memory/hot.md")
        after = store.keyword_matches(["budget", "backup"], 3)
        assert used[-1] and after and len(store.chunks_by_ids([c for c, _, _ in after])) == len(after)
        assert all(c.path != "memory/hot.md" for c in store.chunks_by_ids([c for c, _, _ in after]).values())

        # a replaced file's new words are found at once, scored as the exact ranking scores them
        store.replace_file(*note("memory/00.md", "garden coffee " * 20, "garden coffee dinner"), None)
        got = store.keyword_matches(["garden", "coffee"], 6)
        with store.session() as conn, conn.cursor() as cur:
            exact = keyword.bm25(cur, schema, "a1", store.gen, keyword.query_terms(["garden", "coffee"]), 6)
        assert used[-1] and got[0][0] == exact[0][0] and got[0][1] == pytest.approx(exact[0][1], rel=1e-12)
        assert got[0][2] == {"garden", "coffee"} and store.chunks_by_ids([got[0][0]])[got[0][0]].path == "memory/00.md"


def test_a_schema_11_database_with_rows_gets_term_keys_by_migrating(pg: tuple[Any, str]) -> None:
    conn, _ = pg
    old = "m_" + uuid.uuid4().hex[:10]
    rng = random.Random(9)
    chunks = [text(rng) for _ in range(400)]
    with conn.transaction(), conn.cursor() as cur:  # a schema as version 11 left it, with rows of two agents
        cur.execute(f"CREATE SCHEMA {old}")
        cur.execute(
            f"CREATE TABLE {old}.migrations (version integer PRIMARY KEY, applied_at timestamptz DEFAULT now())"
        )
        for number in range(1, 12):
            MIGRATIONS[number](cur, old)
            cur.execute(f"INSERT INTO {old}.migrations (version) VALUES (%s)", (number,))
        for agent, gen in (("a1", 1), ("b2", 3)):
            total = 0
            for i, body in enumerate(chunks):
                postings, tokens = keyword.postings_of(body, None)
                total += tokens
                cur.execute(
                    f"INSERT INTO {old}.chunks (agent_id, gen, path, source, start_line, end_line, hash, "
                    "embed_hash, heading, text, tokens) VALUES (%s, %s, 'memory/x.md', 'memory', %s, %s, 'h', 'e', "
                    "NULL, %s, %s) RETURNING id",
                    (agent, gen, i + 1, i + 1, body, tokens),
                )
                cid = int(cur.fetchone()[0])
                cur.executemany(
                    f"INSERT INTO {old}.postings (agent_id, gen, term, chunk_id, in_text, in_heading, tokens, "
                    "positions) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    [(agent, gen, t, cid, n.in_text, n.in_heading, tokens, n.positions) for t, n in postings.items()],
                )
            cur.execute(
                f"INSERT INTO {old}.token_totals (agent_id, gen, chunks, tokens) VALUES (%s, %s, %s, %s)",
                (agent, gen, len(chunks), total),
            )
    try:
        assert migrate(conn, old) == SCHEMA_VERSION == 12
        with conn.cursor() as cur:
            cur.execute(f"SELECT agent_id, gen, text, term_keys, term_freqs FROM {old}.chunks")
            rows = cur.fetchall()
        assert len(rows) == 800
        for agent, gen, body, keys, freqs in rows:
            assert (keys, freqs) == chunk_terms(gen, body, agent)
        for agent, gen in (("a1", 1), ("b2", 3)):
            every, _, plan = both(conn, old, ["backup", "budget"], 6, agent, gen)
            assert plan is not None
            by_id = {c: r for c, r, _ in every}
            assert all(r == pytest.approx(by_id[c], rel=1e-12) for c, r, _ in plan)
    finally:
        conn.rollback()
        with conn.transaction():
            conn.execute(f"DROP SCHEMA {old} CASCADE")
