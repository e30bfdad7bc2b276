"""The memory lifecycle for one agent (docs/lifecycle.md): ``plan`` (a dry run), ``apply`` and ``revive``, over
the pure planner and the moves of mdmem.files.archive, with the uses the index counted (mdmem.engine.usage).

Every ``apply`` and ``revive`` appends one receipt to ``<home>/state/lifecycle/<agent>.jsonl``: counts by
tier and reason, never a path or a line of memory. Nothing here runs by itself: ``mdmem watch`` and ``mdmem
serve`` apply when ``lifecycle.schedule`` says (mdmem.engine.lifecycle_schedule).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdmem.files import clock
from mdmem.files.archive import (
    ARCHIVE_PREFIX,
    REVIVING_KINDS,
    Held,
    Move,
    Seen,
    apply_moves,
    digest,
    is_archived,
    is_pinned,
    live_path,
)
from mdmem.files.workspace import MEMORY_DIR, Workspace
from mdmem.util.errors import ConfigError
from mdmem.util.filewrite import Folder

if TYPE_CHECKING:
    from mdmem.config.settings import AgentConfig
    from mdmem.store.api import IndexStore

RECEIPTS_KEPT_IN_STATUS = 1


def receipts_file(agent: AgentConfig) -> Path:
    return agent.home / "state" / "lifecycle" / f"{agent.id}.jsonl"


def seen_files(workspace: Workspace, store: IndexStore | None) -> list[Seen]:
    """The agent's memory files (``memory/`` and MEMORY.md; not extraPaths or sessions) as the planner sees them,
    with their last use and, for archived ones, their reviving uses since they moved."""
    last: dict[str, float] = {}
    reviving: Counter[str] = Counter()
    for r in store.usage_rows() if store is not None else []:
        last[r.path] = max(last.get(r.path, 0.0), r.last_used_at)
        if r.kind in REVIVING_KINDS and is_archived(r.path):
            reviving[r.path] += r.uses
    out: list[Seen] = []
    for f in workspace.discover():
        if f.source != "memory":
            continue
        parts = f.rel.split("/")
        with Folder(workspace.root, parts[:-1]) as folder:
            data = folder.read(parts[-1])
            st = folder.lstat(parts[-1])
        if data is None or st is None:
            continue  # gone since discovery
        text = data.decode("utf-8", "replace")
        out.append(
            Seen(f.rel, st.st_mtime, st.st_size, digest(data), is_pinned(text), last.get(f.rel), reviving[f.rel])
        )
    return out


def plan_view(moves: Sequence[Move], held: Sequence[Held]) -> dict[str, Any]:
    """What ``mdmem lifecycle plan`` shows: every move and hold with its reason, and the counts."""
    return {
        "moves": [m.to_dict() for m in moves],
        "held": [h.to_dict() for h in held],
        "counts": _counts(moves, held, []),
    }


def _counts(moves: Sequence[Move], held: Sequence[Held], skipped: Sequence[tuple[Move, str]]) -> dict[str, Any]:
    archived: dict[str, Counter[str]] = {}
    revived: Counter[str] = Counter()
    for m in moves:
        if is_archived(m.to):
            archived.setdefault(m.tier, Counter())[m.reason] += 1
        else:
            revived[m.reason] += 1
    return {
        "archived": {tier: dict(c) for tier, c in sorted(archived.items())},
        "revived": dict(revived),
        "held": dict(Counter(h.reason for h in held)),
        "skipped": dict(Counter(why.split(":", 1)[0] for _, why in skipped)),
    }


def apply_plan(
    agent: AgentConfig,
    workspace: Workspace,
    moves: Sequence[Move],
    held: Sequence[Held],
    store: Callable[[], IndexStore] | None,
    *,
    action: str = "apply",
    moved: Callable[[Move], None] | None = None,
) -> dict[str, Any]:
    """Make ``moves`` (see mdmem.files.archive.move_file), give each revived file the uses its archived path
    had (``store``: None when the agent has no index), append the run's receipt; returns ``{moved, skipped,
    receipt}``."""
    started = time.time()
    done, skipped = apply_moves(workspace.root, moves, moved)
    notes: list[str] = []
    for m in done:
        if store is not None and not is_archived(m.to):
            try:
                store().move_usage(m.path, m.to)
            except Exception as exc:  # the file moved; its counts stay under the archived path
                notes.append(f"uses of a revived file not carried over: {exc}")
    receipt = {
        "at": round(started, 3),
        "agent": agent.id,
        "action": action,
        **_counts(done, held, skipped),
        "seconds": round(time.time() - started, 3),
    }
    try:
        append_receipt(agent, receipt)
    except OSError as exc:
        notes.append(f"receipt not written: {exc.strerror or exc}")
    out: dict[str, Any] = {
        "moved": [m.to_dict() for m in done],
        "skipped": [{**m.to_dict(), "why": why} for m, why in skipped],
        "receipt": receipt,
    }
    if notes:
        out["warnings"] = notes
    return out


def revive_moves(workspace: Workspace, seen: Sequence[Seen], path: str) -> list[Move]:
    """The move that brings ``path`` back: an archived path, or the live name of an archived file."""
    wanted = path.strip().replace("\\", "/").removeprefix("./")
    by_path = {s.path: s for s in seen}
    if is_archived(wanted):
        found = by_path.get(wanted)
        candidates = [found] if found is not None else []
    else:
        candidates = [s for s in seen if is_archived(s.path) and live_path(s.path) == wanted]
    if not candidates:
        raise ConfigError(
            f"revive: {path} is not an archived memory file. Fix: name a file under {ARCHIVE_PREFIX} or the "
            f"{MEMORY_DIR}/ path it came from (`mdmem lifecycle plan` lists what is archived)"
        )
    if len(candidates) > 1:
        names = ", ".join(s.path for s in candidates)
        raise ConfigError(f"revive: {path} is archived more than once ({names}). Fix: name one of these paths")
    s = candidates[0]
    back = live_path(s.path)
    assert back is not None
    if back in by_path:
        raise ConfigError(f"revive: {back} exists. Fix: rename or merge it, then revive {s.path}")
    return [Move(s.path, back, "live", "asked", s.size, s.mtime, s.digest)]


def append_receipt(agent: AgentConfig, receipt: dict[str, Any]) -> None:
    """One line appended in one write (O_APPEND): a reader sees whole receipts."""
    path = receipts_file(agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(receipt, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def last_receipts(agent: AgentConfig, count: int = RECEIPTS_KEPT_IN_STATUS) -> dict[str, Any]:
    """What status shows: how many runs there were and the last ``count`` receipts (a torn line is skipped)."""
    try:
        lines = receipts_file(agent).read_text(encoding="utf-8").splitlines()
    except OSError:
        return {"runs": 0, "last": []}
    receipts = []
    for line in lines:
        try:
            receipts.append(json.loads(line))
        except ValueError:
            continue
    return {"runs": len(receipts), "last": receipts[-count:]}


def today(agent: AgentConfig, at: float | None = None) -> date:
    """The agent's day at the Unix time ``at`` (None: now) in its ``userTimezone``."""
    return clock.day(agent, None if at is None else datetime.fromtimestamp(at).astimezone())
