"""The watcher and sync service on real watchdog observers over real temp folders."""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from watchdog.observers import Observer

from mdmem.engine.background import SyncService
from mdmem.memory import Memory
from mdmem.runtime.file_watcher import MemoryWatcher, filesystem_type, is_editor_temp
from tests.conftest import write

DEBOUNCE = 0.2


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


class Harness:
    def __init__(self, mem: Memory, reader: Memory, polling: bool | None, native_factory: Callable | None = None):
        self.reader = reader
        self.service = SyncService(mem, debounce_seconds=DEBOUNCE)
        kw = {"native_factory": native_factory} if native_factory else {}
        self.watcher = MemoryWatcher(
            mem.workspace, self.service.mark_dirty, polling=polling, on_armed=self.service.request_sync, **kw
        )
        self.service.start()
        self.watcher.start()
        self.service.request_sync()
        if self.watcher.armed:
            assert self.service.wait_idle(10)

    def settle(self) -> None:
        """Wait until events have arrived and the debounced sync has finished."""
        time.sleep(DEBOUNCE + (1.3 if self.watcher.mode == "polling" else 0.15))
        assert self.service.wait_idle(15)

    def paths(self) -> set[str]:
        return set(self.reader.store.files())

    def texts(self, path: str) -> list[str]:
        return [c.text for c in self.reader.store.chunks_of(path)]

    def stop(self) -> None:
        self.watcher.stop()
        self.service.stop()


@pytest.fixture(params=["native", "polling"])
def harness(
    request: pytest.FixtureRequest, workspace: Path, make_memory: Callable[..., Memory], no_thread_leaks: None
) -> Iterator[Harness]:
    write(workspace / "MEMORY.md", "# Memory\n\nstart")
    h = Harness(make_memory(), make_memory(), polling=request.param == "polling")
    assert h.watcher.mode == request.param
    yield h
    h.stop()


def test_atomic_save_via_temp_file_and_rename(harness: Harness, workspace: Path) -> None:
    target = workspace / "memory" / "2026-01-01.md"
    write(target, "first version")
    harness.settle()
    tmp = workspace / "memory" / "2026-01-01.md.tmp"
    tmp.write_text("second version ocelot")
    os.replace(tmp, target)
    harness.settle()
    assert harness.texts("memory/2026-01-01.md") == ["second version ocelot"]
    assert "memory/2026-01-01.md.tmp" not in harness.paths()


def test_delete_then_create(harness: Harness, workspace: Path) -> None:
    target = write(workspace / "memory" / "a.md", "old aardvark")
    harness.settle()
    target.unlink()
    target.write_text("new narwhal")
    harness.settle()
    assert harness.texts("memory/a.md") == ["new narwhal"]


def test_truncate_then_write(harness: Harness, workspace: Path) -> None:
    target = write(workspace / "memory" / "b.md", "long original text " * 20)
    harness.settle()
    with open(target, "w") as fh:
        fh.flush()
        time.sleep(0.05)
        fh.write("short pangolin")
    harness.settle()
    assert harness.texts("memory/b.md") == ["short pangolin"]


def test_vim_style_backup_rename(harness: Harness, workspace: Path) -> None:
    target = write(workspace / "memory" / "c.md", "vim before")
    harness.settle()
    backup = workspace / "memory" / "c.md~"
    os.rename(target, backup)
    target.write_text("vim after wombat")
    backup.unlink()
    harness.settle()
    assert harness.texts("memory/c.md") == ["vim after wombat"]
    assert harness.paths() == {"MEMORY.md", "memory/c.md"}


def test_new_subfolders_deletes_and_renames(harness: Harness, workspace: Path) -> None:
    deep = workspace / "memory" / "2026" / "02"
    deep.mkdir(parents=True)
    write(deep / "notes.md", "deep capybara")
    harness.settle()
    assert "memory/2026/02/notes.md" in harness.paths()
    provider = harness.service.memory.choice.provider
    embedded = provider.embedded
    os.rename(deep / "notes.md", deep / "renamed.md")
    harness.settle()
    assert "memory/2026/02/renamed.md" in harness.paths() and "memory/2026/02/notes.md" not in harness.paths()
    assert provider.embedded == embedded  # a rename costs no embedding
    (deep / "renamed.md").unlink()
    harness.settle()
    assert harness.paths() == {"MEMORY.md"}


def test_non_markdown_and_editor_temp_files_are_ignored(harness: Harness, workspace: Path) -> None:
    syncs = harness.service.state.runs
    write(workspace / "memory" / "notes.txt", "not memory")
    write(workspace / "memory" / ".#lock.md", "emacs lock")
    write(workspace / "memory" / "x.md.swp", "swap")
    write(workspace / "README.md", "not memory either")
    harness.settle()
    assert harness.service.state.runs == syncs
    assert harness.paths() == {"MEMORY.md"}


