"""The inverted file of a large SQLite index (mdmem.store.ivf, mdmem.store.ivfscan): built when a sync settles
and only at ``exactBelow`` vectors or more (smaller indexes answer exactly as before), near-exact top-k with
exact distances, every write reflected (a deleted vector never comes back, a new one is found at once), and
a killed build, a build of another version's rows or vectors written without lists never give a wrong answer.

The vectors are "sentence-like": topics and subtopics (clusters within clusters) around a shared mean
direction, as MiniLM's are (its vectors are not centred), some far more common than others, so the lists
are uneven as on real notes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mdmem.store.ivf as ivf_mod
from mdmem.config.store import IvfConfig
from mdmem.store import ChunkRow, FileRow, Store
from mdmem.store.ivfscan import ListScan

DIMS = 64
PER_FILE = 50
SMALL = IvfConfig(exact_below=1000, probes=12)


def sentences(rng: np.random.Generator, n: int, topics: int = 40, subtopics: int = 25) -> np.ndarray:
    mean = rng.normal(size=DIMS).astype(np.float32)
    centres = mean + rng.normal(size=(topics, DIMS)).astype(np.float32)
    subs = centres.repeat(subtopics, axis=0) + 0.6 * rng.normal(size=(topics * subtopics, DIMS)).astype(np.float32)
    sizes = rng.zipf(1.6, size=len(subs)).astype(np.float64).clip(max=200)  # some far more common than others
    sub = rng.choice(len(subs), size=n, p=sizes / sizes.sum())
    v = subs[sub] + 0.5 * rng.normal(size=(n, DIMS)).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def write(store: Store, vectors: np.ndarray, first: int = 0) -> None:
    """Files of ``PER_FILE`` chunks, one vector each; chunk ``i`` has hash ``c{i}``."""
    for f in range(first, first + len(vectors), PER_FILE):
        rel = f"memory/{f:06d}.md"
        ids = range(f, min(f + PER_FILE, first + len(vectors)))
        rows = [ChunkRow(rel, "memory", j, j, f"c{i}", f"e{i}", "", f"note {i}") for j, i in enumerate(ids)]
        vecs = [([f"e{i}"], vectors[i - first : i - first + 1]) for i in ids]
        store.replace_file(FileRow(rel, "memory", f"h{f}", 1.0, 1), rows, vecs)


def chunk_ids(store: Store) -> dict[int, int]:
    """Chunk row id by note number."""
    return {int(r[1][1:]): int(r[0]) for r in store.conn.execute("SELECT id, hash FROM chunks")}


def exact_top(vectors: np.ndarray, q: np.ndarray, k: int) -> list[int]:
    sims = vectors @ (q / np.linalg.norm(q))
    return [int(i) for i in np.argsort(-sims, kind="stable")[:k]]


def warm(store: Store, rng: np.random.Generator) -> None:
    """The first KNN of a connection never loads the lists (a one-shot command): search twice."""
    for _ in range(2):
        store.knn(rng.normal(size=DIMS).astype(np.float32), 3)


def listed(store: Store, vectors: np.ndarray, rng: np.random.Generator) -> ListScan:
    """``vectors`` written, the sync settled (the lists built) and the lists loaded: the store's scan."""
    write(store, vectors)
    store.settle()
    warm(store, rng)
    scan = store.vectors.scan
    assert scan is not None
    return scan


