"""Pure path rules: which files are memory, and safe resolution of a path for memory_get.

Memory files are ``MEMORY.md``, ``memory.md``, ``memory/**/*.md`` and the configured ``extraPaths``
(files or folders, relative to the workspace or absolute). Symlinks are never followed, neither while
discovering nor while reading. Only regular files with one link are memory: a FIFO, a device, a socket or
a hard link named ``*.md`` is never opened (discovery reports it as a ``SpecialFile``), and every open goes
through ``fileread.open_regular`` (``lstat`` first, then ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat`` on the open fd).
``missing_roots`` says which of the folders memory comes from are absent right now. With the ``sessions``
source on, ``sessions/**/*.md`` are memory files too (source ``sessions``), under the same rules.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mdmem.util.errors import WorkspaceError
from mdmem.util.fileread import special_kind

ROOT_FILES = ("MEMORY.md", "memory.md")
MEMORY_DIR = "memory"
SESSIONS_DIR = "sessions"  # memorySearch.sources "sessions": retained turns and transcript copies


@dataclass(frozen=True)
class MemoryFile:
    """A discovered memory file. ``rel`` is the path shown to agents (workspace-relative, posix)."""

    rel: str
    abs: str  # absolute path as a string (cheap to build for thousands of files)
    source: str  # "memory", "extra" or "sessions"
    size: int = 0  # from the discovery stat
    mtime: float = 0.0


@dataclass(frozen=True)
class SpecialFile:
    """A memory-named path that is not a regular file with one link; never opened, never indexed."""

    rel: str
    kind: str  # from special_kind(): "a FIFO (named pipe)", "a character device", "hard-linked (2 links)"...

    @property
    def warning(self) -> str:
        why = ""
        if self.kind.startswith("hard-linked"):
            why = " (a copy, not a link: a hard link can bring in a file from outside the workspace)"
        return f"{self.rel} is {self.kind}: not indexed; replace it with a regular file{why}"


@dataclass(frozen=True)
class Scan:
    """One discovery pass: the memory files, and the special files that were skipped."""

    files: list[MemoryFile]
    special: list[SpecialFile]


@dataclass(frozen=True)
class MissingRoot:
    """A folder memory comes from that is absent now: the workspace, ``memory/``, ``sessions/`` (with the
    sessions source) or an ``extraPaths`` entry.

    ``kind`` is ``workspace``, ``memory``, ``sessions`` or ``extra``; ``shown`` is how people know it (the
    workspace's path, ``memory/``, ``sessions/``, the extraPaths entry); ``reason`` completes "<shown> ..."
    (``does not exist``, ``is not a folder``, ``is empty``...). ``prefix`` is what the indexed paths under
    it start with.
    """

    kind: str
    path: str
    shown: str
    reason: str
    prefix: str = ""

    def holds(self, rel: str) -> bool:
        """Whether the indexed path ``rel`` (as ``Workspace.rel`` names it) lies under this root."""
        if self.kind == "workspace":
            return not rel.startswith("/")
        return rel == self.prefix or rel.startswith(self.prefix + "/")


EMPTY = "is empty"


def _is_md(name: str) -> bool:
    return name.lower().endswith(".md")


class Workspace:
    """The memory files of one agent workspace."""

    def __init__(
        self,
        root: Path,
        extra_paths: Sequence[str] = (),
        *,
        sessions: bool = False,
        transcripts: Path | None = None,
    ) -> None:
        self.root = Path(os.path.abspath(os.path.expanduser(root)))
        self._root_prefix = os.path.join(str(self.root), "")
        self.sessions_dir = self.root / SESSIONS_DIR if sessions else None
        self.transcripts = transcripts if sessions else None  # OpenClaw's <dir>/agents/<id>/sessions folder
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

    @property
    def sources(self) -> frozenset[str]:
        """The sources this workspace's files come from (``sessions`` only with that source on). An index
        may hold rows of others, written by a process with another view (the service searches ``sessions``
        for every agent): a sync never prunes them and a search never returns them."""
        return frozenset(("memory", "extra", "sessions") if self.sessions_dir is not None else ("memory", "extra"))

    def source_of(self, rel: str) -> str:
        parts = PurePosixPath(rel).parts
        if rel in ROOT_FILES or (len(parts) > 1 and parts[0] == MEMORY_DIR):
            return "memory"
        if self.sessions_dir is not None and len(parts) > 1 and parts[0] == SESSIONS_DIR:
            return "sessions"
        return "extra"

    # -- discovery ----------------------------------------------------------------------------------
    def discover(self) -> list[MemoryFile]:
        """Every memory file on disk, de-duplicated, sorted by name. Symlinks and special files are skipped."""
        return self.scan().files

    def scan(self) -> Scan:
        """``discover`` plus the special files it skipped (FIFOs, devices, sockets, hard links)."""
        seen: set[tuple[int, int]] = set()
        found: dict[str, MemoryFile] = {}
        special: dict[str, SpecialFile] = {}

        def add(path: Path | str, source: str | None) -> None:
            try:
                st = os.lstat(path)
            except OSError:
                return
            if stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode):
                return
            rel = self.rel(path)
            kind = special_kind(st)
            if kind is not None:
                special.setdefault(rel, SpecialFile(rel, kind))
                return
            if (st.st_dev, st.st_ino) in seen:
                return
            seen.add((st.st_dev, st.st_ino))
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
        if self.sessions_dir is not None and not self._has_symlink(self.sessions_dir):
            for path in _walk_md(self.sessions_dir):
                add(path, "sessions")
        for extra in self.extra_roots:
            if self._has_symlink(extra):
                continue
            if extra.is_dir():
                for path in _walk_md(extra):
                    add(path, None)
            elif _is_md(extra.name):
                add(extra, None)
        return Scan([found[k] for k in sorted(found)], [special[k] for k in sorted(special)])

    def missing_roots(self) -> list[MissingRoot]:
        """The folders memory comes from that are absent now, from a few ``lstat`` calls.

        The workspace is absent when it does not exist, is not a folder or cannot be read, and is listed
        as ``is empty`` when it holds no entry at all (an unmounted drive leaves an empty mount point;
        whether that matters depends on the index, see ``mdmem.files.roots``). ``memory/`` is absent when it
        does not exist (normal in a new workspace), is not a folder or is a symlink; an ``extraPaths``
        entry when it does not exist, goes through a symlink, or is neither a folder nor a ``.md`` file.
        """
        out: list[MissingRoot] = []
        root = str(self.root)
        problem = _root_problem(root)
        if problem is not None:
            out.append(MissingRoot("workspace", root, root, problem))
        if problem is None or problem == EMPTY:
            mem_dir = self.root / MEMORY_DIR
            reason = _entry_problem(mem_dir, folder_only=True)
            if reason is not None:
                out.append(MissingRoot("memory", str(mem_dir), f"{MEMORY_DIR}/", reason, MEMORY_DIR))
            if self.sessions_dir is not None:  # retained turns: as precious as memory/ when it vanishes
                reason = _entry_problem(self.sessions_dir, folder_only=True)
                if reason is not None:
                    shown = f"{SESSIONS_DIR}/"
                    out.append(MissingRoot("sessions", str(self.sessions_dir), shown, reason, SESSIONS_DIR))
        for extra in self.extra_roots:
            inside = _inside(extra, self.root)
            if inside and problem is not None and problem != EMPTY:
                continue  # the missing workspace holds it
            reason = "goes through a symlink (symlinks are not followed)" if self._has_symlink(extra) else None
            reason = reason or _entry_problem(extra, folder_only=False)
            if reason is not None:
                out.append(MissingRoot("extra", str(extra), self.rel(extra), reason, self.rel(extra)))
        return out

    def is_memory_path(self, path: Path) -> bool:
        """Whether ``path`` (absolute) is one of this workspace's memory files by name (not by content)."""
        path = Path(os.path.abspath(path))
        if not _is_md(path.name):
            return False
        if path.parent == self.root and path.name in ROOT_FILES:
            return True
        if _inside(path, self.root / MEMORY_DIR):
            return True
        if self.sessions_dir is not None and _inside(path, self.sessions_dir):
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
            sessions = ", sessions/**/*.md" if self.sessions_dir is not None else ""
            raise WorkspaceError(
                f"path {path!r} is not a memory file: allowed are MEMORY.md, memory.md, memory/**/*.md{sessions} "
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


def _root_problem(root: str) -> str | None:
    try:
        st = os.stat(root)  # the workspace itself may be a symlink (its contents may not)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    try:
        with os.scandir(root) as entries:
            empty = next(entries, None) is None
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return EMPTY if empty else None


def _entry_problem(path: Path, *, folder_only: bool) -> str | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink (symlinks are not followed)"
    if stat.S_ISDIR(st.st_mode):
        return None
    if folder_only:
        return "is not a folder"
    return None if stat.S_ISREG(st.st_mode) and _is_md(path.name) else "is neither a folder nor a .md file"


def _walk_md(folder: Path | str) -> Iterator[str]:
    """Markdown-named entries under ``folder`` that are not folders or symlinks (regular files, and special
    files for ``scan`` to report), recursively, never entering symlinked folders."""
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
            elif _is_md(entry.name):
                yield entry.path
        except OSError:
            continue
