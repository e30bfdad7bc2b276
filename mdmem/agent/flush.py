"""Pre-compaction memory flush: tell the runtime when to give the agent a silent "store memories now" turn.

Per session key, ``sessions.json`` keeps ``compactionCount`` (compactions so far), ``memoryFlushAt``
(epoch milliseconds of the last flush) and ``memoryFlushCompactionCount`` (the compaction count when it
ran). With ``threshold = contextWindow - reserveTokensFloor - softThresholdTokens``:

- a flush is due when the session's token estimate reaches the threshold and no flush has run in this
  compaction cycle (``memoryFlushCompactionCount != compactionCount``);
- it is a *catch-up* when a compaction happened without a flush before it (the tokens jumped past the
  compaction point, or compaction reset the count before the flush fired): the flush is due as soon as
  the session is past the threshold again;
- it is skipped, with the reason, when the flush is disabled or the workspace is not writable.

The file is ``<home>/state/sessions/<agentId>.json``, shaped like Clawdbot's ``sessions.json``
(``{sessionKey: entry}``; other fields of an entry are kept). Every change is a read-modify-write under a
cross-process file lock, written to a temporary file and renamed over the old one, so readers never see
a partial file and concurrent writers never lose each other's updates.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from mdmem.config.load import AgentConfig
from mdmem.files import clock
from mdmem.util.errors import ConfigError, LockError, StoreError, WorkspaceError
from mdmem.util.filewrite import Folder
from mdmem.util.fsync import fsync_dir

NO_REPLY = "NO_REPLY"
NO_REPLY_HINT = "If there is nothing to store, reply with NO_REPLY."
LOCK_TIMEOUT_SECONDS = 30.0
Entry = dict[str, Any]


@dataclass(frozen=True)
class FlushDecision:
    """Whether to run the flush turn now, why, and the prompts to run it with (None when not due).

    ``reason`` starts with a stable word: ``threshold``, ``catch-up`` (due); ``below-threshold``,
    ``already-flushed``, ``disabled``, ``window-too-small``, ``read-only`` (not due).
    """

    due: bool
    reason: str
    system_prompt: str | None
    prompt: str | None
    threshold: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape: ``{due, reason, systemPrompt, prompt, threshold}``."""
        return {
            "due": self.due,
            "reason": self.reason,
            "systemPrompt": self.system_prompt,
            "prompt": self.prompt,
            "threshold": self.threshold,
        }


def sessions_path(agent: AgentConfig) -> Path:
    """Where the agent's session records live: ``<home>/state/sessions/<agentId>.json``."""
    return agent.home / "state" / "sessions" / f"{agent.id}.json"


