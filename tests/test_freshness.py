"""Off the happy path: keyword freshness during embedding outages, CLI-only runtimes, identity changes.

Real parts only: SQLite files, the fake OpenAI server on 127.0.0.1 with scripted faults, the command line
run as real subprocesses, and the detached worker as a real process that outlives the command.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdmem.config.load import load_config
from mdmem.index.chunker import chunk_markdown
from mdmem.memory import Memory
from mdmem.search.hybrid import search as run_search
from mdmem.store import Store, encode_vector
from mdmem.store.schema import MIGRATIONS, SCHEMA_VERSION
from tests.conftest import REPO, write
from tests.daemon_helpers import alive
from tests.fake_openai import FakeOpenAIServer, Fault
from tests.test_daemon import Daemon

ANIMALS = "heron otter badger walrus lynx marten ibis puffin stoat vole wren gannet".split()
PID = re.compile(r"\(pid (\d+)\)")


def degraded(response: dict) -> list[str]:
    """Warnings that say the answer is degraded (stale, keyword-only...); the low-confidence note of a
    search whose best score is under minScore is about the scores, not about freshness."""
    return [w for w in response.get("warnings", []) if "lowConfidence" not in w]


def write_config(path: Path, workspace: Path, **memory_search: Any) -> Path:
    path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": memory_search}}}))
    return path


def cli(config: Path, *args: str) -> dict[str, Any]:
    """Run ``mdmem ARGS --config CONFIG --json`` as its own process; it must exit 0 and print JSON."""
    proc = subprocess.run(
        [sys.executable, "-m", "mdmem", *args, "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout))


def workers(config: Path) -> list[int]:
    """Every live ``mdmem index --worker`` process for ``config``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--worker" in argv and str(config).encode() in argv and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def worker_pid(warnings: list[str]) -> int:
    for note in warnings:
        m = PID.search(note)
        if m:
            return int(m.group(1))
    raise AssertionError(f"no pid in {warnings}")


def notes(workspace: Path, n: int) -> None:
    for i in range(n):
        write(workspace / "memory" / f"2026-03-{i + 1:02d}.md", f"# Day {i}\n\nA {ANIMALS[i]} crossed the garden.\n")


# -- the command line: a detached worker does what the search leaves behind -------------------------------


def test_first_cli_search_without_an_index_answers_and_a_worker_embeds(workspace: Path, tmp_path: Path) -> None:
    notes(workspace, 12)
    config = write_config(tmp_path / "cfg.json5", workspace, provider="hash")

    first = cli(config, "search", "walrus")  # no `mdmem index` ever ran

    assert first["results"][0]["path"] == "memory/2026-03-04.md"
    said = " ".join(first["warnings"])
    assert "12 chunk(s) are not embedded yet and are matched by keywords only" in said
    assert "being embedded by a background worker (pid " in said
    pid = worker_pid(first["warnings"])
    wait_until(lambda: not alive(pid), 60, "the worker to finish")
    status = cli(config, "status")
    assert (status["files"], status["chunks"], status["pendingEmbeddings"]) == (12, 12, 0)
    assert status["vectors"] == 12 and status["worker"] is None and status["lastError"] is None
    later = cli(config, "search", "walrus")
    assert later["mode"] == "hybrid" and not degraded(later)
    assert later["results"][0]["path"] == "memory/2026-03-04.md"


