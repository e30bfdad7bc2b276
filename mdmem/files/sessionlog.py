"""One agent's retained turns: ``sessions/YYYY-MM-DD.md`` blocks and ``sessions/.tombstones.jsonl``.

- Every operation opens ``sessions/`` through ``mdmem.util.filewrite.Folder``: a ``sessions/`` that is a
  symlink (or a day file, the tombstones or the lock file that is one) is refused with an error naming it,
  before anything is written, so nothing is acknowledged that is not in the workspace. The last failure is
  kept for ``stats`` (the service's agent status).
- ``retain`` appends one block (mdmem.files.sessionblocks) with a single ``write``, under this object's thread
  lock and the file lock every mdmem writer of that folder takes (``.mdmemory.lock``, the same name
  ``remember`` uses), so concurrent retains never interleave and ``watch`` / ``index`` never wait on it for
  more than one append: they take the index's own writer lock, never this one. It returns once an ``fsync``
  begun after its append has ended: concurrent retains share one (group commit).
- Duplicates are found in memory: each entry id with the place of its block, loaded from the files once and
  again when a file of the folder changed behind our back (size or mtime differ). ``duplicate`` is answered
  only after the block was read back from its place; an entry the files no longer hold is written again.
- Loading repairs what a crash can leave, on bytes: a torn tail of a day file (mdmem.files.sessionblocks: only
  ever bytes after its last whole block) is cut, and kept in ``.<day>.md.torn`` (mdmem.files.torn: a
  torn block cannot be told from text a person wrote after it); a torn last tombstone line is dropped; a
  block whose id is tombstoned (a crash between the tombstone and the rewrite) is removed. The service
  loads it when it opens the agent, before any search.
- ``forget`` appends the tombstones first (durable intent), then rewrites each changed file atomically
  (temporary file, ``fsync``, ``rename``, ``fsync`` of the folder), then reads the files again: if a heading
  or closing line of a forgotten entry is still there (a block edited by hand so that its end cannot be
  told), it raises, naming the file and line. The caller syncs the index.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from mdmem.config.load import AgentConfig
from mdmem.files import sessionblocks as blocks
from mdmem.files import torn as torn_copy
from mdmem.files.retained import DEFAULT_MAX_MESSAGE_CHARS, Prepared, prepare, render_entry
from mdmem.files.turns import ENTRY_ID
from mdmem.files.workspace import SESSIONS_DIR
from mdmem.util.errors import MdMemoryError, WorkspaceError
from mdmem.util.fileread import special_kind
from mdmem.util.filewrite import Folder, write_all
from mdmem.util.redaction import redact

__all__ = ["SessionLog", "Status", "render_entry", "tombstone_reason"]

TOMBSTONES = ".tombstones.jsonl"
LOCK_NAME = ".mdmemory.lock"
LOCK_TIMEOUT_SECONDS = 30.0
Status = Literal["retained", "duplicate", "forgotten"]
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
MAX_REASON_CHARS = 1000
DAY_FILE = re.compile(r"\d{4}-\d{2}-\d{2}\.md")


def tombstone_reason(reason: str) -> str:
    """A forget's reason as its tombstone keeps it: redacted, at most ``MAX_REASON_CHARS``, valid UTF-8."""
    text = blocks.clean(reason)
    if len(text) > MAX_REASON_CHARS:
        text = text[:MAX_REASON_CHARS] + " …(cut)"
    return redact(text)


