"""Numbered migrations of the shared PostgreSQL schema (``store.schema``, default ``mdmemory``).

Every agent lives in the same tables, its rows keyed by ``agent_id`` and by the index ``gen``eration they
belong to (a rebuild writes a new generation and switches it live in one transaction). Rows with an agent
id rather than a schema per agent: hundreds of agents would otherwise mean hundreds of copies of every
table and index in the catalog, and one migration per agent. Vector search stays exact to an agent with a
partial HNSW index per (agent, generation, dimensions) instead of filtering a global one (pgvector 0.6
returns fewer than k rows when a filter drops most of an index's nearest neighbours).

Keyword search keeps its own postings of FTS5's terms (``mdmem.store.terms``), and of the character
trigrams of CJK runs, so that BM25 is computed exactly as SQLite's FTS5 does (``mdmem.store.pg.keyword``).

Migrations run under a transaction-level advisory lock: several processes opening a new database at once
apply each one exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mdmem.config.store import schema_problem
from mdmem.store.pg.keyword import HEADING_WEIGHT, TEXT_WEIGHT
from mdmem.store.pg.termkeys import key_sql
from mdmem.util.errors import StoreError

SCHEMA_VERSION = 12
MIGRATION_LOCK = 0x6D646D656D  # "mdmem": the advisory lock key of schema migrations


def check_schema_name(name: str) -> str:
    """``name`` when mdmem may use it as its schema (``storeconfig.schema_problem``), else StoreError."""
    problem = schema_problem(name)
    if problem is not None:
        raise StoreError(f"store.schema: {problem}", kind="config")
    return name


def _m1_initial(cur: Any, s: str) -> None:
    for statement in (
        "CREATE EXTENSION IF NOT EXISTS vector",
        f"""CREATE TABLE {s}.generations (
            agent_id text NOT NULL, gen bigint NOT NULL, state text NOT NULL, identity jsonb,
            created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (agent_id, gen))""",
        f"""CREATE TABLE {s}.meta (
            agent_id text NOT NULL, gen bigint NOT NULL, key text NOT NULL, value jsonb NOT NULL,
            PRIMARY KEY (agent_id, gen, key))""",
        f"""CREATE TABLE {s}.files (
            agent_id text NOT NULL, gen bigint NOT NULL, path text NOT NULL, source text NOT NULL,
            hash text NOT NULL, mtime double precision NOT NULL, size bigint NOT NULL,
            PRIMARY KEY (agent_id, gen, path))""",
        f"""CREATE TABLE {s}.chunks (
            id bigserial PRIMARY KEY, agent_id text NOT NULL, gen bigint NOT NULL, path text NOT NULL,
            source text NOT NULL, start_line integer NOT NULL, end_line integer NOT NULL, hash text NOT NULL,
            embed_hash text NOT NULL, heading text, text text NOT NULL, tokens integer NOT NULL,
            trigrams integer NOT NULL DEFAULT 0, pending boolean NOT NULL DEFAULT false)""",
        f"CREATE INDEX chunks_file ON {s}.chunks (agent_id, gen, path)",
        f"CREATE INDEX chunks_pending ON {s}.chunks (agent_id, gen, id) WHERE pending",
        f"""CREATE TABLE {s}.token_totals (
            agent_id text NOT NULL, gen bigint NOT NULL, chunks bigint NOT NULL, tokens bigint NOT NULL,
            trigrams bigint NOT NULL DEFAULT 0, version bigint NOT NULL DEFAULT 0, PRIMARY KEY (agent_id, gen))""",
        f"""CREATE TABLE {s}.grams (
            agent_id text NOT NULL, gen bigint NOT NULL, gram text NOT NULL, chunk_id bigint NOT NULL
            REFERENCES {s}.chunks (id) ON DELETE CASCADE, tf integer NOT NULL,
            PRIMARY KEY (agent_id, gen, gram, chunk_id))""",
        f"CREATE INDEX grams_chunk ON {s}.grams (chunk_id)",
        f"""CREATE TABLE {s}.postings (
            agent_id text NOT NULL, gen bigint NOT NULL, term text NOT NULL, chunk_id bigint NOT NULL
            REFERENCES {s}.chunks (id) ON DELETE CASCADE, in_text integer NOT NULL, in_heading integer NOT NULL,
            PRIMARY KEY (agent_id, gen, term, chunk_id))""",
        f"CREATE INDEX postings_chunk ON {s}.postings (chunk_id)",
        f"""CREATE TABLE {s}.vectors (
            id bigserial PRIMARY KEY, agent_id text NOT NULL, gen bigint NOT NULL, chunk_id bigint NOT NULL
            REFERENCES {s}.chunks (id) ON DELETE CASCADE, hash text NOT NULL, dims integer NOT NULL,
            embedding vector NOT NULL)""",
        f"CREATE INDEX vectors_chunk ON {s}.vectors (chunk_id)",
        f"""CREATE TABLE {s}.embedding_cache (
            provider_key text NOT NULL, hash text NOT NULL, dims integer NOT NULL, embedding vector NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (provider_key, hash))""",
    ):
        cur.execute(statement)


def _m2_sync_state(cur: Any, s: str) -> None:
    """What the indexer and status need besides search: when a generation was retired (it is kept a while for
    the searches still reading it), a file's encoding errors and indexing time, a hash
    lookup of stored vectors (reused after a rename), and the embedding cache per agent with the provider
    and model beside the provider key, as in SQLite (no version before this one wrote to the cache)."""
    for statement in (
        f"ALTER TABLE {s}.generations ADD COLUMN retired_at double precision",
        f"ALTER TABLE {s}.files ADD COLUMN encoding_errors integer NOT NULL DEFAULT 0",
        f"ALTER TABLE {s}.files ADD COLUMN indexed_at double precision NOT NULL DEFAULT 0",
        f"CREATE INDEX vectors_hash ON {s}.vectors (agent_id, gen, hash)",
        f"DROP TABLE {s}.embedding_cache",
        f"""CREATE TABLE {s}.embedding_cache (
            agent_id text NOT NULL, provider text NOT NULL, model text NOT NULL, provider_key text NOT NULL,
            hash text NOT NULL, dims integer NOT NULL, embedding vector NOT NULL, updated_at double precision NOT NULL,
            PRIMARY KEY (agent_id, provider, model, provider_key, hash))""",
        f"CREATE INDEX embedding_cache_age ON {s}.embedding_cache (agent_id, updated_at)",
    ):
        cur.execute(statement)


def _m3_entries(cur: Any, s: str) -> None:
    """Retained entries and tombstones in the database, for ``mdmem serve`` replicas that do not hold an
    agent's files (mdmem.store.pg.entries): an entry retained there waits as ``pending`` (its block kept
    here) until the agent's host writes it into ``sessions/<day>.md`` (``written``: the block is dropped);
    a tombstone waits ``applied = false`` until that host has removed the block from its files. Neither
    belongs to an index generation: a rebuild must not lose them."""
    for statement in (
        f"""CREATE TABLE {s}.entries (
            agent_id text NOT NULL, entry_id text NOT NULL, day text NOT NULL, block text,
            state text NOT NULL CHECK (state IN ('pending', 'written', 'forgotten')), seq bigserial NOT NULL,
            received_at double precision NOT NULL, written_at double precision, PRIMARY KEY (agent_id, entry_id))""",
        f"CREATE INDEX entries_pending ON {s}.entries (agent_id, seq) WHERE state = 'pending'",
        f"CREATE INDEX entries_seq ON {s}.entries (agent_id, seq)",
        f"""CREATE TABLE {s}.tombstones (
            agent_id text NOT NULL, entry_id text NOT NULL, reason text, forgotten_at double precision NOT NULL,
            applied boolean NOT NULL DEFAULT false, seq bigserial NOT NULL, PRIMARY KEY (agent_id, entry_id))""",
        f"CREATE INDEX tombstones_unapplied ON {s}.tombstones (agent_id, seq) WHERE NOT applied",
        f"CREATE INDEX tombstones_seq ON {s}.tombstones (agent_id, seq)",
    ):
        cur.execute(statement)


def _m4_bulk_writes(cur: Any, s: str) -> None:
    """Writes in bulk: postings, trigrams and vectors lose their foreign keys to ``chunks`` (a per-row
    trigger: a fifth of a sync's database time; ``keyword.remove_chunks`` deletes them with their chunks),
    so a file's rows go in by COPY; each generation counts its vectors and the chunks that have them (the
    search reads how many vectors a chunk has from there instead of counting them every time)."""
    for statement in (
        *(f"ALTER TABLE {s}.{t} DROP CONSTRAINT IF EXISTS {t}_chunk_id_fkey" for t in ("postings", "grams", "vectors")),
        f"ALTER TABLE {s}.token_totals ADD COLUMN vectors bigint NOT NULL DEFAULT 0",
        f"ALTER TABLE {s}.token_totals ADD COLUMN vector_chunks bigint NOT NULL DEFAULT 0",
        f"""UPDATE {s}.token_totals t SET vectors = v.n, vector_chunks = v.chunks FROM (SELECT agent_id, gen,
            count(*) AS n, count(DISTINCT chunk_id) AS chunks FROM {s}.vectors GROUP BY agent_id, gen) v
            WHERE t.agent_id = v.agent_id AND t.gen = v.gen""",
    ):
        cur.execute(statement)


def _m5_postings_carry_lengths(cur: Any, s: str) -> None:
    """Each posting carries its chunk's length, and the primary key's index covers what BM25 reads: a
    keyword search is one index-only pass over its terms' postings, with no join with ``chunks`` (at 1M
    chunks, 0.7 s a search with the join)."""
    for statement in (
        f"ALTER TABLE {s}.postings ADD COLUMN tokens integer NOT NULL DEFAULT 0",
        f"UPDATE {s}.postings p SET tokens = c.tokens FROM {s}.chunks c WHERE c.id = p.chunk_id",
        f"ALTER TABLE {s}.postings DROP CONSTRAINT postings_pkey",
        f"ALTER TABLE {s}.postings ADD PRIMARY KEY (agent_id, gen, term, chunk_id) "
        "INCLUDE (in_text, in_heading, tokens)",
    ):
        cur.execute(statement)


def _m6_workspaces(cur: Any, s: str) -> None:
    """Which workspace each agent's index belongs to (mdmem.store.pg.claims): its id, and the host and
    real path that claimed it. An agent indexed before this has none: its next writer claims it."""
    cur.execute(
        f"""CREATE TABLE {s}.workspaces (
            agent_id text PRIMARY KEY, workspace_id text NOT NULL, host text NOT NULL, path text NOT NULL,
            claimed_at double precision NOT NULL)"""
    )


def _m7_pods(cur: Any, s: str) -> None:
    """Which pod each agent serves when no ``agents.list[].pod`` says (mdmem.service.pods): the first pod
    whose request used it, and when. Kept in the database, so that every replica of the service sees it."""
    cur.execute(
        f"CREATE TABLE {s}.pods (agent_id text PRIMARY KEY, pod text NOT NULL, claimed_at double precision NOT NULL)"
    )


def _m8_supersessions(cur: Any, s: str) -> None:
    """Which lines supersede which (mdmem.files.supersession), per generation like the chunks. A generation
    indexed before this has none: the index identity changed with it, so the next sync rebuilds it."""
    cur.execute(
        f"""CREATE TABLE {s}.supersessions (
            agent_id text NOT NULL, gen bigint NOT NULL, path text NOT NULL, line integer NOT NULL,
            old_path text NOT NULL, old_line integer NOT NULL, new_path text NOT NULL, new_line integer NOT NULL,
            date text NOT NULL)"""
    )
    cur.execute(f"CREATE INDEX supersessions_path ON {s}.supersessions (agent_id, gen, path)")
    cur.execute(f"CREATE INDEX supersessions_old ON {s}.supersessions (agent_id, gen, old_path)")
    cur.execute(f"CREATE INDEX supersessions_new ON {s}.supersessions (agent_id, gen, new_path)")


def _m9_links(cur: Any, s: str) -> None:
    """Links between memory files and front-matter aliases (mdmem.files.links), per generation."""
    cur.execute(
        f"""CREATE TABLE {s}.links (
            agent_id text NOT NULL, gen bigint NOT NULL, path text NOT NULL, line integer NOT NULL,
            target text NOT NULL, name text NOT NULL, heading text NOT NULL, kind text NOT NULL)"""
    )
    cur.execute(f"CREATE INDEX links_path ON {s}.links (agent_id, gen, path)")
    cur.execute(f"CREATE INDEX links_target ON {s}.links (agent_id, gen, target)")
    cur.execute(f"CREATE INDEX links_name ON {s}.links (agent_id, gen, name)")


def _m10_positions(cur: Any, s: str) -> None:
    """Each posting keeps its term's token positions in the chunk, for phrases (mdmem.store.pg.keyword), and
    the primary key's index covers them too: a phrase is an index-only pass over its terms' postings (the
    heap holds a chunk's postings together, so a term's are a block each: twice the time). One index rather
    than a second one beside it: measured on 330,000 postings, a second index made writing them 1.8 times
    slower, positions in the primary key's 1.15 times, for an index a quarter larger. A generation indexed
    before this has no positions, so no phrase matches in it: the index identity changed with it, so the
    next sync rebuilds it."""
    for statement in (
        f"ALTER TABLE {s}.postings ADD COLUMN positions integer[]",
        f"ALTER TABLE {s}.postings DROP CONSTRAINT postings_pkey",
        f"ALTER TABLE {s}.postings ADD PRIMARY KEY (agent_id, gen, term, chunk_id) "
        "INCLUDE (in_text, in_heading, tokens, positions)",
    ):
        cur.execute(statement)


def _m11_usage(cur: Any, s: str) -> None:
    """How often each chunk and file was used, by kind (mdmem.store.pg.usage): per agent, not per generation
    (not derived from the files: a rebuild keeps them)."""
    cur.execute(
        f"""CREATE TABLE {s}.usage (
            agent_id text NOT NULL, path text NOT NULL, chunk text NOT NULL, kind text NOT NULL,
            uses bigint NOT NULL, last_used_at double precision NOT NULL, PRIMARY KEY (agent_id, path, chunk, kind))"""
    )


def _m12_term_keys(cur: Any, s: str) -> None:
    """Each chunk's ``term_keys`` (under a GIN index) and ``term_freqs`` (mdmem.store.pg.termkeys), computed
    here from the postings of every generation: the most-terms plan of large generations
    (mdmem.store.pg.mostterms) works at once, no rebuild. A chunk with no postings keeps empty arrays."""
    key = key_sql("p.agent_id", "p.gen", "p.term")
    freq = f"(p.in_text * {TEXT_WEIGHT}::float8 + p.in_heading * {HEADING_WEIGHT}::float8)::real"
    for statement in (
        f"ALTER TABLE {s}.chunks ADD COLUMN term_keys bigint[] NOT NULL DEFAULT '{{}}', "
        "ADD COLUMN term_freqs real[] NOT NULL DEFAULT '{}'",
        f"""UPDATE {s}.chunks c SET term_keys = k.keys, term_freqs = k.freqs FROM (
            SELECT p.chunk_id, array_agg({key} ORDER BY {key}) AS keys, array_agg({freq} ORDER BY {key}) AS freqs
            FROM {s}.postings p GROUP BY p.chunk_id) k WHERE c.id = k.chunk_id""",
        f"CREATE INDEX chunks_term_keys ON {s}.chunks USING gin (term_keys)",
    ):
        cur.execute(statement)


MIGRATIONS: dict[int, Callable[[Any, str], None]] = {
    1: _m1_initial,
    2: _m2_sync_state,
    3: _m3_entries,
    4: _m4_bulk_writes,
    5: _m5_postings_carry_lengths,
    6: _m6_workspaces,
    7: _m7_pods,
    8: _m8_supersessions,
    9: _m9_links,
    10: _m10_positions,
    11: _m11_usage,
    12: _m12_term_keys,
}


_migrated: set[tuple[str, str]] = set()  # (url, schema) this process has brought up to date


def ensure_migrated(conn: Any, url: str, schema: str) -> None:
    """``migrate`` once per process, URL and schema."""
    if (url, schema) not in _migrated:
        migrate(conn, schema)
        _migrated.add((url, schema))


def migrate(conn: Any, schema: str) -> int:
    """Bring ``schema`` to ``SCHEMA_VERSION`` (each migration in its own transaction); returns the version.

    A database whose schema is newer than this mdmem raises ``StoreError(kind="schema")``."""
    s = check_schema_name(schema)
    with conn.transaction(), conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.migrations (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur.execute(f"SELECT coalesce(max(version), 0) FROM {s}.migrations")
        version = int(cur.fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the PostgreSQL schema {s} is at version {version}, newer than this mdmem understands "
                f"({SCHEMA_VERSION}): upgrade mdmem, or point store.schema at another schema",
                kind="schema",
            )
        for number in range(version + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[number](cur, s)
            cur.execute(f"INSERT INTO {s}.migrations (version) VALUES (%s)", (number,))
    return SCHEMA_VERSION
