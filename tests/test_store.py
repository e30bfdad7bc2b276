"""The SQLite store: codec, migrations, per-file replacement, KNN through the vec0 index, cache pruning."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mdmem.store import ChunkRow, FileRow, Store, decode_vector, encode_vector
from mdmem.store.schema import SCHEMA_VERSION
from mdmem.util.errors import StoreError


def unit(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    v = rng.normal(size=(n, dims)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def one_each(vectors: np.ndarray) -> list[tuple[list[str], np.ndarray]]:
    """One vector per chunk, in the store's per-chunk format."""
    return [([f"v{i}"], vectors[i : i + 1]) for i in range(len(vectors))]


def chunk(path: str, i: int, text: str) -> ChunkRow:
    return ChunkRow(path, "memory", i, i, f"h{i}", f"e-{path}-{i}", "", text)


def fts_instances(store: Store, table: str) -> int:
    store.conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_v USING fts5vocab(main, {table}, 'instance')")
    return store.conn.execute(f"SELECT count(*) FROM temp.{table}_v").fetchone()[0]


def test_vector_codec_round_trip() -> None:
    v = np.array([0.0, -1.5, 3.25, 1e-7], dtype=np.float32)
    blob = encode_vector(v)
    assert len(blob) == 16
    assert blob[:4] == b"\x00\x00\x00\x00"
    np.testing.assert_array_equal(decode_vector(blob), v)
    np.testing.assert_array_equal(decode_vector(encode_vector([1, 2, 3])), np.array([1, 2, 3], dtype=np.float32))


def test_migrations_set_schema_version_and_are_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite"
    with Store(path) as s:
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in s.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"meta", "files", "chunks", "chunks_fts", "chunks_trigram", "embedding_cache"} <= tables
        s.set_meta("x", {"a": 1})
    with Store(path) as s:  # reopening keeps data and does not re-run migrations
        assert s.get_meta("x") == {"a": 1}


