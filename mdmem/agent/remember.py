"""``remember``: append one timestamped line to today's log (or ``MEMORY.md``), safely under concurrency.

The line goes in with a single ``write`` on a file opened ``O_APPEND`` (never through a symlink), then
``fsync``, all under a file lock beside the file (``.mdmemory.lock`` in the same folder, shared by every
mdmem process whatever its ``MDMEMORY_HOME``), so concurrent ``remember`` calls never interleave or
lose lines. The folder and the file are created when missing; a new file starts with a heading. The folder
is opened through ``mdmem.util.filewrite.Folder``: a ``memory/`` that is a symlink (to outside the workspace
or not) is refused, and so is a lock file that is one.

Only regular files with one link are appended to: a FIFO, a device, a socket or a hard link named like
the target is refused before anything is opened for writing (``fileread.open_regular``). A note is at
most ``MAX_NOTE_BYTES`` (64 KiB) of UTF-8, and a note that would push its file over
``memorySearch.maxFileBytes`` is refused: the indexer skips files over that size, so the whole file would
drop out of search.

The index needs no flag: the indexer compares each memory file's size and mtime (then content hash) with
what it indexed, so the next search (``sync.onSearch``), the watcher or ``mdmem index`` picks the line up.
"""

from __future__ import annotations

import errno
import os
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from mdmem.agent import supersede
from mdmem.agent.supersede import IndexedLines
from mdmem.config.load import AgentConfig
from mdmem.files import clock
from mdmem.files.workspace import ROOT_FILES, Workspace
from mdmem.util.errors import ConfigError, LockError, SpecialFileError, WorkspaceError
from mdmem.util.filewrite import Folder, write_all

LOCK_NAME = ".mdmemory.lock"
LOCK_TIMEOUT_SECONDS = 30.0
LONG_TERM_HEADING = "# Long-term memory"
MAX_NOTE_BYTES = 64 * 1024  # a note, not a document: larger texts belong in a file of their own


class FileFull(WorkspaceError):
    """The note would push its file over ``memorySearch.maxFileBytes``; nothing written (the service answers 409)."""


