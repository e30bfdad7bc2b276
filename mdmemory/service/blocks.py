"""Retained-turn blocks in ``sessions/YYYY-MM-DD.md``: render, find, repair. Pure text in, text out.

A block is readable, greppable and editable by hand::

    ## 14:03:07 · gpt-4o · hist1_3f2a...

    **User:** what port does the backup job use?

    **Assistant:** It listens on 8443.

    _Tool calls: read_file, search_web_

    <!-- /hist1_3f2a... -->

The closing comment is how a torn tail is told from a whole block: a block is written with one ``write``
then ``fsync``, so after a crash only the last block of a file can be incomplete, and ``repair`` cuts it.
Lines of a message that would read as a heading or a comment are escaped (``\\#``, ``\\<``), so no text
can forge a block boundary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mdmemory.service.contract import Turn

HEADING = re.compile(r"^## (\d\d:\d\d:\d\d) · (.*) · ([A-Za-z0-9._:-]{1,128})$", re.MULTILINE)
_CLOSE = "<!-- /{id} -->"
_FORGE = re.compile(r"^(\s*)([#<])", re.MULTILINE)
MAX_PART_CHARS = 16_000  # one message's text in a block (longer text is cut with a note)


@dataclass(frozen=True)
class Block:
    entry_id: str
    start: int  # character offsets of the block in its file's text, heading to closing line (inclusive)
    end: int


def _escape(text: str) -> str:
    text = text.strip()
    if len(text) > MAX_PART_CHARS:
        text = text[:MAX_PART_CHARS] + " …(cut)"
    return _FORGE.sub(lambda m: m.group(1) + "\\" + m.group(2), text)


def file_header(day: str) -> str:
    return f"# Sessions {day}\n\n"


def closing(entry_id: str) -> str:
    """The line that ends ``entry_id``'s block: text that is in a file (and an index) holding the block."""
    return _CLOSE.format(id=entry_id)


def joiner(text: str) -> str:
    """What goes between the end of a session file's ``text`` (its last two characters suffice) and a block
    appended to it: the file's heading for an empty file, else what makes one blank line between blocks."""
    if not text:
        return ""
    return "" if text.endswith("\n\n") else "\n" if text.endswith("\n") else "\n\n"


def appended(text: str, day: str, block: str) -> str:
    """``text`` of ``sessions/<day>.md`` with ``block`` appended as a retain appends it to the file."""
    return (text + joiner(text) if text else file_header(day)) + block


def render(entry_id: str, time_of_day: str, model: str, turn: Turn) -> str:
    """One block, ending with a newline; ``turn`` must already be redacted."""
    model = re.sub(r"[^\w.:/@+-]", "_", model or "unknown-model")[:80]
    lines = [f"## {time_of_day} · {model} · {entry_id}", ""]
    if turn.user:
        lines += [f"**User:** {_escape(turn.user)}", ""]
    if turn.assistant:
        lines += [f"**Assistant:** {_escape(turn.assistant)}", ""]
    if turn.tools:
        lines += ["_Tool calls: " + _escape(", ".join(turn.tools)) + "_", ""]
    lines += [_CLOSE.format(id=entry_id), ""]
    return "\n".join(lines) + "\n"


def blocks(text: str) -> tuple[list[Block], int | None]:
    """Whole blocks in ``text`` and, when the text ends in an unclosed block, where that torn tail starts."""
    found: list[Block] = []
    heads = list(HEADING.finditer(text))
    for i, m in enumerate(heads):
        limit = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        close = _CLOSE.format(id=m.group(3))
        at = text.find(close, m.end(), limit)
        if at < 0:
            if i + 1 == len(heads):
                return found, m.start()
            continue  # a hand-edited block without its closing line: kept as text, not a retained block
        end = at + len(close)
        if text[end : end + 2] == "\n\n":
            end += 2
        elif text[end : end + 1] == "\n":
            end += 1
        found.append(Block(m.group(3), m.start(), end))
    return found, None


def remove(text: str, ids: set[str]) -> tuple[str, list[str]]:
    """``text`` without the blocks of ``ids``; the ids removed, in file order."""
    found, _ = blocks(text)
    gone = [b for b in found if b.entry_id in ids]
    for b in reversed(gone):
        text = text[: b.start] + text[b.end :]
    return text, [b.entry_id for b in gone]
