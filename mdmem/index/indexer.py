"""Sync: read memory files, chunk, diff by hash, write each file in one transaction, then embed what is new."""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mdmem.config.load import MemorySearchConfig
from mdmem.files import roots, transcripts
from mdmem.files.links import parse_links
from mdmem.files.supersession import parse_supersessions
from mdmem.files.workspace import MemoryFile, Workspace
from mdmem.index import entries as entryindex
from mdmem.index.chunker import chunk_markdown
from mdmem.index.embedding import ChunkEmbedder, embedding_input, embedding_inputs, sha256
from mdmem.index.late import late_identity, late_setup, settle_late
from mdmem.index.report import SyncReport
from mdmem.providers.base import EmbeddingProvider
from mdmem.store import ChunkRow, FileRow
from mdmem.store.api import IndexStore
from mdmem.store.lines import VIRTUAL_SIZE
from mdmem.store.rows import uses_since
from mdmem.util.errors import ProviderError, StoreError, SyncCancelled
from mdmem.util.fileread import read_text
from mdmem.util.tokens import estimate_tokens

__all__ = ["Indexer", "SyncReport", "embedding_input", "embedding_inputs", "is_utf8", "printable", "sha256"]

# 3: supersessions are indexed (mdmem.files.supersession); 4: links (files.links); 5: PostgreSQL postings keep
# token positions (identifier phrases, mdmem.store.pg.keyword)
SCHEMA_IDENTITY = 5
CHUNKER_VERSION = 1
Progress = Callable[[int, int, str], None]