def test_outage_note_is_found_and_the_worker_outlives_the_cli_until_it_converges(
    workspace: Path, tmp_path: Path
) -> None:
    notes(workspace, 2)
    with FakeOpenAIServer(dims=8) as server:
        remote = {"baseUrl": server.url, "dimensions": 8, "maxRetries": 1, "timeoutSeconds": 5}
        config = write_config(tmp_path / "cfg.json5", workspace, provider="openai", remote=remote)
        assert cli(config, "index")["pending"] == 0
        server.enqueue(*[Fault.server_error()] * 100_000)  # the embeddings API is down from now on
        write(workspace / "memory" / "2026-03-20.md", "# Day 20\n\nA kingfisher dived into the pond.\n")

        during = cli(config, "search", "kingfisher")

        assert during["mode"] == "keyword" and during["results"][0]["path"] == "memory/2026-03-20.md"
        said = " ".join(during["warnings"])
        assert "query embedding failed" in said and "HTTP 500" in said
        assert "1 chunk(s) are not embedded yet and are matched by keywords only" in said
        assert "being embedded by a background worker (pid " in said
        pid = worker_pid([w for w in during["warnings"] if "background worker" in w])
        assert alive(pid) and workers(config) == [pid]  # the search exited; its worker did not
        again = cli(config, "search", "kingfisher")
        assert worker_pid([w for w in again["warnings"] if "background worker" in w]) == pid
        assert workers(config) == [pid]  # no second worker while one runs
        status = cli(config, "status")
        assert status["pendingEmbeddings"] == 1 and status["worker"]["pid"] == pid
        assert "HTTP 500" in status["lastError"]["error"]

        server.clear_faults()  # the outage ends: the worker's next retry embeds the note, then it exits
        wait_until(lambda: not alive(pid), 90, "the worker to embed the note and exit")

        status = cli(config, "status")
        assert status["pendingEmbeddings"] == 0 and status["lastError"] is None and status["worker"] is None
        assert status["vectors"] == status["chunks"] == 3
        after = cli(config, "search", "kingfisher")
        assert after["mode"] == "hybrid" and not degraded(after)
        assert after["results"][0]["path"] == "memory/2026-03-20.md"


LONG = "\n\n".join(f"## Section {i}\n\n" + " ".join(f"word{i}x{j}" for j in range(120)) for i in range(6))


def test_a_chunking_change_in_the_config_file_starts_a_rebuild(workspace: Path, tmp_path: Path) -> None:
    write(workspace / "MEMORY.md", LONG)
    config = write_config(tmp_path / "cfg.json5", workspace, provider="hash")
    before = cli(config, "index")
    assert before["chunks"] == len(chunk_markdown(LONG, "MEMORY.md"))
    write_config(tmp_path / "cfg.json5", workspace, provider="hash", chunking={"tokens": 128, "overlap": 16})

    during = cli(config, "search", "word3x5")

    assert during["mode"] == "keyword" and during["results"][0]["path"] == "MEMORY.md"  # the old index answers
    assert during["warnings"][0].startswith(
        "index built for chunking 400/80 tokens, windows 64, config says chunking 128/16 tokens, windows 64: "
        "rebuilding (pid "
    )
    pid = worker_pid(during["warnings"])
    wait_until(lambda: not alive(pid), 60, "the rebuild to finish")
    status = cli(config, "status")
    assert not [w for w in status["warnings"] if "index built for" in w]
    assert status["chunks"] == len(chunk_markdown(LONG, "MEMORY.md", tokens=128, overlap=16)) > before["chunks"]
    assert status["pendingEmbeddings"] == 0 and status["worker"] is None
    after = cli(config, "search", "word3x5")
    assert after["mode"] == "hybrid" and not degraded(after)


def test_no_worker_while_mdmemory_watch_runs_for_the_agent(workspace: Path, tmp_path: Path) -> None:
    notes(workspace, 1)
    config = write_config(tmp_path / "cfg.json5", workspace, provider="hash", sync={"watchDebounceMs": 8000})
    daemon = Daemon(config)
    try:
        daemon.wait_for(lambda e: e["event"] == "sync")  # the initial sync
        for i in range(1, 12):
            write(workspace / "memory" / f"2026-03-{i + 1:02d}.md", f"# Day {i}\n\nA {ANIMALS[i]} crossed.\n")

        found = cli(config, "search", "puffin")  # before the daemon's debounce runs out

        assert found["results"][0]["path"] == "memory/2026-03-08.md"
        said = " ".join(found["warnings"])
        assert f"being embedded by `mdmem watch` (pid {daemon.proc.pid})" in said
        assert workers(config) == [] and not Path(f"{load_config(config).agent().store_path}.worker.json").exists()
        wait_until(lambda: cli(config, "status")["pendingEmbeddings"] == 0, 60, "the daemon to embed them")
    finally:
        assert daemon.stop() == 0


