"""The index is disposable, the files are the truth: a full disk, a corrupt index and a read-only store, for real.

Every fault is produced on a real file system (a small tmpfs filled up, garbage written over the database,
an immutable or read-only-mounted folder) and driven through the command line as a subprocess: the answer is
one clear error naming the path and the fix, never a traceback; searches keep answering; status records it.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlean

from mdmem.config.load import load_config
from mdmem.memory import Memory
from mdmem.store import Store, connect, transaction
from mdmem.store.repair import corrupt_copies
from mdmem.store.schema import MIGRATIONS
from mdmem.util.errors import StoreError
from mdmem.util.statefile import read_state_file, write_state_file
from tests.conftest import write
from tests.fault_helpers import (
    cli,
    cli_json,
    fill_disk,
    remount,
    small_tmpfs,
    unprivileged,
    unwritable,
    write_config,
    write_notes,
)
from tests.test_daemon import Daemon


def first_path(config: Path, query: str) -> str | None:
    code, out = cli_json(config, "search", query, "--max-results", "1")
    assert code == 0, out
    return out["results"][0]["path"] if out["results"] else None


def assert_whole_files(store_path: Path) -> None:
    """Every indexed file has exactly the chunks it was written with: no half-written file."""
    with Store(store_path, readonly=True) as store:
        for path, row in store.files().items():
            assert len(store.chunks_of(path)) == row.chunks, path


# -- transactions: the real error, never "cannot rollback" ------------------------------------------------


def test_transaction_raises_the_real_error_when_sqlite_already_rolled_back(tmp_path: Path) -> None:
    conn = connect(tmp_path / "t.sqlite")
    conn.execute("CREATE TABLE t (x BLOB)")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages + 2}")  # SQLite itself reports SQLITE_FULL past this
    with pytest.raises(sqlean.OperationalError, match="full") as info:
        with transaction(conn):
            conn.execute("INSERT INTO t VALUES (zeroblob(100000))")
    assert info.value.sqlite_errorname == "SQLITE_FULL"
    with pytest.raises(ValueError, match="the real error"):
        with transaction(conn):
            conn.execute("INSERT INTO t VALUES (x'01')")
            conn.execute("ROLLBACK")  # what SQLite does by itself after SQLITE_FULL or an I/O error
            raise ValueError("the real error")
    assert not conn.in_transaction
    with transaction(conn):  # the connection is usable again
        conn.execute("INSERT INTO t VALUES (x'00')")
    conn.close()


def test_state_file_is_rewritten_in_place_on_a_full_disk(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "1m") as disk:
        path = disk / "main.sqlite.health.json"
        write_state_file(path, {"lastError": None})
        fill_disk(disk)
        with pytest.raises(OSError):
            write_state_file(disk / "new.json", {"x": 1})  # no room for a new file...
        write_state_file(path, {"lastError": {"error": "no space left " * 50}})  # ...but the reserved one works
        assert read_state_file(path)["lastError"]["error"].startswith("no space left")


# -- a full disk --------------------------------------------------------------------------------------------


def test_disk_full_during_index_is_one_clear_error_and_converges_when_space_is_freed(
    tmp_path: Path, workspace: Path
) -> None:
    with small_tmpfs(tmp_path / "disk", "16m") as disk:
        store = disk / "main.sqlite"
        config = write_config(tmp_path / "cfg.json5", workspace, store, sync={"onSearch": False})
        old = write_notes(workspace, "heron", 6)
        assert cli(config, "index").returncode == 0
        filler = fill_disk(disk, leave=160_000)
        new = write_notes(workspace, "kestrel", 30, lines=60)

        failed = cli(config, "index")

        assert failed.returncode == 1
        assert "no space left" in failed.stderr and str(store) in failed.stderr and "free some space" in failed.stderr
        assert first_path(config, old[3]).endswith("heron-03.md")  # the index opens and answers the old notes
        assert_whole_files(store)
        code, status = cli_json(config, "status")
        assert code == 0 and status["lastError"]["kind"] == "full" and "no space left" in status["lastError"]["error"]
        assert status["storeState"]["state"] == "full" and status["staleFiles"]
        text = cli(config, "status").stdout
        assert "last error  20" in text and "no space left" in text and "store state full" in text

        filler.unlink()
        code, report = cli_json(config, "index")

        assert code == 0 and report["files"] == len(old) + len(new)
        assert first_path(config, new[29]).endswith("kestrel-29.md")
        code, status = cli_json(config, "status")
        assert status["lastError"] is None and status["storeState"]["state"] == "ok" and status["staleFiles"] == []


def test_watch_survives_a_full_disk_and_converges_when_space_is_freed(tmp_path: Path, workspace: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "16m") as disk:
        config = write_config(
            tmp_path / "cfg.json5", workspace, disk / "main.sqlite", sync={"watchDebounceMs": 200, "onSearch": False}
        )
        write(workspace / "MEMORY.md", "# Memory\n\nThe gate code is 4711.\n")
        daemon = Daemon(config)
        try:
            daemon.wait_for(lambda e: e["event"] == "sync")
            filler = fill_disk(disk, leave=64_000)
            new = write_notes(workspace, "kestrel", 30, lines=60)
            error = daemon.wait_for(lambda e: e["event"] == "error" and "no space left" in e["error"], timeout=30)
            assert error["retryInSeconds"] >= 1
            time.sleep(5)  # several heartbeats and retries on the full disk
            assert daemon.proc.poll() is None
            with Memory(load_config(config).agent()) as mem:
                status = mem.status()
                assert status["watcher"]["running"] and status["watcher"]["pid"] == daemon.proc.pid
                assert status["lastError"]["kind"] == "full"
                assert mem.search("gate code")["results"][0]["path"] == "MEMORY.md"

            filler.unlink()
            deadline = time.monotonic() + 60
            with Memory(load_config(config).agent()) as mem:
                # converged: every file indexed and the sync that did it finished (it clears lastError last)
                while time.monotonic() < deadline:
                    status = mem.status()
                    if not status["staleFiles"] and status["lastError"] is None:
                        break
                    time.sleep(0.5)
                status = mem.status()
                assert status["staleFiles"] == [] and status["files"] == len(new) + 1
                assert status["lastError"] is None and status["storeState"]["state"] == "ok"
                assert mem.search(new[17])["results"][0]["path"].endswith("kestrel-17.md")
        finally:
            assert daemon.stop() == 0
        assert daemon.log[-1]["event"] == "stopped"


# -- a corrupt index ----------------------------------------------------------------------------------------


def corrupt(store: Path, how: str) -> None:
    rng = random.Random(7)
    size = store.stat().st_size
    if how == "garbage":
        store.write_bytes(rng.randbytes(size))
    elif how == "truncated":
        os.truncate(store, size // 2)
    elif how == "garbage-pages":  # the header and schema page survive: opening works, reading fails
        with open(store, "r+b") as fh:
            fh.seek(4096)
            fh.write(rng.randbytes(size - 4096))
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["garbage", "truncated", "garbage-pages"])
def test_corrupt_index_is_a_clear_error_then_moved_aside_and_rebuilt(tmp_path: Path, workspace: Path, how: str) -> None:
    store = tmp_path / "state" / "main.sqlite"
    config = write_config(tmp_path / "cfg.json5", workspace, store, sync={"onSearch": False})
    tags = write_notes(workspace, "heron", 6)
    assert cli(config, "index").returncode == 0
    corrupt(store, how)

    search = cli(config, "search", tags[2])

    assert search.returncode == 1
    assert "is corrupt" in search.stderr and str(store) in search.stderr and "mdmem index" in search.stderr
    code, status = cli_json(config, "status")
    assert code == 0 and status["storeState"]["state"] == "corrupt" and status["lastError"]["kind"] == "corrupt"
    assert "store state corrupt" in cli(config, "status").stdout

    code, report = cli_json(config, "index")  # the next write moves it aside and rebuilds it from the files

    assert code == 0 and report["indexed"] == len(tags) and report["repaired"]["path"]
    moved = Path(report["repaired"]["path"])
    assert corrupt_copies(store) == [moved] and moved.name.startswith("main.sqlite.corrupt-")
    assert first_path(config, tags[2]).endswith("heron-02.md")
    code, status = cli_json(config, "status")
    assert status["storeState"]["state"] == "ok" and status["lastError"] is None
    assert [m["path"] for m in status["storeState"]["movedAside"]] == [str(moved)]
    assert f"to {moved}, rebuilt from the files" in cli(config, "status").stdout


def test_a_wal_from_another_database_is_refused_and_index_force_rebuilds(tmp_path: Path, workspace: Path) -> None:
    store = tmp_path / "state" / "main.sqlite"
    config = write_config(tmp_path / "cfg.json5", workspace, store, sync={"onSearch": False})
    tags = write_notes(workspace, "heron", 6)
    assert cli(config, "index").returncode == 0
    other = sqlean.connect(str(tmp_path / "other.sqlite"), isolation_level=None)
    other.execute("PRAGMA journal_mode = WAL")
    other.execute("PRAGMA wal_autocheckpoint = 0")
    other.execute("CREATE TABLE photos (blob BLOB)")
    other.execute("INSERT INTO photos VALUES (randomblob(50000))")
    Path(f"{store}-wal").write_bytes(Path(f"{tmp_path / 'other.sqlite'}-wal").read_bytes())
    other.close()

    for args in (("search", tags[0]), ("index",)):
        refused = cli(config, *args)
        assert refused.returncode == 1 and "not an mdmem index" in refused.stderr
        assert "mdmem index --force" in refused.stderr and str(store) in refused.stderr
    code, status = cli_json(config, "status")
    assert code == 0 and status["storeState"]["state"] == "foreign"

    forced = cli(config, "index", "--force")

    assert forced.returncode == 0 and "repaired: the corrupt index was moved aside" in forced.stdout
    assert first_path(config, tags[0]).endswith("heron-00.md")


def test_index_force_rebuilds_a_garbage_file_it_never_opened(tmp_path: Path, workspace: Path) -> None:
    store = tmp_path / "state" / "main.sqlite"
    store.parent.mkdir()
    store.write_bytes(random.Random(1).randbytes(64 * 1024))
    config = write_config(tmp_path / "cfg.json5", workspace, store)
    tags = write_notes(workspace, "heron", 3)

    code, report = cli_json(config, "index", "--force")

    assert code == 0 and report["indexed"] == 3 and report["repaired"]["path"]
    assert first_path(config, tags[1]).endswith("heron-01.md")


def test_only_the_newest_corrupt_copies_are_kept(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write_notes(workspace, "heron", 2)
    mem = make_memory()
    mem.sync()
    path = mem.store.path
    moved = []
    for round_ in range(4):
        mem.release_store()
        corrupt(path, "garbage")
        report = mem.sync()
        moved.append(Path(report["repaired"]["path"]))
        assert report["indexed"] == 2, round_
    assert corrupt_copies(path) == moved[-2:] and not any(p.exists() for p in moved[:2])
    assert [m["path"] for m in mem.status()["storeState"]["movedAside"]] == [str(p) for p in moved[-2:]]


def test_a_corruption_found_by_a_reader_is_repaired_by_the_next_writer(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    tags = write_notes(workspace, "heron", 4)
    writer = make_memory({"sync": {"onSearch": False}})
    writer.sync()
    path = writer.store.path
    writer.release_store()
    corrupt(path, "garbage-pages")
    reader = make_memory({"sync": {"onSearch": False}})
    with pytest.raises(StoreError) as info:
        reader.search(tags[1])
    assert info.value.kind == "corrupt"

    report = writer.sync()

    assert report["repaired"]["path"] and report["indexed"] == len(tags)
    assert reader.search(tags[1])["results"][0]["path"].endswith("heron-01.md")


# -- a read-only store -------------------------------------------------------------------------------------


def assert_read_only_behaviour(config: Path, store: Path, tags: list[str]) -> None:
    """Searches answer; writes fail with one clear error; status says read-only."""
    assert first_path(config, tags[1]).endswith("heron-01.md")
    code, out = cli_json(config, "search", tags[1])  # a pending change cannot be indexed: said, not raised
    assert code == 0 and any("could not be indexed" in w for w in out.get("warnings", [])), out
    failed = cli(config, "index")
    assert failed.returncode == 1 and "cannot be written" in failed.stderr and str(store) in failed.stderr
    code, status = cli_json(config, "status")
    assert code == 0 and status["storeState"]["state"] == "read-only" and status["files"] == len(tags)
    assert "store state read-only" in cli(config, "status").stdout


def test_unwritable_store_folder_still_answers_searches(tmp_path: Path, workspace: Path) -> None:
    store = tmp_path / "state" / "main.sqlite"
    config = write_config(tmp_path / "cfg.json5", workspace, store)
    tags = write_notes(workspace, "heron", 4)
    assert cli(config, "index").returncode == 0
    write(workspace / "memory" / "late.md", "a late note about the osprey")
    with unwritable(store.parent):
        assert_read_only_behaviour(config, store, tags)
    assert cli(config, "index").returncode == 0  # writable again: the late note is indexed
    assert first_path(config, "osprey") == "memory/late.md"


def test_read_only_mount_still_answers_searches(tmp_path: Path, workspace: Path) -> None:
    with small_tmpfs(tmp_path / "disk", "16m") as disk:
        store = disk / "main.sqlite"
        config = write_config(tmp_path / "cfg.json5", workspace, store)
        tags = write_notes(workspace, "heron", 4)
        assert cli(config, "index").returncode == 0
        write(workspace / "memory" / "late.md", "a late note about the osprey")
        remount(disk, "ro")
        try:
            assert_read_only_behaviour(config, store, tags)
            assert "read-only file system" in cli_json(config, "status")[1]["storeState"]["message"]
        finally:
            remount(disk, "rw")
        assert cli(config, "index").returncode == 0
        assert first_path(config, "osprey") == "memory/late.md"


def test_a_0555_index_folder_answers_searches_from_the_index_and_says_it_is_stale(
    tmp_path: Path, workspace: Path
) -> None:
    """The folder is read-only, the index file in it still writable (mode 0644): SQLite cannot make the
    ``-shm`` file it needs even to read a WAL-mode database, so the index is read as it is."""
    store = tmp_path / "state" / "main.sqlite"
    config = write_config(tmp_path / "cfg.json5", workspace, store)
    tags = write_notes(workspace, "heron", 4)
    assert cli(config, "index").returncode == 0
    write(workspace / "memory" / "late.md", "a late note about the osprey")
    store.parent.chmod(0o555)
    try:
        probe = subprocess.run(unprivileged(["touch", str(store.parent / "probe")]), capture_output=True)
        assert probe.returncode != 0, "the folder is writable to the command: the test would prove nothing"
        code, out = cli_json(config, "search", tags[1], "--max-results", "1", permissions=True)
        assert code == 0 and out["results"][0]["path"].endswith("heron-01.md") and out["stale"] is True
        assert [w.split(": the index")[0] for w in out["warnings"]] == [
            "changed files could not be indexed; results may be stale"
        ]
        assert "is not writable" in out["warnings"][0] and str(store.parent) in out["warnings"][0]
        code, out = cli_json(config, "pack", tags[2], "--budget-tokens", "200", permissions=True)
        assert code == 0 and out["items"] and any("could not be indexed" in w for w in out["warnings"])
        failed = cli(config, "index", permissions=True)
        assert failed.returncode == 1 and f"the folder {store.parent} is not writable" in failed.stderr
        code, status = cli_json(config, "status", permissions=True)
        assert code == 0 and status["storeState"]["state"] == "read-only" and status["files"] == len(tags)
        assert not (store.parent / "main.sqlite-shm").exists()
    finally:
        store.parent.chmod(0o755)
    assert cli(config, "index").returncode == 0  # writable again: the late note is indexed
    assert first_path(config, "osprey") == "memory/late.md"


def test_read_only_index_at_an_old_schema_says_it_needs_writing(tmp_path: Path, workspace: Path) -> None:
    store = tmp_path / "state" / "main.sqlite"
    store.parent.mkdir()
    conn = sqlean.connect(str(store), isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    MIGRATIONS[0](conn)
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    config = write_config(tmp_path / "cfg.json5", workspace, store)
    write_notes(workspace, "heron", 2)
    with unwritable(store.parent):
        search = cli(config, "search", "heron0")
        assert search.returncode == 1
        assert "schema version 1" in search.stderr and "make it writable once" in search.stderr
        code, status = cli_json(config, "status")
        assert code == 0 and status["storeState"]["state"] == "schema"
    assert cli(config, "search", "heron0").returncode == 0  # writable: migrated on open