class SessionLog:
    """The retained turns of one agent's workspace."""

    def __init__(self, agent: AgentConfig) -> None:
        self.agent = agent
        self.workspace = Path(agent.workspace)
        self.dir = self.workspace / SESSIONS_DIR
        self._lock = threading.Lock()
        # Group commit: a retain appends under the lock, then waits until an fsync that began after its
        # append has ended; one fsync serves every retain appended before it (8 clients: one, not eight).
        self._sync_lock = threading.Lock()
        self._appended = 0  # appends so far (under _lock)
        self._durable = 0  # appends made durable so far (under _sync_lock)
        self._unsynced: set[str] = set()  # names of the files appended to since their last fsync (under _lock)
        self._ids: dict[str, tuple[str, int, int]] = {}  # entry id -> (file name, start, end) of its block
        self._tombstoned: set[str] = set()
        self._seen: tuple[Any, ...] | None = None
        self.last_error: dict[str, str] | None = None  # {at, error} of the last failed write, for status

    # -- loading ------------------------------------------------------------------------------------
    def _files(self, folder: Folder) -> list[str]:
        """The Markdown files of the folder: regular files with one link (others are never read or written)."""
        out = []
        for name in folder.names():
            st = folder.lstat(name)
            if name.endswith(".md") and st is not None and special_kind(st) is None:
                out.append(name)
        return out

    def _signature(self, folder: Folder) -> tuple[Any, ...]:
        out = []
        for name in [*self._files(folder), TOMBSTONES]:
            st = folder.lstat(name)
            if st is not None:
                out.append((name, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def _load(self, folder: Folder) -> None:
        if self._seen is not None and self._signature(folder) == self._seen:
            return
        self._seen = None  # until this load has ended: one that fails is done again by the next operation
        self._tombstoned = {t["entry_id"] for t in self._read_tombstones(folder)}
        self._ids = {}
        for name in self._files(folder):
            data = folder.read(name) or b""
            found, torn = blocks.blocks(data)
            if torn is not None and DAY_FILE.fullmatch(name):  # only day files are appended to
                assert torn >= (found[-1].end if found else 0), "a repair never cuts into a whole block"
                torn_copy.keep(folder, name, data[torn:])
                folder.truncate(name, torn)
                data = data[:torn]
            if any(b.entry_id in self._tombstoned for b in found):
                data, _ = blocks.remove(data, self._tombstoned)
                folder.replace(name, data)
                found, _ = blocks.blocks(data)
            for b in found:
                self._ids.setdefault(b.entry_id, (name, b.start, b.end))
        self._seen = self._signature(folder)

    def _index(self, name: str, data: bytes) -> None:
        """Note where the blocks of file ``name`` are now that it holds ``data`` (after a rewrite)."""
        for eid in [i for i, place in self._ids.items() if place[0] == name]:
            del self._ids[eid]
        for b in blocks.blocks(data)[0]:
            self._ids.setdefault(b.entry_id, (name, b.start, b.end))

    def _read_tombstones(self, folder: Folder) -> list[dict[str, Any]]:
        data = folder.read(TOMBSTONES)
        if not data:
            return []
        if not data.endswith(b"\n"):  # a torn last line from a crash
            keep = data.rfind(b"\n") + 1
            folder.truncate(TOMBSTONES, keep)
            data = data[:keep]
        out = []
        for line in data.split(b"\n"):
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict) and isinstance(item.get("entry_id"), str):
                out.append(item)
        return out

    @contextlib.contextmanager
    def _loaded(self) -> Iterator[Folder]:
        """Hold this object's thread lock and the folder's file lock for the block, the folder's ids and
        tombstones (re)loaded first; the folder (``sessions/``, made when missing) is what it yields."""
        with self._lock:
            if not self.workspace.is_dir():  # never create it: an unmounted volume would hide what we wrote
                raise WorkspaceError(
                    f"workspace {self.workspace} does not exist or is not a folder (an unmounted volume, a moved or "
                    "renamed folder?): nothing was retained or forgotten. Fix: mount or create it, or point the "
                    "agent's `workspace` at the right one"
                )
            with Folder(self.workspace, [SESSIONS_DIR], create=True) as folder:
                with folder.locked(LOCK_NAME, LOCK_TIMEOUT_SECONDS):
                    self._load(folder)
                    yield folder

    @contextlib.contextmanager
    def _recorded(self) -> Iterator[None]:
        """Keep a write's failure (or clear the last one after a write that worked) for ``stats``."""
        try:
            yield
        except (MdMemoryError, OSError) as exc:
            at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            self.last_error = {"at": at, "error": redact(f"{type(exc).__name__}: {exc}")}  # status shows it
            raise
        self.last_error = None

    def _holds(self, folder: Folder, eid: str) -> bool:
        """Whether the files really hold ``eid``'s block: read back from where it was last seen, else the
        folder loaded again."""
        name, start, end = self._ids[eid]
        try:
            fd = folder.open(name, os.O_RDONLY)
            try:
                data = os.pread(fd, end - start, start)
            finally:
                os.close(fd)
        except FileNotFoundError:
            data = b""
        found, _ = blocks.blocks(data)
        if found and found[0].entry_id == eid and found[0].start == 0:
            return True
        self._seen = None
        self._load(folder)
        return eid in self._ids

    # -- operations ---------------------------------------------------------------------------------
    def repair(self) -> None:
        """Load the folder now: cut a torn tail and remove the blocks of tombstoned entries (a crash between a
        forget's tombstone and its rewrite), so that a search after a restart never indexes what was
        forgotten. A failure is left for the next retain or forget to report."""
        with contextlib.suppress(MdMemoryError, OSError), self._loaded():
            pass

    def known(self, entry_id_: str) -> Status | None:
        with self._loaded() as folder:
            if entry_id_ in self._tombstoned:
                return "forgotten"
            return "duplicate" if entry_id_ in self._ids and self._holds(folder, entry_id_) else None

    def retain(
        self, entry: dict[str, Any], metadata: dict[str, Any] | None = None, max_chars: int = DEFAULT_MAX_MESSAGE_CHARS
    ) -> tuple[Status, str]:
        """Append ``entry`` as one block (redacted) unless it is retained or tombstoned already."""
        p = prepare(entry, metadata or {}, max_chars)
        return self.store(p), p.entry_id

    def size_of(self, day: str) -> int | None:
        """The size of ``sessions/<day>.md`` now (None when it does not exist)."""
        try:
            return (self.dir / f"{day}.md").stat().st_size
        except OSError:
            return None

    def store(self, p: Prepared) -> Status:
        """Append a prepared block (mdmem.files.retained) unless its id is retained or tombstoned already."""
        return self.write_blocks([(p.entry_id, p.day, p.block)])[0]

    def write_blocks(self, items: Sequence[tuple[str, str, str]]) -> list[Status]:
        """Append each ``(entry id, day, rendered block)`` to ``sessions/<day>.md`` unless its id is retained or
        tombstoned already; returns once the appends are durable (one ``fsync`` per file)."""
        out: list[Status] = []
        mine = 0
        with self._recorded():
            with self._loaded() as folder:
                for eid, day, block in items:
                    if not DAY.fullmatch(day) or not ENTRY_ID.fullmatch(eid):
                        raise WorkspaceError(f"not a retained entry: id {eid[:40]!r}, day {day[:20]!r}")
                    if eid in self._tombstoned:
                        out.append("forgotten")
                        continue
                    if eid in self._ids and self._holds(folder, eid):
                        out.append("duplicate")
                        continue
                    name = f"{day}.md"
                    self._ids[eid] = (name, *self._append(folder, name, day, block))
                    self._unsynced.add(name)
                    self._appended += 1
                    mine = self._appended
                    out.append("retained")
                if mine:
                    self._seen = self._signature(folder)
            if mine:
                self._make_durable(mine)
        return out

    def _make_durable(self, seq: int) -> None:
        """Return once append number ``seq`` is on disk (fsync), syncing every file appended to since the
        last fsync if no other retain did it meanwhile. An fsync that fails raises (the retain is not
        acknowledged) and leaves its files for the next one to try."""
        with self._sync_lock:
            if self._durable >= seq:
                return
            with self._lock:
                names, self._unsynced = self._unsynced, set()
                upto = self._appended
            try:
                with Folder(self.workspace, [SESSIONS_DIR]) as folder:
                    for name in sorted(names):
                        fd = folder.open(name, os.O_RDONLY)
                        try:
                            os.fsync(fd)
                        finally:
                            os.close(fd)
            except OSError:
                with self._lock:
                    self._unsynced |= names
                raise
            self._durable = upto

    def _append(self, folder: Folder, name: str, day: str, block: str) -> tuple[int, int]:
        """Append ``block`` to the file ``name`` with one ``write``; the block's byte offsets in it."""
        created = folder.lstat(name) is None
        fd = folder.open(name, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            prefix = blocks.joiner(os.pread(fd, 3, size - min(size, 3))) if size else blocks.file_header(day).encode()
            data = prefix + block.encode("utf-8")
            try:
                write_all(fd, data)  # made durable by _make_durable
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)  # a full disk: no torn block left behind
                raise
        finally:
            os.close(fd)
        if created:
            folder.sync()
        return size + len(prefix), size + len(data)

    def forget(self, entry_ids: list[str], reason: str | None = None) -> tuple[int, list[str]]:
        """Tombstone ``entry_ids`` and remove their blocks; ``(blocks removed, files rewritten)``. Raises
        ``WorkspaceError`` when the files still hold a heading or closing line of one of them afterwards."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self._recorded(), self._loaded() as folder:
            new = [i for i in dict.fromkeys(entry_ids) if i not in self._tombstoned]
            if new:
                lines = []
                for i in new:
                    stone: dict[str, Any] = {"agent_id": self.agent.id, "entry_id": i}
                    if reason and reason.strip():
                        stone["reason"] = tombstone_reason(reason)
                    stone["forgotten_at"] = now
                    lines.append(json.dumps(stone, ensure_ascii=False) + "\n")
                created = folder.lstat(TOMBSTONES) is None
                fd = folder.open(TOMBSTONES, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                try:
                    write_all(fd, "".join(lines).encode("utf-8"))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                if created:
                    folder.sync()
                self._tombstoned.update(new)
            targets = set(entry_ids)
            removed, changed = 0, []
            for name in self._files(folder):
                data = folder.read(name) or b""
                if not any(i.encode() in data for i in targets):
                    continue
                data, gone = blocks.remove(data, targets)
                if gone:
                    folder.replace(name, data)
                    self._index(name, data)
                    removed += len(gone)
                    changed.append(f"{SESSIONS_DIR}/{name}")
            torn_copy.scrub(folder, targets)  # what a crash repair kept of them
            self._seen = self._signature(folder)
            self._check_gone(folder, targets)
        return removed, changed

    def _check_gone(self, folder: Folder, targets: set[str]) -> None:
        """Read the files again: none may hold a heading or closing line of ``targets`` any more."""
        for name in self._files(folder):
            data = folder.read(name) or b""
            left = blocks.marks(data, targets) if any(i.encode() in data for i in targets) else []
            if left:
                line, eid = left[0]
                whole = eid in {b.entry_id for b in blocks.blocks(data)[0]}
                why = (
                    "its block is still there after the rewrite (another program wrote the file meanwhile?)"
                    if whole
                    else "a heading or closing line without its other half (edited by hand?), so where its text "
                    "ends cannot be told"
                )
                raise WorkspaceError(
                    f"forget: {folder.shown(name)} line {line} still holds entry {eid}: {why}. It is tombstoned "
                    "(never retained again) but its text may still be searched. Fix: delete its lines (from its "
                    f"heading `## … · {eid}` to its closing line `{blocks.closing(eid)}`) by hand, then forget it "
                    "again"
                )

    def stats(self) -> dict[str, Any]:
        """Counts of the folder's entries, tombstones and files; ``error`` when the folder cannot be used, and
        ``lastError`` (``{at, error}``) when the last retain or forget failed."""
        out: dict[str, Any]
        try:
            with self._loaded() as folder:
                out = {
                    "retained": len(self._ids),
                    "tombstones": len(self._tombstoned),
                    "files": len(self._files(folder)),
                }
        except (MdMemoryError, OSError) as exc:
            out = {"error": redact(f"{type(exc).__name__}: {exc}")}
        if self.last_error is not None:
            out["lastError"] = self.last_error
        return out
