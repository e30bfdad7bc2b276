"""Compound identifiers in a query (Nimbus-14, PROJ-123, v2.3.1, db-02.prod, snake_case, src/app.py) are searched
as their parts and as the phrase of their parts, on SQLite's FTS5 and on PostgreSQL alike."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import sqlean

from mdmem.config.load import HybridConfig
from mdmem.index.chunker import chunk_markdown
from mdmem.search.hybrid import search
from mdmem.search.query import identifier_phrases, keyword_query, keyword_terms, query_terms
from mdmem.store import Store
from mdmem.store.fts import FtsSearch, split_rare_common
from mdmem.store.pg import keyword
from mdmem.store.pg.store import PgStore
from mdmem.store.rows import ChunkRow, FileRow
from mdmem.store.schema import FTS_TOKENIZE

TOOLS = "Bazel Gradle Buck Pants Make Ninja Meson Maven".split()


@pytest.mark.parametrize(
    ("query", "phrases"),
    [
        ("What does the Nimbus-14 project use for builds now?", ["nimbus 14"]),
        ("status of PROJ-123 and proj-77", ["proj 123", "proj 77"]),
        ("upgrade to v2.3.1 from gpt-4o on python3.11", ["v2 3 1", "gpt 4o", "python3 11"]),
        ("is db-02.prod down?", ["db 02 prod"]),
        ("where is max_retry_count set", ["max retry count"]),
        ("src/app/main.py and C:\\tools\\run.bat", ["src app main py", "c tools run bat"]),
        ("the 10.10.1.1 host at 14:35", ["10 10 1 1", "14 35"]),
        ("bob@example.com issue#42 a+b x~y", ["bob example com", "issue 42", "a b", "x y"]),
        ("Nimbus-14 nimbus-14 NIMBUS-14", ["nimbus 14"]),  # once
        ("what did Caroline's sister say about the backup?", []),  # an apostrophe joins no identifier
        ("trailing dots. and dashes - and v2. alone", []),
        ("東京-会議 の メモ", []),  # CJK is the trigram search's
        ("dl-東京", []),
    ],
)
def test_identifier_phrases_of_a_query(query: str, phrases: list[str]) -> None:
    assert identifier_phrases(query) == phrases


@pytest.mark.parametrize(
    "query",
    [
        "what did Dana say about the backup plan?",
        "Caroline's painting, camping; marathon!",
        "寿司和拉面 Dana 吃饭",
        "the a of",
        "14 35 nimbus",
    ],
)
def test_a_query_without_identifiers_asks_the_store_for_the_same_terms_as_before(query: str) -> None:
    assert keyword_query(query, query_terms(query)) == keyword_terms(query_terms(query))


def test_identifier_parts_stay_terms_and_the_phrase_comes_after_them() -> None:
    q = "Nimbus-14 builds, max_retry and the v2.3.1 release"
    assert keyword_query(q, query_terms(q)) == [
        "nimbus", "14", "builds", "max", "retry", "v2", "3", "1", "release",
        "nimbus 14", "max retry", "v2 3 1",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "query",
    [
        'Nimbus-14" OR "x',
        "NEAR(nimbus-14 builds, 2)",
        "nimbus-14* ^nimbus-14 nimbus-*14",
        'x"-"y a-"b"-c',
        "nimbus-14 AND NOT builds: col:nimbus-14 {text}:nimbus-14",
    ],
)
def test_fts_syntax_in_an_identifier_cannot_inject(query: str) -> None:
    for phrase in identifier_phrases(query):
        assert phrase.replace(" ", "").isalnum(), phrase


# -- a corpus where every note's parts are everywhere ----------------------------------------------------------
def project_notes(seed: int = 7) -> dict[str, str]:
    """Notes of projects Nimbus-1 .. Nimbus-20 and friends, each a file; timestamps and dates hold every number."""
    rng = random.Random(seed)
    notes: dict[str, str] = {}
    for i in range(120):
        project = rng.randint(1, 20)
        hour, minute = rng.randint(8, 18), rng.randint(0, 59)
        other = rng.choice([n for n in range(1, 21) if n != project])
        lines = [
            f"# 2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            "",
            f"- [{hour}:{minute:02d}] Nimbus-{project} project switched its builds to {rng.choice(TOOLS)}.",
            f"- [14:{rng.randint(0, 59):02d}] Reviewed nimbus tickets {other} and {rng.randint(1, 30)} with the team.",
        ]
        if i % 5 == 0:
            lines.append(f"- the ticket PROJ-{rng.randint(100, 140)} is on db-0{rng.randint(1, 4)}.prod, v2.{i % 4}.1")
        if i % 7 == 0:
            lines.append(f"- max_retry_count is {rng.randint(1, 9)} in src/app/{rng.choice(['main', 'jobs'])}.py")
        notes[f"memory/notes-{i:03d}.md"] = "\n".join(lines) + "\n"
    notes["memory/headings.md"] = "# Nimbus-14 runbook\n\nbuilds go through the release queue\n"
    return notes


def write(store: Any, notes: dict[str, str]) -> None:
    for path, text in notes.items():
        chunks = [
            ChunkRow(path, "memory", c.start_line, c.end_line, c.hash, c.hash, c.heading, c.text)
            for c in chunk_markdown(text, path, tokens=96, overlap=16)
        ]
        store.replace_file(FileRow(path, "memory", "h", 1.0, len(text)), chunks, None)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[tuple[Store, PgStore]]:
    schema = "i_" + uuid.uuid4().hex[:12]
    sqlite, pg = Store(tmp_path_factory.mktemp("lite") / "index.sqlite"), PgStore(pg_url, "a1", schema)
    notes = project_notes()
    write(sqlite, notes)
    write(pg, notes)
    try:
        yield sqlite, pg
    finally:
        sqlite.close()
        with pg.session() as conn, conn.transaction():
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
        pg.close()


def keyword_search(store: Any, query: str, scoring: str = "blend", n: int = 10) -> list[Any]:
    outcome = search(
        store, query, query_vector=None, max_results=n, min_score=0.0, hybrid=HybridConfig(), keyword_score=scoring
    )
    return outcome.hits


@pytest.mark.parametrize("which", ["sqlite", "pg"])
def test_the_notes_holding_the_identifier_come_first(stores: tuple[Store, PgStore], which: str) -> None:
    store = stores[0] if which == "sqlite" else stores[1]
    query = "What does the Nimbus-14 project use for builds now?"
    holding = [p for p, t in project_notes().items() if "Nimbus-14 " in t]
    assert len(holding) >= 4
    hits = keyword_search(store, query, n=len(holding))
    assert sorted(h.chunk.path for h in hits) == sorted(holding)
    # without the phrase the same store cannot tell them apart: the parts are everywhere
    terms = keyword_terms(query_terms(query))
    parts_only = [rid for rid, _, _ in store.keyword_matches(terms, len(holding))]
    texts = store.chunks_by_ids(parts_only)
    assert any("Nimbus-14 " not in texts[rid].text for rid in parts_only)


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("which database holds PROJ-120?", "PROJ-120 "),
        ("what runs on db-03.prod", "db-03.prod"),
        ("where is max_retry_count", "max_retry_count"),
        ("who changed src/app/jobs.py", "src/app/jobs.py"),
    ],
)
@pytest.mark.parametrize("which", ["sqlite", "pg"])
def test_hyphen_dot_underscore_and_slash_identifiers(
    stores: tuple[Store, PgStore], which: str, query: str, needle: str
) -> None:
    store = stores[0] if which == "sqlite" else stores[1]
    holding = {p for p, t in project_notes().items() if needle in t}
    assert holding
    hits = keyword_search(store, query, n=len(holding))
    assert {h.chunk.path for h in hits} == holding


QUERIES = [
    "What does the Nimbus-14 project use for builds now?",
    "nimbus-14 builds",
    "Nimbus-9 and Nimbus-20 tickets",
    "PROJ-120 on db-03.prod v2.1.1",
    "max_retry_count in src/app/main.py",
    "the 14:05 review",  # a phrase that may be found nowhere
    'Nimbus-14" OR "x NEAR(builds) nimbus-14* ^nimbus-14',
    "东京会议 Nimbus-14",
]


@pytest.mark.parametrize("scoring", ["blend", "coverage", "relative"])
def test_both_stores_rank_and_score_identifier_queries_the_same(stores: tuple[Store, PgStore], scoring: str) -> None:
    sqlite, pg = stores
    for query in QUERIES:
        lite, post = (keyword_search(s, query, scoring, n=15) for s in (sqlite, pg))
        assert [(h.chunk.path, h.chunk.start_line) for h in post] == [(h.chunk.path, h.chunk.start_line) for h in lite]
        assert [h.score for h in post] == pytest.approx([h.score for h in lite], abs=1e-9), query


def test_a_phrase_is_held_only_where_its_parts_stand_together(stores: tuple[Store, PgStore]) -> None:
    notes = project_notes()
    for store in stores:
        assert store.term_frequency_at_least("nimbus-14", 10_000) == sum("Nimbus-14 " in t for t in notes.values())
        held = {rid: found for rid, _, found in store.keyword_matches(["nimbus", "14", "nimbus 14"], 500)}
        for rid, chunk in store.chunks_by_ids(list(held)).items():
            assert ("nimbus 14" in held[rid]) == ("Nimbus-14 " in chunk.text), chunk.text


# -- the rare-first plan stays exact with phrase terms -----------------------------------------------------------
@pytest.mark.parametrize(
    "terms",
    [
        ["nimbus", "nimbus 14", "proj 120"],  # phrases among the rare terms
        ["reviewed nimbus", "nimbus 14", "db 02 prod"],  # and a phrase (in every note) the common term
    ],
)
def test_the_rare_first_plan_with_phrases_equals_the_general_plan(
    stores: tuple[Store, PgStore], terms: list[str]
) -> None:
    sqlite, _ = stores
    fts = sqlite.keyword_search
    assert isinstance(fts, FtsSearch)
    rows = fts.chunk_count()
    split = split_rare_common({t: fts.term_frequency_at_least(t, rows + 1) for t in terms}, rows)
    assert split is not None and split[1] == terms[:1]  # the plan's common term: the first
    quick = fts.rare_first(terms, 3)
    assert quick is not None, "the corpus must mix rare and common terms for this test"
    arms = " UNION ALL ".join(
        "SELECT rowid AS r, bm25(chunks_fts, 1.0, 0.5) AS s FROM chunks_fts WHERE chunks_fts MATCH ?" for _ in terms
    )
    full = sqlite.keyword_search.conn.execute(
        f"SELECT r, sum(s) AS rank FROM ({arms}) GROUP BY r ORDER BY rank, r LIMIT 3",
        ['"' + t + '"' for t in terms],
    ).fetchall()
    assert [rid for rid, _, _ in quick] == [int(r[0]) for r in full]
    assert [s for _, s, _ in quick] == pytest.approx([float(r[1]) for r in full], rel=1e-12)


# -- PostgreSQL's phrase BM25 against FTS5's own, on the same texts ----------------------------------------------
PHRASE_TEXTS = [
    ("nimbus 14 nimbus 14 and nimbus-14", "Nimbus-14"),
    ("Nimbus 9 at 14:35, nimbus and 14 apart", None),
    ("10.10.1.1 then 10.10.1.1.1 and 1.1.1", "hosts"),
    ("a a a a", "a"),
    ("running builds ran on build-servers", "Runs: build server"),
    ("the café naïve-résumé", None),
    ("Nimbus", "14 nimbus"),
]


def fts5_phrase_bm25(chunks: list[tuple[str, str | None]], keys: list[str]) -> list[tuple[int, float]]:
    db = sqlean.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE f USING fts5(text, heading, tokenize='{FTS_TOKENIZE}')")
    db.executemany(
        "INSERT INTO f(rowid, text, heading) VALUES (?, ?, ?)", [(i, t, h) for i, (t, h) in enumerate(chunks)]
    )
    match = " OR ".join('"' + k + '"' for k in keys)
    rows = db.execute("SELECT rowid, bm25(f, 1.0, 0.5) AS r FROM f WHERE f MATCH ? ORDER BY r, rowid", (match,))
    return [(int(r[0]), float(r[1])) for r in rows]


def insert_chunks(conn: Any, schema: str, chunks: Sequence[tuple[str, str | None]]) -> list[int]:
    """``chunks`` (text, heading) as agent a1's generation 1 of memory/x.md, line after line, with their postings."""
    with conn.transaction(), conn.cursor() as cur:
        ids = []
        for i, (text, heading) in enumerate(chunks):
            cur.execute(
                f"INSERT INTO {schema}.chunks (agent_id, gen, path, source, start_line, end_line, hash, embed_hash, "
                "heading, text, tokens) VALUES ('a1', 1, 'memory/x.md', 'memory', %s, %s, 'h', 'e', %s, %s, 0) "
                "RETURNING id",
                (i + 1, i + 1, heading, text),
            )
            ids.append(int(cur.fetchone()[0]))
        keyword.add_postings(cur, schema, "a1", 1, [(cid, t, h) for cid, (t, h) in zip(ids, chunks, strict=True)])
    return ids