# -- in-process: an outage never hides a new note, and vectors follow when it ends ------------------------


@pytest.mark.parametrize("outage", ["http-500", "hanging"])
def test_note_written_during_an_outage_is_found_at_once_and_embedded_after(
    workspace: Path, tmp_path: Path, outage: str, no_thread_leaks: None
) -> None:
    notes(workspace, 3)
    with FakeOpenAIServer(dims=8) as server:
        remote = {"baseUrl": server.url, "dimensions": 8, "maxRetries": 1, "timeoutSeconds": 1}
        config = write_config(tmp_path / "cfg.json5", workspace, provider="openai", remote=remote)
        with Memory.open(config_path=config) as mem:
            mem.sync()
            fault = Fault.server_error() if outage == "http-500" else Fault.slow(30)
            server.enqueue(*[fault] * 10_000)
            write(workspace / "memory" / "2026-03-20.md", "# Day 20\n\nA kingfisher dived into the pond.\n")

            during = mem.search("kingfisher")

            assert during["mode"] == "keyword" and during["results"][0]["path"] == "memory/2026-03-20.md"
            said = " ".join(during["warnings"])
            assert "1 chunk(s) are not embedded yet and are matched by keywords only" in said
            assert "being embedded by a background sync in this process" in said
            status = mem.status()
            assert status["pendingEmbeddings"] == 1 and status["files"] == 4
            assert ("HTTP 500" if outage == "http-500" else "timed out") in status["lastError"]["error"]

            server.clear_faults()
            wait_until(lambda: mem.status()["pendingEmbeddings"] == 0, 60, "the background sync to embed it")

            assert mem.status()["lastError"] is None
            after = mem.search("kingfisher")
            assert after["mode"] == "hybrid" and not degraded(after)
            assert after["results"][0]["path"] == "memory/2026-03-20.md"


