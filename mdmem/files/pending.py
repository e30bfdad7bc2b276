"""Retained entries the agent's files do not hold yet, and tombstones: what a ``mdmem serve`` replica keeps
in the shared database (mdmem.store.api ``EntryLog``) until the agent's host writes them into its session
files (mdmem.files.sessionview shows a session file with them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PendingEntry:
    """A retained entry not in the agent's files yet: its rendered block, for ``sessions/<day>.md``."""

    entry_id: str
    day: str  # YYYY-MM-DD
    block: str


@dataclass(frozen=True)
class Tombstone:
    entry_id: str
    reason: str | None = None
