"""Use tracking (docs/lifecycle.md): searches shown, pack items and memory_get reads counted per chunk and file in
the index (both stores), batched (nothing written per search), kept across rebuilds, dropped on a read-only
index without failing the search; session-start context is not a use; ``mdmem usage`` and status."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mdmem.engine.usage import FileUse, file_uses, hottest_and_coldest
from mdmem.memory import Memory
from mdmem.store.rows import UsageRow
from tests.agent_helpers import run_cli, write_config
from tests.conftest import both_backends, write
from tests.fault_helpers import unwritable


def notes(workspace: Path) -> None:
    write(workspace / "MEMORY.md", "# Facts\n\n- Priya plays the cello\n")
    write(workspace / "memory/2026-05-01.md", "# 2026-05-01\n\n- lunch with Bob about trains\n")
    write(workspace / "memory/2026-05-02.md", "# 2026-05-02\n\n- heron seen at the lake\n")
    write(workspace / "memory/people/bob.md", "# Bob\n\n- glassblower in Murano\n")


def by_kind(rows: list[UsageRow]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for r in rows:
        out[(r.path, r.kind)] = out.get((r.path, r.kind), 0) + r.uses
    return out


@both_backends
def test_uses_are_counted_by_kind_and_written_in_batches(make_memory: Callable[..., Memory], workspace: Path) -> None:
    notes(workspace)
    mem = make_memory({"usage": {"flushSeconds": 3600}}, provider="none")
    for _ in range(3):
        assert [r["path"] for r in mem.search("heron")["results"]] == ["memory/2026-05-02.md"]
    assert [i["path"] for i in mem.pack("cello")["items"]] == ["MEMORY.md"]
    assert mem.get("memory/people/bob.md")["text"].startswith("# Bob")
    assert mem.get("memory/nothing-here.md") == {"path": "memory/nothing-here.md", "text": ""}  # not a use
    mem.session_context("main")  # bulk preload: not a use
    assert mem.store.usage_rows() == []  # nothing written on the hot path yet
    assert mem.engine.usage.state()["waiting"] == 5
    report = mem.usage(limit=2)
    assert by_kind(mem.store.usage_rows()) == {
        ("memory/2026-05-02.md", "search"): 3,
        ("MEMORY.md", "pack"): 1,
        ("memory/people/bob.md", "get"): 1,
    }
    chunk_rows = [r for r in mem.store.usage_rows() if r.kind != "get"]
    assert all(len(r.chunk) == 64 for r in chunk_rows)  # per chunk: its hash; a get is the whole file ("")
    assert report["files"] == 4 and report["used"] == 3
    assert [f["path"] for f in report["hottest"]] == ["memory/2026-05-02.md", "memory/people/bob.md"]
    assert report["hottest"][0]["byKind"] == {"search": 3}
    assert [f["path"] for f in report["coldest"]] == ["memory/2026-05-01.md", "MEMORY.md"]  # none of the hottest
    assert report["coldest"][0] == {"path": "memory/2026-05-01.md", "uses": 0, "byKind": {}, "lastUsedAt": None}
    # a rebuild keeps the counts (they are not derived from the files)
    mem.sync(force=True)
    assert by_kind(mem.store.usage_rows())[("memory/2026-05-02.md", "search")] == 3
    mem.search("heron")
    mem.close()  # close writes what is waiting
    again = make_memory(provider="none")
    assert by_kind(again.store.usage_rows())[("memory/2026-05-02.md", "search")] == 4


@both_backends
def test_a_due_flush_writes_on_the_next_use(make_memory: Callable[..., Memory], workspace: Path) -> None:
    notes(workspace)
    mem = make_memory({"usage": {"flushSeconds": 0}}, provider="none")
    mem.search("heron")
    assert by_kind(mem.store.usage_rows()) == {("memory/2026-05-02.md", "search"): 1}
    off = make_memory({"usage": {"enabled": False}}, provider="none")
    off.search("trains")
    off.close()
    assert ("memory/2026-05-01.md", "search") not in by_kind(mem.store.usage_rows())


def test_a_read_only_index_answers_and_drops_its_uses(tmp_path: Path, workspace: Path) -> None:
    notes(workspace)
    store = tmp_path / "index" / "main.sqlite"
    ms = {"provider": "none", "store": {"path": str(store)}, "usage": {"flushSeconds": 0}}
    cfg = write_config(tmp_path / "c.json5", workspace, {"memorySearch": ms})
    with Memory.open(config_path=cfg) as mem:
        mem.sync()
        mem.search("heron")
    batched = write_config(tmp_path / "b.json5", workspace, {"memorySearch": {**ms, "usage": {}}})
    with Memory.open(config_path=batched) as mem:
        mem.get("memory/people/bob.md")  # no index opened: spooled beside it
    spool = store.with_name("main.sqlite.uses")
    assert spool.exists()
    with unwritable(store.parent), Memory.open(config_path=cfg) as mem:
        assert [r["path"] for r in mem.search("cello")["results"]] == ["MEMORY.md"]
        state = mem.status()["usage"]
        assert state["dropped"] == 1 and "read-only" in state["error"]
        assert state["hottest"][0]["path"] == "memory/2026-05-02.md"  # what was written before still reads
    assert spool.exists()  # a process that cannot write the index leaves the spool to one that can
    with Memory.open(config_path=cfg) as mem:
        mem.usage()
        assert by_kind(mem.store.usage_rows()) == {
            ("memory/2026-05-02.md", "search"): 1,
            ("memory/people/bob.md", "get"): 1,
        }
    assert not spool.exists()


def test_usage_command_and_status(tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes(workspace)
    store = tmp_path / "idx" / "main.sqlite"
    ms = {"provider": "none", "store": {"path": str(store)}}
    cfg = str(write_config(tmp_path / "c.json5", workspace, {"memorySearch": ms}))
    assert run_cli(["search", "--config", cfg, "heron"]) == 0
    stamp = store.stat().st_mtime_ns
    assert run_cli(["get", "--config", cfg, "memory/people/bob.md"]) == 0
    assert run_cli(["get", "--config", cfg, "memory/people/bob.md", "--from", "3", "--lines", "1"]) == 0
    # `mdmem get` opens no index: its use waits in the spool beside it, one line per process
    assert store.stat().st_mtime_ns == stamp
    spool = store.with_name("main.sqlite.uses")
    assert [json.loads(line)[0][:4] for line in spool.read_text().splitlines()] == [
        ["memory/people/bob.md", "", "get", 1]
    ] * 2
    capsys.readouterr()
    assert run_cli(["usage", "--config", cfg, "--json", "--limit", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(f["path"], f["byKind"]) for f in out["hottest"]] == [("memory/people/bob.md", {"get": 2})]
    assert not spool.exists() and not list(spool.parent.glob("*.uses.*"))  # taken into the index
    assert len(out["coldest"]) == 1 and out["coldest"][0]["uses"] == 0
    assert run_cli(["usage", "--config", cfg]) == 0
    text = capsys.readouterr().out
    assert "2 of 4 indexed files used" in text and "memory/people/bob.md  2 uses (get 2), last today" in text
    assert run_cli(["status", "--config", cfg]) == 0
    text = capsys.readouterr().out
    assert "usage       2 of 4 files used" in text and "hot  memory/people/bob.md (2)" in text
    assert "lifecycle   never run" in text
    assert run_cli(["usage", "--config", cfg, "--limit", "0"]) == 2


def test_hottest_and_coldest_order() -> None:
    rows = [
        UsageRow("a.md", "h1", "search", 2, 100.0),
        UsageRow("a.md", "h2", "pack", 1, 300.0),
        UsageRow("b.md", "", "get", 3, 50.0),
        UsageRow("gone.md", "", "get", 9, 900.0),  # not indexed now: left out
    ]
    uses = file_uses(["a.md", "b.md", "c.md"], rows)
    assert uses["a.md"] == FileUse("a.md", 3, {"pack": 1, "search": 2}, 300.0)
    view = hottest_and_coldest(uses, 2)
    assert [f["path"] for f in view["hottest"]] == ["a.md", "b.md"]  # same uses: the latest first
    assert [f["path"] for f in view["coldest"]] == ["c.md"]  # never one of the hottest
    assert [f["path"] for f in hottest_and_coldest(uses, 1)["coldest"]] == ["c.md"]
    assert [f["path"] for f in hottest_and_coldest(file_uses(["a.md", "b.md"], rows), 1)["coldest"]] == ["b.md"]


@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
def test_store_migrate_carries_the_counts_without_adding_them_twice(
    workspace: Path,
    make_memory: Callable[..., Memory],
    store_backend: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from mdmem.cli.commands import main

    notes(workspace)
    lite = make_memory({"store": {**store_backend, "backend": "sqlite"}}, provider="none")  # config-0
    lite.search("heron")
    lite.get("memory/people/bob.md")
    lite.close()
    for _ in range(2):  # twice: the second copy replaces the first one's counts
        assert main(["store", "migrate", "--to", "postgres", "--config", str(tmp_path / "config-0.json5")]) == 0
    pg = make_memory(provider="none")  # config-1: postgres
    expected = {("memory/2026-05-02.md", "search"): 1, ("memory/people/bob.md", "get"): 1}
    assert by_kind(pg.store.usage_rows()) == expected
    pg.search("heron")
    pg.close()
    assert main(["store", "migrate", "--to", "sqlite", "--config", str(tmp_path / "config-1.json5")]) == 0
    capsys.readouterr()
    back = make_memory({"store": {**store_backend, "backend": "sqlite"}}, provider="none")
    assert by_kind(back.store.usage_rows()) == {**expected, ("memory/2026-05-02.md", "search"): 2}


@both_backends
def test_uses_written_during_a_rebuild_are_kept(make_memory: Callable[..., Memory], workspace: Path) -> None:
    notes(workspace)
    mem = make_memory(provider="none")
    mem.sync()
    other = make_memory({"usage": {"flushSeconds": 0}}, provider="none")  # a second process, in effect
    other.search("heron")

    def meanwhile(done: int, total: int, path: str) -> None:
        if done == 2:
            other.search("heron")  # written to the live index while the rebuild fills the new one

    mem.sync(force=True, progress=meanwhile)
    assert by_kind(mem.store.usage_rows()) == {("memory/2026-05-02.md", "search"): 2}


@both_backends
def test_a_traced_pack_says_which_records_it_refreshed(make_memory: Callable[..., Memory], workspace: Path) -> None:
    notes(workspace)
    write(workspace / "memory/2026-05-03.md", "# 2026-05-03\n\n- the heron was back at the lake\n")
    mem = make_memory({"usage": {"flushSeconds": 0}}, provider="none")
    pack = mem.pack("heron lake", trace=True)
    items = sorted(f"{i['path']}#L{i['startLine']}" for i in pack["items"])
    assert len(items) == 2
    refreshed = sorted(r["ref"] for r in pack["refreshed"])
    assert [r.split("-L")[0] for r in refreshed] == items  # each item's chunk, with its lines
    assert {r["kind"] for r in pack["refreshed"]} == {"pack"}
    assert {r.path for r in mem.store.usage_rows() if r.kind == "pack"} == {i.split("#")[0] for i in items}
    assert "refreshed" not in mem.pack("heron lake")  # only with the trace
    off = make_memory({"usage": {"enabled": False}}, provider="none")
    assert off.pack("heron lake", trace=True)["refreshed"] == []  # tracking off: nothing refreshed


def test_pack_trace_prints_the_refreshed_records(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes(workspace)
    cfg = str(write_config(tmp_path / "c.json5", workspace, {"memorySearch": {"provider": "none"}}))
    assert run_cli(["pack", "--config", cfg, "--trace", "glassblower Murano"]) == 0
    assert "uses refreshed: 1 record(s): memory/people/bob.md#L1-L3" in capsys.readouterr().out
