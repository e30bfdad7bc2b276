"""Use tracking (docs/lifecycle.md): what searches showed, packs (and recalls) included and memory_get read,
counted per chunk and per file in the index, never in the Markdown.

A use is added to an in-memory accumulator (a dict, under a lock: no database on the hot path); the
accumulator is written to the index in one transaction at most every ``usage.flushSeconds`` (by the use that
finds it due) and when the engine closes. A read-only index or replica drops what it cannot write and says
so in status; a write that fails otherwise keeps the counts for the next flush (up to ``MAX_PENDING`` keys).

A process that closes without having opened its index (``mdmem get``: one file read, no index) appends its
counts to a spool file beside the index (``<index>.uses``, one line, one write) instead of opening it; the
next flush of any process that has the index open takes the spool (renamed to a name of its own first, so
two processes never take the same lines) and adds it to the index.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdmem.store.rows import USE_KINDS, UsageRow
from mdmem.util.errors import StoreError

if TYPE_CHECKING:
    from mdmem.config.settings import UsageConfig
    from mdmem.store.api import IndexStore

MAX_PENDING = 50_000  # keys kept while writes fail; past this the oldest counts are dropped
Counts = dict[tuple[str, str, str], list[float]]  # (path, chunk, kind) -> [uses, last use]


def _add(counts: Counts, key: tuple[str, str, str], uses: int, last: float) -> None:
    slot = counts.setdefault(key, [0, last])
    slot[0] += uses
    slot[1] = max(slot[1], last)


class UsageTracker:
    """The accumulator of one engine: ``record`` on every use, ``flush`` when due and at close."""

    def __init__(
        self,
        store: Callable[[], IndexStore],
        settings: UsageConfig,
        spool: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.spool = spool
        self.enabled = settings.enabled
        self.flush_seconds = settings.flush_seconds
        self.clock = clock
        self.pending: Counts = {}
        self.lock = threading.Lock()
        self.next_flush = clock() + settings.flush_seconds
        self.dropped = 0  # uses a read-only index could not keep
        self.last_error: str | None = None

    def record(self, kind: str, used: Iterable[tuple[str, str]]) -> bool:
        """Count one use of ``kind`` for each (path, chunk hash) in ``used`` (chunk "": the whole file); False
        when tracking is off (``usage.enabled``) and nothing was counted."""
        if not self.enabled:
            return False
        if kind not in USE_KINDS:
            raise ValueError(f"unknown use kind {kind!r}: one of {', '.join(USE_KINDS)}")
        now = self.clock()
        with self.lock:
            for path, chunk in dict.fromkeys(used):
                _add(self.pending, (path, chunk, kind), 1, now)
            due = now >= self.next_flush
        if due:
            self.flush()
        return True

    def close(self, index_open: bool) -> None:
        """At the end: write what waits, to the index when it is open, else to the spool (see the docstring)."""
        if index_open or self.spool is None:
            self.flush()
            return
        with self.lock:
            taken, self.pending = self.pending, {}
        if taken and not self._spool_out(taken):
            self.dropped += sum(int(v[0]) for v in taken.values())

    def _spool_out(self, counts: Counts) -> bool:
        """Append ``counts`` to the spool in one write; False (and why, in ``last_error``) when it cannot be."""
        assert self.spool is not None
        line = json.dumps([[p, c, k, int(v[0]), v[1]] for (p, c, k), v in counts.items()]) + "\n"
        try:
            self.spool.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.spool, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError as exc:
            self.last_error = f"uses not recorded: {exc.strerror or exc}"
            return False
        return True

    def _take_spool(self) -> Counts:
        """The counts other processes left in the spool, now this process's (the file renamed, read, removed)."""
        if self.spool is None or not self.spool.exists():
            return {}
        mine = self.spool.with_name(f"{self.spool.name}.{os.getpid()}.{threading.get_ident()}")
        try:
            os.rename(self.spool, mine)
        except OSError:
            return {}  # another process took it
        found: Counts = {}
        try:
            lines = mine.read_text(encoding="utf-8").splitlines()
        except OSError:
            return {}
        for line in lines:
            try:
                for p, c, k, uses, last in json.loads(line):
                    _add(found, (str(p), str(c), str(k)), int(uses), float(last))
            except (ValueError, TypeError):
                continue  # a torn line: what it held is lost, nothing else
        with contextlib.suppress(OSError):
            mine.unlink()
        return found

    def flush(self) -> int:
        """Write the counts gathered so far, then the spool's; returns how many rows went (0 when none, or when
        the write failed). The spool is taken only by a process that could write its own counts, and goes back
        to the spool when its write fails."""
        with self.lock:
            self.next_flush = self.clock() + self.flush_seconds
            taken, self.pending = self.pending, {}
        written = 0
        if taken:
            try:
                written = self._write(taken)
            except StoreError as exc:
                self._failed(taken, exc, read_only=exc.kind == "read-only")
                return 0
            except Exception as exc:  # a database error the store did not translate: keep the counts, say why
                self._failed(taken, exc, read_only=False)
                return 0
        spooled = self._take_spool()
        if spooled:
            try:
                written += self._write(spooled)
            except Exception as exc:  # another process (or a later flush) writes them
                self.last_error = f"spooled uses not recorded yet: {exc}"
                self._spool_out(spooled)
                return written
        if written:
            self.last_error = None
        return written

    def _write(self, counts: Counts) -> int:
        rows = [UsageRow(p, c, k, int(v[0]), v[1]) for (p, c, k), v in counts.items()]
        self.store().add_usage(rows)
        return len(rows)

    def _failed(self, taken: Counts, exc: BaseException, *, read_only: bool) -> None:
        self.last_error = f"uses not recorded: {exc}"
        if read_only:
            self.dropped += sum(int(v[0]) for v in taken.values())
            return
        with self.lock:
            for key, (uses, last) in taken.items():
                _add(self.pending, key, int(uses), last)
            while len(self.pending) > MAX_PENDING:
                self.dropped += int(self.pending.pop(next(iter(self.pending)))[0])

    def state(self) -> dict[str, Any]:
        """What status shows of the accumulator: uses waiting to be written, dropped, the last failure."""
        with self.lock:
            waiting = sum(int(v[0]) for v in self.pending.values())
        return {"enabled": self.enabled, "waiting": waiting, "dropped": self.dropped, "error": self.last_error}


