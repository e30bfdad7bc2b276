"""One agent's retained turns: ``sessions/YYYY-MM-DD.md`` blocks and ``sessions/.tombstones.jsonl``.

- ``retain`` appends one block (mdmemory.service.blocks) with a single ``write``, under this object's thread
  lock and the file lock every mdmemory writer of that folder takes (``.mdmemory.lock``, the same name
  ``remember`` uses), so concurrent retains never interleave and ``watch`` / ``index`` never wait on it for
  more than one append: they take the index's own writer lock, never this one. It returns once an ``fsync``
  begun after its append has ended: concurrent retains share one (group commit).
- Duplicates are found in memory: the entry ids of every block heading and every tombstone, loaded once
  and loaded again when a file of the folder changed behind our back (hand edits: size or mtime differ).
- Loading repairs what a crash can leave: a torn last block (no closing line) is cut, a torn last
  tombstone line is dropped, and a block whose id is tombstoned (a crash between the tombstone and the
  rewrite) is removed.
- ``forget`` appends the tombstones first (durable intent), then rewrites each changed file atomically
  (temporary file, ``fsync``, ``rename``, ``fsync`` of the folder). The caller syncs the index.
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
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from filelock import FileLock, Timeout

from mdmemory.agent.fsutil import fsync_dir
from mdmemory.config import AgentConfig
from mdmemory.errors import LockError, WorkspaceError
from mdmemory.fileread import open_regular
from mdmemory.redaction import redact
from mdmemory.service import blocks
from mdmemory.service.canonical import entry_id
from mdmemory.service.contract import ENTRY_ID, Turn, bad, turn_of
from mdmemory.workspace import SESSIONS_DIR

TOMBSTONES = ".tombstones.jsonl"
LOCK_NAME = ".mdmemory.lock"
LOCK_TIMEOUT_SECONDS = 30.0
Status = Literal["retained", "duplicate", "forgotten"]
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def entry_time(entry: dict[str, Any], metadata: dict[str, Any]) -> datetime:
    """The entry's ``ts`` in ``metadata.timezone`` (UTC without one); InvalidArgumentError naming the field."""
    try:
        ts = datetime.fromisoformat(str(entry.get("ts")))
    except ValueError:
        raise bad("entry.ts", f"{str(entry.get('ts'))[:40]!r} is not an RFC 3339 time") from None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    name = metadata.get("timezone")
    if not name:
        return ts.astimezone(UTC)
    try:
        return ts.astimezone(ZoneInfo(name))
    except (ZoneInfoNotFoundError, ValueError):
        raise bad("metadata.timezone", f"{name[:60]!r} is not an IANA time zone name such as 'Europe/Lisbon'") from None


