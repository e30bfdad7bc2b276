"""A missing workspace, memory/ or extraPaths entry never empties the index (mdmem.files.roots)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from mdmem.files.workspace import MissingRoot, Workspace
from mdmem.memory import Memory
from mdmem.util.errors import WorkspaceError
from tests.agent_helpers import run_cli
from tests.conftest import write


def roots_of(ws: Workspace) -> list[tuple[str, str, str]]:
    return [(r.kind, r.shown, r.reason) for r in ws.missing_roots()]


def test_missing_roots_is_path_logic(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    assert roots_of(Workspace(ws)) == [("workspace", str(ws), "does not exist")]
    write(tmp_path / "file", "x")
    assert roots_of(Workspace(tmp_path / "file")) == [("workspace", str(tmp_path / "file"), "is not a folder")]
    ws.mkdir()
    assert roots_of(Workspace(ws)) == [
        ("workspace", str(ws), "is empty"),
        ("memory", "memory/", "does not exist"),
    ]
    write(ws / "AGENTS.md", "not memory, but the folder is not empty")
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "linked").symlink_to(outside)
    write(ws / "notes.txt", "x")
    extras = ["docs", "linked/x", "notes.txt", str(tmp_path / "elsewhere"), str(outside)]
    assert roots_of(Workspace(ws, extras)) == [
        ("memory", "memory/", "does not exist"),
        ("extra", "docs", "does not exist"),
        ("extra", "linked/x", "goes through a symlink (symlinks are not followed)"),
        ("extra", "notes.txt", "is neither a folder nor a .md file"),
        ("extra", str(tmp_path / "elsewhere"), "does not exist"),
    ]
    (ws / "memory").symlink_to(outside)
    assert roots_of(Workspace(ws))[0] == ("memory", "memory/", "is a symlink (symlinks are not followed)")
    (ws / "memory").unlink()
    (ws / "memory").mkdir()
    assert roots_of(Workspace(ws)) == []


def test_which_indexed_paths_a_missing_root_holds() -> None:
    memory = MissingRoot("memory", "/ws/memory", "memory/", "does not exist", "memory")
    assert memory.holds("memory/a.md") and memory.holds("memory/2026/b.md")
    assert not memory.holds("MEMORY.md") and not memory.holds("memoryx/a.md")
    workspace = MissingRoot("workspace", "/ws", "/ws", "does not exist")
    assert workspace.holds("MEMORY.md") and workspace.holds("docs/a.md") and not workspace.holds("/elsewhere/a.md")
    extra = MissingRoot("extra", "/elsewhere", "/elsewhere", "does not exist", "/elsewhere")
    assert extra.holds("/elsewhere/a.md") and not extra.holds("/elsewhere2/a.md")


@pytest.fixture
def indexed(workspace: Path, make_memory: Callable[..., Memory]) -> Memory:
    write(workspace / "AGENTS.md", "# Agent instructions (not memory)\n")
    write(workspace / "MEMORY.md", "# Memory\n\nThe gate code is 4711.\n")
    write(workspace / "memory" / "2026-03-01.md", "# 2026-03-01\n\nBooked the vet for Pixel.\n")
    write(workspace / "memory" / "2026-03-02.md", "# 2026-03-02\n\nThe heron came back to the pond.\n")
    mem = make_memory()
    assert mem.sync()["indexed"] == 3
    return mem


ALL = {"MEMORY.md", "memory/2026-03-01.md", "memory/2026-03-02.md"}


def test_a_missing_workspace_is_an_error_and_keeps_the_index(
    indexed: Memory, workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    away = workspace.with_name("ws-away")
    workspace.rename(away)  # renamed away (or unmounted, or a typo in the config)
    for prune in (False, True):  # not even --prune empties the index of a missing workspace
        with pytest.raises(WorkspaceError, match=f"workspace {workspace} does not exist.*Fix: .*workspace"):
            indexed.sync(prune=prune)
    with pytest.raises(WorkspaceError, match="does not exist"):
        indexed.sync(force=True)
    assert set(indexed.store.files()) == ALL
    status = make_memory().status()
    assert status["files"] == 3 and status["staleFiles"] == []
    assert "does not exist" in status["lastError"]["error"]
    assert any(w.startswith(f"workspace {workspace} does not exist") for w in status["warnings"])
    found = make_memory().search("heron pond")  # searches answer from the last index, and say so
    assert found["results"][0]["path"] == "memory/2026-03-02.md"
    assert any("answering from the last index" in w for w in found["warnings"])
    away.rename(workspace)
    assert indexed.sync()["unchanged"] == 3
    assert make_memory().status()["lastError"] is None


def test_cli_index_on_a_missing_workspace_exits_non_zero(
    indexed: Memory, workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "cli.json5"
    ms = {"provider": "hash"}
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": ms}}}))
    assert run_cli(["index", "--config", str(cfg)]) == 0
    capsys.readouterr()
    shutil.rmtree(workspace)
    assert run_cli(["index", "--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert f"workspace {workspace} does not exist" in err and "Fix:" in err and "Traceback" not in err
    assert run_cli(["status", "--config", str(cfg), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["files"] == 3 and "does not exist" in status["lastError"]["error"]


def test_an_empty_workspace_looks_unmounted_until_pruned(indexed: Memory, workspace: Path) -> None:
    for child in workspace.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    with pytest.raises(WorkspaceError, match="is empty, but the index holds 3 file.*unmounted.*--prune"):
        indexed.sync()
    assert set(indexed.store.files()) == ALL
    assert indexed.indexer.changed_files() == []  # nothing looks deleted: searches do not try to sync
    assert indexed.sync(prune=True)["removed"] == 3
    assert indexed.store.files() == {}
    assert indexed.sync()["files"] == 0  # an empty workspace with an empty index is fine


def test_missing_memory_folder_keeps_its_rows_until_it_returns_or_is_pruned(
    indexed: Memory, workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    stash = workspace.parent / "stash"
    (workspace / "memory").rename(stash)
    report = indexed.sync()
    assert (report["removed"], report["held"]) == (0, 2)
    assert set(indexed.store.files()) == ALL
    status = make_memory().status()
    assert status["staleFiles"] == []
    assert "memory/ does not exist (root missing): its 2 indexed file(s) are kept" in "\n".join(status["warnings"])
    assert make_memory().search("heron")["results"][0]["path"] == "memory/2026-03-02.md"
    (workspace / "MEMORY.md").unlink()  # a file deleted under a root that is present is still removed
    report = indexed.sync()
    assert (report["removed"], report["held"]) == (1, 2)
    stash.rename(workspace / "memory")  # the folder returns: nothing to re-embed
    report = indexed.sync()
    assert (report["held"], report["indexed"], report["unchanged"]) == (0, 0, 2)
    shutil.rmtree(workspace / "memory")
    report = indexed.sync(prune=True)  # deleted on purpose: --prune drops them
    assert (report["removed"], report["held"]) == (2, 0)
    assert indexed.store.files() == {}


def test_a_rebuild_does_not_drop_rows_of_a_missing_folder_unless_told(
    indexed: Memory, workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    shutil.rmtree(workspace / "memory")
    other = make_memory({"chunking": {"tokens": 300, "overlap": 60}})  # another identity: a rebuild is due
    with pytest.raises(WorkspaceError, match="memory/ does not exist.*2 file.*rebuild would drop.*--prune"):
        other.sync()
    assert set(other.store.files()) == ALL
    assert "rebuild would drop" in make_memory().status()["lastError"]["error"]
    report = other.sync(force=True)  # --force is an explicit rebuild from the files on disk
    assert report["rebuilt"] and set(other.store.files()) == {"MEMORY.md"}


def test_missing_extra_paths(workspace: Path, tmp_path: Path, make_memory: Callable[..., Memory]) -> None:
    share = tmp_path / "share"
    write(share / "notes.md", "the nas keeps the osprey photos")
    write(workspace / "MEMORY.md", "root")
    mem = make_memory({"extraPaths": [str(share), "never-created"]})
    mem.sync()
    assert f"{share}/notes.md" in mem.store.files()
    share.rename(tmp_path / "share-unmounted")
    assert mem.sync()["held"] == 1
    assert mem.search("osprey")["results"][0]["path"] == f"{share}/notes.md"
    warnings = "\n".join(mem.status()["warnings"])
    assert f"extraPaths entry {share} does not exist (root missing): its 1 indexed file(s) are kept" in warnings
    assert "extraPaths entry never-created does not exist: nothing is indexed from it" in warnings


def test_search_on_a_workspace_that_vanished_never_raises(indexed: Memory, workspace: Path) -> None:
    os.rename(workspace, workspace.with_name("gone"))
    result = indexed.search("gate code")
    assert result["results"][0]["path"] == "MEMORY.md"
    assert "stale" not in result and any("does not exist" in w for w in result["warnings"])