@pytest.mark.parametrize(
    "keys",
    [
        ["nimbus 14"],
        ["nimbus", "nimbus 14", "14"],
        ["10 10 1 1", "1 1"],
        ["a a", "a"],
        ["runs build", "build server"],
        ["naive resume", "cafe"],
        ["14 nimbus"],
    ],
)
def test_postgres_phrase_bm25_equals_fts5(pg: tuple[Any, str], keys: list[str]) -> None:
    conn, schema = pg
    chunks = PHRASE_TEXTS * 3
    ids = insert_chunks(conn, schema, chunks)
    by_key = dict(zip(keys, keyword_terms_of(keys), strict=True))
    terms = [ts[0] for ts in by_key.values() if len(ts) == 1]
    phrases = [ts for ts in by_key.values() if len(ts) > 1]
    with conn.cursor() as cur:
        got = keyword.bm25(cur, schema, "a1", 1, terms, 100, phrases=phrases)
    expected = fts5_phrase_bm25(chunks, keys)
    assert expected
    position = {cid: i for i, cid in enumerate(ids)}
    assert [position[cid] for cid, _, _ in got] == [rid for rid, _ in expected]
    assert [r for _, r, _ in got] == pytest.approx([r for _, r in expected], rel=1e-9, abs=1e-12)


