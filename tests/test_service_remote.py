"""``mdmemory serve`` replicas that do not hold the agent's workspace (``service.remoteAgents``), one PostgreSQL,
and the agent's host running a real ``mdmemory watch``: a retain on a replica is durable in the database, recalled
by every replica at once, written into the agent's ``sessions/*.md`` exactly once by the watch, and indexed once
throughout; a forget through a replica is honoured at once everywhere and applied to the files."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_helpers import Daemon
from tests.fleet import Fleet, eventually, recalled
from tests.service_bodies import openai_entry, retain_body

pytestmark = pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
DAY = "sessions/2026-11-23.md"


@pytest.fixture
def fleet(tmp_path: Path, store_backend: dict[str, Any]) -> Iterator[Fleet]:
    f = Fleet(tmp_path, store_backend)
    try:
        yield f
    finally:
        f.stop()


def retain(svc: Any, question: str, answer: str, eid: str, ts: str = "2026-11-23T14:03:07Z") -> str:
    reply = svc.call("POST", "/retain", retain_body("main", openai_entry(question, answer, id=eid, ts=ts)))
    assert reply.status == 202, reply.raw
    return str(reply.body["status"])


def test_a_retain_on_a_replica_without_the_files_is_recalled_everywhere_and_written_once_by_the_watch(
    fleet: Fleet,
) -> None:
    a, b = fleet.replica("a"), fleet.replica("b")
    question = "where does the nightly backup of the walrus cluster go?"
    assert retain(a, question, "The walrus cluster backup goes to s3://walrus-nightly at 03:00.", "hist1_w1") == (
        "retained"
    )
    assert eventually(lambda: "walrus-nightly" in recalled(b, question), 5)  # the other replica, from the store
    assert "walrus-nightly" in recalled(a, question)
    assert retain(b, question, "again", "hist1_w1") == "duplicate"  # idempotent across replicas
    assert fleet.copies_indexed("hist1_w1") == 1
    assert fleet.blocks_in_files("hist1_w1") == 0  # the agent's host is not running yet
    assert fleet.entry_state("hist1_w1") == "pending"

    seen: list[int] = []  # the index's copies of the entry, watched while the host writes it into its file
    done = threading.Event()

    def watch_index() -> None:
        while not done.is_set():
            seen.append(fleet.copies_indexed("hist1_w1"))

    watcher = threading.Thread(target=watch_index)
    watcher.start()
    daemon = Daemon(fleet.agent_config)
    try:
        daemon.wait_for(lambda e: e.get("event") == "drained" and e.get("written") == 1)
        assert eventually(lambda: fleet.row_size(DAY) not in (None, -1)), daemon.log  # the index: the file itself
    finally:
        done.set()
        watcher.join()
        daemon.stop()
    assert seen and set(seen) == {1}, f"copies seen while draining: {sorted(set(seen))}"
    assert fleet.blocks_in_files("hist1_w1") == 1
    assert fleet.entry_state("hist1_w1") == "written"
    assert "walrus-nightly" in recalled(b, question)
    assert retain(a, question, "again", "hist1_w1") == "duplicate"


def test_a_forget_through_a_replica_is_honoured_at_once_and_applied_to_the_agents_files(fleet: Fleet) -> None:
    a, b = fleet.replica("a"), fleet.replica("b")
    daemon = Daemon(fleet.agent_config)
    try:
        question = "what colour is the walrus van?"
        assert retain(a, question, "The walrus van is teal.", "hist1_v1") == "retained"
        assert retain(a, "where is the walrus depot?", "The depot is in Tromso.", "hist1_v2") == "retained"
        assert eventually(lambda: fleet.blocks_in_files("hist1_v1") == 1 and fleet.blocks_in_files("hist1_v2") == 1)
        assert eventually(lambda: "teal" in recalled(b, question))

        gone = b.call("POST", "/forget", {"agent_id": "main", "entry_ids": ["hist1_v1"], "reason": "asked"})
        assert gone.status == 204
        assert "teal" not in recalled(a, question)  # at once, on every replica
        assert "teal" not in recalled(b, question)
        assert fleet.copies_indexed("hist1_v1") == 0
        assert fleet.copies_indexed("hist1_v2") == 1  # its neighbour in the same file stays
        assert "Tromso" in recalled(a, "where is the walrus depot?")
        assert eventually(lambda: fleet.blocks_in_files("hist1_v1") == 0)  # the host applies it to the files
        stones = (fleet.workspace / "sessions" / ".tombstones.jsonl").read_text()
        assert "hist1_v1" in stones and '"reason": "asked"' in stones
        assert retain(a, question, "The walrus van is teal.", "hist1_v1") == "forgotten"
        assert retain(b, question, "The walrus van is teal.", "hist1_v1") == "forgotten"
        assert eventually(lambda: fleet.row_size(DAY) not in (None, -1))
        assert fleet.copies_indexed("hist1_v1") == 0 and fleet.copies_indexed("hist1_v2") == 1
    finally:
        daemon.stop()