def is_utf8(name: str) -> bool:
    """False for a file name with undecodable bytes (Python keeps them as lone surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(name: str) -> str:
    """A file name safe to show and store: undecodable bytes become U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class Indexer:
    """Keeps one agent's Store equal to its workspace's memory files."""

    def __init__(
        self,
        store: IndexStore,
        workspace: Workspace,
        settings: MemorySearchConfig,
        provider: EmbeddingProvider | None,
    ) -> None:
        self.store = store
        self.workspace = workspace
        self.settings = settings
        self.provider = provider
        self.should_stop: Callable[[], bool] | None = None  # checked between files; set by the sync service
        self.embedder = ChunkEmbedder(store, provider, settings) if provider is not None else None

    # -- identity ----------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """What the stored vectors and chunks depend on; a change means a full rebuild."""
        p = self.provider
        return {
            "schema": SCHEMA_IDENTITY,
            "chunker": CHUNKER_VERSION,
            "provider": p.id if p else "none",
            "model": p.model if p else None,
            "providerKey": p.provider_key if p else None,
            "dims": p.dims if p else None,
            "chunkTokens": self.settings.chunking.tokens,
            "chunkOverlap": self.settings.chunking.overlap,
            "windowTokens": self.settings.chunking.window_tokens,
            **late_identity(self.settings.chunking, p),
        }

    def known_identity(self) -> dict[str, Any]:
        """``identity`` to store: a provider that could not tell yet whether it late-chunks (a remote server) is
        asked now; if it still cannot tell, the index keeps the value it has (a rebuild needs a real change)."""
        if self.provider is not None and self.provider.token_embeddings is None:
            late_setup(self.provider, self.settings.chunking)  # asks the server, once (never raises)
        return settle_late(self.identity(), self.store.get_meta("identity"))

    def identity_matches(self) -> bool:
        stored = self.store.get_meta("identity")
        if stored is None:
            return False
        current = settle_late(self.identity(), stored)
        if current["dims"] is None:  # a remote model's dimension is learnt from its first answer
            stored = {**stored, "dims": None}
        elif stored.get("dims") is None and self.store.vec_dims() is None:  # nothing embedded yet: not known
            current["dims"] = None
        return bool(stored == current)

    # -- sync --------------------------------------------------------------------------------------
    def sync(
        self,
        *,
        force: bool = False,
        progress: Progress | None = None,
        wait: float = 60.0,
        embed: bool = True,
        budget: float | None = None,
        keep_live: bool = False,
        prune: bool = False,
    ) -> SyncReport:
        """Bring the index up to date, in two phases; keyword freshness never waits for embeddings.

        Phase 1, under the store's writer lock: each changed file's rows (files, chunks, and
        so the keyword indexes) are replaced in one transaction, with the vectors already known (embedding
        cache, or the same input elsewhere in the index); chunks still without vectors are marked pending.
        ``budget`` (seconds) leaves the changed files not reached in time for a later sync (``deferred``).

        Phase 2 (skipped with ``embed=False``), under a separate embedding lock so that other processes can
        index text meanwhile: pending chunks are embedded in batches, one transaction each. A provider
        failure stops it cleanly: the chunks stay pending, the report says how many and ``embed_error`` why.

        A new identity (or ``force``) rebuilds beside the live index, see ``_rebuild``; ``keep_live``
        discards a rebuild that could not embed everything instead of swapping it in. ``prune`` (implied by
        ``force``) drops indexed files whose folder is missing (mdmem.files.roots).
        """
        started = time.monotonic()
        with self.store.writing(wait):
            deadline = None if budget is None else started + budget
            report = self._sync_locked(
                force=force, progress=progress, deadline=deadline, keep_live=keep_live, prune=prune or force
            )
        if not report.rebuilt:  # a rebuild embedded its new generation before the swap
            self.embed_pending(report, embed)
            self.store.settle()
            report.pending = self.store.pending_count()
            report.seconds = round(time.monotonic() - started, 3)
            self._record(report)
        return report

    def embed_waiting(self) -> SyncReport:
        """Phase 2 alone: embed the chunks that earlier text-only syncs (``embed=False``) left pending. It takes
        no writer lock, so text syncs on other connections go on meanwhile (a service indexes a retained turn's
        text at once and its vectors here, in the background)."""
        started = time.monotonic()
        report = SyncReport()
        self.store.refresh()
        self.embed_pending(report)
        self.store.settle()
        report.pending = self.store.pending_count()
        report.seconds = round(time.monotonic() - started, 3)
        identity = self.store.get_meta("identity")
        if identity is not None and identity.get("dims") is None and self.store.vec_dims() is not None:
            self.store.set_meta("identity", {**identity, "dims": self.store.vec_dims()})  # as ``_record``
        return report

    def embed_pending(self, report: SyncReport, embed: bool = True) -> None:
        """A sync's second phase, outside the writer lock: embed the chunks that wait (unless ``embed`` is
        False), then let the embedder drop what it kept for this sync."""
        try:
            if embed:
                self._embed_phase(report)
        finally:
            if self.embedder is not None:
                self.embedder.forget()

    def _sync_locked(
        self, *, force: bool, progress: Progress | None, deadline: float | None, keep_live: bool, prune: bool = False
    ) -> SyncReport:
        self.store.tidy()
        self.store.refresh()
        copies = self.refresh_transcripts()
        if self.store.get_meta("identity") is not None and (force or not self.identity_matches()):
            roots.guard(self.workspace.missing_roots(), self.store.files(), prune=prune, rebuild=True)
            report = self._rebuild(progress, keep_live)
        else:
            report = self._update(progress, prune, deadline)
        report.errors.extend(copies.errors)
        return report

    def _embed_phase(self, report: SyncReport) -> None:
        """Phase 2 on the live index. If another process holds the embedding lock, it embeds these chunks
        too: it looks for pending chunks again after releasing the lock."""
        if self.embedder is None:
            return
        for _ in range(3):
            with self.store.embedding_turn() as mine:
                if not mine:
                    return
                report.embed_error = self.embedder.embed_pending(report, self.should_stop)
            if report.embed_error is not None or not self.store.pending_count():
                return

    def _record(self, report: SyncReport) -> None:
        """Store the sync report, and the vector dimension once the first vectors taught it."""
        identity = self.store.get_meta("identity")
        if identity is not None and identity.get("dims") is None and self.store.vec_dims() is not None:
            self.store.set_meta("identity", {**identity, "dims": self.store.vec_dims()})
        self.store.set_meta("lastSync", {"at": time.time(), "report": report.to_dict()})

    def _rebuild(self, progress: Progress | None, keep_live: bool) -> SyncReport:
        """Build a complete new index beside the live one, seeded from its embedding cache, then switch it in
        at once (``IndexStore.begin_rebuild``: a new SQLite file swapped in, or a PostgreSQL generation).

        Until the switch, searches keep answering from the live index; if anything fails, the new index is
        dropped and the live index is untouched. When the provider fails while embedding the new index:

        - a ``force`` rebuild of an index whose identity matches (its vectors serve searches), or one with
          ``keep_live`` (a fallback provider can take over and may match the live index), is discarded and
          the provider error raised;
        - otherwise the live index was built for another identity, so searches can only use its keywords:
          the new one is swapped in with its text complete and its missing vectors pending (filled in by
          later syncs, without another rebuild), so new notes stay findable during an outage.
        """
        current = self.identity_matches()
        started = time.monotonic()
        fresh = self.store.begin_rebuild()
        try:
            builder = Indexer(fresh, self.workspace, self.settings, self.provider)
            builder.should_stop = self.should_stop
            report = builder._update(progress)
            report.rebuilt = True
            if builder.embedder is not None:
                report.embed_error = builder.embedder.embed_pending(report, self.should_stop)
            report.pending = fresh.pending_count()
            if report.pending and (current or keep_live):
                raise ProviderError(
                    f"{report.embed_error or 'embedding stopped'} (the rebuild of {self.store.path} was discarded: "
                    f"{report.pending} chunk(s) could not be embedded; the live index keeps answering)"
                )
            report.seconds = round(time.monotonic() - started, 3)
            builder._record(report)
        except BaseException:
            self.store.abandon_rebuild(fresh)
            raise
        with contextlib.suppress(StoreError):  # the uses written to the live index since the rebuild began
            meanwhile = uses_since(self.store.usage_rows(), fresh.usage_rows())
            if meanwhile:
                fresh.add_usage(meanwhile)
        self.store.finish_rebuild(fresh)
        return report

    def _update(self, progress: Progress | None, prune: bool = False, deadline: float | None = None) -> SyncReport:
        started = time.monotonic()
        report = SyncReport()
        entries = entryindex.snapshot(self.store, self.workspace)  # the database's, for the session files
        indexed = self._indexed()
        on_disk = self.workspace.discover()
        # after discovery, so a folder that vanished during it counts as missing, not as emptied
        held = roots.guard(self.workspace.missing_roots(), indexed, prune=prune, rebuild=False)
        report.files = len(on_disk)
        limit = self.settings.max_file_bytes
        for n, mf in enumerate(on_disk, start=1):
            if self.should_stop is not None and self.should_stop():
                raise SyncCancelled(f"sync of {self.store.path} stopped after {n - 1} of {len(on_disk)} files")
            if progress:
                progress(n, len(on_disk), printable(mf.rel))
            if deadline is not None and time.monotonic() > deadline and _looks_changed(mf, indexed.get(mf.rel)):
                report.deferred += 1  # out of time: the next sync indexes it
                continue
            if not is_utf8(mf.rel):
                report.errors.append(
                    {"path": printable(mf.rel), "error": "file name is not valid UTF-8: rename the file to index it"}
                )
                continue
            try:
                self._sync_file(mf, indexed.get(mf.rel), limit, report, entries)
            except ProviderError:
                raise
            except (OSError, ValueError, UnicodeError) as exc:
                report.errors.append({"path": mf.rel, "error": f"{type(exc).__name__}: {exc}"})
        present = {mf.rel for mf in on_disk if is_utf8(mf.rel)} | held  # never delete under a missing root
        present |= entryindex.kept(entries)  # a day file only the database has entries for, so far
        report.held = len(held)
        skipped = {s["path"] for s in report.skipped}
        for path in indexed:
            if path not in present or path in skipped:
                self.store.delete_file(path)
                report.removed += 1
        if entries:
            entryindex.index_entries(self, entries, report, files_here=True)
        if self.settings.cache.enabled:
            self.store.cache_prune(self.settings.cache.max_entries)
        identity = self.known_identity()
        if identity["dims"] is None and self.store.vec_dims() is not None:
            identity["dims"] = self.store.vec_dims()
        self.store.set_meta("identity", identity)
        report.seconds = round(time.monotonic() - started, 3)
        self.store.set_meta("lastSync", {"at": time.time(), "report": report.to_dict()})
        return report

    def _sync_file(
        self, mf: MemoryFile, row: FileRow | None, limit: int, report: SyncReport, entries: entryindex.Snapshot
    ) -> None:
        size, mtime = mf.size, mf.mtime  # from the discovery stat
        if size > limit:
            report.skipped.append(
                {
                    "path": mf.rel,
                    "reason": f"{size} bytes is over maxFileBytes ({limit}); raise "
                    "agents.defaults.memorySearch.maxFileBytes to index it",
                }
            )
            return
        if row is not None and row.size == size and row.mtime == mtime:
            report.unchanged += 1
            return
        text, replaced, raw = read_text(mf.abs)
        digest = hashlib.sha256(raw).hexdigest()
        viewed = entryindex.viewed(entries, mf.rel, text)
        if viewed != text:  # the database's entries for it are not all in the file yet (mdmem.files.sessionview)
            digest, text, size, mtime = sha256(viewed), viewed, VIRTUAL_SIZE, 0.0
        if row is not None and row.hash == digest:
            if size != VIRTUAL_SIZE:
                self.store.touch_file(mf.rel, mtime, size)
            report.unchanged += 1
            return
        self.write_text(FileRow(mf.rel, mf.source, digest, mtime, size, replaced), text, report)

    def write_text(self, file_row: FileRow, text: str, report: SyncReport) -> None:
        """Chunk ``text`` as ``file_row.path``'s content and replace that file's rows with it."""
        provider = self.provider
        chunks = chunk_markdown(
            text,
            file_row.path,
            tokens=self.settings.chunking.tokens,
            overlap=self.settings.chunking.overlap,
            count_tokens=provider.count_tokens if provider else estimate_tokens,
            count_many=provider.count_tokens_batch if provider else None,
        )
        path, source = file_row.path, file_row.source
        rows = [
            ChunkRow(path, source, c.start_line, c.end_line, c.hash, sha256(embedding_input(c)), c.heading, c.text)
            for c in chunks
        ]
        vectors = self.embedder.known_vectors(rows, report) if self.embedder else None
        derived = parse_supersessions(text, path), parse_links(text, path)
        ids = self.store.replace_file(file_row, rows, vectors, *derived)
        if self.embedder is not None:
            self.embedder.remember(ids)
        report.indexed += 1
        report.chunks += len(rows)

    # -- staleness ---------------------------------------------------------------------------------
    def refresh_transcripts(self) -> transcripts.Refreshed:
        """Update the Markdown copies of OpenClaw transcripts (memorySearch.sessions.transcriptsDir), see
        mdmem.files.transcripts; the copies written (workspace-relative) and those that could not be."""
        if self.workspace.transcripts is None:
            return transcripts.Refreshed()
        return transcripts.refresh(self.workspace.root, self.workspace.transcripts)

    def changed_files(self) -> list[tuple[str, str, int]]:
        """Files whose size or mtime differ from the index (cheap: one stat each, no reads).

        Returns (path, state, size) with state ``new``, ``modified`` or ``deleted``. A file touched without
        a content change shows up here; ``stale_files`` confirms with hashes.
        """
        indexed = self._indexed()
        out: list[tuple[str, str, int]] = []
        present: set[str] = set()
        for mf in self.workspace.discover():
            if not is_utf8(mf.rel):
                continue  # reported by status and sync, never indexed
            present.add(mf.rel)
            row = indexed.get(mf.rel)
            if mf.size > self.settings.max_file_bytes:
                if row is not None:
                    out.append((mf.rel, "oversize", 0))
            elif row is None:
                out.append((mf.rel, "new", mf.size))
            elif row.size != mf.size or row.mtime != mf.mtime:
                out.append((mf.rel, "modified", mf.size))
        present |= roots.kept(self.workspace.missing_roots(), indexed)  # kept by sync: not stale
        out.extend((p, "deleted", 0) for p in indexed if p not in present)
        return out

    def _indexed(self) -> dict[str, FileRow]:
        """The indexed files of this workspace's sources (see ``Workspace.sources``)."""
        sources = self.workspace.sources
        return {path: row for path, row in self.store.files().items() if row.source in sources}

    def stale_files(self) -> list[dict[str, str]]:
        """Files whose index rows differ from disk, computed from the files themselves (not a flag)."""
        indexed = self._indexed()
        stale: list[dict[str, str]] = []
        for path, state, _ in self.changed_files():
            if state == "modified":
                try:
                    _, _, raw = read_text(self.workspace.root / path if not Path(path).is_absolute() else Path(path))
                except OSError:
                    continue
                if hashlib.sha256(raw).hexdigest() == indexed[path].hash:
                    continue  # touched, not changed
            stale.append({"path": path, "state": state})
        return stale


def _looks_changed(mf: MemoryFile, row: FileRow | None) -> bool:
    return row is None or row.size != mf.size or row.mtime != mf.mtime
