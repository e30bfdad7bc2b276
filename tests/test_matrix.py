"""KNN over the vectors held in memory (mdmem.store.matrix): the same answers as sqlite-vec's exact scan,
caught up with every write (this connection's and another process's), bounded in size, and only for a
store that searches more than once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mdmem.store.matrix as matrix_mod
from mdmem.store import ChunkRow, FileRow, Store


def unit(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    v = rng.normal(size=(n, dims)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def write(store: Store, path: str, vectors: np.ndarray, windows: int = 1) -> None:
    """One chunk per ``windows`` rows of ``vectors``, each chunk owning those rows (its windows)."""
    n = len(vectors) // windows
    rows = [ChunkRow(path, "memory", i, i, f"h{i}", f"e-{path}-{i}", "", f"text {path} {i}") for i in range(n)]
    vecs = [([f"w{j}" for j in range(windows)], vectors[i * windows : (i + 1) * windows]) for i in range(n)]
    store.replace_file(FileRow(path, "memory", f"h-{path}-{n}", 1.0, 1), rows, vecs)


def exact(path: Path, q: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The answer of sqlite-vec's own scan: the first KNN of a fresh connection never uses the matrix."""
    with Store(path) as fresh:
        got = fresh.knn(q, k)
        assert fresh.vectors.matrix is None
        return got


def held(store: Store, rng: np.random.Generator, dims: int) -> None:
    """Search twice (the first KNN of a connection never loads the matrix): the vectors are then in memory."""
    for _ in range(2):
        store.knn(unit(rng, 1, dims)[0], 3)
    assert store.vectors.matrix is not None


def same(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> None:
    assert [cid for cid, _ in a] == [cid for cid, _ in b]
    assert [d for _, d in a] == pytest.approx([d for _, d in b], abs=1e-5)


def test_a_second_search_answers_from_memory_exactly_as_sqlite_vec(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    path = tmp_path / "a.sqlite"
    with Store(path) as s:
        write(s, "memory/a.md", unit(rng, 900, 24), windows=3)  # 300 chunks of 3 vectors each
        first = s.knn(unit(rng, 1, 24)[0], 10)
        assert s.vectors.matrix is None and len(first) == 10  # the first KNN of a connection: sqlite-vec
        for _ in range(15):
            q = unit(rng, 1, 24)[0]
            got = s.knn(q, 25)
            assert s.vectors.matrix is not None
            same(got, exact(path, q, 25))
            assert len({cid for cid, _ in got}) == 25  # a chunk counted once, at its best window


def test_the_matrix_follows_writes_deletes_and_other_connections(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    path = tmp_path / "a.sqlite"
    with Store(path) as reader, Store(path) as writer:
        write(writer, "memory/a.md", unit(rng, 200, 16))
        write(writer, "memory/b.md", unit(rng, 200, 16))
        reader.knn(unit(rng, 1, 16)[0], 5)
        q = unit(rng, 1, 16)[0]
        same(reader.knn(q, 20), exact(path, q, 20))
        held = reader.vectors.matrix
        steps = [
            lambda: write(writer, "memory/c.md", unit(rng, 50, 16)),  # another connection adds
            lambda: writer.delete_file("memory/a.md"),  # ... and deletes
            lambda: write(writer, "memory/b.md", unit(rng, 120, 16)),  # ... and replaces a file's rows
            lambda: write(reader, "memory/d.md", unit(rng, 30, 16)),  # this connection writes
        ]
        for step in steps:
            step()
            for _ in range(3):
                q = unit(rng, 1, 16)[0]
                same(reader.knn(q, 20), exact(path, q, 20))
        assert reader.vectors.matrix is held  # caught up in place, never reloaded whole
        assert held.live_count == reader.vector_count()
        live = sorted(int(i) for i in held.ids[: held.size][held.live[: held.size]])
        assert live == [r[0] for r in reader.conn.execute("SELECT id FROM vectors ORDER BY id")]


def test_mostly_deleted_rows_are_compacted_away(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    path = tmp_path / "a.sqlite"
    with Store(path) as s:
        write(s, "memory/a.md", unit(rng, 300, 8))
        write(s, "memory/b.md", unit(rng, 40, 8))
        held(s, rng, 8)
        s.delete_file("memory/a.md")
        q = unit(rng, 1, 8)[0]
        same(s.knn(q, 10), exact(path, q, 10))
        assert s.vectors.matrix is not None and s.vectors.matrix.size == s.vectors.matrix.live_count == 40


def test_an_index_over_the_size_bound_stays_on_sqlite_vec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matrix_mod, "MAX_BYTES", 100 * 16 * 4 - 1)  # just under 100 vectors of 16 floats
    rng = np.random.default_rng(14)
    path = tmp_path / "a.sqlite"
    with Store(path) as s:
        write(s, "memory/a.md", unit(rng, 99, 16))
        held(s, rng, 16)
        write(s, "memory/b.md", unit(rng, 1, 16))  # 100 vectors: over the bound, the memory is let go
        q = unit(rng, 1, 16)[0]
        same(s.knn(q, 10), exact(path, q, 10))
        assert s.vectors.matrix is None


def test_a_rebuild_swapped_in_drops_the_old_generations_vectors(tmp_path: Path) -> None:
    rng = np.random.default_rng(15)
    path = tmp_path / "a.sqlite"
    with Store(path) as s:
        write(s, "memory/a.md", unit(rng, 50, 8))
        held(s, rng, 8)
        s.reopen()  # what refresh() does when a rebuild swapped another file in
        assert s.vectors.matrix is None
