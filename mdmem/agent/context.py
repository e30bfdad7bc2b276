"""Session-start context: what an agent reads before its first turn.

Today's and yesterday's daily logs (``memory/YYYY-MM-DD.md``, dates in ``userTimezone``) and, for the
main private session only, ``MEMORY.md``. Group contexts never get ``MEMORY.md``: it holds the user's
private long-term memory.

Secrets in the files become ``[REDACTED:<kind>]`` (mdmem.util.redaction, as in recall, pack and search; a
secret over several lines keeps its line breaks, so the line numbers the notes cite are the file's).

The text is bounded by ``sessionContext.maxChars`` (headings and notes included). When it does not fit,
today's log keeps its room first, then ``MEMORY.md``, then yesterday's log; a daily log loses its oldest
lines and ``MEMORY.md`` its last ones, whole lines only, and a note in the text says which lines were
cut and how to read them with memory_get.

Files are read through memory_get's rules: never through a symlink, never a FIFO, device, socket or hard
link (such a file is listed in ``skipped`` and never opened, so it cannot hang the session start), and at
most ``memorySearch.maxFileBytes`` of each (a daily log over that size is skipped: its newest lines are past
the cap).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal

from mdmem.config.load import AgentConfig
from mdmem.files import clock
from mdmem.files.memory_get import get_file
from mdmem.files.workspace import ROOT_FILES, Workspace
from mdmem.util.errors import ConfigError
from mdmem.util.redaction import redact

SessionKind = Literal["main", "group"]
KINDS: tuple[SessionKind, ...] = ("main", "group")
SEPARATOR = "\n\n"


@dataclass
class _Part:
    path: str
    role: str  # "long-term", "yesterday" or "today"
    body: str
    keep_tail: bool  # daily logs keep their newest lines, MEMORY.md its first ones
    priority: int  # lower keeps its room first

    @property
    def header(self) -> str:
        return f"## {self.path} ({self.role})\n"

    def note(self, first: int, last: int, chars: int) -> str:
        lines = f"lines {first}-{last}"
        where = f'memory_get path="{self.path}" from={first} lines={last - first + 1}'
        side = "older" if self.keep_tail else "later"
        return f"[{chars} {side} characters ({lines}) cut to fit sessionContext.maxChars; {where} reads them]"


def session_context(
    agent: AgentConfig,
    kind: SessionKind = "main",
    today: date | str | None = None,
    *,
    max_chars: int | None = None,
) -> dict[str, Any]:
    """The session-start context for a ``main`` (private) or ``group`` session.

    Returns ``{kind, today, timezone, maxChars, chars, truncated, files: [{path, role, chars,
    includedChars, cutLines}], skipped: [{path, error}], text}``; ``text`` is ready to put in the prompt,
    at most ``maxChars`` long. ``skipped`` lists files that exist but were not read.
    ``today`` defaults to today in ``userTimezone``; ``max_chars`` to ``sessionContext.maxChars``.
    """
    if kind not in KINDS:
        raise ConfigError(f"unknown session kind {kind!r}. Fix: use 'main' (private) or 'group'.")
    limit = agent.session_context.max_chars if max_chars is None else max_chars
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"max_chars must be a whole number >= 1, got {limit!r}")
    day = clock.day(agent, today)
    workspace = Workspace(agent.workspace, agent.memory_search.extra_paths)
    reader = _Reader(workspace, agent.memory_search.max_file_bytes)
    parts: list[_Part] = []
    if kind == "main":
        parts += [_Part(p, "long-term", t, False, 1) for p, t in _long_term(workspace, reader)]
    for role, when, priority in (("yesterday", day - timedelta(days=1), 2), ("today", day, 0)):
        text = reader.read(clock.daily_log(when), whole=True)
        if text:
            parts.append(_Part(clock.daily_log(when), role, text, True, priority))
    files, text = _fit(parts, limit)
    return {
        "kind": kind,
        "today": day.isoformat(),
        "timezone": clock.zone_name(agent),
        "maxChars": limit,
        "chars": len(text),
        "truncated": any(f["cutLines"] for f in files),
        "files": files,
        "skipped": reader.skipped,
        "text": text,
    }


@dataclass
class _Reader:
    workspace: Workspace
    max_bytes: int
    skipped: list[dict[str, str]] = field(default_factory=list)

    def read(self, rel: str, *, whole: bool = False) -> str:
        """A memory file's text through memory_get's rules; "" when missing, refused or unreadable (then
        listed in ``skipped``). ``whole``: a file cut at ``max_bytes`` is skipped too."""
        got = get_file(self.workspace, rel, max_bytes=self.max_bytes)
        if got.get("error"):
            self.skipped.append({"path": rel, "error": got["error"]})
            return ""
        if whole and got.get("truncated"):
            self.skipped.append({"path": rel, "error": got["note"]})
            return ""
        # prompt-bound: secrets go as in recall, pack and search; line numbers stay the file's for memory_get
        return redact(str(got["text"]).rstrip(), keep_lines=True)


def _long_term(workspace: Workspace, reader: _Reader) -> list[tuple[str, str]]:
    """MEMORY.md and memory.md (one of them on case-insensitive file systems), when they have text."""
    out: list[tuple[str, str]] = []
    seen: set[tuple[int, int]] = set()
    for name in ROOT_FILES:
        try:
            st = os.lstat(workspace.root / name)
        except OSError:
            continue
        text = reader.read(name)
        if text and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            out.append((name, text))
    return out


def _fit(parts: list[_Part], limit: int) -> tuple[list[dict[str, Any]], str]:
    """Render ``parts`` in reading order within ``limit`` characters; see the module docstring."""
    order = sorted(parts, key=lambda p: {"long-term": 0, "yesterday": 1, "today": 2}[p.role])
    full = SEPARATOR.join(p.header + p.body for p in order)
    if len(full) <= limit:
        return [_file(p, len(p.body), None) for p in order], full
    # Reserve every heading, separator and a worst-case note, then share the rest by priority.
    reserve = len(SEPARATOR) * max(0, len(order) - 1)
    for p in order:
        n = p.body.count("\n") + 1
        reserve += len(p.header) + len(p.note(n, n, len(p.body))) + 1
    room = max(0, limit - reserve)
    kept: dict[int, tuple[str, tuple[int, int] | None, int]] = {}
    for p in sorted(order, key=lambda p: p.priority):
        body, cut, cut_chars = _cut(p, room)
        room -= len(body)
        kept[id(p)] = (body, cut, cut_chars)
    sections, files = [], []
    for p in order:
        body, cut, cut_chars = kept[id(p)]
        if cut is None:
            sections.append(p.header + body)
        else:
            note = p.note(cut[0], cut[1], cut_chars)
            joined = [note, body] if p.keep_tail else [body, note]
            sections.append(p.header + "\n".join(s for s in joined if s))
        files.append(_file(p, len(body), cut))
    return files, SEPARATOR.join(sections)


def _cut(part: _Part, room: int) -> tuple[str, tuple[int, int] | None, int]:
    """The body cut to at most ``room`` characters of whole lines: (kept, cut line range, cut characters)."""
    if len(part.body) <= room:
        return part.body, None, 0
    lines = part.body.split("\n")
    size, count = 0, 0
    walk = reversed(lines) if part.keep_tail else iter(lines)
    for line in walk:
        extra = len(line) + (1 if count else 0)
        if size + extra > room:
            break
        size += extra
        count += 1
    n = len(lines)
    if part.keep_tail:
        kept = lines[n - count :]
        cut = (1, n - count)
    else:
        kept = lines[:count]
        cut = (count + 1, n)
    body = "\n".join(kept)
    return body, cut, len(part.body) - len(body)


def _file(part: _Part, included: int, cut: tuple[int, int] | None) -> dict[str, Any]:
    return {
        "path": part.path,
        "role": part.role,
        "chars": len(part.body),
        "includedChars": included,
        "cutLines": list(cut) if cut else None,
    }
