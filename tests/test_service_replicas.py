"""Two ``mdmem serve`` replicas (two hosts' state folders) on one PostgreSQL store and one shared workspace
volume: a retain sent to one is recalled by the other, and a forget through one is honoured by both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fleet import eventually
from tests.service_bodies import openai_entry, recall_body, retain_body
from tests.service_server import Service, write_config

TOKEN = "replica-token-3c9e71d0"


@pytest.fixture
def replicas(tmp_path: Path, store_backend: dict[str, Any]) -> Iterator[tuple[Service, Service, Path]]:
    ws = tmp_path / "shared-volume" / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe staging database is Postgres 16 on port 5433.\n")
    cfg = write_config(tmp_path / "config.json", {"main": ws}, memory_search={"store": store_backend})
    started: list[Service] = []
    try:
        for name in ("a", "b"):  # each replica has its own host state (MDMEMORY_HOME): nothing shared there
            svc = Service(cfg, tmp_path / f"host-{name}", TOKEN, tmp_path / f"serve-{name}.log")
            svc.start()
            started.append(svc)
        yield started[0], started[1], ws
    finally:
        for svc in started:
            svc.stop()


def texts(svc: Service, question: str) -> str:
    reply = svc.call("POST", "/recall", recall_body("main", question))
    assert reply.status == 200, reply.raw
    return " ".join(str(m["text"]) for m in reply.body["memories"])


@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
def test_a_retain_on_one_replica_is_recalled_by_the_other_and_a_forget_is_honoured_by_both(
    replicas: tuple[Service, Service, Path],
) -> None:
    a, b, ws = replicas
    question = "where does the nightly backup of the walrus cluster go?"
    answer = "The walrus cluster backup goes to bucket s3://walrus-nightly at 03:00."
    entry = openai_entry(question, answer, id="hist1_w1")
    assert a.call("POST", "/retain", retain_body("main", entry)).body == {"status": "retained", "id": "hist1_w1"}
    assert eventually(lambda: "walrus-nightly" in texts(b, question), 10.0)  # B answers from the shared store
    assert "walrus-nightly" in texts(a, question)
    assert b.call("POST", "/retain", retain_body("main", entry)).body["status"] == "duplicate"  # once in files

    gone = b.call("POST", "/forget", {"agent_id": "main", "entry_ids": ["hist1_w1"], "reason": "asked"})
    assert gone.status == 204
    assert "walrus-nightly" not in texts(b, question)
    assert "walrus-nightly" not in texts(a, question)  # at once on the other replica too: the store is one
    assert a.call("POST", "/retain", retain_body("main", entry)).body["status"] == "forgotten"
    sessions = "".join(p.read_text() for p in (ws / "sessions").glob("*.md"))
    assert "walrus-nightly" not in sessions and "hist1_w1" not in sessions

    other = openai_entry("what colour is the walrus van?", "The walrus van is teal.", id="hist1_w2")
    assert b.call("POST", "/retain", retain_body("main", other)).body["status"] == "retained"
    assert eventually(lambda: "teal" in texts(a, "what colour is the walrus van?"), 10.0)
