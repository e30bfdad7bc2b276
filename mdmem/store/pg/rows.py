"""A file's chunks written in bulk: ids drawn from the sequence at once, then chunks, postings and trigrams
each by one COPY, inside the caller's transaction (``PgStore.replace_file``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mdmem.store.pg import keyword
from mdmem.store.rows import ChunkRow, FileRow


def insert_chunks(
    cur: Any, schema: str, agent_id: str, gen: int, file: FileRow, chunks: Sequence[ChunkRow], pending: Sequence[bool]
) -> list[int]:
    """Insert ``chunks`` of ``file`` (``pending[i]``: chunk i waits for its vectors) with their keyword
    postings; returns their ids, in order."""
    if not chunks:
        return []
    cur.execute(
        f"SELECT nextval(pg_get_serial_sequence('{schema}.chunks', 'id')) FROM generate_series(1, %s)", (len(chunks),)
    )
    ids = sorted(int(r[0]) for r in cur.fetchall())
    rows = keyword.postings_for(agent_id, gen, [(cid, c.text, c.heading) for cid, c in zip(ids, chunks, strict=True)])
    with cur.copy(
        f"COPY {schema}.chunks (id, agent_id, gen, path, source, start_line, end_line, hash, embed_hash, heading, "
        "text, tokens, trigrams, pending, term_keys, term_freqs) FROM STDIN"
    ) as copy:
        for cid, c, (tokens, trigrams), waits, (keys, freqs) in zip(
            ids, chunks, rows.lengths, pending, rows.keys, strict=True
        ):
            copy.write_row(
                (
                    cid,
                    agent_id,
                    gen,
                    file.path,
                    file.source,
                    c.start_line,
                    c.end_line,
                    c.hash,
                    c.embed_hash,
                    c.heading or None,
                    c.text,
                    tokens,
                    trigrams,
                    waits,
                    keys,
                    freqs,
                )
            )
    keyword.write_postings(cur, schema, agent_id, gen, rows)
    return ids
