"""Sync: read memory files, chunk, diff by hash, embed what is new, write each file in one transaction."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock, Timeout

from mdmemory.chunker import Chunk, chunk_markdown
from mdmemory.config import MemorySearchConfig, camel
from mdmemory.errors import LockError, ProviderError, SyncCancelled
from mdmemory.providers.base import EmbeddingProvider
from mdmemory.store import ChunkRow, ChunkVectors, FileRow, Store, transaction
from mdmemory.store.connection import remove_database
from mdmemory.store.generations import live_file, next_generation, remove_orphans, swap_in
from mdmemory.tokens import TokenCounter, estimate_tokens
from mdmemory.workspace import MemoryFile, Workspace, read_text

SCHEMA_IDENTITY = 2
CHUNKER_VERSION = 1
Progress = Callable[[int, int, str], None]


@dataclass
class SyncReport:
    """What one sync did. ``files`` counts memory files found on disk."""

    files: int = 0
    indexed: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks: int = 0
    embedded: int = 0
    from_cache: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    rebuilt: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape, camelCase like every JSON mdmemory emits (``fromCache``)."""
        return {camel(k): v for k, v in asdict(self).items()}


def embedding_input(chunk: Chunk | ChunkRow) -> str:
    """The text sent to the embedding model for a whole chunk: the heading path, then the chunk text."""
    first = chunk.text.lstrip().split("\n", 1)[0]
    if chunk.heading and not first.startswith("#"):
        return f"{chunk.heading}\n{chunk.text}"
    return chunk.text


