"""What the index holds of a session day file (``sessions/YYYY-MM-DD.md``) while the database has entries for
it that are not in the file yet, or tombstones not applied to it yet. Pure: text in, text out.

Replicas of ``mdmem serve`` that do not hold an agent's files keep what they retain and forget in the
database (``mdmem.store.api.EntryLog``) until the agent's host writes it into its files. Meanwhile every
writer of the index (that host's ``watch`` reading the file, a replica rebuilding the file's text from the
index) indexes this view of it: the file's blocks minus the tombstoned ones, plus the pending blocks of its day
that it does not hold, appended as a retain appends them. So an entry is in the index exactly once from its
``202`` on — pending, then in the file — and a forgotten one is gone from its ``204`` on.

What a prompt sees of a session day file (``prompt_text``): the turns as the user and the assistant wrote
them, ``**User:** … **Assistant:** …``, without the bookkeeping that lets the service find its blocks (each
block's ``## hh:mm:ss · model · <entry id>`` heading and ``<!-- /<entry id> -->`` closing line, the file's
``# Sessions`` header) and without the backslashes the format adds to message text (``blocks.escape``).
Pack items and search snippets of day files go through it; the citation still names the file's lines.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

from mdmem.files import sessionblocks as blocks
from mdmem.files.pending import PendingEntry

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
    the bytes, as ``SessionLog`` finds them (mdmem.files.sessionblocks)."""
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


def is_day_file(path: str, source: str) -> bool:
    """Whether a search hit's file is a session day file, whose text ``prompt_text`` shows."""
    return source == "sessions" and day_of(path) is not None


def inside_block(lines_from: Iterable[str], *, whole: bool) -> bool:
    """Whether the first of ``lines_from`` (the lines of a day file from some line on) is inside a retained
    block: the next structure line ahead is a block's closing line. ``whole``: ``lines_from`` runs to the
    end of the file, so text with no structure line after it is outside (a person's, after the last block);
    otherwise (a chunk's text: a piece of a long block) it is taken to be inside."""
    for line in lines_from:
        kind = blocks.structure_of(line.rstrip("\r"))
        if kind is not None:
            return kind == "closing"
    return not whole


def prompt_text(lines: Sequence[str], inside: bool) -> str:
    """``lines`` of a session day file as a prompt should see them (see the module docstring); ``inside``:
    whether the first line is inside a block (``inside_block``). Each structure line goes with the blank
    line after it; message text comes back as the block holds it (``blocks.read_block``), and text a person
    wrote between blocks as it is. Blank lines at both ends are trimmed."""
    out: list[str] = []
    skip_blank = False
    for line in lines:
        kind = blocks.structure_of(line.rstrip("\r"))
        if kind is not None:
            inside, skip_blank = kind == "heading", True
            continue
        if skip_blank and not line.strip():
            skip_blank = False
            continue
        skip_blank = False
        if inside:
            label = next((label for label in blocks.LABELS if line.startswith(label)), "")
            line = label + blocks.unescape(line[len(label) :])
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    while out and not out[0].strip():
        out.pop(0)
    return "\n".join(out)