def keyword_terms_of(keys: list[str]) -> list[list[str]]:
    from mdmem.store.terms import text_terms

    return text_terms(keys)


# -- the pack's lines and the snippets see the identifier too ------------------------------------------------
@pytest.mark.parametrize(
    ("line", "held"),
    [
        ("- [09:10] Nimbus-14 switched to Bazel", {"nimbus", "14", "nimbus 14"}),
        ("- [14:35] Nimbus-9 switched to Gradle", {"nimbus", "14"}),
        ("NIMBUS 14 and nimbus.14", {"nimbus", "14", "nimbus 14"}),
        ("nimbus-140 and xnimbus-14", {"nimbus", "14"}),
        ("14 nimbus", {"nimbus", "14"}),
    ],
)
def test_a_pack_line_holds_the_phrase_only_where_the_parts_stand_together(line: str, held: set[str]) -> None:
    from mdmem.pack.trim import TermMatcher

    assert TermMatcher(["nimbus", "14", "nimbus 14"]).held(line) == held


def test_a_snippet_centres_on_the_identifier() -> None:
    from mdmem.search.snippets import make_snippet

    filler = [f"- [14:{m:02d}] Nimbus-{m + 20} reviewed the queue and the flaky tests again" for m in range(40)]
    text = "\n".join(filler[:30] + ["- [09:10] Nimbus-14 switched its builds to Bazel"] + filler[30:])
    assert "Nimbus-14 switched" in make_snippet(text, ["nimbus", "14", "nimbus 14"], limit=300)