def remember(
    agent: AgentConfig,
    text: str,
    *,
    long_term: bool = False,
    at: datetime | None = None,
    timeout: float = LOCK_TIMEOUT_SECONDS,
    supersedes: str | None = None,
    indexed: IndexedLines | None = None,
    redact_secrets: bool = False,
) -> dict[str, Any]:
    """Append ``text`` as one timestamped list item and return ``{path, line, ref, created, indexed}``.

    Daily log (default): ``- [HH:MM] text`` in ``memory/YYYY-MM-DD.md`` (today in ``userTimezone``).
    ``long_term``: ``- [YYYY-MM-DD HH:MM] text`` in ``MEMORY.md`` (or an existing ``memory.md``).
    Further lines of a multi-line ``text`` are indented so the entry stays one list item.
    ``ref`` is the new line's ``path#L<m>``; ``indexed`` is always False: the next search or sync indexes the line.

    ``supersedes`` (``path#L<n>``): the new fact replaces that line. The new line ends with
    `` (supersedes path#L<n>)`` and the old one gets `` (superseded YYYY-MM-DD → new path#L<m>)``, nothing else of
    its file changing (mdmem.agent.supersede); the answer adds ``supersedes`` (the old line's ``path#L<n>``,
    where it was marked) and ``marked``. ``indexed`` gives the lines the index holds for a file, to find an old
    line a hand edit moved. A reference that names no line to supersede raises ``ConfigError``
    (``StaleReference`` when the line is already superseded or changed since it was indexed), nothing written.
    Once the new line is written the call does not fail: were the old line not markable then (removed or
    rewritten meanwhile, its lock held too long), the answer has ``marked: false`` and a warning, the new line's
    own mark recording the change (an error would invite a retry, and a second copy of the fact).

    ``redact_secrets``: secrets in ``text`` are stored as ``[REDACTED:<kind>]`` (mdmem.util.redaction), and a
    warning says so: for text a model or a proxy sends (the memory_remember tool, the service's ``/remember``);
    a person's own ``mdmem remember`` keeps what they wrote, as a hand edit would.
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("nothing to remember: the text is empty. Fix: pass the note to store.")
    warnings: list[str] = []
    if redact_secrets:
        text, kinds = _redacted(text)
        if kinds:
            warnings.append(
                f"the text held {len(kinds)} secret(s) ({', '.join(sorted(set(kinds)))}), stored as [REDACTED:<kind>]: "
                "memory is no place for credentials. Fix: keep secrets in a secret store and remember where they are"
            )
    size = len(text.strip().encode("utf-8", "surrogatepass"))
    if size > MAX_NOTE_BYTES:
        raise ConfigError(
            f"the note is {size} bytes; remember stores notes of at most {MAX_NOTE_BYTES} bytes (64 KiB). "
            "Fix: store a short summary, and put long documents in a file under memorySearch.extraPaths."
        )
    moment = clock.now(agent, at)
    workspace = Workspace(agent.workspace, agent.memory_search.extra_paths)
    if long_term:
        rel = next((n for n in ROOT_FILES if os.path.lexists(workspace.root / n)), ROOT_FILES[0])
        stamp, heading = moment.strftime("%Y-%m-%d %H:%M"), LONG_TERM_HEADING
    else:
        rel = clock.daily_log(moment.date())
        stamp, heading = moment.strftime("%H:%M"), f"# {moment.date().isoformat()}"
    parts = [part.rstrip() for part in text.strip().splitlines()]
    target = supersede.locate(workspace, supersedes, indexed) if supersedes is not None else None
    if target is not None:
        parts[0] += f" (supersedes {target.ref})"
    line = f"- [{stamp}] " + "\n  ".join(parts)
    created, number = append_numbered(
        workspace.root, rel, line, heading=heading, timeout=timeout, max_file_bytes=agent.memory_search.max_file_bytes
    )
    ref = f"{rel}#L{number}"
    result: dict[str, Any] = {"path": rel, "line": line, "ref": ref, "created": created, "indexed": False}
    if target is not None:
        try:
            marked = supersede.mark(workspace, target, ref, moment.date().isoformat(), lock=LOCK_NAME, timeout=timeout)
            result.update(supersedes=marked.ref, marked=True)
        except (WorkspaceError, LockError, OSError) as exc:  # the new line is written: say so, never fail now
            result.update(supersedes=target.ref, marked=False)
            warnings.append(
                f"{target.ref} was not marked superseded ({exc}). The new line's own '(supersedes {target.ref})' "
                "records the change: search, packs and truth read it"
            )
    if warnings:
        result["warnings"] = warnings
    return result


def _redacted(text: str) -> tuple[str, list[str]]:
    from mdmem.util.redaction import find_secrets, redact  # only for a tool's or the service's text

    kinds = [kind for _, _, kind in find_secrets(text)]
    return (redact(text, keep_lines=True) if kinds else text), kinds


def append_line(
    root: Path,
    rel: str,
    line: str,
    *,
    heading: str,
    timeout: float = LOCK_TIMEOUT_SECONDS,
    max_file_bytes: int | None = None,
) -> bool:
    """Append ``line`` (plus a newline) to the file ``rel`` of the workspace ``root`` atomically; True when the
    file was created. See ``append_numbered``."""
    return append_numbered(root, rel, line, heading=heading, timeout=timeout, max_file_bytes=max_file_bytes)[0]


def append_numbered(
    root: Path,
    rel: str,
    line: str,
    *,
    heading: str,
    timeout: float = LOCK_TIMEOUT_SECONDS,
    max_file_bytes: int | None = None,
) -> tuple[bool, int]:
    """Append ``line`` (plus a newline) to the file ``rel`` of the workspace ``root`` atomically: (True when
    the file was created, the 1-based number of the line's first line in the file).

    A new or empty file gets ``heading`` and a blank line first; a file whose last line has no newline
    gets one before ``line``. Refuses (``WorkspaceError``, nothing written) a folder on the way that is a
    symlink (mdmem.util.filewrite), a file that is not a regular file with one link, and a line that would make
    the file larger than ``max_file_bytes``.
    """
    *parts, name = PurePosixPath(rel).parts
    try:  # first, so that a workspace that cannot exist is reported as such
        root.mkdir(parents=True, exist_ok=True)
        folder = Folder(root, parts, create=True)  # refuses symlinked folders
    except WorkspaceError:
        raise
    except OSError as exc:
        raise _unwritable(root / rel, exc) from None
    try:
        with folder, folder.locked(LOCK_NAME, timeout):
            return _append(folder, name, line, heading, max_file_bytes)
    except (SpecialFileError, WorkspaceError, LockError):
        raise
    except OSError as exc:
        raise _unwritable(root / rel, exc) from None


def _append(folder: Folder, name: str, line: str, heading: str, max_file_bytes: int | None) -> tuple[bool, int]:
    existed = folder.lstat(name) is not None
    fd = folder.open(name, os.O_RDWR | os.O_APPEND | os.O_CREAT)  # never a symlink, a FIFO or a hard link
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            prefix, before = f"{heading}\n\n", 0
        else:
            held = os.pread(fd, size, 0)  # read whole (at most maxFileBytes) to number the new line
            before = held.count(b"\n")
            prefix = "" if held.endswith(b"\n") else "\n"
        data = (prefix + line + "\n").encode("utf-8")
        if max_file_bytes is not None and size + len(data) > max_file_bytes:
            if not existed:
                os.unlink(name, dir_fd=folder.fd)
            raise FileFull(
                f"{folder.shown(name)} would grow to {size + len(data)} bytes, over maxFileBytes ({max_file_bytes}), "
                "and drop out of search; nothing was written. Fix: move older notes of that file into another "
                "file under memory/, or raise agents.defaults.memorySearch.maxFileBytes."
            )
        write_all(fd, data)  # one write on a regular file; the loop only guards odd file systems
        os.fsync(fd)
    finally:
        os.close(fd)
    if not existed:
        folder.sync()
    return not existed, before + prefix.count("\n") + 1


def _unwritable(path: Path, exc: OSError) -> WorkspaceError:
    if exc.errno == errno.ELOOP:
        return WorkspaceError(f"{path} is a symlink: mdmem never writes through symlinks")
    reason = exc.strerror or str(exc)
    return WorkspaceError(
        f"cannot write {path} ({reason}). Fix: make the workspace writable, or store the note elsewhere."
    )