@dataclass(frozen=True)
class FileUse:
    """One file's uses: in all, by kind, and the last one (None: never used)."""

    path: str
    uses: int
    by_kind: dict[str, int]
    last_used_at: float | None

    def to_dict(self) -> dict[str, Any]:
        """As ``usage`` and status show it: a token in a file name becomes its marker (mdmem.util.redaction)."""
        from mdmem.util.redaction import redact_path  # here: ``mdmem get`` loads this module, not the rules

        path = redact_path(self.path)
        return {"path": path, "uses": self.uses, "byKind": self.by_kind, "lastUsedAt": self.last_used_at}


def file_uses(paths: Iterable[str], rows: Iterable[UsageRow]) -> dict[str, FileUse]:
    """The uses of each of ``paths`` (indexed files), summed over their chunks from ``rows``."""
    uses: dict[str, dict[str, int]] = {p: {} for p in paths}
    last: dict[str, float] = {}
    for r in rows:
        if r.path not in uses:
            continue  # a file no longer indexed (moved or removed): its counts wait for it
        uses[r.path][r.kind] = uses[r.path].get(r.kind, 0) + r.uses
        last[r.path] = max(last.get(r.path, 0.0), r.last_used_at)
    return {p: FileUse(p, sum(k.values()), dict(sorted(k.items())), last.get(p)) for p, k in uses.items()}


def hottest_and_coldest(uses: dict[str, FileUse], limit: int) -> dict[str, list[dict[str, Any]]]:
    """The ``limit`` most used files (most uses, then the latest) and the ``limit`` coldest (never used first,
    then the longest unused; none of the hottest), each ``FileUse.to_dict``."""
    ranked = sorted(uses.values(), key=lambda u: (-u.uses, -(u.last_used_at or 0.0), u.path))
    hot = [u for u in ranked if u.uses][:limit]
    shown = {u.path for u in hot}
    rest = [u for u in uses.values() if u.path not in shown]
    cold = sorted(rest, key=lambda u: (u.last_used_at or 0.0, u.uses, u.path))[:limit]
    return {"hottest": [u.to_dict() for u in hot], "coldest": [u.to_dict() for u in cold]}