_ATX = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def embedding_inputs(chunk: Chunk | ChunkRow, window_tokens: int, count: TokenCounter | None = None) -> list[str]:
    """The whole chunk's input, then one input per window of about ``window_tokens`` tokens.

    Windows are runs of whole non-blank lines, each prefixed with the heading path in force at its
    first line (so a line keeps its section and date). A chunk that fits in one window has no windows:
    its whole-chunk vector already is that window.
    """
    whole = embedding_input(chunk)
    if not window_tokens:
        return [whole]
    count = count or estimate_tokens
    path = [(i + 1, part) for i, part in enumerate(chunk.heading.split(" > ")) if part] if chunk.heading else []
    windows: list[str] = []
    lines: list[str] = []
    used = 0
    prefix = " > ".join(t for _, t in path)

    def flush() -> None:
        if lines:
            body = "\n".join(lines)
            windows.append(f"{prefix}\n{body}" if prefix else body)
            lines.clear()

    for line in chunk.text.split("\n"):
        m = _ATX.match(line)
        if m:
            flush()
            used = 0
            level = len(m.group(1))
            path = [(lv, t) for lv, t in path if lv < level] + [(level, m.group(2))]
            prefix = " > ".join(t for _, t in path)
            continue
        if not line.strip():
            continue
        cost = count(line)
        if lines and used + cost > window_tokens:
            flush()
            used = 0
        lines.append(line)
        used += cost
    flush()
    if len(windows) <= 1:
        return [whole]
    return [whole, *windows]


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


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Indexer:
    """Keeps one agent's Store equal to its workspace's memory files."""

    def __init__(
        self,
        store: Store,
        workspace: Workspace,
        settings: MemorySearchConfig,
        provider: EmbeddingProvider | None,
    ) -> None:
        self.store = store
        self.workspace = workspace
        self.settings = settings
        self.provider = provider
        self.lock_path = Path(f"{store.path}.lock")
        self.should_stop: Callable[[], bool] | None = None  # checked between files; set by the sync service

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
        }

    def identity_matches(self) -> bool:
        stored = self.store.get_meta("identity")
        if stored is None:
            return False
        current = self.identity()
        if current["dims"] is None:  # a remote model's dimension is learnt from its first answer
            stored = {**stored, "dims": None}
        return bool(stored == current)

    # -- sync --------------------------------------------------------------------------------------
    def sync(self, *, force: bool = False, progress: Progress | None = None, wait: float = 60.0) -> SyncReport:
        """Bring the index up to date. Holds the writer lock beside the database for the duration."""
        lock = FileLock(str(self.lock_path))
        try:
            lock.acquire(timeout=wait)
        except Timeout as exc:
            raise LockError(
                f"another mdmemory process is writing {self.store.path} (lock {self.lock_path}); "
                "wait for it to finish or stop it"
            ) from exc
        try:
            return self._sync_locked(force=force, progress=progress)
        finally:
            lock.release()

    def _sync_locked(self, *, force: bool, progress: Progress | None) -> SyncReport:
        remove_orphans(self.store.path)
        self.store.refresh()
        if self.store.get_meta("identity") is not None and (force or not self.identity_matches()):
            return self._rebuild(progress)
        return self._update(progress)

    def _rebuild(self, progress: Progress | None) -> SyncReport:
        """Build a complete new index beside the live one, seeded from its embedding cache, then swap it in.

        Until the swap, searches keep answering from the live index; if anything fails, the new file is
        deleted and the live index is untouched.
        """
        target = next_generation(self.store.path)
        fresh = Store(target)
        try:
            fresh.conn.execute("ATTACH DATABASE ? AS live", (str(live_file(self.store.path)),))
            with transaction(fresh.conn):
                fresh.conn.execute("INSERT OR IGNORE INTO main.embedding_cache SELECT * FROM live.embedding_cache")
            fresh.conn.execute("DETACH DATABASE live")
            builder = Indexer(fresh, self.workspace, self.settings, self.provider)
            builder.should_stop = self.should_stop
            report = builder._update(progress)
            report.rebuilt = True
            fresh.close()
            swap_in(self.store.path, target)
        except BaseException:
            fresh.close()
            remove_database(target)
            raise
        self.store.reopen()
        return report

    def _update(self, progress: Progress | None) -> SyncReport:
        started = time.monotonic()
        report = SyncReport()
        indexed = self.store.files()
        on_disk = self.workspace.discover()
        report.files = len(on_disk)
        limit = self.settings.max_file_bytes
        for n, mf in enumerate(on_disk, start=1):
            if self.should_stop is not None and self.should_stop():
                raise SyncCancelled(f"sync of {self.store.path} stopped after {n - 1} of {len(on_disk)} files")
            if progress:
                progress(n, len(on_disk), printable(mf.rel))
            if not is_utf8(mf.rel):
                report.errors.append(
                    {"path": printable(mf.rel), "error": "file name is not valid UTF-8: rename the file to index it"}
                )
                continue
            try:
                self._sync_file(mf, indexed.get(mf.rel), limit, report)
            except ProviderError:
                raise
            except (OSError, ValueError, UnicodeError) as exc:
                report.errors.append({"path": mf.rel, "error": f"{type(exc).__name__}: {exc}"})
        present = {mf.rel for mf in on_disk if is_utf8(mf.rel)}
        skipped = {s["path"] for s in report.skipped}
        for path in indexed:
            if path not in present or path in skipped:
                self.store.delete_file(path)
                report.removed += 1
        if self.settings.cache.enabled:
            self.store.cache_prune(self.settings.cache.max_entries)
        identity = self.identity()
        if identity["dims"] is None and self.store.vec_dims() is not None:
            identity["dims"] = self.store.vec_dims()
        self.store.set_meta("identity", identity)
        report.seconds = round(time.monotonic() - started, 3)
        self.store.set_meta("lastSync", {"at": time.time(), "report": report.to_dict()})
        return report

    def _sync_file(self, mf: MemoryFile, row: FileRow | None, limit: int, report: SyncReport) -> None:
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
        if row is not None and row.hash == digest:
            self.store.touch_file(mf.rel, mtime, size)
            report.unchanged += 1
            return
        counter = self.provider.count_tokens if self.provider else None
        chunks = chunk_markdown(
            text,
            mf.rel,
            tokens=self.settings.chunking.tokens,
            overlap=self.settings.chunking.overlap,
            **({"count_tokens": counter} if counter else {}),
        )
        rows = [
            ChunkRow(mf.rel, mf.source, c.start_line, c.end_line, c.hash, sha256(embedding_input(c)), c.heading, c.text)
            for c in chunks
        ]
        vectors = self._vectors_for(rows, report) if self.provider else None
        file_row = FileRow(mf.rel, mf.source, digest, mtime, size, replaced)
        self.store.replace_file(file_row, rows, vectors)
        report.indexed += 1
        report.chunks += len(rows)

    def _vectors_for(self, rows: list[ChunkRow], report: SyncReport) -> list[ChunkVectors] | None:
        """Each chunk's vectors (the whole chunk, then its windows): cached or stored ones when the exact
        input was embedded before, fresh embeddings otherwise."""
        p = self.provider
        assert p is not None
        if not rows:
            return None
        count = p.count_tokens if self.settings.chunking.window_tokens else None
        inputs = [embedding_inputs(r, self.settings.chunking.window_tokens, count) for r in rows]
        keyed = [[(sha256(t), t) for t in group] for group in inputs]
        texts = dict(pair for group in keyed for pair in group)
        hashes = list(texts)
        known: dict[str, np.ndarray] = {}
        if self.settings.cache.enabled:
            known = self.store.cache_get(p.id, p.model, p.provider_key, hashes)
        reused = set(known)
        missing = [h for h in hashes if h not in known]
        if missing:
            known.update(self.store.vectors_by_hash(missing))
        todo = [h for h in hashes if h not in known]
        report.from_cache += len(hashes) - len(todo)
        if todo:
            fresh = p.embed_documents([texts[h] for h in todo])
            new = dict(zip(todo, fresh, strict=True))
            known.update(new)
            report.embedded += len(todo)
            if self.settings.cache.enabled:
                self.store.cache_put(p.id, p.model, p.provider_key, new)
        if self.settings.cache.enabled and reused:
            self.store.cache_touch(p.id, p.model, p.provider_key, list(reused))
        out: list[ChunkVectors] = []
        for group in keyed:
            keys = [h for h, _ in group]
            out.append((keys, np.stack([known[h] for h in keys])))
        return out

    # -- staleness ---------------------------------------------------------------------------------
    def changed_files(self) -> list[tuple[str, str, int]]:
        """Files whose size or mtime differ from the index (cheap: one stat each, no reads).

        Returns (path, state, size) with state ``new``, ``modified`` or ``deleted``. A file touched without
        a content change shows up here; ``stale_files`` confirms with hashes.
        """
        indexed = self.store.files()
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
        out.extend((p, "deleted", 0) for p in indexed if p not in present)
        return out

    def stale_files(self) -> list[dict[str, str]]:
        """Files whose index rows differ from disk, computed from the files themselves (not a flag)."""
        indexed = self.store.files()
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
