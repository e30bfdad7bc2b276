"""memory_get: allowed paths, refusals (traversal, absolute, symlinks, NUL), line slicing."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from mdmem.memory import Memory
from tests.conftest import write


@pytest.fixture
def mem(workspace: Path, tmp_path: Path, make_memory: Callable[..., Memory]) -> Memory:
    write(workspace / "MEMORY.md", "one\ntwo\nthree\nfour\nfive")
    write(workspace / "memory" / "2026-01-01.md", "daily\nlog")
    write(workspace / "memory" / "sub" / "deep.md", "deep note")
    write(workspace / "notes" / "extra.md", "extra note")
    write(workspace / "notes" / "secret.txt", "not markdown")
    write(workspace / "AGENTS.md", "not a memory file")
    outside = write(tmp_path / "outside" / "x.md", "OUTSIDE SECRET")
    os.symlink(outside, workspace / "memory" / "link.md")
    os.symlink(outside.parent, workspace / "memory" / "linkdir")
    return make_memory({"extraPaths": ["notes"]}, provider="none")


@pytest.mark.parametrize(
    "path",
    [
        "../x.md",
        "/etc/passwd",
        "memory/../../x.md",
        "memory/link.md",
        "memory/linkdir/x.md",
        "MEMORY.md\x00.txt",
        "",
        "AGENTS.md",
        "notes/secret.txt",
        "memory/../AGENTS.md",
        "../outside/x.md",
        "~/x.md",
        "memory",
    ],
)
def test_refused_paths_return_an_error(mem: Memory, path: str) -> None:
    res = mem.get(path)
    assert set(res) == {"path", "text", "error"}
    assert res["text"] == "" and res["error"]
    assert "OUTSIDE SECRET" not in str(res)


def test_absolute_path_outside_workspace_is_refused(mem: Memory, tmp_path: Path) -> None:
    res = mem.get(str(tmp_path / "outside" / "x.md"))
    assert res["error"] and res["text"] == ""


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("MEMORY.md", "one\ntwo\nthree\nfour\nfive"),
        ("memory/2026-01-01.md", "daily\nlog"),
        ("memory/sub/deep.md", "deep note"),
        ("notes/extra.md", "extra note"),
    ],
)
def test_allowed_paths(mem: Memory, path: str, text: str) -> None:
    assert mem.get(path) == {"path": path, "text": text}


def test_absolute_path_inside_workspace_is_allowed(mem: Memory, workspace: Path) -> None:
    assert mem.get(str(workspace / "MEMORY.md"))["text"].startswith("one")


def test_line_slices_are_one_based(mem: Memory) -> None:
    assert mem.get("MEMORY.md", from_line=2, lines=2) == {"path": "MEMORY.md", "text": "two\nthree"}
    assert mem.get("MEMORY.md", from_line=4) == {"path": "MEMORY.md", "text": "four\nfive"}
    assert mem.get("MEMORY.md", lines=1) == {"path": "MEMORY.md", "text": "one"}
    assert mem.get("MEMORY.md", from_line=99, lines=3) == {"path": "MEMORY.md", "text": ""}
    for bad in (0, -1, True, "2"):
        res = mem.get("MEMORY.md", from_line=bad)  # type: ignore[arg-type]
        assert res["error"] and res["text"] == ""


def test_missing_memory_file_is_empty_not_an_error(mem: Memory) -> None:
    assert mem.get("memory/2030-01-01.md") == {"path": "memory/2030-01-01.md", "text": ""}
    assert mem.get("memory.md") == {"path": "memory.md", "text": ""}
