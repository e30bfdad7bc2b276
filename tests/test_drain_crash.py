"""``kill -9`` of the agent's ``mdmem watch`` while it writes what a replica without the files retained into
``sessions/*.md``: every round converges to exactly one block per entry in the files and one copy in the index,
with the forgotten ones in neither; and a writer that died between the file and the database (blocks in the
file, entries still pending, a torn last block) is finished by the next one without a second copy."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from mdmem.files import sessionblocks as blocks
from mdmem.files.sessionlog import render_entry
from tests.daemon_helpers import Daemon
from tests.fleet import Fleet, eventually, recalled
from tests.service_bodies import openai_entry, retain_body

pytestmark = pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
ROUNDS = 5
PER_ROUND = 240
DAYS = ("2026-11-21", "2026-11-22", "2026-11-23")


def entry(r: int, i: int) -> dict[str, Any]:
    day = DAYS[i % len(DAYS)]
    ts = f"{day}T10:{i // 60:02d}:{i % 60:02d}Z"
    return openai_entry(f"what is token k{r}x{i}?", f"Token k{r}x{i} is zebra{r}q{i}.", id=f"hist1_k{r}_{i}", ts=ts)


def retain_all(svc: Any, entries: list[dict[str, Any]]) -> None:
    def one(e: dict[str, Any]) -> None:
        reply = svc.call("POST", "/retain", retain_body("main", e))
        assert reply.status == 202 and reply.body["status"] == "retained", reply.raw

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, entries))


def test_kill_9_of_the_watch_mid_drain_converges_to_one_block_per_entry(fleet: Fleet) -> None:
    replica = fleet.replica("a")
    rng = random.Random(13)
    retained: set[str] = set()
    forgotten: set[str] = set()
    killed_mid_drain = 0
    for r in range(ROUNDS):
        batch = [entry(r, i) for i in range(PER_ROUND)]
        retain_all(replica, batch)
        retained |= {e["id"] for e in batch}
        # forget a few: some still pending, some written in an earlier round
        drop = rng.sample(sorted(retained - forgotten), 6)
        assert replica.call("POST", "/forget", {"agent_id": "main", "entry_ids": drop}).status == 204
        forgotten |= set(drop)
        daemon = Daemon(fleet.agent_config)
        log = fleet.entry_log()
        try:  # kill it as soon as it has begun to write, while the database still has entries pending for it
            before = sum(p.stat().st_size for p in (fleet.workspace / "sessions").glob("*.md"))
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                now = sum(p.stat().st_size for p in (fleet.workspace / "sessions").glob("*.md"))
                if now > before:
                    break
                time.sleep(0.001)
            time.sleep(rng.choice((0.0, 0.005, 0.02, 0.08, 0.3)))  # mid-batch, between batches, after
            os.kill(daemon.proc.pid, signal.SIGKILL)
            daemon.proc.wait(10)
            pending = log.stats()["pending"]
            killed_mid_drain += pending > 0
        finally:
            log.conn.close()
            daemon.stop()
        i = next(i for i in range(PER_ROUND) if f"hist1_k{r}_{i}" not in forgotten)
        assert f"zebra{r}q{i}" in recalled(replica, f"what is token k{r}x{i}?")  # meanwhile, wherever it is now

    daemon = Daemon(fleet.agent_config)
    log = fleet.entry_log()
    try:
        assert eventually(lambda: not log.has_work(), 60)
        assert eventually(lambda: fleet.indexed() == Counter(retained - forgotten), 30)
    finally:
        log.conn.close()
        daemon.stop()
    files, torn = fleet.in_files()
    assert torn == []
    assert files == Counter(retained - forgotten)  # exactly one block per entry, none of the forgotten
    assert killed_mid_drain >= 1, "no kill landed while entries were still pending"


def test_a_writer_that_died_between_the_file_and_the_database_is_finished_without_a_second_copy(
    fleet: Fleet,
) -> None:
    replica = fleet.replica("a")
    batch = [entry(0, i) for i in range(12)]
    retain_all(replica, batch)
    ids = [e["id"] for e in batch]
    # What a watch killed after its appends and before marking them written leaves: the first eight blocks in
    # the files (durable), then a torn ninth; every entry still pending in the database.
    sessions = fleet.workspace / "sessions"
    sessions.mkdir()
    rendered = [render_entry(e, {}) for e in batch]
    for _eid, day, block in rendered[:8]:
        path = sessions / f"{day}.md"
        data = path.read_bytes() if path.exists() else b""
        path.write_bytes(blocks.appended(data, day, block))
    eid, day, block = rendered[8]
    path = sessions / f"{day}.md"
    path.write_bytes(blocks.appended(path.read_bytes() if path.exists() else b"", day, block)[:-40])
    log = fleet.entry_log()
    try:
        assert log.stats()["pending"] == 12
        daemon = Daemon(fleet.agent_config)
        try:
            assert eventually(lambda: not log.has_work(), 30)
            assert eventually(lambda: fleet.indexed() == Counter(ids), 30)
        finally:
            daemon.stop()
        assert log.stats()["written"] == 12
    finally:
        log.conn.close()
    files, torn = fleet.in_files()
    assert torn == [] and files == Counter(ids)
