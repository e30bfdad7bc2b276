"""Indexing the retained entries and tombstones the database holds for an agent's session files.

A ``mdmem serve`` replica that does not hold an agent's files commits what it retains and forgets to the
database (``mdmem.store.api.EntryLog``); the agent's host writes them into ``sessions/*.md`` later
(mdmem.engine.drain). Until it has, each session day file is indexed as ``mdmem.files.sessionview.view`` of
it: by that host's syncs from the file on disk (``Indexer._update``: ``viewed``, then ``index_entries`` for
the day files that did not change on disk), and by a replica from the file's text as the index holds it
(mdmem.index.replica ``sync_entries``), both under the agent's writer lock. A file indexed as a view
differs from the file, so its row gets ``VIRTUAL_SIZE``: the host reads the file again at its next sync, and
once the database's entries are all in it (and its tombstones applied) the index holds the file itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from mdmem.config.load import MemorySearchConfig
from mdmem.files.pending import PendingEntry
from mdmem.files.sessionblocks import closing
from mdmem.files.sessionview import day_of, day_path, view
from mdmem.files.workspace import Workspace
from mdmem.index.embedding import sha256
from mdmem.index.report import SyncReport
from mdmem.store import FileRow
from mdmem.store.api import IndexStore
from mdmem.store.lines import VIRTUAL_SIZE, file_text
from mdmem.util.fileread import read_text

MAX_PENDING = 10_000  # pending entries one sync indexes (the rest at the next; a drained host has none)


class EntryWriter(Protocol):
    """What indexing the entries needs of an indexer (mdmem.index.indexer.Indexer)."""

    @property
    def store(self) -> IndexStore: ...

    @property
    def workspace(self) -> Workspace: ...

    @property
    def settings(self) -> MemorySearchConfig: ...

    def write_text(self, file_row: FileRow, text: str, report: SyncReport) -> None: ...


@dataclass(frozen=True)
class Snapshot:
    """The database's entries not in the files yet and its tombstones not applied to them yet."""

    pending: Sequence[PendingEntry] = ()
    forgotten: frozenset[str] = field(default_factory=frozenset)

    def __bool__(self) -> bool:
        return bool(self.pending or self.forgotten)


def snapshot(store: IndexStore, workspace: Workspace | None = None) -> Snapshot:
    """Read under the writer lock, so that no sync indexes a file without what was committed before it; empty
    for a ``workspace`` whose sync does not manage the session files (mdmem.files.workspace: sources)."""
    log = store.entry_log()
    if log is None or (workspace is not None and "sessions" not in workspace.sources):
        return Snapshot()
    return Snapshot(tuple(log.pending(MAX_PENDING)), frozenset(t.entry_id for t in log.unapplied()))


def viewed(entries: Snapshot, rel: str, text: str) -> str:
    """The text to index for the file ``rel`` whose content is ``text``."""
    if not entries or not rel.startswith("sessions/"):
        return text
    return view(text, day_of(rel), entries.pending, entries.forgotten)


def kept(entries: Snapshot) -> set[str]:
    """Day files the index keeps though they are not on disk: the database has entries for them."""
    return {day_path(e.day) for e in entries.pending}


def index_entries(indexer: EntryWriter, entries: Snapshot, report: SyncReport, *, files_here: bool) -> None:
    """Index the view of every session file the snapshot changes, unless the index holds it already.

    ``files_here``: the base is the file on disk (a day file not on disk yet: empty); else the file's text
    as the index holds it (mdmem.store.lines)."""
    store = indexer.store
    if files_here and any(r.kind in ("workspace", "sessions") for r in indexer.workspace.missing_roots()):
        files_here = False  # an unmounted volume, a sessions/ folder not made yet: build on the index's copy
    paths = {day_path(e.day) for e in entries.pending}
    if entries.forgotten:
        paths |= set(store.paths_with_text([closing(i) for i in sorted(entries.forgotten)], "sessions"))
    indexed = store.files()
    for rel in sorted(paths):
        row = indexed.get(rel)
        base = _on_disk(indexer, rel) if files_here else None
        if base is None:
            base = file_text(store.chunks_of(rel)) if row is not None and not files_here else ""
        new = view(base, day_of(rel), entries.pending, entries.forgotten)
        if new == base and (files_here or row is not None):
            continue  # nothing of the database's is missing from it
        if row is not None and row.hash == sha256(new):
            continue  # indexed as this view already (by another writer)
        if len(new.encode("utf-8")) > indexer.settings.max_file_bytes:
            report.skipped.append({"path": rel, "reason": "over maxFileBytes with the retained entries"})
            continue
        indexer.write_text(FileRow(rel, "sessions", sha256(new), 0.0, VIRTUAL_SIZE), new, report)


def _on_disk(indexer: EntryWriter, rel: str) -> str | None:
    path = Path(indexer.workspace.root) / rel
    try:
        text, _, _ = read_text(path)
    except FileNotFoundError:
        return None
    return text
