"""The search pipeline answers the same on PostgreSQL as on SQLite, over the same chunks and vectors."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from mdmem.config.load import HybridConfig
from mdmem.index.chunker import chunk_markdown
from mdmem.search.hybrid import search
from mdmem.store import Store
from mdmem.store.pg.store import PgStore
from mdmem.store.rows import ChunkRow, FileRow

NAMES = "Dana Mika Caroline Melanie Jon Gina".split()
TOPICS = (
    "backup server deploy database meeting budget flight hotel dinner birthday doctor garden coffee release "
    "painting camping adoption marathon concert pottery guitar recipe volunteering"
).split()
FILLER = "we talked about it again and agreed to check the numbers next week before the review".split()
CJK = ["寿司和拉面很好吃", "东京会议在周五", "周末去爬山", "吃饭", "好", "会议记录已发送", "拉面店"]


def daily_notes(n: int) -> dict[str, str]:
    rng = random.Random(11)
    notes = {}
    for day in range(n):
        lines = [f"# 2026-03-{day + 1:02d}", ""]
        for _ in range(rng.randint(4, 14)):
            who, topic = rng.choice(NAMES), rng.choice(TOPICS)
            lines.append(f"- {who}: the {topic} plan, " + " ".join(rng.sample(FILLER, 6)) + f" ({topic}s).")
            if rng.random() < 0.3:
                lines.append(f"- {rng.choice(NAMES)}: " + "，".join(rng.sample(CJK, 2)) + "。")
        notes[f"memory/2026-03-{day + 1:02d}.md"] = "\n".join(lines) + "\n"
    return notes


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[tuple[Store, PgStore]]:
    """The same 40 daily notes, chunked once, written to a SQLite index and to PostgreSQL (read-only after)."""
    schema = "q_" + uuid.uuid4().hex[:12]
    rng = np.random.default_rng(4)
    sqlite, pg = Store(tmp_path_factory.mktemp("lite") / "index.sqlite"), PgStore(pg_url, "a1", schema)
    for path, text in daily_notes(40).items():
        chunks = [
            ChunkRow(path, "memory", c.start_line, c.end_line, c.hash, c.hash, c.heading, c.text)
            for c in chunk_markdown(text, path, tokens=96, overlap=16)
        ]
        vecs = rng.normal(size=(len(chunks), 32)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        per_chunk = [([c.hash], vecs[i : i + 1]) for i, c in enumerate(chunks)]
        row = FileRow(path, "memory", "h", 1.0, len(text))
        sqlite.replace_file(row, chunks, per_chunk)
        pg.replace_file(row, chunks, per_chunk)
    pg.settle()  # as a sync ends: the vectors under their HNSW index
    try:
        yield sqlite, pg
    finally:
        sqlite.close()
        with pg.session() as conn, conn.transaction():
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
        pg.close()


QUERIES = [
    "what did Dana say about the backup plan?",
    "Caroline painting",
    "camping trip with Melanie",
    "marathon and concert",
    "flights",
    "pottery guitar recipes",
    "寿司和拉面",
    "东京会议 好",
    "Dana 吃饭",
]


@pytest.mark.parametrize("scoring", ["blend", "coverage", "relative"])
def test_keyword_search_ranks_and_scores_as_on_sqlite(stores: tuple[Store, PgStore], scoring: str) -> None:
    sqlite, pg = stores
    for query in QUERIES:
        runs = [
            search(s, query, query_vector=None, max_results=10, min_score=0.0, hybrid=HybridConfig(), keyword_score=k)
            for s, k in ((sqlite, scoring), (pg, scoring))
        ]
        lite, post = ([(h.chunk.path, h.chunk.start_line) for h in r.hits] for r in runs)
        assert lite and post == lite, query
        assert [h.score for h in runs[1].hits] == pytest.approx([h.score for h in runs[0].hits], abs=1e-9)


def test_hybrid_search_with_the_same_vectors_answers_the_same(stores: tuple[Store, PgStore]) -> None:
    sqlite, pg = stores
    rng = np.random.default_rng(9)
    for query in QUERIES:
        q = rng.normal(size=32).astype(np.float32)
        q /= np.linalg.norm(q)
        runs = [
            search(s, query, query_vector=q, max_results=8, min_score=0.0, hybrid=HybridConfig(), keyword_score="blend")
            for s in (sqlite, pg)
        ]
        lite, post = ([(h.chunk.path, h.chunk.start_line) for h in r.hits] for r in runs)
        assert post == lite, query
        assert [h.score for h in runs[1].hits] == pytest.approx([h.score for h in runs[0].hits], abs=1e-5)
