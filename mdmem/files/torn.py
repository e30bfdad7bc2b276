"""What a crash repair cuts from a session file, kept beside it: ``sessions/.<day>.md.torn``.

A repair cuts the torn tail of a day file (mdmem.files.sessionblocks: only bytes after its last whole block). A
torn block cannot be told from text a person wrote after it before the restart (a note typed at the end of
the file), so the cut bytes are appended to ``.<day>.md.torn`` first, under a line saying when: nothing is
thrown away. The file is not memory (not ``.md``: never indexed, never searched, never recalled).

A forget erases there too: from the heading of each forgotten entry to the end of its cut section, so an
erased turn's text stays nowhere in the folder (a torn block has no closing line, so its end is unknown).
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime

from mdmem.util.filewrite import Folder, write_all

SUFFIX = ".torn"
_SECTION = re.compile(rb"^--- cut from the end of [^\n]* ---$", re.M)
_HEADING = rb"^## \d\d:\d\d:\d\d \xc2\xb7 [^\n]* \xc2\xb7 "


def name_for(day_file: str) -> str:
    return f".{day_file}{SUFFIX}"


def keep(folder: Folder, day_file: str, cut: bytes) -> None:
    """Append ``cut`` (the bytes a repair is about to cut from ``day_file``) to its ``.torn`` file, durably."""
    fd = folder.open(name_for(day_file), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        write_all(fd, f"\n--- cut from the end of {day_file} at {stamp} ---\n".encode() + cut)
        os.fsync(fd)
    finally:
        os.close(fd)


def scrubbed(data: bytes, ids: set[str]) -> bytes:
    """``data`` (a ``.torn`` file) without, in each section, what follows a heading of one of ``ids``."""
    headings = re.compile(_HEADING + rb"(?:" + b"|".join(re.escape(i.encode()) for i in sorted(ids)) + rb")\r?$", re.M)
    out = bytearray()
    pos = 0
    for m in headings.finditer(data):
        if m.start() < pos:
            continue
        section = _SECTION.search(data, m.end())
        out += data[pos : m.start()]
        pos = section.start() if section is not None else len(data)
    return bytes(out + data[pos:])


def scrub(folder: Folder, ids: set[str]) -> None:
    """Erase ``ids``' text from every ``.torn`` file of the folder (atomically, as forget rewrites a day file)."""
    with os.scandir(folder.fd) as entries:
        names = [e.name for e in entries if e.name.endswith(SUFFIX) and e.is_file(follow_symlinks=False)]
    for name in names:
        data = folder.read(name) or b""
        if any(i.encode() in data for i in ids):
            new = scrubbed(data, ids)
            if new != data:
                folder.replace(name, new)
