"""The agent's meta values and its files' rows on PostgreSQL: a part of ``PgStore``. A file's chunks, keyword
postings, vectors, supersessions, links and file row are replaced or deleted together, in one transaction."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from typing import Any

from mdmem.files.links import Link
from mdmem.files.supersession import Supersession
from mdmem.store.pg import keyword, rows
from mdmem.store.pg import links as link_sql
from mdmem.store.pg import supersessions as supersession_sql
from mdmem.store.pg import vectors as vector_sql
from mdmem.store.pg.connection import borrows
from mdmem.store.pg.view import PgIndexView
from mdmem.store.rows import ChunkRow, ChunkVectors, FileRow
from mdmem.util.errors import StoreError


class PgFiles:
    """Meta values and files' rows of the generation ``view`` reads and writes (or of ``gen``)."""

    def __init__(self, view: PgIndexView) -> None:
        self.view = view

    def session(self) -> contextlib.AbstractContextManager[Any]:
        return self.view.session()

    @borrows
    def get_meta(self, key: str, default: Any = None, gen: int | None = None) -> Any:
        row = self.view.conn.execute(
            f"SELECT value FROM {self.view.schema}.meta WHERE agent_id = %s AND gen = %s AND key = %s",
            (self.view.agent_id, self.view.gen if gen is None else gen, key),
        ).fetchone()
        return row[0] if row else default

    @borrows
    def set_meta(self, key: str, value: Any, gen: int | None = None) -> None:
        with self.view.conn.transaction():
            self.view.conn.execute(
                f"INSERT INTO {self.view.schema}.meta (agent_id, gen, key, value) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (agent_id, gen, key) DO UPDATE SET value = EXCLUDED.value",
                (self.view.agent_id, self.view.gen if gen is None else gen, key, json.dumps(value)),
            )

    @borrows
    def files(self, gen: int | None = None) -> dict[str, FileRow]:
        rows = self.view.conn.execute(
            f"SELECT f.path, f.source, f.hash, f.mtime, f.size, f.encoding_errors, (SELECT count(*) FROM "
            f"{self.view.schema}.chunks c WHERE c.agent_id = f.agent_id AND c.gen = f.gen AND c.path = f.path), "
            f"f.indexed_at FROM {self.view.schema}.files f WHERE f.agent_id = %s AND f.gen = %s",
            (self.view.agent_id, self.view.gen if gen is None else gen),
        ).fetchall()
        return {
            r[0]: FileRow(r[0], r[1], r[2], float(r[3]), int(r[4]), int(r[5]), int(r[6]), float(r[7])) for r in rows
        }

    @borrows
    def replace_file(
        self,
        file: FileRow,
        chunks: Sequence[ChunkRow],
        vectors: Sequence[ChunkVectors | None] | None,
        supersessions: Sequence[Supersession] = (),
        links: Sequence[Link] = (),
        gen: int | None = None,
    ) -> list[int]:
        """Replace every row of ``file.path`` with ``chunks`` (and their vectors: see the SQLite store's
        ``replace_file``; None for a chunk marks it pending) in one transaction. Returns the chunk ids."""
        if vectors is not None and len(vectors) != len(chunks):
            raise StoreError(f"{file.path}: vectors for {len(vectors)} chunks, but {len(chunks)} chunks")
        s, a, g = self.view.schema, self.view.agent_id, self.view.gen if gen is None else gen
        with self.view.conn.transaction(), self.view.conn.cursor() as cur:
            self._delete_rows(cur, file.path, g)
            pending = [vectors is not None and vectors[i] is None for i in range(len(chunks))]
            ids = rows.insert_chunks(cur, s, a, g, file, chunks, pending)
            supersession_sql.add(cur, s, a, g, file.path, supersessions)
            link_sql.add(cur, s, a, g, file.path, links)
            if vectors is not None:
                stored = [
                    (cid, digest, row)
                    for cid, cv in zip(ids, vectors, strict=True)
                    if cv is not None
                    for digest, row in zip(cv[0], cv[1], strict=True)
                ]
                vector_sql.add_vectors(cur, s, a, g, stored)
            cur.execute(
                f"INSERT INTO {s}.files (agent_id, gen, path, source, hash, mtime, size, encoding_errors, indexed_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (agent_id, gen, path) DO UPDATE SET "
                "source = EXCLUDED.source, hash = EXCLUDED.hash, mtime = EXCLUDED.mtime, size = EXCLUDED.size, "
                "encoding_errors = EXCLUDED.encoding_errors, indexed_at = EXCLUDED.indexed_at",
                (a, g, file.path, file.source, file.hash, file.mtime, file.size, file.encoding_errors, time.time()),
            )
        self.view.remembered = None
        return ids

    @borrows
    def delete_file(self, path: str, gen: int | None = None) -> None:
        """Remove a file and every row derived from it, in one transaction."""
        g = self.view.gen if gen is None else gen
        with self.view.conn.transaction(), self.view.conn.cursor() as cur:
            self._delete_rows(cur, path, g)
            cur.execute(
                f"DELETE FROM {self.view.schema}.files WHERE agent_id = %s AND gen = %s AND path = %s",
                (self.view.agent_id, g, path),
            )
        self.view.remembered = None

    def _delete_rows(self, cur: Any, path: str, gen: int) -> None:
        cur.execute(
            f"SELECT id FROM {self.view.schema}.chunks WHERE agent_id = %s AND gen = %s AND path = %s",
            (self.view.agent_id, gen, path),
        )
        keyword.remove_chunks(cur, self.view.schema, self.view.agent_id, gen, [int(r[0]) for r in cur.fetchall()])
        supersession_sql.delete(cur, self.view.schema, self.view.agent_id, gen, path)
        link_sql.delete(cur, self.view.schema, self.view.agent_id, gen, path)
