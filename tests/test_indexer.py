"""Indexing: exact replacement on edit, deletion, encoding problems, size cap, symlinks, cache reuse."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from mdmem.index.chunker import chunk_markdown
from mdmem.index.indexer import embedding_inputs
from mdmem.memory import Memory
from mdmem.store import Store
from mdmem.store.api import IndexStore
from mdmem.store.pg.store import PgStore
from tests.conftest import both_backends, write

LONG = "\n\n".join(f"## Section {i}\n\n" + " ".join(f"word{i}x{j}" for j in range(120)) for i in range(8))


def table_counts(store: IndexStore) -> dict[str, int]:
    """Rows of every table, the keyword indexes' entries included (FTS5's, or PostgreSQL's postings)."""
    out = store.counts()
    if isinstance(store, PgStore):
        with store.session() as conn:
            for name, table in (("chunks_fts", "postings"), ("chunks_trigram", "grams")):
                sql = f"SELECT count(*) FROM {store.schema}.{table} WHERE agent_id = %s AND gen = %s"
                out[name] = conn.execute(sql, (store.agent_id, store.gen)).fetchone()[0]
            conn.commit()
        return out
    assert isinstance(store, Store)
    for table in ("chunks_fts", "chunks_trigram"):
        store.conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_v USING fts5vocab(main, {table}, 'instance')"
        )
        out[table] = store.conn.execute(f"SELECT count(*) FROM temp.{table}_v").fetchone()[0]
    return out


@both_backends
def test_index_summary_and_rows_match_the_chunker(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "MEMORY.md", LONG)
    write(workspace / "memory" / "2026-01-01.md", "# Day\n\nShort note.\n")
    mem = make_memory()
    report = mem.sync()
    expected = chunk_markdown(LONG, "MEMORY.md")
    assert report["files"] == 2 and report["indexed"] == 2
    assert report["chunks"] == len(expected) + 1
    rows = mem.store.chunks_of("MEMORY.md")
    assert [(r.start_line, r.end_line, r.text, r.heading) for r in rows] == [
        (c.start_line, c.end_line, c.text, c.heading) for c in expected
    ]
    again = mem.sync()
    assert again["indexed"] == 0 and again["unchanged"] == 2 and again["embedded"] == 0


