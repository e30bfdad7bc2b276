"""``mdmem serve`` replicas that do not hold the agent's workspace (``service.remoteAgents``), one PostgreSQL,
and the agent's host running a real ``mdmem watch``: a retain on a replica is durable in the database, recalled
by every replica at once, written into the agent's ``sessions/*.md`` exactly once by the watch, and indexed once
throughout; a forget through a replica is honoured at once everywhere and applied to the files."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_helpers import Daemon
from tests.fleet import TOKEN, Fleet, eventually, recalled
from tests.pg_tcp import TcpPostgres
from tests.service_bodies import openai_entry, recall_body, retain_body
from tests.service_server import Service, write_config

postgres = pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
DAY = "sessions/2026-11-23.md"


def cli(svc: Service, *args: str) -> str:
    """``mdmem ARGS --json`` on the replica's host (its configuration and state folder)."""
    env = {**os.environ, "MDMEMORY_HOME": str(svc.home)}
    argv = [sys.executable, "-m", "mdmem", *args, "--config", str(svc.config), "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def recall_text(svc: Service, question: str) -> str:
    """The recalled texts, or "" while the service answers 503 (its connection pool reconnecting)."""
    reply = svc.call("POST", "/recall", recall_body("main", question))
    return " ".join(str(m["text"]) for m in reply.body["memories"]) if reply.status == 200 else ""


def retain(svc: Any, question: str, answer: str, eid: str, ts: str = "2026-11-23T14:03:07Z") -> str:
    reply = svc.call("POST", "/retain", retain_body("main", openai_entry(question, answer, id=eid, ts=ts)))
    assert reply.status == 202, reply.raw
    return str(reply.body["status"])


@postgres
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


@postgres
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


@postgres
def test_a_day_without_the_agents_host_entries_accumulate_are_recalled_and_land_in_the_files_on_its_return(
    fleet: Fleet,
) -> None:
    a, b = fleet.replica("a"), fleet.replica("b")
    ids = []
    for i in range(20):  # two days of turns, half through each replica; the agent's host is down
        day = "2026-11-23" if i < 10 else "2026-11-24"
        svc = (a, b)[i % 2]
        assert (
            retain(
                svc,
                f"what is the code of locker {i}?",
                f"Locker {i} opens with otter{i}x.",
                f"hist1_d{i}",
                f"{day}T09:00:{i:02d}Z",
            )
            == "retained"
        )
        ids.append(f"hist1_d{i}")
    assert b.call("POST", "/forget", {"agent_id": "main", "entry_ids": ["hist1_d3", "hist1_d15"]}).status == 204
    kept = Counter(i for i in ids if i not in ("hist1_d3", "hist1_d15"))
    for i in (0, 7, 12, 19):  # each replica recalls what the other retained
        assert f"otter{i}x" in recalled((b, a)[i % 2], f"what is the code of locker {i}?")
    assert "otter3x" not in recalled(a, "what is the code of locker 3?")
    assert fleet.indexed() == kept
    assert not (fleet.workspace / "sessions").exists()  # nothing on the host yet
    for command in ("search", "pack"):  # the command line on a replica's host finds them too
        out = cli(a, command, "what is the code of locker 12?")
        assert "otter12x" in out and "sessions/2026-11-24.md" in out, out

    daemon = Daemon(fleet.agent_config)  # the host is back
    log = fleet.entry_log()
    try:
        assert eventually(lambda: not log.has_work(), 30)
        assert eventually(lambda: fleet.row_size("sessions/2026-11-24.md") not in (None, -1), 30)
        assert eventually(lambda: fleet.row_size(DAY) not in (None, -1), 30)
    finally:
        log.conn.close()
        daemon.stop()
    assert fleet.in_files() == (kept, [])
    assert fleet.indexed() == kept
    assert "otter12x" in recalled(a, "what is the code of locker 12?")


@postgres
def test_which_replicas_take_the_database_path(fleet: Fleet, tmp_path: Path) -> None:
    """A replica configured as remote for the agent retains through the database; one that should hold the
    files but finds the workspace missing (an unmounted volume) answers 503 and creates nothing, as before;
    a remote agent whose index is in SQLite is refused at start."""
    remote = fleet.replica("remote")
    unmounted = fleet.replica("unmounted", remote=False)
    assert retain(remote, "q?", "a.", "hist1_r1") == "retained"
    status = remote.call("GET", "/agents/main/status").body
    assert status["filesHere"] is False and status["warnings"] == [] and status["entries"]["pending"] == 1
    reply = unmounted.call("POST", "/retain", retain_body("main", openai_entry("q?", "a.", id="hist1_r2")))
    assert reply.status == 503 and "does not exist" in reply.body["error"]
    assert not (tmp_path / "replica-unmounted" / "volume-not-here").exists()
    assert fleet.entry_state("hist1_r2") is None

    sqlite = tmp_path / "replica-sqlite"
    sqlite.mkdir()
    cfg = write_config(sqlite / "config.json", {"main": sqlite / "absent"}, remoteAgents=["main"])
    with pytest.raises(RuntimeError, match="remoteAgents"):
        Service(cfg, sqlite / "home", TOKEN, sqlite / "serve.log").start()


@postgres
def test_a_serve_that_holds_the_files_writes_the_remote_entries_and_shares_its_own_with_the_replicas(
    fleet: Fleet,
) -> None:
    local = fleet.local()
    remote = fleet.replica("r")
    assert retain(remote, "which port does the yak proxy use?", "The yak proxy listens on 7461.", "hist1_y1") == (
        "retained"
    )
    assert "7461" in recalled(local, "which port does the yak proxy use?")  # from the store, before the files
    assert eventually(lambda: fleet.blocks_in_files("hist1_y1") == 1)  # its background pass drains it
    assert retain(local, "which port does the yak proxy use?", "again", "hist1_y1") == "duplicate"
    assert retain(local, "what is the yak van's plate?", "The plate is YAK-204.", "hist1_y2") == "retained"
    assert retain(remote, "what is the yak van's plate?", "again", "hist1_y2") == "duplicate"  # it knows
    assert eventually(lambda: "YAK-204" in recalled(remote, "what is the yak van's plate?"))

    assert local.call("POST", "/forget", {"agent_id": "main", "entry_ids": ["hist1_y1"]}).status == 204
    assert "7461" not in recalled(remote, "which port does the yak proxy use?")
    assert retain(remote, "which port does the yak proxy use?", "x", "hist1_y1") == "forgotten"
    assert fleet.blocks_in_files("hist1_y1") == 0 and fleet.indexed() == Counter({"hist1_y2": 1})


def test_postgresql_down_a_retain_answers_503_and_leaves_nothing_then_works_again(tmp_path: Path) -> None:
    pg = TcpPostgres()
    pg.start()
    fleet = Fleet(tmp_path / "fleet", {"backend": "postgres", "url": pg.url, "schema": "mdmemory"})
    try:
        a = fleet.replica("a")
        assert retain(a, "where is the heron key?", "The heron key is under the mat.", "hist1_h1") == "retained"
        pg.stop("immediate")  # a crash of the database server
        again = retain_body("main", openai_entry("where is the heron boat?", "The heron boat is blue.", id="hist1_h2"))
        started = time.monotonic()
        reply = a.call("POST", "/retain", again)
        waited = time.monotonic() - started
        assert reply.status == 503 and "PostgreSQL" in reply.body["error"], reply.raw
        assert waited < 6  # the entries' short wait for a connection (store.open.ENTRY_WAIT_SECONDS)
        assert a.call("POST", "/recall", recall_body("main", "where is the heron key?")).status == 503
        local = fleet.local()  # a serve that holds the files retains into them all the same
        reply = local.call(
            "POST", "/retain", retain_body("main", openai_entry("q?", "Heron oars: red.", id="hist1_h3"))
        )
        assert reply.status == 202 and fleet.blocks_in_files("hist1_h3") == 1
        pg.start()
        assert fleet.entry_state("hist1_h2") is None  # nothing half-written
        # what was answered 202 is there: still pending, or already written into the files by the serve that
        # holds them (its drain runs once a second and may get there first now that the database is back)
        assert fleet.entry_state("hist1_h1") in ("pending", "written")
        started = time.monotonic()
        assert a.call("POST", "/retain", again).status == 202  # at once: a connection of its own if need be
        assert time.monotonic() - started < 6
        # recorded at once; the serve that holds the files may already have drained it, and will
        assert fleet.entry_state("hist1_h2") in ("pending", "written")
        assert eventually(lambda: fleet.blocks_in_files("hist1_h2") == 1, 90)
        assert eventually(
            lambda: "under the mat" in recall_text(a, "where is the heron key?"), 90
        )  # the pool's backoff
    finally:
        fleet.stop()
        pg.remove()