def render_entry(entry: dict[str, Any], metadata: dict[str, Any]) -> tuple[str, str, str]:
    """``(entry id, day, block)``: the entry's block (redacted) and the day of the file it goes into."""
    eid = entry_id(entry)
    when = entry_time(entry, metadata)
    turn = turn_of(entry)
    turn = Turn(redact(turn.user), redact(turn.assistant), tuple(redact(t) for t in turn.tools))
    model = entry.get("effective_model") or entry.get("requested_model") or metadata.get("requested_model")
    block = blocks.render(eid, when.strftime("%H:%M:%S"), redact(str(model or "")), turn)
    return eid, when.date().isoformat(), block


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _rewrite(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _truncate(path: Path, size: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


class SessionLog:
    """The retained turns of one agent's workspace."""

    def __init__(self, agent: AgentConfig) -> None:
        self.agent = agent
        self.dir = Path(agent.workspace) / SESSIONS_DIR
        self._lock = threading.Lock()
        # Group commit: a retain appends under the lock, then waits until an fsync that began after its
        # append has ended; one fsync serves every retain appended before it (8 clients: one, not eight).
        self._sync_lock = threading.Lock()
        self._appended = 0  # appends so far (under _lock)
        self._durable = 0  # appends made durable so far (under _sync_lock)
        self._unsynced: set[Path] = set()  # files appended to since their last fsync (under _lock)
        self._ids: set[str] = set()
        self._tombstoned: set[str] = set()
        self._seen: tuple[Any, ...] | None = None

    # -- loading ------------------------------------------------------------------------------------
    def _files(self) -> list[Path]:
        try:
            return sorted(p for p in self.dir.iterdir() if p.suffix == ".md" and p.is_file() and not p.is_symlink())
        except FileNotFoundError:
            return []

    def _signature(self) -> tuple[Any, ...]:
        out = []
        for p in [*self._files(), self.dir / TOMBSTONES]:
            try:
                st = os.stat(p)
            except FileNotFoundError:
                continue
            out.append((p.name, st.st_size, st.st_mtime_ns))
        return tuple(out)

    def _load(self) -> None:
        if self._seen is not None and self._signature() == self._seen:
            return
        self._tombstoned = {t["entry_id"] for t in self._read_tombstones()}
        ids: set[str] = set()
        for path in self._files():
            text = path.read_text(encoding="utf-8", errors="replace")
            found, torn = blocks.blocks(text)
            if torn is not None:
                _truncate(path, len(text[:torn].encode("utf-8")))
                text = text[:torn]
            if any(b.entry_id in self._tombstoned for b in found):
                text, _ = blocks.remove(text, self._tombstoned)
                _rewrite(path, text)
            ids.update(b.entry_id for b in found if b.entry_id not in self._tombstoned)
        self._ids = ids
        self._seen = self._signature()

    def _read_tombstones(self) -> list[dict[str, Any]]:
        path = self.dir / TOMBSTONES
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        if data and not data.endswith(b"\n"):  # a torn last line from a crash
            keep = data.rfind(b"\n") + 1
            _truncate(path, keep)
            data = data[:keep]
        out = []
        for line in data.decode("utf-8", errors="replace").splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict) and isinstance(item.get("entry_id"), str):
                out.append(item)
        return out

    @contextlib.contextmanager
    def _loaded(self) -> Iterator[None]:
        """Hold this object's thread lock and the folder's file lock for the block, the folder's ids and
        tombstones (re)loaded first."""
        with self._lock:
            workspace = self.dir.parent
            if not workspace.is_dir():  # never create it: an unmounted volume would hide what we wrote
                raise WorkspaceError(
                    f"workspace {workspace} does not exist or is not a folder (an unmounted volume, a moved or "
                    "renamed folder?): nothing was retained or forgotten. Fix: mount or create it, or point the "
                    "agent's `workspace` at the right one"
                )
            self.dir.mkdir(exist_ok=True)
            lock = FileLock(str(self.dir / LOCK_NAME))
            try:
                lock.acquire(timeout=LOCK_TIMEOUT_SECONDS)
            except Timeout as exc:
                raise LockError(f"another process holds {self.dir / LOCK_NAME}; wait for it or stop it") from exc
            try:
                self._load()
                yield
            finally:
                lock.release()

    # -- operations ---------------------------------------------------------------------------------
    def known(self, entry_id_: str) -> Status | None:
        with self._loaded():
            if entry_id_ in self._tombstoned:
                return "forgotten"
            return "duplicate" if entry_id_ in self._ids else None

    def retain(self, entry: dict[str, Any], metadata: dict[str, Any] | None = None) -> tuple[Status, str]:
        """Append ``entry`` as one block (redacted) unless it is retained or tombstoned already."""
        eid, day, block = render_entry(entry, metadata or {})
        return self.write_blocks([(eid, day, block)])[0], eid

    def write_blocks(self, items: Sequence[tuple[str, str, str]]) -> list[Status]:
        """Append each ``(entry id, day, rendered block)`` to ``sessions/<day>.md`` unless its id is retained or
        tombstoned already; returns once the appends are durable (one ``fsync`` per file)."""
        out: list[Status] = []
        mine = 0
        with self._loaded():
            for eid, day, block in items:
                if not DAY.fullmatch(day) or not ENTRY_ID.fullmatch(eid):
                    raise WorkspaceError(f"not a retained entry: id {eid[:40]!r}, day {day[:20]!r}")
                if eid in self._tombstoned:
                    out.append("forgotten")
                    continue
                if eid in self._ids:
                    out.append("duplicate")
                    continue
                path = self.dir / f"{day}.md"
                self._append(path, day, block)
                self._ids.add(eid)
                self._unsynced.add(path)
                self._appended += 1
                mine = self._appended
                out.append("retained")
            if mine:
                self._seen = self._signature()
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
                paths, self._unsynced = self._unsynced, set()
                upto = self._appended
            try:
                for path in sorted(paths):
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            except OSError:
                with self._lock:
                    self._unsynced |= paths
                raise
            self._durable = upto

    def _append(self, path: Path, day: str, block: str) -> None:
        created = not path.exists()
        fd = open_regular(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, shown=f"{SESSIONS_DIR}/{path.name}")
        try:
            size = os.fstat(fd).st_size
            tail = os.pread(fd, 2, size - min(size, 2)).decode("utf-8", errors="replace") if size else ""
            prefix = blocks.joiner(tail) if size else blocks.file_header(day)
            _write_all(fd, (prefix + block).encode("utf-8"))  # made durable by _make_durable
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.dir)

    def forget(self, entry_ids: list[str], reason: str | None = None) -> tuple[int, list[str]]:
        """Tombstone ``entry_ids`` and remove their blocks; ``(blocks removed, files rewritten)``."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self._loaded():
            new = [i for i in dict.fromkeys(entry_ids) if i not in self._tombstoned]
            if new:
                lines = []
                for i in new:
                    stone: dict[str, Any] = {"agent_id": self.agent.id, "entry_id": i}
                    if reason:
                        stone["reason"] = reason.strip()
                    stone["forgotten_at"] = now
                    lines.append(json.dumps(stone, ensure_ascii=False) + "\n")
                fd = os.open(self.dir / TOMBSTONES, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    _write_all(fd, "".join(lines).encode("utf-8"))
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self._tombstoned.update(new)
            targets = set(entry_ids)
            removed, changed = 0, []
            for path in self._files():
                text = path.read_text(encoding="utf-8", errors="replace")
                if not any(i in text for i in targets):
                    continue
                text, gone = blocks.remove(text, targets)
                if gone:
                    _rewrite(path, text)
                    removed += len(gone)
                    changed.append(f"{SESSIONS_DIR}/{path.name}")
            self._ids.difference_update(targets)
            self._seen = self._signature()
        return removed, changed

    def stats(self) -> dict[str, Any]:
        with self._loaded():
            return {"retained": len(self._ids), "tombstones": len(self._tombstoned), "files": len(self._files())}
