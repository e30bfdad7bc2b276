"""One agent's index on a real PostgreSQL: files replaced whole, one writer per agent, generations switched
in one transaction, a writer killed mid-rebuild leaving nothing a reader sees."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdmem.store.pg.store import PgStore
from mdmem.store.rows import ChunkRow, FileRow
from mdmem.util.errors import LockError

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def schema(pg_url: str) -> Iterator[str]:
    name = "s_" + uuid.uuid4().hex[:12]
    yield name
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def note(path: str, *texts: str) -> tuple[FileRow, list[ChunkRow]]:
    chunks = [ChunkRow(path, "memory", i + 1, i + 1, f"h{i}", f"e{i}", "Notes", t) for i, t in enumerate(texts)]
    return FileRow(path, "memory", "hash-" + "-".join(texts)[:20], 1.0, 10), chunks


def unit(rng: np.random.Generator, n: int, dims: int = 16) -> np.ndarray:
    v = rng.normal(size=(n, dims)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_files_are_replaced_whole_and_searched_by_keyword_and_vector(pg_url: str, schema: str) -> None:
    rng = np.random.default_rng(1)
    with PgStore(pg_url, "a1", schema) as store:
        f, chunks = note("memory/2026-03-01.md", "The backup runs nightly with restic.", "Dinner with Dana.")
        vecs = unit(rng, 2)
        ids = store.replace_file(f, chunks, [(["w0"], vecs[0:1]), None])
        assert store.files()["memory/2026-03-01.md"].chunks == 2 and store.pending_count() == 1
        got = store.keyword_matches(["backups", "nightly"], 5)
        assert [cid for cid, _, _ in got] == [ids[0]] and got[0][2] == {"backups", "nightly"}
        assert store.knn(vecs[0], 1) == [(ids[0], pytest.approx(0.0, abs=1e-5))]

        f2, chunks2 = note("memory/2026-03-01.md", "Only lunch today.")
        new = store.replace_file(f2, chunks2, [(["w1"], vecs[1:2])])
        assert store.keyword_matches(["backup"], 5) == [] and store.chunk_count() == 1
        assert set(store.chunks_by_ids(ids + new)) == set(new)  # the old rows are gone with their postings
        with pytest.raises(ValueError):  # a bad row mid-transaction: nothing of it stays
            store.replace_file(*note("memory/2026-03-01.md", "Broken write."), [(["a", "b"], vecs[0:1])])
        assert store.keyword_matches(["lunch"], 5)[0][0] == new[0] and store.keyword_matches(["broken"], 5) == []
        store.delete_file("memory/2026-03-01.md")
        assert store.files() == {} and store.chunk_count() == 0


def test_one_writer_per_agent(pg_url: str, schema: str) -> None:
    with (
        PgStore(pg_url, "a1", schema) as one,
        PgStore(pg_url, "a1", schema) as two,
        PgStore(pg_url, "a2", schema) as other,
    ):
        with one.writer():
            with pytest.raises(LockError, match="a1"):
                with two.writer(wait=0.2):
                    pass
            with other.writer():  # another agent writes at the same time
                pass
        with two.writer():  # released
            pass


def test_a_rebuild_switches_in_one_transaction_and_readers_never_see_half(pg_url: str, schema: str) -> None:
    with PgStore(pg_url, "a1", schema) as writer, PgStore(pg_url, "a1", schema) as reader:
        writer.replace_file(*note("memory/a.md", "old kingfisher note"), None)
        gen = writer.begin_generation({"provider": "none"})
        writer.replace_file(*note("memory/a.md", "new heron note"), None, gen=gen)
        assert [w for _, _, w in reader.keyword_matches(["kingfisher"], 5)] == [{"kingfisher"}]
        assert reader.keyword_matches(["heron"], 5) == []  # the building generation is invisible
        writer.switch_live(gen)
        assert len(reader.keyword_matches(["kingfisher"], 5)) == 1  # not followed yet: the whole old index
        assert reader.refresh() and reader.keyword_matches(["kingfisher"], 5) == []
        assert len(reader.keyword_matches(["heron"], 5)) == 1


def test_a_writer_killed_mid_rebuild_leaves_the_live_index_answering(pg_url: str, schema: str) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO)!r})
        from mdmem.store.rows import ChunkRow, FileRow
        from mdmem.store.pg.store import PgStore
        store = PgStore({pg_url!r}, "a1", {schema!r})
        with store.writer():
            gen = store.begin_generation()
            for i in range(20):
                row = FileRow(f"memory/{{i}}.md", "memory", "h", 1.0, 1)
                store.replace_file(row, [ChunkRow(row.path, "memory", 1, 1, "h", "e", "", "half rebuilt osprey")], None,
                                   gen=gen)
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    with PgStore(pg_url, "a1", schema) as store:
        store.replace_file(*note("memory/a.md", "the live egret note"), None)
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
        assert done.returncode == -9, done.stderr.decode()[-2000:]
        assert store.keyword_matches(["osprey"], 5) == [] and len(store.keyword_matches(["egret"], 5)) == 1
        with store.writer():  # the killed writer's lock died with its session
            gen = store.begin_generation()  # and its abandoned generation is dropped
            store.replace_file(*note("memory/a.md", "rebuilt egret note"), None, gen=gen)
            store.switch_live(gen)
            store.tidy(keep_seconds=0)  # the retired generation too, once no search can still be reading it
        assert [len(store.keyword_matches([w], 5)) for w in ("osprey", "rebuilt")] == [0, 1]
        with store.session() as conn:
            count = conn.execute(
                f"SELECT count(*) FROM {schema}.chunks WHERE agent_id = 'a1' AND gen <> %s", (store.gen,)
            ).fetchone()[0]
        assert count == 0  # nothing of the killed rebuild is left


def test_an_sqlite_index_is_copied_with_its_vectors_and_pending_chunks(
    pg_url: str,
    schema: str,
    tmp_path: Path,
) -> None:
    from mdmem.store import Store
    from mdmem.store.copy import copy_index

    rng = np.random.default_rng(2)
    with Store(tmp_path / "index.sqlite") as lite, PgStore(pg_url, "a1", schema) as pg:
        pg.replace_file(*note("memory/old.md", "an old row the copy replaces"), None)
        f1, c1 = note("memory/a.md", "The backup runs nightly.", "Windows of a long chunk.")
        v1 = unit(rng, 3)
        lite.replace_file(f1, c1, [(["x0"], v1[0:1]), (["x1", "x2"], v1[1:3])])
        f2, c2 = note("memory/b.md", "Dinner with Dana is pending.")
        lite.replace_file(f2, c2, [None])
        lite.set_meta("identity", {"provider": "hash", "dims": 16})

        counts = copy_index(lite, pg)

        assert counts == {"files": 2, "chunks": 3, "vectors": 3, "pending": 1, "cacheEntries": 0}
        assert set(pg.files()) == {"memory/a.md", "memory/b.md"} and pg.pending_count() == 1
        assert pg.get_meta("identity") == {"provider": "hash", "dims": 16}
        assert pg.keyword_matches(["old"], 5) == []
        nearest = pg.knn(v1[2], 1)[0]  # the second window of the second chunk
        assert pg.chunks_by_ids([nearest[0]])[nearest[0]].text == "Windows of a long chunk."
        assert nearest[1] == pytest.approx(0.0, abs=1e-5)


def test_document_frequencies_are_remembered_until_the_index_changes(pg_url: str, schema: str) -> None:
    with PgStore(pg_url, "a1", schema) as store:
        store.replace_file(*note("memory/a.md", "heron at dawn", "heron at dusk"), None)
        assert store.term_frequency_at_least("herons", 10) == 2
        store.replace_file(*note("memory/b.md", "a heron again"), None)  # a write: counted afresh
        assert store.term_frequency_at_least("herons", 10) == 3
        with PgStore(pg_url, "a1", schema) as other:  # another process's write is seen too
            other.delete_file("memory/a.md")
        store.refresh()  # from its next search on (each one begins with a refresh)
        assert store.term_frequency_at_least("herons", 10) == 1


def test_a_connection_given_back_to_the_pool_holds_no_writer_lock(pg_url: str, schema: str) -> None:
    from mdmem.store.pg.connection import try_lock
    from mdmem.store.pg.view import lock_key

    first = PgStore(pg_url, "a1", schema)
    with pytest.raises(RuntimeError), first.session():  # a block that fails between taking and releasing it
        assert try_lock(pg_url, lock_key("a1"))
        raise RuntimeError("killed mid-write")
    others = [PgStore(pg_url, "a1", schema) for _ in range(3)]  # one of them may get that connection again
    try:
        for store in others:
            with store.writer(wait=0.0):
                pass
    finally:
        for store in others:
            store.close()


def _hnsw_state(store: PgStore, dims: int) -> str | None:
    from mdmem.store.pg import vectors

    with store.session() as conn, conn.cursor() as cur:
        state = vectors.index_state(cur, store.schema, store.agent_id, store.gen, dims)
    return state


def test_a_generation_is_indexed_once_it_is_loaded_and_big_enough_and_a_killed_builds_index_by_the_next(
    pg_url: str, schema: str
) -> None:
    from mdmem.store.pg import vectors

    per_file = 600
    rng = np.random.default_rng(4)
    vecs = unit(rng, 4 * per_file)
    with PgStore(pg_url, "a1", schema) as store:
        for i in range(4):  # vectors go in without an index: it is built once they are all in
            f, chunks = note(f"memory/{i}.md", *(f"note {i} {j}" for j in range(per_file)))
            first = i * per_file
            store.replace_file(
                f, chunks, [([f"w{first + j}"], vecs[first + j : first + j + 1]) for j in range(per_file)]
            )
            store.settle()  # a small generation is searched exactly, without one
            assert _hnsw_state(store, 16) is None or (i + 1) * per_file >= vectors.HNSW_MIN_VECTORS
            assert store.knn(vecs[first], 1)[0][1] == pytest.approx(0.0, abs=1e-5)
        assert 4 * per_file >= vectors.HNSW_MIN_VECTORS and _hnsw_state(store, 16) == "valid"
        f, chunks = note("memory/9.md", "one more")  # from now on the index takes each vector as it comes
        (new,) = store.replace_file(f, chunks, [(["w9"], vecs[0:1])])
        assert new in {cid for cid, _ in store.knn(vecs[0], 2)}

        with store.session() as conn, conn.transaction(), conn.cursor() as cur:  # as a killed build leaves it
            name = f"{schema}.{vectors.index_name('a1', store.gen, 16)}"
            cur.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", (name,))
        assert _hnsw_state(store, 16) == "invalid"
    with PgStore(pg_url, "a1", schema) as writer, writer.writer():
        writer.tidy()  # what the next sync does first
        assert _hnsw_state(writer, 16) == "valid"
        assert writer.counts()["vectors"] == 4 * per_file + 1


def test_vectors_go_to_the_server_and_back_in_pgvectors_binary_form(pg_url: str, schema: str) -> None:
    from mdmem.store.pg import codec

    v = np.array([0.5, -1.25, 3.0, 1e-7, -0.0], dtype=np.float32)
    with PgStore(pg_url, "a1", schema) as store, store.session() as conn:
        text, blob = conn.execute(
            "SELECT %s::vector::text, vector_send(%s::vector)", (codec.param(v), codec.param(v))
        ).fetchone()
    assert text == "[0.5,-1.25,3,1e-07,-0]"
    back = codec.array(blob)
    assert back.dtype == np.float32 and back.tobytes() == v.tobytes()


@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
def test_a_sync_ends_with_a_big_generations_vectors_under_their_index(make_memory: Any, workspace: Path) -> None:
    from mdmem.store.pg import vectors

    words = [f"w{i}" for i in range(3000)]  # one vector per chunk: enough chunks for an index
    for day in range(1, 11):
        body = "\n\n".join(
            f"## Note {n}\n\n" + " ".join(words[(day * 97 + n * 7 + k) % 3000] for k in range(12)) for n in range(240)
        )
        (workspace / "memory" / f"2026-03-{day:02d}.md").write_text(f"# Day {day}\n\n{body}\n")
    mem = make_memory({"chunking": {"tokens": 32, "overlap": 0, "windowTokens": 0}})
    mem.sync()
    assert isinstance(mem.store, PgStore) and mem.store.counts()["vectors"] >= vectors.HNSW_MIN_VECTORS
    assert _hnsw_state(mem.store, 64) == "valid"


def test_a_search_reads_one_snapshot_whatever_a_writer_commits_meanwhile(pg_url: str, schema: str) -> None:
    rng = np.random.default_rng(8)
    v = unit(rng, 2)
    with PgStore(pg_url, "a1", schema) as reader, PgStore(pg_url, "a1", schema) as writer:
        writer.replace_file(*note("memory/today.md", "the heron came back"), [(["w0"], v[0:1])])
        reader.refresh()
        with reader.reading():
            (hit, _), *_ = reader.knn(v[0], 1)
            writer_thread = threading.Thread(  # another connection: a writer replaces the file and commits
                target=writer.replace_file, args=(*note("memory/today.md", "the heron left"), [(["w1"], v[1:2])])
            )
            writer_thread.start()
            writer_thread.join(10)
            assert reader.chunks_by_ids([hit])[hit].text == "the heron came back"
        reader.refresh()
        assert reader.chunks_by_ids([hit]) == {}  # the next search sees the new rows


def test_a_vector_search_started_ahead_runs_on_a_second_connection_in_the_searchs_snapshot(
    pg_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mdmem.store.pg import searching

    lent: list[object] = []
    real_spare = searching.spare

    def counted_spare(url: str, max_connections: int = 16) -> object:
        conn = real_spare(url, max_connections)
        lent.append(conn)
        return conn

    monkeypatch.setattr(searching, "spare", counted_spare)
    rng = np.random.default_rng(7)
    vecs = unit(rng, 3)
    with PgStore(pg_url, "a1", schema) as reader, PgStore(pg_url, "a1", schema) as writer:
        f, chunks = note("memory/a.md", "kingfisher by the river", "heron at dawn", "otter tracks")
        ids = writer.replace_file(f, chunks, [(["k"], vecs[0:1]), (["h"], vecs[1:2]), (["o"], vecs[2:3])])
        reader.refresh()
        assert reader.start_knn(vecs[0], 1)() == reader.knn(vecs[0], 1)  # outside a search: answered later, here
        assert lent == []
        with reader.reading() as conn:
            own_pid = conn.info.backend_pid
            assert reader.keyword_matches(["kingfisher"], 5)[0][0] == ids[0]  # the search's snapshot is taken here
            other = threading.Thread(target=writer.delete_file, args=("memory/a.md",))  # its own connection
            other.start()
            other.join()
            nearest = reader.start_knn(vecs[1], 3)
            assert reader.keyword_matches(["heron"], 5)[0][0] == ids[1]  # this thread goes on meanwhile
            got = nearest()
        assert len(lent) == 1 and lent[0] is not None
        assert lent[0].info.backend_pid != own_pid  # type: ignore[attr-defined]
        assert got[0][0] == ids[1] and {cid for cid, _ in got} == set(ids)  # the deleted rows, as the snapshot has them
        with reader.reading():
            assert reader.start_knn(vecs[1], 3)() == []  # a new search: a new snapshot, without them
