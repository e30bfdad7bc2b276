"""Retained-turn blocks in ``sessions/YYYY-MM-DD.md``: render, find, read back, repair. Pure, on bytes.

A block is readable, greppable and editable by hand::

    ## 14:03:07 · gpt-4o · hist1_3f2a...

    **User:** what port does the backup job use?

    **Assistant:** It listens on 8443.

    _Tool calls: read_file, search_web_

    <!-- /hist1_3f2a... -->

**Lines.** Only ``\\n`` ends a line (mdmem.util.fileread.split_lines: the definition every reader shares, the
index's line numbers and ``memory_get`` included); a ``\\r`` just before it is part of the line ending, and a
lone ``\\r``, U+2028 or NEL is a character inside its line. Files are parsed as bytes, so every offset is a
byte offset into the file.

**Safe by construction.** Message text is normalised before it is written: every line ending another reader
might see (``\\r\\n``, lone ``\\r``, VT, FF, FS/GS/RS, NEL, U+2028, U+2029) becomes ``\\n``, NUL and lone
surrogates become U+FFFD. Then whatever could read as structure gets a backslash (which Markdown does not
show): ``#``, ``<`` and the part labels (``**User:**``, ``**Assistant:**``, ``_Tool calls:``) at the start of a
line, a heading's ``## hh:mm:ss`` and ``<!--`` anywhere in a line. So no message can start or end a block,
whatever a reader takes for a line, and ``read_block`` gives the text back exactly (``clean`` of it).

**Torn tails.** A block is appended with one ``write``, then ``fsync``; the closing comment is how a whole
block is told from a torn one. After a crash only what follows the last whole block can be torn: an
unclosed last block shaped like ours, a partial heading line, a partial file heading. ``torn`` is where that
starts, never before the end of the last whole block, and text a person added after it is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mdmem.files.turns import Turn
from mdmem.util.fileread import normalise_line_endings

_ID = rb"[A-Za-z0-9._:-]{1,128}"
# A heading or a closing line, the whole line (a "\r" before its "\n" belongs to the line ending).
_STRUCTURE = re.compile(
    rb"^(?:## (\d\d:\d\d:\d\d) \xc2\xb7 ([^\n]*) \xc2\xb7 (" + _ID + rb")|<!-- /(" + _ID + rb") -->)\r?$", re.M
)
_CLOSE = "<!-- /{id} -->"
LABELS = ("**User:** ", "**Assistant:** ", "_Tool calls: ")

_UNSAFE = re.compile("[\x00\ud800-\udfff]")
# Where a backslash goes (one more than the run of backslashes already there): structure at a line start,
# a heading's time and an HTML comment's "<!--" anywhere.
_AT_START = re.compile(r"^([ \t]*)(\\*)(?=#|<|\*\*(?:User|Assistant):\*\*|_Tool calls:)", re.M)
_HEADING_TIME = re.compile(r"(?<!#)(?=#+[ \t]*\d\d:\d\d:\d\d)")
_COMMENT = re.compile(r"<(\\*)(?=!--)")
_UN_AT_START = re.compile(r"^([ \t]*)\\(?=\\*(?:#|<|\*\*(?:User|Assistant):\*\*|_Tool calls:))", re.M)
_UN_HEADING_TIME = re.compile(r"\\(?=#+[ \t]*\d\d:\d\d:\d\d)")
_UN_COMMENT = re.compile(r"<\\(?=\\*!--)")

_HEADER = b"# Sessions 0000-00-00\n\n"  # "0" stands for any digit
_FILE_HEADER = re.compile(r"# Sessions \d{4}-\d{2}-\d{2}\r?")
_HEADING_START = b"## 00:00:00 \xc2\xb7 "


@dataclass(frozen=True)
class Block:
    entry_id: str
    start: int  # byte offsets of the block in its file, heading to closing line and one blank line after it
    end: int


@dataclass(frozen=True)
class Rendered:
    """What a block holds (``read_block``)."""

    entry_id: str
    time_of_day: str
    model: str
    turn: Turn


def clean(text: str) -> str:
    """A message's text as a block keeps it: line endings as ``\\n``, NUL and lone surrogates as U+FFFD, stripped
    (whole: how much of a long message is kept is mdmem.files.retained's ``stored_text``)."""
    return _UNSAFE.sub("\ufffd", normalise_line_endings(text)).strip()


def escape(text: str) -> str:
    """``text`` (``clean``) with a backslash before whatever could read as a block's structure."""
    text = _COMMENT.sub(lambda m: "<\\" + m[1], text)
    text = _HEADING_TIME.sub(r"\\", text)
    return _AT_START.sub(lambda m: m[1] + "\\" + m[2], text)


def unescape(text: str) -> str:
    """The inverse of ``escape``: ``unescape(escape(t)) == t``."""
    text = _UN_AT_START.sub(lambda m: m[1], text)
    text = _UN_HEADING_TIME.sub("", text)
    return _UN_COMMENT.sub("<", text)


def file_header(day: str) -> str:
    return f"# Sessions {day}\n\n"


def structure_of(line: str) -> str | None:
    """What one line of a session file (without its line ending) is: ``"heading"`` or ``"closing"`` of a
    block, ``"header"`` (the file's ``# Sessions YYYY-MM-DD``), else None (text)."""
    if not line.startswith(("## ", "<!-- /", "# Sessions ")):
        return None
    if _FILE_HEADER.fullmatch(line):
        return "header"
    m = _STRUCTURE.fullmatch(line.encode("utf-8", "surrogateescape"))
    if m is None:
        return None
    return "heading" if m[3] is not None else "closing"


def closing(entry_id: str) -> str:
    """The line that ends ``entry_id``'s block: text that is in a file (and an index) holding the block."""
    return _CLOSE.format(id=entry_id)


def joiner(tail: bytes) -> bytes:
    """What goes between the end of a session file (its last three bytes suffice) and a block appended to
    it: nothing for an empty file or one ending in a blank line, else what makes one blank line."""
    if not tail or tail.endswith((b"\n\n", b"\n\r\n")):
        return b""
    return b"\n" if tail.endswith(b"\n") else b"\n\n"


def appended(data: bytes, day: str, block: str) -> bytes:
    """``data`` of ``sessions/<day>.md`` with ``block`` appended as a retain appends it to the file."""
    return (data + joiner(data[-3:]) if data else file_header(day).encode()) + block.encode("utf-8")


def render(entry_id: str, time_of_day: str, model: str, turn: Turn) -> str:
    """One block, ending with a newline; ``turn`` must already be redacted."""
    model = re.sub(r"[^\w.:/@+\[\]-]", "_", model or "unknown-model")[:80] or "unknown-model"  # [REDACTED:kind]
    lines = [f"## {time_of_day} · {model} · {entry_id}", ""]
    for label, text in zip(LABELS, (turn.user, turn.assistant, ", ".join(turn.tools)), strict=True):
        body = escape(clean(text))
        if body:
            lines += [label + body + ("_" if label == LABELS[2] else ""), ""]
    lines += [_CLOSE.format(id=entry_id), ""]
    return "\n".join(lines) + "\n"


def blocks(data: bytes) -> tuple[list[Block], int | None]:
    """The whole blocks in ``data`` (a session file's bytes), and where its torn tail starts (None: none).

    A heading whose block has no closing line before the next heading is text (a hand edit), not a block.
    """
    found: list[Block] = []
    open_: tuple[str, int, int] | None = None  # (id, start, end of the heading line) of the unclosed heading
    for m in _STRUCTURE.finditer(data):
        if m[3] is not None:
            open_ = (m[3].decode(), m.start(), m.end())
        elif open_ is not None and m[4].decode() == open_[0]:
            found.append(Block(open_[0], open_[1], _after_blank_line(data, m.end())))
            open_ = None
    done = found[-1].end if found else 0
    if open_ is not None and open_[1] >= done and _could_be_torn(data[open_[1] :], open_[0]):
        return found, open_[1]
    last = data.rfind(b"\n") + 1
    if last >= done and last < len(data) and data[last:][:1] == b"#" and _prefix_of(data[last:], _HEADING_START):
        return found, last  # a heading cut before its line ended
    if not found and 0 < len(data) < len(_HEADER) and _prefix_of(data, _HEADER):
        return found, 0  # the file's own heading, cut
    return found, None


def remove(data: bytes, ids: set[str]) -> tuple[bytes, list[str]]:
    """``data`` without the blocks of ``ids``; the ids removed, in file order."""
    found, _ = blocks(data)
    gone = [b for b in found if b.entry_id in ids]
    for b in reversed(gone):
        data = data[: b.start] + data[b.end :]
    return data, [b.entry_id for b in gone]


def marks(data: bytes, ids: set[str]) -> list[tuple[int, str]]:
    """``(line number, entry id)`` of every heading or closing line of ``ids`` in ``data``, whole block or not."""
    out = []
    for m in _STRUCTURE.finditer(data):
        eid = (m[3] or m[4]).decode()
        if eid in ids:
            out.append((data.count(b"\n", 0, m.start()) + 1, eid))
    return out


def read_block(data: bytes, block: Block) -> Rendered:
    """What ``block`` of ``data`` holds: ``read_block`` of a ``render``-ed block gives its parts back, each as
    ``clean`` of the text rendered, tools as one text (``", ".join``)."""
    lines = data[block.start : block.end].decode("utf-8", errors="replace").split("\n")
    head = _STRUCTURE.match(lines[0].encode())
    assert head is not None and head[3] is not None, "not a block's heading"
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines[2:]:
        if line.rstrip("\r") == closing(block.entry_id):
            break
        label = next((label for label in LABELS if line.startswith(label)), None)
        if label is not None:
            current = parts.setdefault(label, [])
            line = line[len(label) :]
        if current is not None:
            current.append(line)

    def text(label: str) -> str:
        got = parts.get(label, [])
        if got and got[-1] == "":
            got = got[:-1]  # the blank line after each part
        body = "\n".join(got)
        return unescape(body[:-1] if label == LABELS[2] else body)

    tools = text(LABELS[2])
    turn = Turn(text(LABELS[0]), text(LABELS[1]), (tools,) if tools else ())
    return Rendered(head[3].decode(), head[1].decode(), head[2].decode(errors="replace"), turn)


def _after_blank_line(data: bytes, end: int) -> int:
    """The end of a closing line at ``end`` (its line ending), with one blank line after it if there is one."""
    for _ in range(2):
        if data.startswith(b"\n", end):
            end += 1
        elif data.startswith(b"\r\n", end):
            end += 2
        else:
            break
    return end


def _could_be_torn(tail: bytes, entry_id: str) -> bool:
    """Whether ``tail`` (from an unclosed heading to the end of the file) is a prefix of a block as ``render``
    writes it: the heading, a blank line, then a part label or the closing line. Anything else is a person's."""
    lines = tail.split(b"\n", 2)
    if len(lines) < 2:
        return True
    if lines[1] != b"":
        return False
    if len(lines) < 3:
        return True
    starts = [label.encode() for label in LABELS] + [closing(entry_id).encode()]
    third = lines[2].split(b"\n", 1)
    partial = len(third) == 1  # the file ends inside this line
    return any(third[0].startswith(s) or (partial and s.startswith(third[0])) for s in starts)


def _prefix_of(data: bytes, template: bytes) -> bool:
    """Whether ``data`` and ``template`` agree on their common length, ``0`` in ``template`` standing for a digit."""
    for a, t in zip(data, template, strict=False):
        if a != t and not (t == 0x30 and 0x30 <= a <= 0x39):
            return False
    return True
