"""OpenClaw session transcripts as memory: Markdown copies of their user and assistant text.

With ``memorySearch.sources`` holding ``sessions`` and ``memorySearch.sessions.transcriptsDir`` set, each
``<transcriptsDir>/agents/<agentId>/sessions/<id>.jsonl`` (OpenClaw's transcript: one JSON object a line;
``{"type": "message", "timestamp", "message": {"role", "content"}}`` with ``content`` a string or a list of
parts such as ``{"type": "text", "text"}``) gets a copy ``sessions/transcripts/<id>.md`` in the workspace:
one ``### <role> · <timestamp>`` heading and the text per user or assistant message. Tool calls, tool results
(``role: "toolResult"``), thinking and images are dropped, secrets are redacted (mdmem.util.redaction), and
malformed lines are skipped. The copies are ordinary files under ``sessions/``: indexed with ``source:
"sessions"``, cited by their lines and read with ``memory_get``; the transcript itself is never written.

A copy is written when its transcript is first seen, and after that only once the transcript has grown by
``DELTA_BYTES`` (100 KB) or ``DELTA_MESSAGES`` (50 messages), OpenClaw's own re-index deltas, or shrunk
(rewritten). Each write rebuilds the copy from the transcript's complete lines and replaces it atomically
(temporary file, fsync, rename), so a crash leaves the old copy or the new one, never half of one; how far
each copy got is kept in ``sessions/transcripts/.state.json`` (a cache: without it, every copy is rebuilt);
a transcript whose size has not changed since the last look is not read. Called by the indexer before each
sync (under its writer lock) and when a search checks for changed files. Two processes refreshing at once
write the same bytes, each by an atomic rename. Copies are written inside the workspace only, never through
a symlink (mdmem.util.filewrite): a ``sessions/`` or ``sessions/transcripts/`` that is one is refused, and the
refusal is one of the sync's errors (``status`` shows them).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdmem.files.workspace import SESSIONS_DIR
from mdmem.util.errors import WorkspaceError
from mdmem.util.fileread import normalise_line_endings
from mdmem.util.filewrite import Folder
from mdmem.util.redaction import redact

COPY_DIR = f"{SESSIONS_DIR}/transcripts"
STATE_FILE = ".state.json"
DELTA_BYTES = 100_000
DELTA_MESSAGES = 50
ROLES = ("user", "assistant")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def transcripts_folder(transcripts_dir: str | None, agent_id: str) -> Path | None:
    """``<transcriptsDir>/agents/<agentId>/sessions``, OpenClaw's layout; None when not configured."""
    return None if not transcripts_dir else Path(transcripts_dir) / "agents" / agent_id / "sessions"


@dataclass(frozen=True)
class Message:
    role: str
    text: str
    timestamp: str = ""


def messages(raw: bytes) -> list[Message]:
    """The user and assistant text messages of a transcript's complete lines; anything else is skipped."""
    out = []
    for line in raw.split(b"\n"):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("type") != "message":
            continue
        message = entry.get("message")
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            continue
        text = _text(message.get("content")).strip()
        if text:
            stamp = entry.get("timestamp")
            out.append(Message(message["role"], text, stamp if isinstance(stamp, str) else ""))
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "\n\n".join(t for t in parts if isinstance(t, str) and t.strip())
    return ""


def render(session_id: str, found: list[Message]) -> str:
    """The Markdown copy: a title, then one heading and the redacted text per message."""
    blocks = [f"# OpenClaw session {session_id}\n"]
    for m in found:
        when = f" · {m.timestamp}" if m.timestamp else ""
        body = normalise_line_endings(redact(m.text))  # the same lines for every reader
        # a line that looks like a heading inside a message would split it in the chunker: indent it
        body = re.sub(r"(?m)^(#{1,6}\s)", r" \1", body)
        blocks.append(f"### {m.role}{when}\n\n{body}\n")
    return "\n".join(blocks)


@dataclass(frozen=True)
class Refreshed:
    """What ``refresh`` did: the copies written (workspace-relative) and what it could not write, as a sync
    report's errors (``{path, error}``)."""

    written: list[str] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)


def refresh(workspace_root: Path, folder: Path) -> Refreshed:
    """Bring the copies of the transcripts in ``folder`` up to date (see the module docstring). A missing folder
    or unreadable transcript is left for the next call; a copy that cannot be written is reported, and a
    ``sessions/`` or ``sessions/transcripts/`` that is a symlink is refused (``mdmem.util.filewrite``: nothing is
    written outside the workspace or through a symlink)."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return Refreshed()
    entries = [e for e in entries if e.name.endswith(".jsonl") and not e.is_symlink() and e.is_file()]
    if not entries:
        return Refreshed()
    try:
        copies = Folder(workspace_root, COPY_DIR.split("/"), create=True)
    except FileNotFoundError:
        return Refreshed()  # no workspace (an unmounted volume): status says so; nothing is made in its place
    except (WorkspaceError, OSError) as exc:
        return Refreshed([], [{"path": f"{COPY_DIR}/", "error": f"transcript copies not written: {exc}"}])
    with copies:
        return _refresh(copies, entries)


def _refresh(copies: Folder, entries: list[os.DirEntry[str]]) -> Refreshed:
    state = _load_state(copies)
    out = Refreshed()
    dirty = False
    for entry in entries:
        session_id = _UNSAFE.sub("_", entry.name.removesuffix(".jsonl"))
        seen = state.get(entry.name, {})
        name = f"{session_id}.md"
        exists = copies.lstat(name) is not None
        try:
            size = entry.stat(follow_symlinks=False).st_size
            if size == seen.get("size") and exists:
                continue  # unchanged since it was last looked at: no read
            raw = _complete_lines(Path(entry.path))
        except OSError:
            continue
        done_bytes, done_messages = int(seen.get("bytes", -1)), int(seen.get("messages", 0))
        found = messages(raw)
        first = done_bytes < 0 or not exists
        grown = len(raw) - done_bytes >= DELTA_BYTES or len(found) - done_messages >= DELTA_MESSAGES
        dirty = True
        if first or grown or len(raw) < done_bytes:
            try:
                copies.replace(name, render(session_id, found).encode("utf-8"))
            except (WorkspaceError, OSError) as exc:  # a full disk, a symlink in its place: the next sync again
                out.errors.append({"path": f"{COPY_DIR}/{name}", "error": f"copy not written: {exc}"})
                continue
            state[entry.name] = {"bytes": len(raw), "messages": len(found), "size": size}
            out.written.append(f"{COPY_DIR}/{name}")
        else:  # below the deltas: remember the size seen, so the next call does not read it again
            state[entry.name] = {**seen, "size": size}
    if dirty:
        with contextlib.suppress(WorkspaceError, OSError):
            copies.replace(STATE_FILE, (json.dumps(state, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    return out


def _complete_lines(path: Path) -> bytes:
    """The transcript up to its last newline (a line still being written is left for later)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        raw = fh.read()
    return raw[: raw.rfind(b"\n") + 1]


def _load_state(copies: Folder) -> dict[str, dict[str, int]]:
    try:
        data = json.loads(copies.read(STATE_FILE) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
