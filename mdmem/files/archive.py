"""The memory lifecycle's file side (docs/lifecycle.md): which memory files a policy would archive or bring
back, and the moves themselves.

- **Planning is pure**: ``plan_moves`` takes the files as ``Seen`` (path, age, pinned, last use, uses since
  archived) and the tiers (``lifecycle.tiers``), and returns the moves and the files held, each with its tier
  and reason. The first tier whose pattern matches a file decides; ``MEMORY.md``/``memory.md``, files outside
  ``memory/`` and pinned files never move.
- **Pinned**: ``pinned: true`` in a file's front matter, or a line ``<!-- pin -->`` (or ``<!-- pinned -->``).
- **Where to**: ``memory/<rest>`` goes to ``memory/archive/<YYYY>/<rest>`` (YYYY: the daily log's year, else the
  year of the file's mtime) and comes back to ``memory/<rest>``: the path says where a file came from, so
  nothing else has to remember it.
- **A move is one rename** inside the workspace (``os.rename`` relative to two ``Folder`` descriptors, never
  through a symlink), so a crash leaves each file moved or not, never lost or doubled. Right before it, the
  file is read again: one edited since the plan (size, mtime or hash changed) is skipped (``edited``), and so
  is one whose target exists (``target-exists``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from mdmem.files.workspace import MEMORY_DIR, ROOT_FILES
from mdmem.util.errors import WorkspaceError
from mdmem.util.filewrite import Folder
from mdmem.util.redaction import redact_path

if TYPE_CHECKING:
    from mdmem.config.settings import TierConfig

ARCHIVE_DIR = f"{MEMORY_DIR}/archive"
ARCHIVE_PREFIX = f"{ARCHIVE_DIR}/"
DAY = 86_400.0
_DATED = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_PIN_LINE = re.compile(r"^\s*<!--\s*pin(?:ned)?\s*-->\s*$", re.IGNORECASE | re.MULTILINE)
_PIN_FRONT = re.compile(r"^pinned\s*:\s*(?:true|yes)\s*$", re.IGNORECASE)
REVIVING_KINDS = ("get", "pack")  # uses of an archived file that bring it back (lifecycle.reviveOnUse)


def is_archived(path: str) -> bool:
    return path.startswith(ARCHIVE_PREFIX)


def is_pinned(text: str) -> bool:
    """Whether a person pinned the file: ``pinned: true`` in its front matter, or a ``<!-- pin -->`` line."""
    if _PIN_LINE.search(text):
        return True
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        return False
    for line in lines[1:200]:
        if line.strip() in ("---", "..."):
            return False
        if _PIN_FRONT.match(line.strip()):
            return True
    return False


def file_day(path: str) -> date | None:
    """The day a daily log's name holds (``memory/2026-01-31.md``, ``memory/2026-01-31-standup.md``)."""
    found = _DATED.match(path.rsplit("/", 1)[-1])
    if found is None:
        return None
    with contextlib.suppress(ValueError):
        return date(int(found[1]), int(found[2]), int(found[3]))
    return None


def archived_path(path: str, mtime: float) -> str:
    """Where ``memory/<rest>`` goes: ``memory/archive/<YYYY>/<rest>``."""
    day = file_day(path) or datetime.fromtimestamp(mtime).date()
    return f"{ARCHIVE_PREFIX}{day.year:04d}/{path[len(MEMORY_DIR) + 1 :]}"


def live_path(path: str) -> str | None:
    """Where an archived ``memory/archive/<YYYY>/<rest>`` comes back to (None: not an archived path)."""
    if not is_archived(path):
        return None
    year, _, rest = path[len(ARCHIVE_PREFIX) :].partition("/")
    if not (len(year) == 4 and year.isdigit()) or not rest:
        return None
    return f"{MEMORY_DIR}/{rest}"


@dataclass(frozen=True)
class Seen:
    """A memory file as the planner sees it. ``last_used_at``: its last use (None: never); ``revived_by``: uses
    of an archived file since it moved, of the kinds that revive it."""

    path: str
    mtime: float
    size: int
    digest: str  # sha256 of its bytes when seen: the move is skipped if it changed
    pinned: bool = False
    last_used_at: float | None = None
    revived_by: int = 0


