"""A replica's sync of an agent whose files it does not hold (``mdmem serve`` with the files on another
host): the session files' views (mdmem.index.entries) from the index's own copy of their text."""

from __future__ import annotations

import time

from mdmem.index.entries import index_entries, snapshot
from mdmem.index.identity import identity_change
from mdmem.index.indexer import Indexer
from mdmem.index.report import SyncReport


def sync_entries(indexer: Indexer, wait: float, embed: bool = True) -> SyncReport:
    """A replica's sync of an agent whose files it does not hold: the session files' views, under the
    writer lock, from the index's own copy of their text; then their embeddings, as any sync embeds."""
    started = time.monotonic()
    store = indexer.store
    report = SyncReport()
    with store.writing(wait):
        store.refresh()
        stored = store.get_meta("identity")
        if stored is not None and not indexer.identity_matches():
            report.errors.append(
                {
                    "path": "sessions/",
                    "error": f"{identity_change(stored, indexer.identity())}: retained entries are not "
                    "indexed here; the agent's host indexes them when it writes them into its files",
                }
            )
            return report
        entries = snapshot(store, indexer.workspace)
        if entries:
            index_entries(indexer, entries, report, files_here=False)
        if stored is None and report.indexed:
            store.set_meta("identity", indexer.known_identity())
    indexer.embed_pending(report, embed)
    report.pending = store.pending_count()
    report.seconds = round(time.monotonic() - started, 3)
    return report