class SessionStore:
    """``sessions.json``: atomic replace on every write, a file lock around every read-modify-write."""

    def __init__(self, path: Path, timeout: float = LOCK_TIMEOUT_SECONDS) -> None:
        self.path = Path(path)
        self.timeout = timeout

    def read(self) -> dict[str, Any]:
        """The whole file (``{}`` when it does not exist yet). Needs no lock: writes are atomic renames."""
        try:
            raw = _read_regular(self.path)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise StoreError(f"cannot read {self.path}: {exc.strerror}. Fix: check its permissions.") from None
        if raw is None:
            raise StoreError(f"{self.path} is not a regular file (a FIFO, a device, a folder?). Fix: remove it.")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StoreError(
                f"{self.path} is not UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); mdmem writes it "
                "as UTF-8 JSON. Fix: re-save it as UTF-8, or delete it to forget the flush state."
            ) from None
        try:
            data = json.loads(text) if text.strip() else {}
        except (ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise StoreError(
                f"{self.path} is not valid JSON ({reason}). Fix: repair it, or delete it to forget the flush state."
            ) from None
        if not isinstance(data, dict):
            raise StoreError(f"{self.path} must hold a JSON object. Fix: delete it to start over.")
        return data

    def entry(self, key: str) -> Entry:
        """A copy of the entry for session ``key`` (``{}`` when there is none)."""
        value = self.read().get(_check_key(key))
        return dict(value) if isinstance(value, dict) else {}

    def update(self, key: str, change: Callable[[Entry], Entry | None]) -> Entry | None:
        """Apply ``change`` to the entry of ``key`` under the lock and save; None from ``change`` deletes it."""
        key = _check_key(key)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with FileLock(f"{self.path}.lock", timeout=self.timeout):
                data = self.read()
                current = data.get(key)
                new = change(dict(current) if isinstance(current, dict) else {})
                if new is None:
                    data.pop(key, None)
                else:
                    data[key] = new
                self._write(data)
                return new
        except Timeout:
            raise LockError(
                f"{self.path} stayed locked by another process for {self.timeout:g} s. Fix: retry; if no "
                "mdmem process is running, check the file system."
            ) from None

    def _write(self, data: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=2, sort_keys=True, ensure_ascii=False)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        fsync_dir(self.path.parent)


def _read_regular(path: Path) -> bytes | None:
    """The bytes of ``path``; None when it is not a regular file (a FIFO is never waited on)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def _check_key(key: str) -> str:
    if not isinstance(key, str) or not key.strip():
        raise ConfigError("the session key is empty. Fix: pass the runtime's session key, e.g. 'agent:main:main'.")
    return key


def _count(entry: Entry, field: str) -> int | None:
    value = entry.get(field)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# -- the decision ---------------------------------------------------------------------------------------


def flush_prompts(agent: AgentConfig, today: date) -> tuple[str, str]:
    """The system and user prompts of the flush turn: ``YYYY-MM-DD`` filled in, ``NO_REPLY`` guaranteed."""
    settings = agent.compaction.memory_flush
    stamp = today.isoformat()
    system = settings.system_prompt.replace("YYYY-MM-DD", stamp)
    prompt = settings.prompt.replace("YYYY-MM-DD", stamp)
    if NO_REPLY not in prompt:
        prompt = f"{prompt.rstrip()}\n\n{NO_REPLY_HINT}"
    return system, prompt


def workspace_writable(root: Path) -> tuple[bool, str]:
    """Whether the agent can create ``memory/YYYY-MM-DD.md`` under ``root``: (ok, why not).

    Tried for real (a temporary file in ``memory/``, or in the workspace while it has none), since permission
    bits say nothing about read-only mounts and nothing at all to root; never outside the workspace and never
    through a symlink (mdmem.util.filewrite: a ``memory/`` that is a symlink is not writable for mdmem). A
    workspace that does not exist yet is writable when its nearest existing parent folder is.
    """
    root = Path(root)
    if not root.is_dir():
        nearest = root
        while not os.path.lexists(nearest) and nearest.parent != nearest:
            nearest = nearest.parent
        if not nearest.is_dir():
            return False, f"{nearest} is not a folder"
        if not os.access(nearest, os.W_OK | os.X_OK):
            return False, f"cannot create the workspace {root} in {nearest} (permission denied)"
        return True, ""
    try:
        with Folder(root, ()) as top:
            if top.lstat(clock.DAILY_DIR) is None:
                return _probe(top)
        with Folder(root, [clock.DAILY_DIR]) as folder:
            return _probe(folder)
    except WorkspaceError as exc:
        return False, str(exc)
    except OSError as exc:
        return False, f"cannot open {root} ({exc.strerror or exc})"


def _probe(folder: Folder) -> tuple[bool, str]:
    name = f".mdmemory-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder.fd)
    except OSError as exc:
        return False, f"cannot create a file in {folder.path} ({exc.strerror or exc})"
    os.close(fd)
    os.unlink(name, dir_fd=folder.fd)
    return True, ""


def check_flush(
    agent: AgentConfig,
    session_key: str,
    total_tokens: int,
    context_window: int,
    *,
    writable: bool | None = None,
    today: date | str | None = None,
) -> FlushDecision:
    """Decide whether the pre-compaction flush turn is due for ``session_key``; reads, never writes.

    ``total_tokens`` is the runtime's estimate of the session's context, ``context_window`` the model's.
    ``writable`` False (a read-only sandbox) skips the flush; None tries the workspace for real.
    ``today`` (default: today in ``userTimezone``) is the date filled into the prompts.
    """
    _check_key(session_key)
    for label, value, low in (("total_tokens", total_tokens, 0), ("context_window", context_window, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{label} must be a whole number >= {low}, got {value!r}")
    compaction = agent.compaction
    settings = compaction.memory_flush
    threshold = max(0, context_window - compaction.reserve_tokens_floor - settings.soft_threshold_tokens)

    def skip(reason: str) -> FlushDecision:
        return FlushDecision(False, reason, None, None, threshold)

    if not settings.enabled:
        return skip("disabled: compaction.memoryFlush.enabled is false")
    if threshold <= 0:
        return skip(
            f"window-too-small: contextWindow {context_window} - reserveTokensFloor "
            f"{compaction.reserve_tokens_floor} - softThresholdTokens {settings.soft_threshold_tokens} leaves no room"
        )
    if total_tokens < threshold:
        return skip(f"below-threshold: {total_tokens} tokens < threshold {threshold}")
    entry = SessionStore(sessions_path(agent)).entry(session_key)
    cycle = _count(entry, "compactionCount") or 0
    last = _count(entry, "memoryFlushCompactionCount") if entry.get("memoryFlushAt") is not None else None
    if last == cycle:
        return skip(f"already-flushed: a flush already ran in this compaction cycle (compaction {cycle})")
    if writable is None:
        writable, why = workspace_writable(agent.workspace)
    else:
        why = "the runtime reported a read-only workspace"
    if not writable:
        return skip(f"read-only: the workspace {agent.workspace} is not writable ({why}); flush skipped")
    missed = cycle if last is None else cycle - last - 1
    if last is not None and last > cycle:
        reason = f"catch-up: the compaction count went back ({last} -> {cycle}) since the last flush"
    elif missed > 0:
        reason = (
            f"catch-up: {missed} compaction(s) happened without a flush; the session is past the threshold "
            f"again ({total_tokens} >= {threshold})"
        )
    else:
        reason = f"threshold: {total_tokens} tokens >= threshold {threshold}"
    system, prompt = flush_prompts(agent, clock.day(agent, today))
    return FlushDecision(True, reason, system, prompt, threshold)


# -- recording --------------------------------------------------------------------------------------------


def _shown(key: str, entry: Entry | None) -> dict[str, Any]:
    return {"sessionKey": key, **(entry or {})}


def record_flush(agent: AgentConfig, session_key: str) -> dict[str, Any]:
    """Record that the flush turn ran: ``memoryFlushAt`` = now, ``memoryFlushCompactionCount`` = the cycle."""

    def change(entry: Entry) -> Entry:
        now = int(time.time() * 1000)
        cycle = _count(entry, "compactionCount") or 0
        return {**entry, "compactionCount": cycle, "memoryFlushAt": now, "memoryFlushCompactionCount": cycle}

    return _shown(session_key, SessionStore(sessions_path(agent)).update(session_key, change))


def record_compaction(agent: AgentConfig, session_key: str) -> dict[str, Any]:
    """Record that the runtime compacted the session: ``compactionCount`` + 1 (a new flush cycle)."""

    def change(entry: Entry) -> Entry:
        return {**entry, "compactionCount": (_count(entry, "compactionCount") or 0) + 1}

    return _shown(session_key, SessionStore(sessions_path(agent)).update(session_key, change))


def reset_session(agent: AgentConfig, session_key: str) -> dict[str, Any]:
    """A session reset (new conversation under the same key): clear the flush and compaction fields."""
    fields = ("compactionCount", "memoryFlushAt", "memoryFlushCompactionCount")
    cleared: list[str] = []

    def change(entry: Entry) -> Entry | None:
        cleared.extend(f for f in fields if f in entry)
        rest = {k: v for k, v in entry.items() if k not in fields}
        return rest or None

    entry = SessionStore(sessions_path(agent)).update(session_key, change)
    return {**_shown(session_key, entry), "cleared": cleared}
