"""``remember --supersedes REF``: find the old line, then mark it with a link to the new one.

``remember`` writes the new fact first, with `` (supersedes REF)`` at the end of its first line; then
``mark`` appends `` (superseded YYYY-MM-DD → NEW)`` to the old line (mdmem.files.supersession). Each step
is atomic: the append is one ``O_APPEND`` write, the mark rewrites the old file through a temporary file and
a rename, both under the folder's lock that every ``remember`` takes, so concurrent writers never lose a line.
Nothing but the old line changes: every other byte of the file (other lines, their line endings, a missing
final newline) is kept as it is. Were the process killed between the two steps, the new line's own marker
still says what it supersedes.

The old line is found by its reference (``path#L<n>``, as search results cite; ``path#L<n>-L<m>`` when that
range holds a single fact line; ``path:<n>``). A file edited by hand since it was indexed may have moved the
line: when line n is no longer the line the index holds there, the line is looked for by its indexed text
and used where it is now if it is there exactly once; otherwise the call is refused, nothing written. The
same holds for an edit between the check and the write: the mark re-reads the file under the lock, and a
file changed by a writer that takes no lock (an editor) between that read and the rename is read again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mdmem.files.supersession import marker, parse_supersessions, strip_markers
from mdmem.files.workspace import Workspace
from mdmem.util.errors import ConfigError, WorkspaceError
from mdmem.util.filewrite import Folder

__all__ = ["BadReference", "IndexedLines", "StaleReference", "Target", "locate", "mark"]

IndexedLines = Callable[[str], "list[str] | None"]
"""The lines of a file as the index holds them (None: not indexed), to find a line a hand edit moved."""

_REF = re.compile(r"^(?P<path>.+?)(?:#L(?P<start>\d+)(?:-L?(?P<end>\d+))?|:(?P<colon>\d+))$")
_RETRIES = 5


class BadReference(WorkspaceError):
    """The reference names no memory file inside the workspace (missing, outside, not Markdown, ``..``): the
    caller's mistake, nothing written (the service answers 400)."""


class StaleReference(ConfigError):
    """The cited line cannot be superseded as its file is now: it is already superseded, or it was changed since
    it was indexed. Nothing was written; searching again gives the current line (the service answers 409)."""


@dataclass(frozen=True)
class Target:
    """The line to mark: line ``line`` of the workspace-relative ``path``, whose text is ``text``."""

    path: str
    line: int
    text: str

    @property
    def ref(self) -> str:
        return f"{self.path}#L{self.line}"


def locate(workspace: Workspace, ref: str, indexed: IndexedLines | None = None) -> Target:
    """The line ``ref`` names, checked: a fact line (not blank, not a heading) of a memory file inside the
    workspace, not superseded yet; moved to where a hand edit put it (see the module docstring)."""
    found = _REF.match(ref.strip()) if isinstance(ref, str) else None
    if found is None:
        raise ConfigError(
            f"supersedes: {ref!r} is not a line reference. Fix: pass the old line as path#L<n>, as search "
            "results cite it (e.g. memory/2026-03-01.md#L4)"
        )
    start = int(found["start"] or found["colon"])
    end = int(found["end"] or start)
    try:
        path = workspace.resolve_for_read(found["path"])
    except WorkspaceError as exc:
        raise BadReference(f"supersedes: {exc}") from None
    if not path.is_relative_to(workspace.root):
        raise BadReference(
            f"supersedes: {found['path']} is outside the workspace {workspace.root}: mdmem marks lines only "
            "in files inside the workspace. Fix: supersede the fact by hand in that file (see docs/truth.md)"
        )
    rel = workspace.rel(path)
    lines = _read_lines(workspace.root, rel)
    if start < 1 or end < start or start > len(lines):
        raise ConfigError(
            f"supersedes: {rel} has {len(lines)} lines, no line {start}. Fix: search again and cite a line"
        )
    facts = [n for n in range(start, min(end, len(lines)) + 1) if _is_fact(lines[n - 1])]
    if len(facts) != 1:
        cited = "; ".join(f"{rel}#L{n}: {_short(lines[n - 1])}" for n in facts[:8]) or "none"
        raise ConfigError(
            f"supersedes: {ref} holds {len(facts)} fact lines ({cited}). Fix: cite the one line to supersede"
        )
    line = _moved(rel, facts[0], lines, indexed)
    target = Target(rel, line, lines[line - 1])
    _check_current(target, "\n".join(lines))
    return target