@dataclass(frozen=True)
class Move:
    path: str
    to: str
    tier: str
    reason: str  # "age-unused", "age" (archive); "use", "asked" (revive)
    size: int
    mtime: float
    digest: str

    def to_dict(self) -> dict[str, object]:
        """As outputs show it: a token in a file name becomes its marker (mdmem.util.redaction)."""
        return {"path": redact_path(self.path), "to": redact_path(self.to), "tier": self.tier, "reason": self.reason}


@dataclass(frozen=True)
class Held:
    path: str
    tier: str | None
    reason: str  # "root", "outside", "pinned", "young", "used", "keep", "no-tier", "target-exists"

    def to_dict(self) -> dict[str, object]:
        return {"path": redact_path(self.path), "tier": self.tier, "reason": self.reason}


def plan_moves(
    seen: Sequence[Seen], tiers: Sequence[TierConfig], today: date, now: float, *, revive_on_use: bool = True
) -> tuple[list[Move], list[Held]]:
    """What ``apply`` would move, and why; what it holds, and why (see the module docstring)."""
    moves: list[Move] = []
    held: list[Held] = []
    present = {s.path for s in seen}
    for s in sorted(seen, key=lambda f: f.path):
        if is_archived(s.path):
            back = live_path(s.path)
            if back is not None and revive_on_use and s.revived_by:
                if back in present:
                    held.append(Held(s.path, None, "target-exists"))
                else:
                    moves.append(Move(s.path, back, "live", "use", s.size, s.mtime, s.digest))
            continue
        if s.path in ROOT_FILES:
            held.append(Held(s.path, None, "root"))
            continue
        if not s.path.startswith(f"{MEMORY_DIR}/"):
            held.append(Held(s.path, None, "outside"))
            continue
        tier = next((t for t in tiers if any(fnmatchcase(s.path, p) for p in t.paths)), None)
        if tier is None:
            held.append(Held(s.path, None, "no-tier"))
            continue
        if s.pinned:
            held.append(Held(s.path, tier.name, "pinned"))
            continue
        if tier.action == "keep":
            held.append(Held(s.path, tier.name, "keep"))
            continue
        born = file_day(s.path) or datetime.fromtimestamp(s.mtime).date()
        if (today - born).days < tier.older_than_days:
            held.append(Held(s.path, tier.name, "young"))
            continue
        if tier.unused_days and s.last_used_at is not None and now - s.last_used_at < tier.unused_days * DAY:
            held.append(Held(s.path, tier.name, "used"))
            continue
        to = archived_path(s.path, s.mtime)
        if to in present:
            held.append(Held(s.path, tier.name, "target-exists"))
            continue
        moves.append(
            Move(s.path, to, tier.name, "age-unused" if tier.unused_days else "age", s.size, s.mtime, s.digest)
        )
    return moves, held


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def move_file(root: Path, move: Move) -> str | None:
    """Rename ``move.path`` to ``move.to`` inside the workspace ``root``: None when moved, else why not
    (``edited``, ``gone``, ``target-exists``). Raises WorkspaceError for a symlink on the way."""
    src_parts, name = _split(move.path)
    dst_parts, new_name = _split(move.to)
    with Folder(root, src_parts) as src:
        data = src.read(name)
        if data is None:
            return "gone"
        st = src.lstat(name)
        if st is None or digest(data) != move.digest or st.st_size != move.size or st.st_mtime != move.mtime:
            return "edited"
        with Folder(root, dst_parts, create=True) as dst:
            if dst.lstat(new_name) is not None:
                return "target-exists"
            os.rename(name, new_name, src_dir_fd=src.fd, dst_dir_fd=dst.fd)
            dst.sync()
        src.sync()
    return None


def apply_moves(
    root: Path, moves: Sequence[Move], moved: Callable[[Move], None] | None = None
) -> tuple[list[Move], list[tuple[Move, str]]]:
    """Make ``moves`` one at a time (``move_file``), calling ``moved`` after each: (done, [(skipped, why)])."""
    done: list[Move] = []
    skipped: list[tuple[Move, str]] = []
    for m in moves:
        try:
            why = move_file(root, m)
        except (WorkspaceError, OSError) as exc:
            why = f"error: {exc}"
        if why is None:
            done.append(m)
            if moved is not None:
                moved(m)
        else:
            skipped.append((m, why))
    return done, skipped


def _split(rel: str) -> tuple[list[str], str]:
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise WorkspaceError(f"{rel}: not a plain workspace-relative path")
    return parts[:-1], parts[-1]
