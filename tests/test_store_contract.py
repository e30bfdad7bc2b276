"""The store contract, on each store (``both_backends``: SQLite, and PostgreSQL on the test server): a
workspace indexed, searched by keywords and hybrid, edits and deletions reflected, a model switch rebuilt
as a new generation while searches keep answering from the old one, and status telling which store it is."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdmem.memory import Memory
from mdmem.providers.factory import ProviderChoice
from mdmem.providers.hashing import HashEmbeddingProvider
from mdmem.store.open import open_store
from mdmem.util.errors import StoreError
from tests.conftest import both_backends, write


def seed(workspace: Path) -> None:
    write(workspace / "MEMORY.md", "# Preferences\n\n- Dana prefers green tea, no sugar.\n")
    for day, line in enumerate(
        ["The heron waded in the pond.", "Backups run nightly with restic to s3.", "Dinner with Mika at the harbour."]
    ):
        write(workspace / "memory" / f"2026-05-0{day + 1}.md", f"# 2026-05-0{day + 1}\n\n{line}\n")


def paths(response: dict[str, Any]) -> list[str]:
    return [r["path"] for r in response["results"]]


@both_backends
def test_keyword_only_index_search_edit_and_delete(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    seed(workspace)
    mem = make_memory(provider="none")
    report = mem.sync()
    assert report["files"] == report["indexed"] == 4
    found = mem.search("restic backups")
    assert found["mode"] == "keyword" and paths(found)[0] == "memory/2026-05-02.md"
    day = workspace / "memory" / "2026-05-02.md"
    day.write_text("# 2026-05-02\n\nThe backups moved to borg on a NAS.\n")
    os.utime(day, (7, 7))
    assert mem.sync()["indexed"] == 1
    assert paths(mem.search("borg"))[0] == "memory/2026-05-02.md"
    assert mem.search("restic")["results"] == []
    day.unlink()
    assert mem.sync()["removed"] == 1
    assert mem.search("borg")["results"] == [] and set(mem.store.files()) == {
        "MEMORY.md",
        "memory/2026-05-01.md",
        "memory/2026-05-03.md",
    }
    status = mem.status()
    assert (status["files"], status["vectors"], status["mode"], status["staleFiles"]) == (3, 0, "keyword", [])


@both_backends
def test_hybrid_search_edit_and_delete(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    seed(workspace)
    mem = make_memory()
    mem.sync()
    found = mem.search("heron pond")
    assert found["mode"] == "hybrid" and paths(found)[0] == "memory/2026-05-01.md"
    counts = mem.store.counts()
    assert counts["chunks"] == 4 and counts["vectors"] == 4 and mem.store.pending_count() == 0
    note = workspace / "memory" / "2026-05-01.md"
    note.write_text("# 2026-05-01\n\nThe heron waded in the pond.\n\nA kingfisher dived twice.\n")
    os.utime(note, (9, 9))
    report = mem.sync()
    assert report["indexed"] == 1 and report["embedded"] == 1  # only the changed chunk's text is embedded
    assert paths(mem.search("kingfisher"))[0] == "memory/2026-05-01.md"
    note.unlink()
    mem.sync()
    assert "memory/2026-05-01.md" not in paths(mem.search("heron kingfisher"))
    assert mem.store.counts()["vectors"] == 3


class Rebuilding(HashEmbeddingProvider):
    """A provider of another dimension (a model switch) that runs ``during`` on its first call: while the
    rebuild embeds its new index."""

    def __init__(self, dims: int, during: Callable[[], None]) -> None:
        super().__init__(dims=dims)
        self.during: Callable[[], None] | None = during

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return super().embed_batch(texts)


@both_backends
def test_a_model_switch_rebuilds_as_a_new_generation_while_searches_keep_answering(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    seed(workspace)
    first = make_memory()
    first.sync()
    before = first.search("heron pond")
    reader = make_memory()  # another reader of the same index, on a connection of its own
    seen: list[dict[str, Any]] = []
    switched = make_memory()
    switched.engine.providers.adopt(
        ProviderChoice(Rebuilding(32, lambda: seen.append(reader.search("heron pond"))), "hash")
    )
    report = switched.sync()
    assert report["rebuilt"] is True and report["indexed"] == 4
    assert seen == [before]  # mid-rebuild: the old index, vectors and all, answered
    assert switched.store.vec_dims() == 32 and switched.store.counts()["chunks"] == 4
    assert switched.search("heron pond")["mode"] == "hybrid"
    assert reader.status()["dims"] == 32  # status tells the index as it is now, not as the reader last saw it
    assert reader.store.vec_dims() == 32
    assert switched.sync()["rebuilt"] is False  # one rebuild, not a storm
    again = open_store(switched.agent)  # a store opened afresh sees the new generation only
    try:
        assert again.counts() == switched.store.counts() and again.vec_dims() == 32
    finally:
        again.close()


@both_backends
def test_status_names_the_backend_and_never_the_password(
    workspace: Path, make_memory: Callable[..., Memory], store_backend: dict[str, Any]
) -> None:
    seed(workspace)
    secret = "s3cret-pw-4417"
    store = dict(store_backend)
    if store:  # the test server trusts local connections: any password connects, so it must never show
        store["url"] = store["url"].replace("postgres:@", f"postgres:{secret}@")
    mem = make_memory({"store": store})
    mem.sync()
    status = mem.status()
    assert status["backend"] == (store.get("backend") or "sqlite")
    assert status["storeState"]["state"] == "ok" and status["files"] == 4 and status["vectors"] == 4
    assert Path(f"{mem.agent.store_path}.health.json").is_file()  # this host's state files of the agent
    if store:
        assert status["store"].startswith("postgresql://postgres:[REDACTED]@") and store["schema"] in status["store"]
        assert status["storeState"]["freeBytes"] is None  # not this machine's disk
    else:
        assert status["store"] == str(mem.agent.store_path)
    shown = json.dumps(status) + repr(mem.agent) + repr(mem.config) + str(mem.search("heron"))
    assert secret not in shown


@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)  # SQLite's: tests/test_store_faults.py
def test_an_unreachable_store_is_reported_without_a_traceback_or_password(
    workspace: Path, make_memory: Callable[..., Memory], store_backend: dict[str, Any], tmp_path: Path
) -> None:
    seed(workspace)
    url = f"postgresql://postgres:hunter2-pw@/postgres?host={tmp_path / 'no-server-here'}"
    mem = make_memory({"store": {**store_backend, "url": url}})
    status = mem.status()
    assert status["storeState"]["state"] == "unavailable" and "cannot connect" in status["storeState"]["message"]
    assert "hunter2" not in json.dumps(status)
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL") as failed:
        mem.search("heron")
    assert failed.value.kind == "unavailable" and "hunter2" not in str(failed.value)


@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
def test_dropped_connections_are_replaced_and_one_dropped_mid_search_fails_only_that_search(
    workspace: Path, make_memory: Callable[..., Memory], store_backend: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from mdmem.store.pg import connection

    seed(workspace)
    mem = make_memory()
    mem.sync()
    expected = mem.search("heron pond")

    def drop_all() -> None:  # a server restart, a failover...
        with psycopg.connect(store_backend["url"], autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )

    monkeypatch.setattr(connection, "CHECK_AFTER_IDLE_SECONDS", 0.0)  # as if they had been idle a while
    drop_all()  # while idle in the pool: checked before being lent, replaced
    assert mem.search("heron pond") == expected
    monkeypatch.undo()
    with mem.store.reading():  # the search's connection dropped while it is held
        drop_all()
        with pytest.raises(StoreError, match="PostgreSQL failed") as failed:
            mem.search("heron pond")
    assert failed.value.kind == "unavailable"
    assert mem.search("heron pond") == expected  # a new connection, the same index
    assert mem.status()["storeState"]["state"] == "ok"


@both_backends
def test_the_agent_tools_answer_from_either_store(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    seed(workspace)
    mem = make_memory()
    found = mem.call_tool("memory_search", {"query": "restic backups"})
    assert found["results"][0]["path"] == "memory/2026-05-02.md"  # the first search indexed the workspace
    pack = mem.call_tool("memory_pack", {"query": "what does Dana drink", "budgetTokens": 200})
    assert pack["items"][0]["path"] == "MEMORY.md" and "green tea" in pack["bundleText"]
    got = mem.call_tool("memory_get", {"path": pack["items"][0]["path"]})
    assert "green tea" in got["text"]
    status = mem.call_tool("memory_status", {})
    assert status["files"] == 4 and status["pendingEmbeddings"] == 0 and "error" not in status


@both_backends
def test_the_background_sync_keeps_either_store_fresh(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    from mdmem.engine.background import SyncService

    seed(workspace)
    reader = make_memory({"sync": {"onSearch": False}})  # it never syncs: what it finds, the service wrote
    service = SyncService(make_memory(), debounce_seconds=0.05)
    service.start()
    try:
        service.request_sync()
        assert service.wait_idle(30) and service.state.last_error is None
        assert paths(reader.search("heron pond"))[0] == "memory/2026-05-01.md"
        write(workspace / "memory" / "2026-05-04.md", "# 2026-05-04\n\nAn otter surfaced by the jetty.\n")
        service.mark_dirty("memory/2026-05-04.md")
        assert service.wait_idle(30) and service.state.runs == 2
        assert paths(reader.search("otter jetty"))[0] == "memory/2026-05-04.md"
    finally:
        service.stop()