PROJECTS_LOG = "# 2025-03-08\n\n" + "".join(
    f"- [14:{i:02d}] Nimbus-{n} project switched its builds to {tool}.\n"
    for i, (n, tool) in enumerate(
        [(9, "Gradle"), (20, "Buck"), (3, "Pants"), (14, "Bazel"), (7, "Make"), (11, "Ninja")]
    )
)


@pytest.mark.parametrize("store_backend", ["sqlite", "postgres"], indirect=True)
def test_the_pack_keeps_the_identifier_line(workspace: Any, make_memory: Any) -> None:
    (workspace / "memory" / "2025-03-08.md").write_text(PROJECTS_LOG)
    mem = make_memory(provider="none")
    mem.sync()
    query = "What does the Nimbus-14 project use for builds now?"
    items = mem.pack(query, budget_tokens=80)["items"]
    assert items and "Nimbus-14 project switched its builds to Bazel" in items[0]["text"]
    assert "Nimbus-9 " not in items[0]["text"]  # one chunk of six such lines: trimmed to the identifier's
    hit = mem.search(query, max_results=3, min_score=0)["results"][0]
    assert "Nimbus-14" in hit["snippet"]


def test_an_index_written_before_positions_answers_without_phrases_until_rebuilt(pg: tuple[Any, str]) -> None:
    """Postings of a generation written before migration 10 have no positions: a phrase finds nothing there
    (the parts still do), rather than failing; the index identity makes the next sync rebuild it."""
    conn, schema = pg
    chunks = [("Nimbus-14 builds with Bazel", None), ("Nimbus-9 at 14:05", None)]
    ids = insert_chunks(conn, schema, chunks)
    with conn.cursor() as cur:
        assert keyword.phrase_frequency(cur, schema, "a1", 1, ["nimbu", "14"], 10) == 1
        assert keyword.phrase_frequency(cur, schema, "a1", 1, ["nimbu"], 10) == 2  # a phrase of one term
        cur.execute(f"UPDATE {schema}.postings SET positions = NULL")
        assert keyword.phrase_frequency(cur, schema, "a1", 1, ["nimbu", "14"], 10) == 0
        found = keyword.bm25(cur, schema, "a1", 1, ["nimbu", "14"], 10, phrases=[["nimbu", "14"]])
    assert sorted(cid for cid, _, _ in found) == sorted(ids)
    assert all("nimbu 14" not in held for _, _, held in found)
    conn.rollback()