def test_a_burst_of_writes_ends_in_one_sync(harness: Harness, workspace: Path) -> None:
    syncs = harness.service.state.runs
    target = workspace / "memory" / "burst.md"
    for i in range(10):
        target.write_text(f"version {i}")
        time.sleep(0.01)
    harness.settle()
    assert harness.service.state.runs == syncs + 1
    assert harness.texts("memory/burst.md") == ["version 9"]


def test_memory_folder_created_after_start(
    tmp_path: Path, make_memory: Callable[..., Memory], no_thread_leaks: None
) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").rmdir()
    write(ws / "MEMORY.md", "root only")
    h = Harness(make_memory(), make_memory(), polling=False)
    try:
        write(ws / "memory" / "2026-05-05.md", "late folder lemur")
        h.settle()
        write(ws / "memory" / "2026-05-06.md", "second file in the new folder")
        h.settle()
        assert {"memory/2026-05-05.md", "memory/2026-05-06.md"} <= h.paths()
    finally:
        h.stop()


def test_falls_back_to_polling_when_native_watching_fails(
    workspace: Path, make_memory: Callable[..., Memory], no_thread_leaks: None
) -> None:
    def exhausted() -> Observer:
        observer = Observer()
        original = observer.schedule

        def schedule(*args: object, **kwargs: object) -> object:
            raise OSError(errno.ENOSPC, "inotify watch limit reached")

        observer.schedule = schedule  # type: ignore[method-assign]
        assert original is not None
        return observer

    write(workspace / "MEMORY.md", "x")
    h = Harness(make_memory(), make_memory(), polling=None, native_factory=exhausted)
    try:
        assert h.watcher.mode == "polling"
        assert "max_user_watches" in (h.watcher.fallback_reason or "")
        write(workspace / "memory" / "poll.md", "seen by polling")
        h.settle()
        assert "memory/poll.md" in h.paths()
    finally:
        h.stop()


def test_stop_is_idempotent_and_joins(
    workspace: Path, make_memory: Callable[..., Memory], no_thread_leaks: None
) -> None:
    write(workspace / "MEMORY.md", "x")
    h = Harness(make_memory(), make_memory(), polling=False)
    h.stop()
    h.stop()
    assert not h.watcher.is_alive() and not h.service.is_alive()


def test_helpers() -> None:
    assert is_editor_temp(".#MEMORY.md") and is_editor_temp("x.md~") and is_editor_temp("4913")
    assert not is_editor_temp("2026-01-01.md")
    assert filesystem_type(Path("/")) is not None


def test_interval_reconcile_catches_changes_without_events(
    workspace: Path, make_memory: Callable[..., Memory], no_thread_leaks: None
) -> None:
    """No watcher at all: the periodic reconcile (sync.intervalMinutes) still picks changes up."""
    write(workspace / "MEMORY.md", "start")
    reader = make_memory()
    service = SyncService(make_memory(), debounce_seconds=0.1, interval_seconds=0.3)
    service.start()
    try:
        write(workspace / "memory" / "missed.md", "an edit no event told us about")
        wait_for(lambda: "memory/missed.md" in reader.store.files(), timeout=10)
        wait_for(lambda: service.state.runs >= 1, timeout=10)  # the sync commits the file before it returns
    finally:
        service.stop()


def test_session_start_syncs_and_reports(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "memory" / "2026-01-09.md", "session start note")
    result = make_memory().session_start()
    assert result["sync"]["indexed"] == 1 and result["status"]["staleFiles"] == []
    off = make_memory({"sync": {"onSessionStart": False}})
    write(workspace / "memory" / "2026-01-10.md", "another")
    result = off.session_start()
    assert result["sync"] is None and result["status"]["staleFiles"] == [
        {"path": "memory/2026-01-10.md", "state": "new"}
    ]


# -- re-arming: folders deleted and recreated, renamed away and back, a workspace that appears later --------
GUARD = 1.0  # MemoryWatcher's default check interval


def note_is_searchable(h: Harness, rel: str, word: str, timeout: float = 15.0) -> None:
    wait_for(lambda: rel in h.paths() and h.reader.search(word)["results"][:1] != [], timeout)
    assert h.reader.search(word)["results"][0]["path"] == rel


