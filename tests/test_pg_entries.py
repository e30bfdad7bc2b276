"""The database's record of retained entries and tombstones (mdmem.store.pg.entries) on a real PostgreSQL:
statuses across replicas, tombstones winning whatever order they commit in, and what the files' host drains."""

from __future__ import annotations

from typing import Any

from mdmem.files.pending import PendingEntry, Tombstone
from mdmem.store.pg.entries import PgEntryLog


def log_of(pg: tuple[Any, str], agent: str = "main") -> PgEntryLog:
    conn, schema = pg
    return PgEntryLog(conn, schema, agent)


def test_statuses_of_a_retain(pg: tuple[Any, str]) -> None:
    log = log_of(pg)
    assert log.known("hist1_a") is None
    assert log.retain("hist1_a", "2026-11-23", "block a") == "retained"
    assert log.retain("hist1_a", "2026-11-23", "block a again") == "duplicate"
    assert log.known("hist1_a") == "duplicate"
    assert log.pending() == [PendingEntry("hist1_a", "2026-11-23", "block a")]
    assert log_of(pg, "other").pending() == []  # agents never see each other's entries
    assert log_of(pg, "other").retain("hist1_a", "2026-11-23", "theirs") == "retained"


def test_written_entries_are_no_longer_pending_and_keep_no_text(pg: tuple[Any, str]) -> None:
    log = log_of(pg)
    for eid in ("hist1_a", "hist1_b", "hist1_c"):
        log.retain(eid, "2026-11-23", f"block {eid}")
    assert [e.entry_id for e in log.pending(2)] == ["hist1_a", "hist1_b"]  # oldest first
    assert log.has_work()
    log.written(["hist1_a", "hist1_b"])
    assert [e.entry_id for e in log.pending()] == ["hist1_c"]
    assert log.retain("hist1_a", "2026-11-23", "x") == "duplicate"
    conn, schema = pg
    assert conn.execute(f"SELECT block FROM {schema}.entries WHERE entry_id = 'hist1_a'").fetchone() == (None,)
    conn.commit()
    log.written(["hist1_c"])
    assert not log.has_work()
    assert log.stats() == {"pending": 0, "written": 3, "tombstones": 0, "unapplied": 0}


def test_a_tombstone_wins_before_or_after_the_retain(pg: tuple[Any, str]) -> None:
    log = log_of(pg)
    log.retain("hist1_a", "2026-11-23", "a")
    assert log.forget(["hist1_a", "hist1_never"], "asked", applied=False) == 1  # one entry known here changed
    assert log.pending() == []
    assert log.known("hist1_a") == "forgotten" and log.known("hist1_never") == "forgotten"
    assert log.retain("hist1_a", "2026-11-23", "a") == "forgotten"
    assert log.retain("hist1_never", "2026-11-23", "n") == "forgotten"  # tombstoned ahead
    assert log.unapplied() == [Tombstone("hist1_a", "asked"), Tombstone("hist1_never", "asked")]
    assert log.has_work()
    log.applied(["hist1_a", "hist1_never"])
    assert log.unapplied() == [] and not log.has_work()
    assert log.forget(["hist1_a"], None, applied=False) == 0  # again: nothing new, still applied
    assert log.unapplied() == []


def test_a_pending_entry_with_a_tombstone_is_never_drained(pg: tuple[Any, str]) -> None:
    """Two replicas: one retains while the other forgets the same id; whichever commits first, the entry is not
    pending once the tombstone exists (the tombstone's check in ``retain`` may have run before it)."""
    conn, schema = pg
    log = log_of(pg)
    log.forget(["hist1_race"], None, applied=False)
    conn.execute(  # the retain that checked for a tombstone before the forget committed, then inserted
        f"INSERT INTO {schema}.entries (agent_id, entry_id, day, block, state, received_at) "
        "VALUES ('main', 'hist1_race', '2026-11-23', 'b', 'pending', 0)"
    )
    conn.commit()
    assert log.pending() == []
    assert log.has_work()  # the tombstone, still to apply


def test_entries_written_here_are_recorded_and_versions_change(pg: tuple[Any, str]) -> None:
    log = log_of(pg)
    first = log.version()
    log.record("hist1_local", "2026-11-23")
    assert log.known("hist1_local") == "duplicate" and log.pending() == []
    second = log.version()
    assert second[0] > first[0] and second[1] == first[1]
    log.forget(["hist1_local"], "x", applied=True)
    assert log.version()[1] > second[1]
    assert log.unapplied() == []  # forgotten from the files already
    assert log.stats() == {"pending": 0, "written": 0, "tombstones": 1, "unapplied": 0}
