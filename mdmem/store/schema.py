"""Numbered migrations, applied on open. ``PRAGMA user_version`` holds the schema version."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import sqlean

from mdmem.store.connection import transaction
from mdmem.util.errors import StoreError

FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"  # keyword terms: folded, stemmed (see store/terms.py)

_M1_STATEMENTS = [
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)
    """,
    """
    CREATE TABLE files (
    path TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    hash TEXT NOT NULL,
    mtime REAL NOT NULL,
    size INTEGER NOT NULL,
    encoding_errors INTEGER NOT NULL DEFAULT 0,
    chunks INTEGER NOT NULL DEFAULT 0,
    indexed_at REAL NOT NULL
    )
    """,
    """
    CREATE TABLE chunks (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    source TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    hash TEXT NOT NULL,
    embed_hash TEXT NOT NULL,
    heading TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL
    )
    """,
    """
    CREATE INDEX chunks_path ON chunks(path)
    """,
    """
    CREATE INDEX chunks_embed_hash ON chunks(embed_hash)
    """,
    """
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
    text, heading, content='chunks', content_rowid='id',
    tokenize='unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE VIRTUAL TABLE chunks_trigram USING fts5(
    text, content='chunks', content_rowid='id', tokenize='trigram remove_diacritics 1'
    )
    """,
    """
    CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO chunks_fts(rowid, text, heading) VALUES (new.id, new.text, new.heading);
    INSERT INTO chunks_trigram(rowid, text) VALUES (new.id, new.text);
    END
    """,
    """
    CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text, heading)
    VALUES ('delete', old.id, old.text, old.heading);
    INSERT INTO chunks_trigram(chunks_trigram, rowid, text) VALUES ('delete', old.id, old.text);
    END
    """,
    """
    CREATE TRIGGER chunks_au AFTER UPDATE ON chunks BEGIN
    INSERT INTO chunks_fts(chunks_fts, rowid, text, heading)
    VALUES ('delete', old.id, old.text, old.heading);
    INSERT INTO chunks_trigram(chunks_trigram, rowid, text) VALUES ('delete', old.id, old.text);
    INSERT INTO chunks_fts(rowid, text, heading) VALUES (new.id, new.text, new.heading);
    INSERT INTO chunks_trigram(rowid, text) VALUES (new.id, new.text);
    END
    """,
    """
    CREATE TABLE chunk_vectors (id INTEGER PRIMARY KEY, embedding BLOB NOT NULL)
    """,
    """
    CREATE TABLE embedding_cache (
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    provider_key TEXT NOT NULL,
    hash TEXT NOT NULL,
    dims INTEGER NOT NULL,
    embedding BLOB NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (provider, model, provider_key, hash)
    ) WITHOUT ROWID
    """,
    """
    CREATE INDEX embedding_cache_age ON embedding_cache(updated_at)
    """,
]


def _m1_initial(conn: sqlean.Connection) -> None:
    for statement in _M1_STATEMENTS:
        conn.execute(statement)


def _m2_stemming_and_windows(conn: sqlean.Connection) -> None:
    """Porter stemming for keywords; several vectors per chunk (one per window), keyed by their own id."""
    conn.execute("DROP TABLE chunks_fts")
    conn.execute(
        "CREATE VIRTUAL TABLE chunks_fts USING fts5(text, heading, content='chunks', content_rowid='id', "
        f"tokenize='{FTS_TOKENIZE}')"
    )
    conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
    conn.execute(
        "CREATE TABLE vectors (id INTEGER PRIMARY KEY AUTOINCREMENT, chunk_id INTEGER NOT NULL, "
        "hash TEXT NOT NULL, embedding BLOB NOT NULL)"
    )
    conn.execute("CREATE INDEX vectors_chunk ON vectors(chunk_id)")
    conn.execute("CREATE INDEX vectors_hash ON vectors(hash)")
    conn.execute(
        "INSERT INTO vectors(id, chunk_id, hash, embedding) SELECT v.id, v.id, c.embed_hash, v.embedding "
        "FROM chunk_vectors v JOIN chunks c ON c.id = v.id"
    )
    conn.execute("DROP TABLE chunk_vectors")


def _m3_pending_embeddings(conn: sqlean.Connection) -> None:
    """Chunks written before their vectors: keyword search finds them at once, vectors follow.

    Before this version every chunk of an index with a provider got its vectors in the transaction that
    wrote it; any chunk of such an index still without a vector is marked pending so the next sync embeds it.
    """
    conn.execute("CREATE TABLE pending_embeddings (chunk_id INTEGER PRIMARY KEY)")
    conn.execute(
        "INSERT INTO pending_embeddings(chunk_id) SELECT c.id FROM chunks c "
        "WHERE EXISTS (SELECT 1 FROM meta WHERE key = 'identity' "
        "AND coalesce(json_extract(value, '$.provider'), 'none') != 'none') "
        "AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.chunk_id = c.id)"
    )