def mark(workspace: Workspace, target: Target, new_ref: str, date: str, *, lock: str, timeout: float) -> Target:
    """Append the superseded marker (``→ new_ref``, dated ``date``) to ``target``'s line, holding the folder's lock
    file ``lock`` (``remember``'s); returns where the line was marked (a writer may have moved it since ``locate``)."""
    *parts, name = PurePosixPath(target.path).parts
    with Folder(workspace.root, parts) as folder, folder.locked(lock, timeout):
        for _ in range(_RETRIES):
            before = folder.lstat(name)
            raw = folder.read(name)
            if raw is None or before is None:
                raise WorkspaceError(
                    f"{target.path} was removed before its line could be marked; the new fact is written"
                )
            pieces = raw.split(b"\n")
            line = _find(pieces, target)
            piece = pieces[line - 1]
            cr = b"\r" if piece.endswith(b"\r") else b""
            text = piece[: len(piece) - len(cr)].decode("utf-8", "surrogateescape").rstrip()
            pieces[line - 1] = (text + marker(date, new_ref)).encode("utf-8", "surrogateescape") + cr
            after = folder.lstat(name)
            if after is None or (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
                continue  # changed by a writer that takes no lock: read it again
            folder.replace(name, b"\n".join(pieces))
            return Target(target.path, line, text)
    raise WorkspaceError(f"{target.path} kept changing while its line was being marked; the new fact is written")


def _find(pieces: list[bytes], target: Target) -> int:
    """Where ``target``'s line is in the file now: at its number, or moved, once (else WorkspaceError)."""
    lines = [p.rstrip(b"\r").decode("utf-8", "surrogateescape") for p in pieces]
    if target.line <= len(lines) and lines[target.line - 1] == target.text:
        return target.line
    where = [n for n, text in enumerate(lines, start=1) if text == target.text]
    if not where and target.line <= len(lines):
        now = lines[target.line - 1]
        marks = [m for m in parse_supersessions(now, target.path) if (m.old_path, m.old_line) == (target.path, 1)]
        if marks and strip_markers(now) == strip_markers(target.text):  # another writer superseded it meanwhile
            by = next((f" by {m.new_path}#L{m.new_line}" for m in marks if m.new_path), "")
            raise WorkspaceError(
                f"{target.ref} was superseded{by} by another writer while the new fact was written; it keeps that "
                "mark only, and the new fact its own '(supersedes ...)'. Fix: if the new fact is the current one, "
                "mark the other line superseded by it (see docs/truth.md)"
            )
    if len(where) != 1:
        raise WorkspaceError(
            f"{target.ref} changed while the new fact was written (edited by hand?) and its line cannot be found "
            f"again; the new fact is written with its own marker. Fix: mark the old line by hand (see docs/truth.md)"
        )
    return where[0]


def _read_lines(root: Path, rel: str) -> list[str]:
    *parts, name = PurePosixPath(rel).parts
    try:
        with Folder(root, parts) as folder:
            raw = folder.read(name)
    except FileNotFoundError:
        raw = None
    if raw is None:
        raise BadReference(f"supersedes: {rel} does not exist. Fix: search again and cite a line of a memory file")
    return [p.rstrip("\r") for p in raw.decode("utf-8", "replace").split("\n")]


def _short(line: str, limit: int = 80) -> str:
    """A line as an error quotes it, so the caller can pick one without reading the file again."""
    line = line.strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _is_fact(line: str) -> bool:
    return bool(line.strip()) and not line.lstrip().startswith("#")


def _moved(rel: str, line: int, lines: list[str], indexed: IndexedLines | None) -> int:
    """``line``, or where the line the index holds at ``line`` is now when a hand edit moved it."""
    held = indexed(rel) if indexed is not None else None
    if not held or line > len(held) or held[line - 1] == lines[line - 1] or not _is_fact(held[line - 1]):
        return line
    if strip_markers(held[line - 1]) == strip_markers(lines[line - 1]):
        return line  # only marked (superseded) since it was indexed: the same fact, which _check_current refuses
    where = [n for n, text in enumerate(lines, start=1) if text == held[line - 1]]
    if len(where) == 1:
        return where[0]
    raise StaleReference(
        f"supersedes: {rel}#L{line} changed since it was indexed (the file was edited): it was {held[line - 1]!r}, "
        f"it is now {lines[line - 1]!r}. Nothing was written. Fix: search again and cite the line's new reference"
    )


def _check_current(target: Target, text: str) -> None:
    for s in parse_supersessions(text, target.path):
        if s.old_path == target.path and s.old_line == target.line and s.path == target.path:
            by = f" by {s.new_path}#L{s.new_line}" if s.new_path else ""
            raise StaleReference(
                f"supersedes: {target.ref} is already superseded{by}. Nothing was written. Fix: supersede the "
                "current line instead (`mdmem truth` shows it)"
            )