def test_lists_find_the_exact_neighbours_with_exact_distances(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    vecs = sentences(rng, 4000)
    with Store(tmp_path / "a.sqlite", ivf=SMALL) as s:
        scan = listed(s, vecs, rng)
        meta = s.get_meta("vector_lists")
        assert meta["complete"] and meta["lists"] == ivf_mod.list_count(4000) and meta["trained"] == 4000
        assert scan.live_count == 4000
        assert scan.sorted_upto == 4000 and SMALL.probes < meta["lists"] // 4  # a search reads a few lists only
        ids = chunk_ids(s)
        for k in (10, 24, 96):
            hits = 0
            for q in vecs[rng.integers(0, len(vecs), 40)] + 0.2 * rng.normal(size=(40, DIMS)).astype(np.float32):
                truth = exact_top(vecs, q, k)
                got = s.knn(q, k)
                assert len(got) == k
                hits += len({cid for cid, _ in got} & {ids[i] for i in truth})
                by_chunk = {ids[i]: i for i in ids}
                unit = q / np.linalg.norm(q)
                for cid, dist in got:  # distances are the exact float ones, best first
                    assert dist == pytest.approx(1.0 - float(vecs[by_chunk[cid]] @ unit), abs=1e-5)
                assert [d for _, d in got] == sorted(d for _, d in got)
            assert hits / (40 * k) >= 0.95, k


def test_a_small_index_has_no_lists_and_answers_exactly_as_before(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    vecs = sentences(rng, 900)
    with Store(tmp_path / "a.sqlite", ivf=SMALL) as s, Store(tmp_path / "b.sqlite") as plain:
        write(s, vecs)
        write(plain, vecs)
        s.settle()
        assert s.get_meta("vector_lists") is None
        assert not s.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'vector_lists'").fetchall()
        for q in rng.normal(size=(10, DIMS)).astype(np.float32):
            assert s.knn(q, 24) == plain.knn(q, 24)  # bit-identical: same path, same floats
        assert s.vectors.scan is None


def test_a_deleted_vector_never_comes_back_and_a_new_one_is_found_at_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    vecs = sentences(rng, 3000)
    with Store(tmp_path / "a.sqlite", ivf=SMALL) as s:
        scan = listed(s, vecs, rng)
        q = vecs[123]
        first = s.knn(q, 10)
        target = chunk_ids(s)[123]
        assert first[0][0] == target
        s.delete_file("memory/000100.md")  # notes 100..149, the nearest one among them
        got = s.knn(q, 10)
        assert target not in {cid for cid, _ in got} and len(got) == 10
        assert s.vectors.scan is scan  # followed incrementally, not reloaded
        assert not s.conn.execute(
            "SELECT 1 FROM vector_lists l LEFT JOIN vectors v USING (id) WHERE v.id IS NULL"
        ).fetchall()
        # the same note written again (new vector ids): filed by the write itself, found by the next search
        write(s, vecs[100:150], first=100)
        again = s.knn(q, 10)
        assert again[0][0] == chunk_ids(s)[123] and again[0][1] == pytest.approx(0.0, abs=1e-6)
        assert int(s.conn.execute("SELECT count(*) FROM vector_lists").fetchone()[0]) == 3000
        # another connection's delete (the reader holds its lists in memory)
        with Store(tmp_path / "a.sqlite", ivf=SMALL) as other:
            other.delete_file("memory/000100.md")
        assert chunk_ids(s).get(123) is None
        assert all(d > 1e-4 for _, d in s.knn(q, 10))


def test_a_search_started_ahead_scans_the_lists_in_another_thread_and_answers_as_knn(tmp_path: Path) -> None:
    """``start_knn`` (what a hybrid search calls before its keyword half): the lists' scan runs in a worker
    thread, the rescoring on the caller's connection when the answer is asked for; the answer is ``knn``'s,
    and a file deleted by another connection in between is never in it."""
    import threading

    rng = np.random.default_rng(7)
    vecs = sentences(rng, 3000)
    with Store(tmp_path / "a.sqlite", ivf=SMALL) as s:
        scan = listed(s, vecs, rng)
        threads: set[str] = set()
        approximate = scan.approximate

        def recorded(*args: object) -> object:
            threads.add(threading.current_thread().name)
            return approximate(*args)  # type: ignore[arg-type]

        scan.approximate = recorded  # type: ignore[method-assign]
        for q in vecs[rng.integers(0, len(vecs), 20)]:
            later = s.start_knn(q, 10)
            assert later() == s.knn(q, 10)
        assert any(name.startswith("mdmem-ivf") for name in threads)
        assert threading.current_thread().name in threads  # knn itself scans on the caller's thread
        q = vecs[123]
        gone = {chunk_ids(s)[i] for i in range(100, 150)}
        later = s.start_knn(q, 10)
        with Store(tmp_path / "a.sqlite", ivf=SMALL) as other:
            other.delete_file("memory/000100.md")  # notes 100..149, 123 the nearest to q
        got = later()
        assert len(got) == 10 and not {cid for cid, _ in got} & gone
        assert all(d > 1e-4 for _, d in got)


def test_a_killed_build_is_never_used_and_the_next_settle_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(4)
    vecs = sentences(rng, 3000)
    path = tmp_path / "a.sqlite"
    with Store(path, ivf=SMALL) as s:
        write(s, vecs)
        monkeypatch.setattr(ivf_mod, "BATCH", 500)
        real_write = ivf_mod._write
        calls = {"n": 0}

        def dying(*args: object) -> None:
            calls["n"] += 1
            if calls["n"] == 3:
                raise KeyboardInterrupt  # killed in the third batch's transaction
            real_write(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(ivf_mod, "_write", dying)
        with pytest.raises(KeyboardInterrupt):
            s.settle()
    monkeypatch.setattr(ivf_mod, "_write", real_write)
    with Store(path, ivf=SMALL) as s:
        meta = s.get_meta("vector_lists")
        assert meta["complete"] is False and meta["filed"] > 0
        assert int(s.conn.execute("SELECT count(*) FROM vector_lists").fetchone()[0]) == 1000  # two whole batches
        warm(s, rng)
        assert s.vectors.scan is None  # an unfinished build is not searched
        ids = chunk_ids(s)
        assert s.knn(vecs[2500], 5)[0][0] == ids[2500]  # a vector the build had not reached yet
        s.settle()
        meta = s.get_meta("vector_lists")
        assert meta["complete"] and meta["filed"] == int(s.conn.execute("SELECT max(id) FROM vectors").fetchone()[0])
        assert int(s.conn.execute("SELECT count(*) FROM vector_lists").fetchone()[0]) == 3000
        warm(s, rng)
        assert s.vectors.scan is not None and s.knn(vecs[2500], 5)[0][0] == ids[2500]


def test_vectors_written_without_lists_are_searched_exactly_until_settled(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    vecs = sentences(rng, 3000)
    with Store(tmp_path / "a.sqlite", ivf=SMALL) as s:
        write(s, vecs)
        s.settle()
        # an older mdmem knows nothing of the lists: its new vectors get none
        s.conn.execute("DELETE FROM vector_lists WHERE id IN (SELECT id FROM vectors ORDER BY id DESC LIMIT 50)")
        warm(s, rng)
        assert s.vectors.scan is None
        ids = chunk_ids(s)
        assert s.knn(vecs[2990], 3)[0][0] == ids[2990]
        assert s.settle() is None and int(s.conn.execute("SELECT count(*) FROM vector_lists").fetchone()[0]) == 3000
        warm(s, rng)
        assert s.vectors.scan is not None and s.knn(vecs[2990], 3)[0][0] == ids[2990]


def test_an_index_grown_fourfold_is_trained_again_and_readers_reload(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    vecs = sentences(rng, 5200)
    with Store(tmp_path / "a.sqlite", ivf=SMALL) as s:
        write(s, vecs[:1200])
        s.settle()
        first = s.get_meta("vector_lists")
        warm(s, rng)
        old = s.vectors.scan
        assert old is not None
        write(s, vecs[1200:], first=1200)
        s.settle()
        again = s.get_meta("vector_lists")
        assert (
            again["trained"] == 5200 and again["lists"] == ivf_mod.list_count(5200) and again["stamp"] != first["stamp"]
        )
        ids = chunk_ids(s)
        assert s.knn(vecs[4000], 3)[0][0] == ids[4000]
        assert s.vectors.scan is not old and s.vectors.scan is not None and s.vectors.scan.live_count == 5200


def test_the_ivf_settings_are_validated(tmp_path: Path) -> None:
    from mdmem.config.load import load_config
    from mdmem.util.errors import ConfigError

    cfg = tmp_path / "c.json"
    cfg.write_text('{"agents": {"defaults": {"memorySearch": {"store": {"ivf": {"probes": 0}}}}}}')
    with pytest.raises(ConfigError, match=r"store\.ivf\.probes"):
        load_config(cfg)
    cfg.write_text(
        '{"agents": {"defaults": {"memorySearch": {"store": {"ivf": {"exactBelow": 200000, "probes": 64}}}}}}'
    )
    got = load_config(cfg).agent().memory_search.store.ivf
    assert got == IvfConfig(exact_below=200_000, probes=64)


def test_a_rebuilt_index_is_swapped_in_with_its_lists(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    vecs = sentences(rng, 1500)
    with Store(tmp_path / "a.sqlite", ivf=SMALL) as s:
        write(s, vecs[:500])
        s.settle()
        assert s.get_meta("vector_lists") is None  # under exactBelow
        fresh = s.begin_rebuild()
        write(fresh, vecs)
        s.finish_rebuild(fresh)
        meta = s.get_meta("vector_lists")
        assert meta is not None and meta["complete"] and meta["trained"] == 1500
        warm(s, rng)
        assert s.vectors.scan is not None and s.knn(vecs[1400], 3)[0][0] == chunk_ids(s)[1400]