def test_newer_schema_is_refused_with_a_fix(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite"
    with Store(path) as s:
        s.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    with pytest.raises(StoreError, match="newer than this mdmem"):
        Store(path)


def test_replace_file_swaps_every_row(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    with Store(tmp_path / "a.sqlite") as s:
        f = FileRow("memory/a.md", "memory", "hash1", 1.0, 10)
        s.replace_file(
            f, [chunk("memory/a.md", 1, "alpha bravo"), chunk("memory/a.md", 2, "charlie")], one_each(unit(rng, 2, 8))
        )
        s.replace_file(
            FileRow("MEMORY.md", "memory", "x", 1.0, 1), [chunk("MEMORY.md", 1, "zulu")], one_each(unit(rng, 1, 8))
        )
        assert s.counts()["chunks"] == 3 and s.counts()["vectors"] == 3
        before = fts_instances(s, "chunks_fts")
        s.replace_file(f, [chunk("memory/a.md", 1, "delta")], one_each(unit(rng, 1, 8)))
        assert [c.text for c in s.chunks_of("memory/a.md")] == ["delta"]
        assert s.counts() == {"files": 2, "chunks": 2, "vectors": 2, "cacheEntries": 0}
        assert fts_instances(s, "chunks_fts") == before - 3 + 1
        assert s.keyword(["alpha"], 10) == [] and s.keyword(["charlie"], 10) == []
        assert len(s.keyword(["delta"], 10)) == 1
        assert s.files()["memory/a.md"].chunks == 1


def test_delete_file_leaves_nothing_in_any_table(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    with Store(tmp_path / "a.sqlite") as s:
        f = FileRow("memory/b.md", "memory", "h", 1.0, 1)
        s.replace_file(
            f, [chunk("memory/b.md", i, f"word{i} 寿司拉面{i}") for i in range(1, 5)], one_each(unit(rng, 4, 8))
        )
        s.delete_file("memory/b.md")
        assert s.counts() == {"files": 0, "chunks": 0, "vectors": 0, "cacheEntries": 0}
        assert fts_instances(s, "chunks_fts") == 0
        assert fts_instances(s, "chunks_trigram") == 0
        assert s.conn.execute("SELECT count(*) FROM chunks_vec").fetchone()[0] == 0


def test_failed_replace_rolls_back_whole_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    with Store(tmp_path / "a.sqlite") as s:
        f = FileRow("memory/c.md", "memory", "h", 1.0, 1)
        s.replace_file(f, [chunk("memory/c.md", 1, "original")], one_each(unit(rng, 1, 8)))
        with pytest.raises(StoreError):  # wrong dimension -> nothing of the new version is kept
            s.replace_file(f, [chunk("memory/c.md", 1, "replacement")], one_each(unit(rng, 1, 16)))
        assert [c.text for c in s.chunks_of("memory/c.md")] == ["original"]
        assert s.counts()["vectors"] == 1


def test_knn_uses_the_vec0_index_and_matches_brute_force(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    vecs = unit(rng, 200, 16)
    with Store(tmp_path / "a.sqlite") as s:
        rows = [chunk("memory/k.md", i, f"text {i}") for i in range(200)]
        s.replace_file(FileRow("memory/k.md", "memory", "h", 1.0, 1), rows, one_each(vecs))
        q = unit(rng, 1, 16)[0]
        got = s.knn(q, 10)
        ids = {c.id: c.start_line for c in s.chunks_of("memory/k.md")}
        expect = list(np.argsort(-(vecs @ q))[:10])
        assert [ids[rid] for rid, _ in got] == expect
        assert got[0][1] == pytest.approx(1 - float(vecs[expect[0]] @ q), abs=1e-5)
        from mdmem.store.vectors import encode_vector as enc

        plan = s.conn.execute(
            "EXPLAIN QUERY PLAN WITH knn AS (SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? "
            "AND k = ?) SELECT rowid, distance FROM knn ORDER BY distance",
            (enc(q), 10),
        ).fetchall()
        assert any("INDEX 0:3{" in str(r[3]) for r in plan), plan  # sqlite-vec's KNN plan, not a scan


def test_cache_prune_keeps_the_newest(tmp_path: Path) -> None:
    with Store(tmp_path / "a.sqlite") as s:
        for i in range(5):
            s.cache_put("p", "m", "k", {f"h{i}": np.ones(4, dtype=np.float32) * i})
        s.cache_touch("p", "m", "k", ["h0"])
        assert s.cache_prune(3) == 2
        assert set(s.cache_get("p", "m", "k", [f"h{i}" for i in range(5)])) == {"h0", "h3", "h4"}
        assert s.cache_get("p", "m", "other-key", ["h0"]) == {}


def test_large_index_knn_uses_bit_codes_then_exact_rescoring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mdmem.store.knn as index_mod
    import mdmem.store.matrix as matrix_mod

    monkeypatch.setattr(matrix_mod, "MAX_BYTES", 0)  # never held in memory: sqlite-vec's paths answer
    monkeypatch.setattr(index_mod, "EXACT_KNN_MAX_ROWS", 100)
    monkeypatch.setattr(index_mod, "EXACT_ROWS_PER_CANDIDATE", 1)
    rng = np.random.default_rng(5)
    centres = unit(rng, 20, 64)
    vecs = centres[rng.integers(0, 20, size=600)] + rng.normal(scale=0.08, size=(600, 64)).astype(np.float32)
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    with Store(tmp_path / "a.sqlite") as s:
        rows = [chunk("memory/k.md", i, f"text {i}") for i in range(600)]
        s.replace_file(FileRow("memory/k.md", "memory", "h", 1.0, 1), rows, one_each(vecs))
        line_of = {c.id: c.start_line for c in s.chunks_of("memory/k.md")}
        hits = 0
        for _ in range(20):
            q = vecs[rng.integers(600)] + rng.normal(scale=0.05, size=64).astype(np.float32)
            q /= np.linalg.norm(q)
            got = s.knn(q, 10)
            truth = list(np.argsort(-(vecs @ q))[:10])
            assert line_of[got[0][0]] == truth[0]  # the nearest neighbour is always found
            dists = [d for _, d in got]
            assert dists == sorted(dists)  # exact rescoring orders the candidates by true distance
            assert dists[0] == pytest.approx(1 - float(vecs[truth[0]] @ q), abs=1e-5)
            hits += len({line_of[i] for i, _ in got} & set(truth))
        assert hits / 200 >= 0.9  # recall@10 of the coarse-then-rescore path

        # a wide net over few vectors per candidate is answered by the exact scan: the true order, all of it
        monkeypatch.setattr(index_mod, "EXACT_ROWS_PER_CANDIDATE", 40)  # 40 x max(4k, 96) >= 600 vectors
        q = vecs[3]
        assert [line_of[i] for i, _ in s.knn(q, 10)] == list(np.argsort(-(vecs @ q))[:10])


def test_migration_2_keeps_a_version_1_index_usable(tmp_path: Path) -> None:
    """A database written by schema 1 (one vector per chunk, unstemmed FTS) migrates in place."""
    import sqlean
    import sqlite_vec

    from mdmem.store.schema import _M1_STATEMENTS

    path = tmp_path / "old.sqlite"
    conn = sqlean.connect(str(path), isolation_level=None)
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    for statement in _M1_STATEMENTS:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO chunks(id, path, source, start_line, end_line, hash, embed_hash, heading, text) "
        "VALUES (7, 'MEMORY.md', 'memory', 1, 1, 'h', 'e7', '', 'we vacationed in Porto')"
    )
    conn.execute("INSERT INTO chunk_vectors(id, embedding) VALUES (7, ?)", (encode_vector([1, 0, 0, 0, 0, 0, 0, 0]),))
    conn.close()
    with Store(path) as s:
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert [r for r, _ in s.keyword(["vacation"], 5)] == [7]  # rebuilt with stemming
        assert s.conn.execute("SELECT id, chunk_id, hash FROM vectors").fetchall() == [(7, 7, "e7")]


def test_chunk_similarities_take_the_best_vector_of_each_chunk(tmp_path: Path) -> None:
    with Store(tmp_path / "a.sqlite") as s:
        rows = [chunk("memory/s.md", 1, "a"), chunk("memory/s.md", 2, "b")]
        e = np.eye(4, dtype=np.float32)
        s.replace_file(FileRow("memory/s.md", "memory", "h", 1.0, 1), rows, [(["x", "y"], e[:2]), (["z"], e[2:3])])
        ids = [c.id for c in s.chunks_of("memory/s.md")]
        sims = s.chunk_similarities(ids, np.array([0, 1, 0, 0], dtype=np.float32))
        assert sims == {ids[0]: pytest.approx(1.0), ids[1]: pytest.approx(0.0)}
        assert [cid for cid, _ in s.knn(np.array([0, 0.9, 0.1, 0], dtype=np.float32), 2)] == ids  # by best vector
        assert s.vector_count() == 3 and s.counts()["chunks"] == 2


def test_pending_chunks_get_their_vectors_once_and_leave_no_marks(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    with Store(tmp_path / "a.sqlite") as s:
        f = FileRow("memory/p.md", "memory", "h", 1.0, 1)
        rows = [chunk("memory/p.md", 1, "alpha"), chunk("memory/p.md", 2, "bravo"), chunk("memory/p.md", 3, "kilo")]
        vectors = one_each(unit(rng, 3, 8))
        ids = s.replace_file(f, rows, [vectors[0], None, None])  # chunks 2 and 3 wait for their vectors
        assert s.pending_count() == 2 and s.vector_count() == 1
        assert len(s.keyword(["bravo"], 5)) == 1  # found by keywords while pending
        pending = s.pending_chunks(10)
        assert [c.id for c in pending] == ids[1:] and s.pending_chunks(10, after_id=ids[1]) == pending[1:]
        stale = replace(pending[1], embed_hash="another-embed-hash")  # its file was rewritten by another process
        assert s.add_vectors([(pending[0], vectors[1]), (stale, vectors[2])]) == 1
        assert s.pending_count() == 1 and s.vector_count() == 2
        assert s.add_vectors([(pending[0], vectors[1])]) == 0  # not pending any more: written once
        assert s.vector_count() == 2
        s.delete_file("memory/p.md")
        assert s.pending_count() == 0 and s.counts() == {"files": 0, "chunks": 0, "vectors": 0, "cacheEntries": 0}