@pytest.mark.parametrize(
    ("line", "count"),
    [
        ("- [09:10] Nimbus-14 switched its builds to Bazel", 3),
        ("- [14:05] Nimbus-9 switched its builds to Gradle", 1),  # nimbus and 14, but not Nimbus-14
        ("- nimbus 14 builds", 3),
        ("- Nimbus-140 builds", 1),
        ("- Priya lives in Lisbon", 0),
    ],
)
def test_a_line_mentions_an_identifier_only_where_it_writes_it(line: str, count: int) -> None:
    from mdmem.search.truth import mentions

    assert mentions("Nimbus-14 builds", line) == count


class RecordingStore(Store):
    """A real SQLite store that remembers the terms each keyword query asked for."""

    def __init__(self, path: Any) -> None:
        super().__init__(path)
        self.asked: list[list[str]] = []

    def keyword_matches(self, terms: Any, k: int) -> list[tuple[int, float, set[str]]]:
        self.asked.append(list(terms))
        return super().keyword_matches(terms, k)


def test_the_store_is_asked_for_the_same_terms_as_before_unless_the_query_holds_an_identifier(tmp_path: Any) -> None:
    from mdmem.search.hybrid import _prune_common

    store = RecordingStore(tmp_path / "index.sqlite")
    write(store, project_notes())
    try:
        for query in ["which tools did the team review", "Bazel or Gradle builds", "tickets reviewed 14 nimbus"]:
            keyword_search(store, query)
            assert store.asked[-1] == _prune_common(store, keyword_terms(query_terms(query)))
        keyword_search(store, "what does Nimbus-14 build with")
        assert store.asked[-1][-1] == "nimbus 14"
    finally:
        store.close()
