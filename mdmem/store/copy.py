"""Copying an agent's index from one store to another (SQLite to PostgreSQL or back), nothing embedded again.

The copy is written as a rebuild of the target (``IndexStore.begin_rebuild``): beside its live index,
then switched in at once, so the target's readers see its old index until the copy is complete, and a
copy that fails or is killed leaves the target as it was. Every file's chunks are copied with their
vectors (whole chunk and windows); a chunk still waiting for its vectors stays pending; the embedding
cache, the use counts and the index's identity (provider, model, chunking) come along, so the copy is used as is. The
supersessions and links are derived again from the copied lines (mdmem.files).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mdmem.files.links import parse_links
from mdmem.files.supersession import parse_supersessions
from mdmem.store.lines import file_text

if TYPE_CHECKING:
    from mdmem.store.api import IndexStore

COPIED_META = ("identity", "lastSync", "fallback")
PENDING_PAGE = 1000


def copy_index(source: IndexStore, target: IndexStore, *, wait: float = 60.0) -> dict[str, int]:
    """Replace ``target``'s index by a copy of ``source``'s, holding both writer locks (so no sync changes
    the source mid-copy; each waited for at most ``wait`` seconds). Returns ``{files, chunks, vectors,
    pending, cacheEntries}`` copied."""
    counts = dict.fromkeys(("files", "chunks", "vectors", "pending", "cacheEntries"), 0)
    with source.writing(wait), target.writing(wait):
        source.refresh()
        pending = _pending_ids(source)
        has_vectors = source.vec_dims() is not None or bool(pending)
        target.tidy()
        built = target.begin_rebuild()
        try:
            for path, row in sorted(source.files().items()):
                chunks = source.chunks_of(path)
                stored = source.chunk_vectors([c.id for c in chunks if c.id is not None]) if has_vectors else {}
                vectors = [stored.get(c.id) if c.id is not None else None for c in chunks] if has_vectors else None
                text = file_text(chunks)
                built.replace_file(row, chunks, vectors, parse_supersessions(text, path), parse_links(text, path))
                counts["files"] += 1
                counts["chunks"] += len(chunks)
                counts["vectors"] += sum(len(v[0]) for v in stored.values())
                counts["pending"] += sum(1 for c in chunks if c.id in pending)
            for group, items in source.cache_entries():
                built.cache_put(*group, items)
                counts["cacheEntries"] += len(items)
            built.add_usage(source.usage_rows(), replace=True)  # the source's counts, not added to older ones
            for key in COPIED_META:
                value = source.get_meta(key)
                if value is not None:
                    built.set_meta(key, value)
        except BaseException:
            target.abandon_rebuild(built)
            raise
        target.finish_rebuild(built)
    return counts


def _pending_ids(store: IndexStore) -> set[int]:
    found: set[int] = set()
    after = 0
    while page := store.pending_chunks(PENDING_PAGE, after):
        found.update(c.id for c in page if c.id is not None)
        after = max(found)
    return found