def test_a_chunk_without_vectors_is_scored_by_its_keywords(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    notes(workspace, 6)
    mem = make_memory({"sync": {"onSearch": False}})
    mem.sync()
    write(workspace / "memory" / "2026-03-20.md", "# Day 20\n\nThe zeppelin left the harbour at noon.\n")
    report = mem.indexer.sync(embed=False)  # phase 1 only: the text is indexed, the vectors are pending
    assert (report.indexed, report.pending, mem.store.pending_count()) == (1, 1, 1)
    provider = mem.choice.provider
    assert provider is not None
    query = "zeppelin timetable"  # one word of two: not an exact hit, so minScore would apply to it
    vector = provider.embed_query(query)
    hybrid = mem.settings.query.hybrid
    keyword_only = run_search(mem.store, query, query_vector=None, max_results=5, min_score=0.35, hybrid=hybrid)
    expected = keyword_only.hits[0]
    assert expected.chunk.path == "memory/2026-03-20.md" and 0.3 * expected.score < 0.35

    for fused in (hybrid, type(hybrid)(**{**hybrid.__dict__, "fusion": "rrf"})):
        found = run_search(mem.store, query, query_vector=vector, max_results=5, min_score=0.35, hybrid=fused)
        hit = found.hits[0]
        assert found.mode == "hybrid" and hit.chunk.path == "memory/2026-03-20.md" and hit.vector_score is None
        assert hit.score == pytest.approx(expected.score if fused.fusion == "weighted" else 1.0)
    vector_only = type(hybrid)(**{**hybrid.__dict__, "enabled": False})
    found = run_search(mem.store, query, query_vector=vector, max_results=5, min_score=0.35, hybrid=vector_only)
    assert found.mode == "vector" and "memory/2026-03-20.md" in [h.chunk.path for h in found.hits]

    mem.sync()  # phase 2: the chunk gets its vectors and is scored on both sides again
    found = run_search(mem.store, query, query_vector=vector, max_results=5, min_score=0, hybrid=hybrid)
    hit = next(h for h in found.hits if h.chunk.path == "memory/2026-03-20.md")
    assert hit.vector_score is not None and mem.store.pending_count() == 0


def test_a_time_budget_defers_files_and_the_next_sync_indexes_them(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    notes(workspace, 3)
    mem = make_memory()
    report = mem.indexer.sync(budget=0.0, embed=False)
    assert (report.deferred, report.indexed, mem.store.counts()["files"]) == (3, 0, 0)
    report = mem.indexer.sync()
    assert (report.deferred, report.indexed, report.pending, mem.store.counts()["vectors"]) == (0, 3, 0, 3)


# -- migration ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["hash", "none"])
def test_migration_3_marks_chunks_without_vectors_of_an_old_index(tmp_path: Path, provider: str) -> None:
    """A database written by schema 2 gains the pending table; a chunk it left without vectors is pending."""
    import sqlean
    import sqlite_vec

    path = tmp_path / "old.sqlite"
    conn = sqlean.connect(str(path), isolation_level=None)
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    for migration in MIGRATIONS[:2]:
        migration(conn)
    conn.execute("PRAGMA user_version = 2")
    conn.execute("INSERT INTO meta(key, value) VALUES ('identity', ?)", (json.dumps({"provider": provider}),))
    for cid in (1, 2):
        conn.execute(
            "INSERT INTO chunks(id, path, source, start_line, end_line, hash, embed_hash, heading, text) "
            "VALUES (?, 'MEMORY.md', 'memory', ?, ?, 'h', ?, '', 'an old note')",
            (cid, cid, cid, f"e{cid}"),
        )
    if provider == "hash":
        conn.execute("INSERT INTO vectors(chunk_id, hash, embedding) VALUES (1, 'e1', ?)", (encode_vector(np.ones(8)),))
    conn.close()

    with Store(path) as store:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        assert [c.id for c in store.pending_chunks(10)] == ([2] if provider == "hash" else [])
        assert store.pending_count() == (1 if provider == "hash" else 0)


def test_a_catch_up_interval_lets_searches_skip_the_file_walk_until_it_passes_or_a_write_is_announced(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    notes(workspace, 3)
    mem = make_memory(provider="none")  # keywords: a result is there or not, no near-miss vectors
    mem.sync()
    mem.catch_up_interval = 0.6
    assert mem.search("kingfisher")["results"] == []  # this search caught up: the next 0.6 s do not
    write(workspace / "memory" / "2026-03-20.md", "# Day 20\n\nA kingfisher dived into the pond.\n")
    assert mem.search("kingfisher")["results"] == []  # within the interval: the walk is skipped
    time.sleep(0.7)
    assert mem.search("kingfisher")["results"][0]["path"] == "memory/2026-03-20.md"  # interval over: caught up

    write(workspace / "memory" / "2026-03-21.md", "# Day 21\n\nA grebe stood in the reeds.\n")
    mem.changed()  # a writer says so (the service, after a retain): no wait
    assert mem.search("grebe")["results"][0]["path"] == "memory/2026-03-21.md"

    mem.catch_up_interval = 0.0  # the default: every search catches up
    write(workspace / "memory" / "2026-03-22.md", "# Day 22\n\nAn avocet flew over.\n")
    assert mem.search("avocet")["results"][0]["path"] == "memory/2026-03-22.md"


def test_a_write_announced_while_a_catch_up_runs_is_caught_up_by_the_next_search(
    workspace: Path, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mdmem.engine import catchup

    notes(workspace, 2)
    mem = make_memory(provider="none")
    mem.sync()
    mem.catch_up_interval = 60.0
    real = catchup.CatchUp.before_search

    def scan_then_a_retain_lands(catch: catchup.CatchUp) -> tuple[bool, list[str]]:
        result = real(catch)  # the files are walked...
        write(workspace / "memory" / "2026-03-20.md", "# Day 20\n\nA kingfisher dived into the pond.\n")
        catch.changed()  # ...and a write is announced before this catch-up has recorded itself
        return result

    monkeypatch.setattr(catchup.CatchUp, "before_search", scan_then_a_retain_lands)
    assert mem.search("kingfisher")["results"] == []
    monkeypatch.setattr(catchup.CatchUp, "before_search", real)
    assert mem.change_announced and mem.catch_up_due()
    assert mem.search("kingfisher")["results"][0]["path"] == "memory/2026-03-20.md"  # not skipped for 60 s
