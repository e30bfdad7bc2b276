"""Copying an agent's index between SQLite and PostgreSQL, vectors included (nothing is embedded again)."""

from __future__ import annotations

from typing import Any

from mdmemory.store.index import Store
from mdmemory.store.pg.store import PgStore


def copy_to_postgres(source: Store, target: PgStore) -> dict[str, Any]:
    """Write every file of the SQLite index ``source`` into a new generation of ``target`` and switch it
    live in one transaction (readers of ``target`` see the old index until then). A chunk still waiting
    for its vectors stays pending. Returns ``{files, chunks, vectors}``."""
    counts = {"files": 0, "chunks": 0, "vectors": 0}
    with target.writer():
        gen = target.begin_generation(source.get_meta("identity"))
        has_vectors = source.vec_dims() is not None
        for path, row in sorted(source.files().items()):
            chunks = source.chunks_of(path)
            stored = source.chunk_vectors([c.id for c in chunks if c.id is not None]) if has_vectors else {}
            vecs = [stored.get(c.id) for c in chunks if c.id is not None] if has_vectors else None
            target.replace_file(row, chunks, vecs, gen=gen)
            counts["files"] += 1
            counts["chunks"] += len(chunks)
            counts["vectors"] += sum(len(v[0]) for v in stored.values())
        for key in ("identity", "vec_dims"):
            value = source.get_meta(key)
            if value is not None:
                target.set_meta(key, value, gen=gen)
        target.switch_live(gen)
    target.analyze()
    return counts
