"""What the index holds of a session day file (``sessions/YYYY-MM-DD.md``) while the database has entries for
it that are not in the file yet, or tombstones not applied to it yet. Pure: text in, text out.

Replicas of ``mdmemory serve`` that do not hold an agent's files keep what they retain and forget in the
database (``mdmemory.store.api.EntryLog``) until the agent's host writes it into its files. Meanwhile every
writer of the index (that host's ``watch`` reading the file, a replica rebuilding the file's text from the
index) indexes this view of it: the file's blocks minus the tombstoned ones, plus the pending blocks of its day
that it does not hold, appended as a retain appends them. So an entry is in the index exactly once from its
``202`` on — pending, then in the file — and a forgotten one is gone from its ``204`` on.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from mdmemory.service import blocks
from mdmemory.store.api import PendingEntry

DAY_FILE = re.compile(r"sessions/(\d{4}-\d{2}-\d{2})\.md")


def day_of(rel: str) -> str | None:
    """The day of a session day file's workspace-relative path; None for any other file."""
    m = DAY_FILE.fullmatch(rel)
    return m[1] if m else None


def day_path(day: str) -> str:
    return f"sessions/{day}.md"


def entry_ids(text: str) -> set[str]:
    """The ids of the whole retained blocks in ``text``."""
    return {b.entry_id for b in blocks.blocks(text.encode("utf-8", "surrogateescape"))[0]}


def view(text: str, day: str | None, pending: Sequence[PendingEntry], forgotten: Collection[str]) -> str:
    """``text`` (a session file's) without the blocks of ``forgotten`` ids and, for a day file, without a torn
    last block (a crash mid-append: the entry is pending still), then with the blocks of ``pending`` entries of
    ``day`` it does not hold, in order. ``day`` None (not a day file): only the removals. Blocks are found in
    the bytes, as ``SessionLog`` finds them (mdmemory.service.blocks)."""
    data = text.encode("utf-8", "surrogateescape")
    found, torn = blocks.blocks(data)
    if torn is not None and day is not None:
        data = data[:torn]  # as SessionLog cuts it when it next loads the folder
    gone = {b.entry_id for b in found} & set(forgotten)
    if gone:
        data, _ = blocks.remove(data, gone)
    have = {b.entry_id for b in found} - gone
    for entry in pending:
        if day is None or entry.day != day or entry.entry_id in have or entry.entry_id in forgotten:
            continue
        data = blocks.appended(data, day, entry.block)
        have.add(entry.entry_id)
    return data.decode("utf-8", "surrogateescape")
