"""The agent's host writes what replicas without its files retained and forgot into ``sessions/*.md``.

``drain`` first applies the database's unapplied tombstones (``SessionLog.forget``: tombstone lines, then
each file rewritten atomically) and marks them applied; then appends the pending entries' blocks, exactly
as a local retain appends them (``SessionLog.write_blocks``: the folder's file lock, one ``write`` per block,
one ``fsync`` per file), and marks them written. Every step is idempotent, so a crash anywhere converges on
the next drain: a block appended but not marked is found in the file (``duplicate``) and marked then; a torn
block is cut by ``SessionLog`` and written again; a tombstone applied but not marked is applied again (a
no-op). Meanwhile the index holds the database's view of the files (mdmem.index.entries), so searches see
each entry once throughout.

``Drainer`` runs it for one agent every ``DRAIN_SECONDS`` while the database has work for the host
(``mdmem watch``; ``mdmem serve`` for the agents whose files it holds), then asks for a sync.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mdmem.config.load import AgentConfig
from mdmem.engine.background import BackgroundWork, Backoff
from mdmem.files.sessionlog import SessionLog
from mdmem.store.api import EntryLog
from mdmem.store.open import entry_log
from mdmem.util.errors import MdMemoryError

DRAIN_SECONDS = 1.0
BATCH = 200  # pending entries appended per fsync and transaction


def drain(log: SessionLog, entries: EntryLog) -> dict[str, int]:
    """Apply the tombstones and write the pending entries; ``{applied, written, duplicates, forgotten}``."""
    out = {"applied": 0, "written": 0, "duplicates": 0, "forgotten": 0}
    stones = entries.unapplied()
    by_reason: dict[str | None, list[str]] = {}
    for t in stones:
        by_reason.setdefault(t.reason, []).append(t.entry_id)
    for reason, ids in by_reason.items():
        log.forget(ids, reason)
        entries.applied(ids)
        out["applied"] += len(ids)
    while True:
        batch = entries.pending(BATCH)
        if not batch:
            return out
        statuses = log.write_blocks([(e.entry_id, e.day, e.block) for e in batch])
        done = [e.entry_id for e, st in zip(batch, statuses, strict=True) if st != "forgotten"]
        gone = [e.entry_id for e, st in zip(batch, statuses, strict=True) if st == "forgotten"]
        entries.written(done)  # after the fsync: a crash before this finds them in the files next time
        if gone:  # tombstoned in the files (a local forget before this host knew the entry)
            entries.forget(gone, None, applied=True)
        out["written"] += statuses.count("retained")
        out["duplicates"] += statuses.count("duplicate")
        out["forgotten"] += len(gone)


class Drainer:
    """Drains one agent's entries every ``interval`` on a ``BackgroundWork`` of its own; ``on_drained`` is
    called after a drain that wrote, ``on_error`` once per distinct failure (the next round tries again)."""

    def __init__(
        self,
        agent: AgentConfig,
        on_drained: Callable[[dict[str, Any]], None],
        on_error: Callable[[BaseException], None],
        interval: float = DRAIN_SECONDS,
        log: SessionLog | None = None,
    ) -> None:
        self.agent = agent
        self.log = log or SessionLog(agent)  # the service passes the one its retains append with
        self.on_drained = on_drained
        self.on_error = on_error
        self.interval = interval
        self._last_error: str | None = None
        self.work = BackgroundWork(
            self._round,
            name=f"mdmemory-drain-{agent.id}",
            interval=interval,
            backoff=Backoff(first=interval, most=interval, store_most=interval),  # every round, failed or not
        )

    def start(self) -> None:
        self.work.start()

    def stop(self) -> None:
        self.work.stop(30)

    def run_once(self) -> dict[str, int] | None:
        """One drain if the database has work for this host; its counts (None: nothing to do)."""
        with entry_log(self.agent) as entries:
            if entries is None or not entries.has_work():
                return None
            return drain(self.log, entries)

    def _round(self) -> None:
        try:
            report = self.run_once()
        except (MdMemoryError, OSError) as exc:  # the database or the workspace is away: the next round
            if str(exc) != self._last_error:
                self.on_error(exc)
            self._last_error = str(exc)
            return
        self._last_error = None
        if report is not None:
            self.on_drained(report)