@both_backends
def test_edited_file_rows_are_replaced_exactly(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    path = write(workspace / "MEMORY.md", LONG)
    write(workspace / "memory" / "other.md", "# Other\n\nuntouched zebra\n")
    mem = make_memory()
    mem.sync()
    other_before = mem.store.chunks_of("memory/other.md")
    edited = LONG.replace("word3x5 ", "pelican ") + "\n\n## New\n\nfresh flamingo line\n"
    path.write_text(edited)
    os.utime(path, (1, 1))  # a different mtime even on coarse filesystems
    report = mem.sync()
    assert report["indexed"] == 1 and report["unchanged"] == 1
    rows = mem.store.chunks_of("MEMORY.md")
    expected = chunk_markdown(edited, "MEMORY.md")
    assert [(r.start_line, r.end_line, r.text) for r in rows] == [(c.start_line, c.end_line, c.text) for c in expected]
    assert mem.store.chunks_of("memory/other.md") == other_before
    counts = table_counts(mem.store)
    assert counts["chunks"] == len(expected) + 1
    inputs = {text for row in mem.store.chunks_of("MEMORY.md") for text in embedding_inputs(row, 64)}
    assert counts["vectors"] == len(inputs) + 1  # every chunk and window of both files, nothing stale
    assert mem.store.keyword(["word3x5"], 50) == []
    assert len(mem.store.keyword(["flamingo"], 50)) == 1
    # only the inputs whose text changed were embedded again; the rest came from the cache
    assert 0 < report["embedded"] < len(inputs) / 2
    assert report["fromCache"] == len(inputs) - report["embedded"]


@both_backends
def test_deleted_file_leaves_nothing_in_any_table(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    path = write(workspace / "memory" / "2026-01-01.md", LONG + "\n\n寿司和拉面\n")
    mem = make_memory()
    mem.sync()
    assert table_counts(mem.store)["chunks_trigram"] > 0
    path.unlink()
    report = mem.sync()
    assert report["removed"] == 1
    counts = table_counts(mem.store)
    assert {k: v for k, v in counts.items() if k != "cacheEntries"} == {
        "files": 0,
        "chunks": 0,
        "vectors": 0,
        "chunks_fts": 0,
        "chunks_trigram": 0,
    }


@both_backends
def test_invalid_utf8_is_indexed_and_reported(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    (workspace / "memory" / "bad.md").write_bytes(b"# Notes\n\ncaf\xe9 latte and \xff\xfe bytes\n")
    mem = make_memory(provider="none")
    mem.sync()
    assert mem.search("latte")["results"][0]["path"] == "memory/bad.md"
    status = mem.status()
    assert any("memory/bad.md" in w and "UTF-8" in w for w in status["warnings"])


@both_backends
def test_oversize_file_is_skipped_with_a_warning(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "memory" / "big.md", "x " * 2000)
    write(workspace / "MEMORY.md", "small")
    mem = make_memory({"maxFileBytes": 1000}, provider="none")
    report = mem.sync()
    assert [s["path"] for s in report["skipped"]] == ["memory/big.md"]
    assert "maxFileBytes" in report["skipped"][0]["reason"]
    assert any("memory/big.md" in w and "maxFileBytes" in w for w in mem.status()["warnings"])
    assert set(mem.store.files()) == {"MEMORY.md"}


@both_backends
def test_symlinks_are_not_followed(workspace: Path, tmp_path: Path, make_memory: Callable[..., Memory]) -> None:
    outside = write(tmp_path / "elsewhere" / "secret.md", "classified aardvark")
    os.symlink(outside, workspace / "memory" / "link.md")
    os.symlink(outside.parent, workspace / "memory" / "dirlink")
    os.symlink(outside, workspace / "MEMORY.md")
    write(workspace / "memory" / "real.md", "visible")
    mem = make_memory(provider="none")
    mem.sync()
    assert set(mem.store.files()) == {"memory/real.md"}
    assert mem.search("aardvark")["results"] == []


@both_backends
def test_discovery_covers_nested_folders_and_extra_paths(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "memory.md", "lower")
    write(workspace / "memory" / "a" / "b" / "deep.md", "deep")
    write(workspace / "memory" / "notes.txt", "not markdown")
    write(workspace / "docs" / "x.md", "extra folder")
    write(workspace / "single.md", "extra file")
    write(workspace / "README.md", "not memory")
    mem = make_memory({"extraPaths": ["docs", "single.md"]}, provider="none")
    mem.sync()
    assert set(mem.store.files()) == {"memory.md", "memory/a/b/deep.md", "docs/x.md", "single.md"}
    assert mem.store.files()["docs/x.md"].source == "extra"


@both_backends
def test_chunking_change_rebuilds(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "MEMORY.md", LONG)
    first = make_memory({"chunking": {"tokens": 400, "overlap": 80}})
    first.sync()
    n400 = first.store.counts()["chunks"]
    first.close()
    second = make_memory({"chunking": {"tokens": 128, "overlap": 16}})
    report = second.sync()
    assert report["rebuilt"] is True
    assert second.store.counts()["chunks"] == len(chunk_markdown(LONG, "MEMORY.md", tokens=128, overlap=16)) > n400


@both_backends
def test_keyword_only_mode_is_reported(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "MEMORY.md", "# Hi\n\nhello there")
    mem = make_memory(provider="none")
    mem.sync()
    status = mem.status()
    assert status["provider"] == "none" and status["mode"] == "keyword" and status["vectors"] == 0
    res = mem.search("hello")
    assert res["provider"] == "none" and res["mode"] == "keyword" and res["results"]


@both_backends
def test_status_staleness_is_computed_from_disk(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    a = write(workspace / "memory" / "a.md", "alpha")
    b = write(workspace / "memory" / "b.md", "bravo")
    mem = make_memory({"sync": {"onSearch": False}}, provider="none")
    mem.sync()
    assert mem.status()["staleFiles"] == []
    a.write_text("alpha changed")
    os.utime(a, (5, 5))
    b.unlink()
    write(workspace / "memory" / "c.md", "charlie")
    os.utime(workspace / "memory" / "c.md", (5, 5))
    stale = {f["path"]: f["state"] for f in mem.status()["staleFiles"]}
    assert stale == {"memory/a.md": "modified", "memory/b.md": "deleted", "memory/c.md": "new"}
    # touching a file without changing it is not staleness
    mem.sync()
    os.utime(workspace / "memory" / "c.md", (9, 9))
    assert mem.status()["staleFiles"] == []


@both_backends
def test_search_syncs_small_edits_first(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "MEMORY.md", "nothing yet")
    mem = make_memory(provider="none")
    mem.sync()
    write(workspace / "memory" / "2026-05-01.md", "remember the wombat")
    assert mem.search("wombat")["results"][0]["path"] == "memory/2026-05-01.md"


def test_embedding_inputs_are_the_windows_with_their_heading_or_the_whole_chunk() -> None:
    from mdmem.store import ChunkRow

    text = "## 9 May\n\nCaroline: went hiking\nMelanie: nice\n\n## 10 May\n\nCaroline: bought a guitar"
    row = ChunkRow("memory/d.md", "memory", 1, 7, "h", "e", "Log", text)
    inputs = embedding_inputs(row, 8)  # about one line per window
    assert inputs == [  # the windows only: the whole chunk is not embedded as well
        "Log > 9 May\nCaroline: went hiking",
        "Log > 9 May\nMelanie: nice",
        "Log > 10 May\nCaroline: bought a guitar",
    ]
    assert embedding_inputs(row, 0) == [text]  # windows off
    small = ChunkRow("MEMORY.md", "memory", 3, 3, "h", "e", "Prefs", "- tea, no sugar")
    assert embedding_inputs(small, 64) == ["Prefs\n- tea, no sugar"]  # one window: the chunk itself


@both_backends
def test_stemmed_keywords_match_other_word_forms(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "memory" / "2026-02-02.md", "# Trip\n\nWe vacationed in Porto and visited bookshops.\n")
    mem = make_memory(provider="none")
    mem.sync()
    assert mem.search("vacation")["results"][0]["path"] == "memory/2026-02-02.md"
    assert mem.search("visiting")["results"][0]["path"] == "memory/2026-02-02.md"


def test_phase_two_writes_a_batch_while_the_next_is_embedded_and_an_outage_keeps_what_was_written(
    workspace: Path, make_memory: Callable[..., Memory], monkeypatch
) -> None:
    """Pipelined embedding: batch k's vectors are written while batch k+1 is embedded on another thread. A
    provider failing mid-way stops it cleanly: the batches before are written, the rest stays pending, and
    no embedding is left running when the sync returns."""
    import threading
    import time

    import pytest

    import mdmem.index.embedding as embedding
    from mdmem.providers.factory import ProviderChoice
    from mdmem.providers.hashing import HashEmbeddingProvider
    from mdmem.util.errors import EmbeddingsPending, ProviderError

    class Slow(HashEmbeddingProvider):
        def __init__(self, fail_on: int | None = None) -> None:
            super().__init__(dims=64)
            self.fail_on, self.spans, self.active = fail_on, [], 0

        def embed_batch(self, texts):
            self.active += 1
            started = time.monotonic()
            try:
                time.sleep(0.05)
                if self.fail_on is not None and len(self.spans) + 1 >= self.fail_on:
                    raise ProviderError("simulated outage")
                return super().embed_batch(texts)
            finally:
                self.spans.append((started, time.monotonic(), threading.get_ident()))
                self.active -= 1

    monkeypatch.setattr(embedding, "EMBED_BATCH_INPUTS", 3)
    for day in range(1, 9):
        write(workspace / "memory" / f"2026-03-{day:02d}.md", f"# Day {day}\n\nNote {day}: the heron came back.\n")
    mem = make_memory(memory_search={"cache": {"enabled": False}})
    slow = Slow()
    mem.engine.providers.adopt(ProviderChoice(slow, "hash"))
    writes: list[float] = []

    def record_writes(store) -> None:
        add_vectors = store.add_vectors

        def recorded(items):
            writes.append(time.monotonic())
            return add_vectors(items)

        monkeypatch.setattr(store, "add_vectors", recorded)

    record_writes(mem.store)
    report = mem.sync()
    assert report["embedError"] is None and report["pending"] == 0 and len(slow.spans) >= 3
    assert all(t != threading.get_ident() for _, _, t in slow.spans)  # embedded off the syncing thread
    assert any(s < w < e for w in writes for s, e, _ in slow.spans)  # a write while the next batch embedded

    for day in range(1, 9):
        write(workspace / "memory" / f"2026-03-{day:02d}.md", f"# Day {day}\n\nNote {day}: the otter left.\n")
    mem.close()
    mem = make_memory(memory_search={"cache": {"enabled": False}})
    failing = Slow(fail_on=3)
    mem.engine.providers.adopt(ProviderChoice(failing, "hash"))
    writes.clear()
    record_writes(mem.store)
    with pytest.raises(EmbeddingsPending, match="simulated outage") as stopped:
        mem.sync()
    assert failing.active == 0  # nothing still embedding behind our back
    assert len(writes) == 2 and 0 < stopped.value.pending < 8  # the two batches before the outage are written
    assert mem.store.pending_count() == stopped.value.pending