def live_watch_catches(h: Harness, workspace: Path, name: str, word: str) -> None:
    """A note written after the guard has had time to re-arm, with no re-arm after it: only a live
    watch (not a resync) can index it."""
    time.sleep(2 * GUARD + 0.5)
    rearms = h.watcher.rearms
    write(workspace / "memory" / name, f"a later note about the {word}")
    note_is_searchable(h, f"memory/{name}", word)
    assert h.watcher.rearms == rearms and h.watcher.armed


def test_memory_folder_deleted_and_recreated(harness: Harness, workspace: Path) -> None:
    write(workspace / "memory" / "old.md", "an old note about the badger")
    harness.settle()
    rearms = harness.watcher.rearms
    shutil.rmtree(workspace / "memory")
    wait_for(lambda: harness.watcher.rearms > rearms)  # the blind watch on the deleted folder was replaced
    harness.settle()
    assert "memory/old.md" in harness.paths()  # memory/ is missing: its rows are kept (mdmem.files.roots)
    write(workspace / "memory" / "new.md", "a new note about the kingfisher")
    note_is_searchable(harness, "memory/new.md", "kingfisher")
    live_watch_catches(harness, workspace, "later.md", "otter")
    assert "memory/old.md" not in harness.paths()  # memory/ is back without it: a deleted file is removed


def test_workspace_renamed_away_and_back(harness: Harness, workspace: Path) -> None:
    away = workspace.with_name("ws-away")
    workspace.rename(away)
    wait_for(lambda: not harness.watcher.armed and harness.watcher.waiting_for == str(workspace))
    assert harness.watcher.state()["waitingFor"] == str(workspace)
    write(away / "memory" / "while-away.md", "written while the workspace was away: the marmot")
    away.rename(workspace)
    wait_for(lambda: harness.watcher.armed)
    note_is_searchable(harness, "memory/while-away.md", "marmot")  # the resync after re-arming
    live_watch_catches(harness, workspace, "back.md", "lynx")


def test_workspace_renamed_away_and_back_quickly(harness: Harness, workspace: Path) -> None:
    away = workspace.with_name("ws-away")
    workspace.rename(away)
    write(away / "memory" / "quick.md", "a note from a quick trip: the weasel")
    away.rename(workspace)
    note_is_searchable(harness, "memory/quick.md", "weasel")
    live_watch_catches(harness, workspace, "after-quick.md", "stoat")


def test_workspace_deleted_and_recreated(harness: Harness, workspace: Path) -> None:
    shutil.rmtree(workspace)
    wait_for(lambda: not harness.watcher.armed)
    harness.service.request_sync()  # a sync now fails (WorkspaceError) and keeps the index
    time.sleep(0.5)
    assert "MEMORY.md" in harness.paths()
    write(workspace / "memory" / "reborn.md", "the recreated workspace remembers the puffin")
    note_is_searchable(harness, "memory/reborn.md", "puffin")
    live_watch_catches(harness, workspace, "next.md", "gannet")
    assert "MEMORY.md" not in harness.paths()  # the new workspace has none: removed


@pytest.mark.parametrize("polling", [False, True], ids=["native", "polling"])
def test_starts_waiting_for_a_missing_workspace_then_arms(
    polling: bool, tmp_path: Path, make_memory: Callable[..., Memory], no_thread_leaks: None
) -> None:
    ws = tmp_path / "ws"
    shutil.rmtree(ws)
    h = Harness(make_memory(), make_memory(), polling=polling)
    try:
        assert not h.watcher.armed and h.watcher.waiting_for == str(ws) and h.watcher.is_alive()
        write(ws / "MEMORY.md", "# Memory\n\nthe workspace arrived with the albatross")
        (ws / "memory").mkdir()
        wait_for(lambda: h.watcher.armed)
        assert h.watcher.mode == ("polling" if polling else "native")
        note_is_searchable(h, "MEMORY.md", "albatross")
        live_watch_catches(h, ws, "first.md", "cormorant")
    finally:
        h.stop()


def test_an_extra_paths_folder_that_appears_later_is_watched(
    workspace: Path, tmp_path: Path, make_memory: Callable[..., Memory], no_thread_leaks: None
) -> None:
    share = tmp_path / "share"  # outside the workspace: no event in a watched folder announces it
    write(workspace / "MEMORY.md", "x")
    h = Harness(make_memory({"extraPaths": [str(share)]}), make_memory({"extraPaths": [str(share)]}), polling=False)
    try:
        write(share / "mounted.md", "the share came online with the narwhal")
        note_is_searchable(h, f"{share}/mounted.md", "narwhal")
        time.sleep(2 * GUARD + 0.5)
        rearms = h.watcher.rearms
        write(share / "later.md", "and later the beluga")
        note_is_searchable(h, f"{share}/later.md", "beluga")
        assert h.watcher.rearms == rearms == 1
    finally:
        h.stop()
