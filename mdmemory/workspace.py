"""Pure path rules: which files are memory, and safe resolution of a path for memory_get.

Memory files are ``MEMORY.md``, ``memory.md``, ``memory/**/*.md`` and the configured ``extraPaths``
(files or folders, relative to the workspace or absolute). Symlinks are never followed, neither while
discovering nor while reading.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mdmemory.errors import WorkspaceError

ROOT_FILES = ("MEMORY.md", "memory.md")
MEMORY_DIR = "memory"


@dataclass(frozen=True)
class MemoryFile:
    """A discovered memory file. ``rel`` is the path shown to agents (workspace-relative, posix)."""

    rel: str
    abs: str  # absolute path as a string (cheap to build for thousands of files)
    source: str  # "memory" or "extra"
    size: int = 0  # from the discovery stat
    mtime: float = 0.0


def _is_md(name: str) -> bool:
    return name.lower().endswith(".md")


class Workspace:
    """The memory files of one agent workspace."""

    def __init__(self, root: Path, extra_paths: Sequence[str] = ()) -> None:
        self.root = Path(os.path.abspath(os.path.expanduser(root)))
        self._root_prefix = os.path.join(str(self.root), "")
        self.extra_roots: list[Path] = []
        for entry in extra_paths:
            p = Path(os.path.expanduser(entry))
            self.extra_roots.append(Path(os.path.abspath(p if p.is_absolute() else self.root / p)))

    # -- naming -------------------------------------------------------------------------------------
    def rel(self, path: Path | str) -> str:
        """The agent-facing name of ``path``: workspace-relative when inside, else absolute."""
        text = os.fspath(path)
        prefix = self._root_prefix
        if text.startswith(prefix):
            return text[len(prefix) :].replace(os.sep, "/")
        return text.replace(os.sep, "/")

    def source_of(self, rel: str) -> str:
        parts = PurePosixPath(rel).parts
        if rel in ROOT_FILES or (len(parts) > 1 and parts[0] == MEMORY_DIR):
            return "memory"
        return "extra"

    # -- discovery ----------------------------------------------------------------------------------
    def discover(self) -> list[MemoryFile]:
        """Every memory file on disk, de-duplicated, sorted by name. Symlinks are skipped."""
        seen: set[tuple[int, int]] = set()
        found: dict[str, MemoryFile] = {}

        def add(path: Path | str, source: str | None) -> None:
            try:
                st = os.lstat(path)
            except OSError:
                return
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                return
            seen.add((st.st_dev, st.st_ino))
            rel = self.rel(path)
            found.setdefault(
                rel, MemoryFile(rel, os.fspath(path), source or self.source_of(rel), st.st_size, st.st_mtime)
            )

        for name in ROOT_FILES:
            if not self._has_symlink(self.root / name):
                add(self.root / name, "memory")
        mem_dir = self.root / MEMORY_DIR
        if not self._has_symlink(mem_dir):
            for path in _walk_md(mem_dir):
                add(path, "memory")
        for extra in self.extra_roots:
            if self._has_symlink(extra):
                continue
            if extra.is_dir():
                for path in _walk_md(extra):
                    add(path, None)
            elif _is_md(extra.name):
                add(extra, None)
        return [found[k] for k in sorted(found)]

    def is_memory_path(self, path: Path) -> bool:
        """Whether ``path`` (absolute) is one of this workspace's memory files by name (not by content)."""
        path = Path(os.path.abspath(path))
        if not _is_md(path.name):
            return False
        if path.parent == self.root and path.name in ROOT_FILES:
            return True
        if _inside(path, self.root / MEMORY_DIR):
            return True
        return any(path == extra or _inside(path, extra) for extra in self.extra_roots)

    # -- safe resolution for memory_get -------------------------------------------------------------
    def resolve_for_read(self, path: str) -> Path:
        """Resolve an agent-supplied path to a memory file, or raise WorkspaceError saying why not.

        Refused: empty paths, NUL bytes, any ``..`` component, absolute paths outside the allowed
        roots, files that are not Markdown memory files, and any symlink on the way.
        """
        if not isinstance(path, str) or not path.strip():
            raise WorkspaceError("path is empty: pass a workspace-relative path such as 'MEMORY.md'")
        if "\x00" in path:
            raise WorkspaceError("path contains a NUL byte")
        raw = path.strip().replace("\\", "/")
        if ".." in PurePosixPath(raw).parts:
            raise WorkspaceError(f"path {path!r} contains '..': path traversal is not allowed")
        candidate = Path(os.path.expanduser(raw)) if raw.startswith("~") else Path(raw)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        candidate = Path(os.path.normpath(candidate))
        if not _is_md(candidate.name):
            raise WorkspaceError(f"path {path!r} is not a Markdown (.md) memory file")
        if not self.is_memory_path(candidate):
            raise WorkspaceError(
                f"path {path!r} is not a memory file: allowed are MEMORY.md, memory.md, memory/**/*.md "
                "and the configured extraPaths"
            )
        if self._has_symlink(candidate):
            raise WorkspaceError(f"path {path!r} goes through a symlink: symlinks are not followed")
        return candidate

    def _has_symlink(self, path: Path) -> bool:
        """True when ``path`` or any of its parents below the allowed root is a symlink."""
        base = self.root if _inside(path, self.root) or path == self.root else None
        if base is None:
            base = next((r for r in self.extra_roots if path == r or _inside(path, r)), None)
        if base is None:
            return True
        current = base
        for part in path.relative_to(base).parts:
            current = current / part
            try:
                if stat.S_ISLNK(os.lstat(current).st_mode):
                    return True
            except FileNotFoundError:
                return False
            except OSError:
                return True
        return path == base and base.is_symlink() and base != self.root


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return path != folder


def _walk_md(folder: Path | str) -> Iterator[str]:
    """Markdown files under ``folder``, recursively, never entering symlinked folders."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                yield from _walk_md(entry.path)
            elif entry.is_file(follow_symlinks=False) and _is_md(entry.name):
                yield entry.path
        except OSError:
            continue


def read_text(path: Path | str) -> tuple[str, int, bytes]:
    """Read a memory file without following a final symlink.

    Returns (text, replaced, raw) where ``replaced`` counts invalid UTF-8 sequences that became U+FFFD.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read()
    text = raw.decode("utf-8", errors="replace")
    replaced = 0
    if "\ufffd" in text:
        replaced = text.count("\ufffd") - raw.decode("utf-8", errors="ignore").count("\ufffd")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, replaced, raw
