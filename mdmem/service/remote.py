"""Retain and forget for an agent whose index is in the shared PostgreSQL store, on a replica that holds its
files (``LocalLog``) or one that does not (``RemoteLog``; ``service.remoteAgents``).

Both keep the database's record of entries and tombstones (``mdmem.store.api.EntryLog``), so that any
replica recognises a duplicate or a forgotten id whichever replica saw it first:

- ``RemoteLog.retain`` commits the rendered block as a pending entry (the ``202`` follows the commit); the
  agent's host writes it into ``sessions/<day>.md`` (mdmem.engine.drain) and, until then, the index holds
  it as part of that file's view (mdmem.index.entries). ``forget`` commits tombstones; the caller's sync then
  removes the blocks from the index at once, and the agent's host removes them from its files.
- ``LocalLog`` writes the files as ``SessionLog`` does, and records what it retained and forgot in the
  database; a database that cannot be reached only costs the cross-replica check of a retain. A retain is
  answered ``duplicate`` only when the files hold the block: an entry the database knows but the files do
  not hold (lost to a hand edit, or still pending there) is written into them now; the drain then finds it.

Which agents a replica does not hold: ``service.remoteAgents`` (ids, or ``"*"``), or ``MDMEMORY_REMOTE_AGENTS``
(comma-separated) instead; the configuration marks them (``AgentConfig.files_here``) and refuses one whose
index is in SQLite. An agent not named there must have its workspace here: a missing one answers 503, as an
unmounted volume should.
"""

from __future__ import annotations

import contextlib
from typing import Any

from mdmem.config.load import AgentConfig
from mdmem.files.retained import DEFAULT_MAX_MESSAGE_CHARS, Prepared, prepare
from mdmem.files.sessionlog import SessionLog, Status, tombstone_reason
from mdmem.store.open import entry_log
from mdmem.util.errors import StoreError


def _reason(reason: str | None) -> str | None:
    return tombstone_reason(reason) if reason and reason.strip() else None


class RemoteLog:
    """An agent's retained turns on a replica that does not hold its files: the database's entries only."""

    def __init__(self, agent: AgentConfig) -> None:
        self.agent = agent

    def retain(
        self, entry: dict[str, Any], metadata: dict[str, Any] | None = None, max_chars: int = DEFAULT_MAX_MESSAGE_CHARS
    ) -> tuple[Status, str]:
        p = prepare(entry, metadata or {}, max_chars)
        return self.store(p), p.entry_id

    def size_of(self, day: str) -> int | None:
        return None  # the files are on the agent's host

    def store(self, p: Prepared) -> Status:
        with entry_log(self.agent) as log:
            assert log is not None
            return log.retain(p.entry_id, p.day, p.block)

    def forget(self, entry_ids: list[str], reason: str | None = None) -> tuple[int, list[str]]:
        """Tombstone ``entry_ids``; the caller's sync removes their blocks from the index."""
        with entry_log(self.agent) as log:
            assert log is not None
            return log.forget(entry_ids, _reason(reason), applied=False), []

    def stats(self) -> dict[str, Any]:
        with entry_log(self.agent) as log:
            assert log is not None
            return {"filesHere": False, **log.stats()}


class LocalLog(SessionLog):
    """``SessionLog`` for an agent in the shared store: the database's entries and tombstones are checked and
    kept too, so replicas without the files see what this one retained and forgot."""

    def store(self, p: Prepared) -> Status:
        eid, day, block = p.entry_id, p.day, p.block
        known, reached = None, False
        with contextlib.suppress(StoreError), entry_log(self.agent) as log:
            known = log.known(eid) if log is not None else None
            reached = True
        if known == "forgotten":
            return known
        status = self.write_blocks([(eid, day, block)])[0]  # "duplicate" only when the files hold it
        if status == "retained" and reached:  # the database away: the files alone, without a second wait
            with contextlib.suppress(StoreError), entry_log(self.agent) as log:
                if log is not None:
                    log.record(eid, day)
        return status

    def forget(self, entry_ids: list[str], reason: str | None = None) -> tuple[int, list[str]]:
        removed, changed = super().forget(entry_ids, reason)  # the files first: the intent is durable there
        with entry_log(self.agent) as log:
            if log is not None:
                log.forget(entry_ids, _reason(reason), applied=True)
        return removed, changed