def _m4_supersessions(conn: sqlean.Connection) -> None:
    """Which lines supersede which (mdmem.files.supersession), derived from the files like the chunks. An
    index of an older version has none: the index identity changed with it, so the next sync rebuilds it."""
    conn.execute(
        "CREATE TABLE supersessions (path TEXT NOT NULL, line INTEGER NOT NULL, old_path TEXT NOT NULL, "
        "old_line INTEGER NOT NULL, new_path TEXT NOT NULL, new_line INTEGER NOT NULL, date TEXT NOT NULL)"
    )
    conn.execute("CREATE INDEX supersessions_path ON supersessions(path)")
    conn.execute("CREATE INDEX supersessions_old ON supersessions(old_path)")
    conn.execute("CREATE INDEX supersessions_new ON supersessions(new_path)")


def _m5_links(conn: sqlean.Connection) -> None:
    """Links between memory files and front-matter aliases (mdmem.files.links), derived like the chunks."""
    conn.execute(
        "CREATE TABLE links (path TEXT NOT NULL, line INTEGER NOT NULL, target TEXT NOT NULL, name TEXT NOT NULL, "
        "heading TEXT NOT NULL, kind TEXT NOT NULL)"
    )
    conn.execute("CREATE INDEX links_path ON links(path)")
    conn.execute("CREATE INDEX links_target ON links(target)")
    conn.execute("CREATE INDEX links_name ON links(name)")


def _m6_usage(conn: sqlean.Connection) -> None:
    """How often each chunk and file was used, by kind (mdmem.store.usage): not derived from the files, so a
    rebuild copies it over; an index of an older version starts with none."""
    conn.execute(
        "CREATE TABLE usage (path TEXT NOT NULL, chunk TEXT NOT NULL, kind TEXT NOT NULL, uses INTEGER NOT NULL, "
        "last_used_at REAL NOT NULL, PRIMARY KEY (path, chunk, kind)) WITHOUT ROWID"
    )


MIGRATIONS: list[Callable[[sqlean.Connection], None]] = [
    _m1_initial,
    _m2_stemming_and_windows,
    _m3_pending_embeddings,
    _m4_supersessions,
    _m5_links,
    _m6_usage,
]
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(conn: sqlean.Connection) -> int:
    """Apply every migration newer than the database's ``user_version``; returns the final version.

    Each migration runs in its own transaction together with its version bump, so a crash leaves the
    database at a whole version.
    """
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        from mdmem.util.errors import StoreError

        raise StoreError(
            f"index schema version {version} is newer than this mdmem ({SCHEMA_VERSION}); upgrade mdmem "
            "or delete the index file to rebuild it"
        )
    for number in range(version, SCHEMA_VERSION):
        with transaction(conn):
            # Re-check under the write lock: another process may have migrated meanwhile.
            if conn.execute("PRAGMA user_version").fetchone()[0] > number:
                continue
            MIGRATIONS[number](conn)
            conn.execute(f"PRAGMA user_version = {number + 1}")
    return SCHEMA_VERSION


def check_ours(conn: sqlean.Connection, path: Path) -> None:
    """Refuse to add our tables to a database that is not an mdmem index (a foreign file or WAL)."""
    if int(conn.execute("PRAGMA user_version").fetchone()[0]) != 0:
        return
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' LIMIT 5")]
    # read again: another connection may have created the index between the two reads (its first migration
    # commits the tables and the version together)
    if names and int(conn.execute("PRAGMA user_version").fetchone()[0]) == 0:
        raise StoreError(
            f"{path} is not an mdmem index (no schema version, tables {', '.join(names)}): if it is a damaged "
            "index, run `mdmem index --force` to move it aside and rebuild it from the memory files; "
            "otherwise set memorySearch.store.path to a new file",
            kind="foreign",
        )


def check_readable_schema(conn: sqlean.Connection, path: Path, why: str | None) -> None:
    """A read-only index must already be at this version's schema: migrations need to write."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version == SCHEMA_VERSION:
        return
    because = f": {why}" if why else ""
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"the index {path} has schema version {version}, newer than this mdmem ({SCHEMA_VERSION}): upgrade mdmem",
            kind="schema",
        )
    raise StoreError(
        f"the index {path} has schema version {version} and this mdmem needs {SCHEMA_VERSION}, but it cannot be "
        f"upgraded while it is read-only{because}; make it writable once (any `mdmem index` upgrades it), or "
        "set memorySearch.store.path to a writable place",
        kind="schema",
    )
