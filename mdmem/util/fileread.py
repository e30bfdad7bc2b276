"""Reading memory files safely: only regular files with one link, never through a symlink, never a FIFO,
a device or a socket (``open_regular``: ``lstat`` first, then ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat`` on
the open fd), decoded as UTF-8 with invalid sequences counted, whole or capped at whole lines.

What a line is, for every reader (the chunker's line ranges, ``memory_get``, the pack, the session files'
blocks): ``split_lines``. Only ``\n`` ends a line; a ``\r`` just before it belongs to the line ending (CRLF
files read like LF files), and any other ``\r`` (a lone CR), VT, FF, NEL, U+2028 or U+2029 is a character
inside its line, as ``wc -l``, ``grep -n`` and ``sed -n`` count them.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from mdmem.util.errors import SpecialFileError


def special_kind(st: os.stat_result) -> str | None:
    """Why a file with this ``lstat`` may not be read as memory, or None for a regular file with one link."""
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return f"hard-linked ({st.st_nlink} links)" if st.st_nlink > 1 else None
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symlink"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def open_regular(
    path: Path | str,
    flags: int = os.O_RDONLY,
    mode: int = 0o644,
    *,
    shown: str | None = None,
    dir_fd: int | None = None,
) -> int:
    """Open a memory file that is a regular file with one link; return the fd (blocking mode).

    Never follows a final symlink and never opens a FIFO, a device or a socket: an ``lstat`` refuses them
    before the open, and ``O_NOFOLLOW | O_NONBLOCK`` then an ``fstat`` of the open fd close the race of a
    file swapped in between (a FIFO opened non-blocking does not wait for a writer). With ``O_CREAT`` in
    ``flags`` a missing file is created. Raises ``SpecialFileError`` (an ``OSError``) for a special file or a
    hard link, ``OSError`` otherwise. ``dir_fd``: ``path`` is relative to that folder (``openat``).
    """
    name = shown or os.fspath(path)
    try:
        kind = special_kind(os.stat(path, dir_fd=dir_fd, follow_symlinks=False))
    except FileNotFoundError:
        if not flags & os.O_CREAT:
            raise
        kind = None
    if kind == "a symlink":
        kind = f"a symlink to {os.readlink(path, dir_fd=dir_fd)}"
    if kind is not None:
        raise _special(name, kind)
    extra = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags | extra, mode, dir_fd=dir_fd)
    try:
        kind = special_kind(os.fstat(fd))
        if kind is not None:
            raise _special(name, kind)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _special(name: str, kind: str) -> SpecialFileError:
    why = " (a hard link can bring in a file from outside the workspace)" if kind.startswith("hard-linked") else ""
    return SpecialFileError(
        f"{name} is {kind}, not a regular file{why}: mdmem never opens it. Fix: replace it with a regular file."
    )


# Everything that ends a line for some reader (str.splitlines, CommonMark, Unicode): what writers normalise.
LINE_BREAKS = re.compile("\r\n|[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def normalise_line_endings(text: str) -> str:
    """``text`` with every line ending any reader might see (CRLF, lone CR, VT, FF, FS/GS/RS, NEL, U+2028,
    U+2029) made ``\\n``: text a writer puts in a memory file then has the same lines for every reader."""
    return LINE_BREAKS.sub("\n", text)


def split_lines(text: str) -> list[str]:
    """The lines of a memory file's ``text`` (1-based line n is item n - 1), each without its line ending.

    ``"\\n".join(split_lines(t))`` is ``t`` with its CRLF line endings made LF."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def _decode(raw: bytes) -> tuple[str, int]:
    text = raw.decode("utf-8", errors="replace")
    replaced = 0
    if "\ufffd" in text:
        replaced = text.count("\ufffd") - raw.decode("utf-8", errors="ignore").count("\ufffd")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text, replaced


def read_text(path: Path | str) -> tuple[str, int, bytes]:
    """Read a memory file (a regular file with one link, see ``open_regular``).

    Returns (text, replaced, raw) where ``replaced`` counts invalid UTF-8 sequences that became U+FFFD.
    """
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read()
    text, replaced = _decode(raw)
    return text, replaced, raw


def read_capped(path: Path | str, max_bytes: int, *, shown: str | None = None) -> tuple[str, int | None]:
    """Read at most ``max_bytes`` of a memory file: (text, total size when it was cut, else None).

    A cut file keeps its whole lines (up to the last newline within the cap, when there is one).
    """
    fd = open_regular(path, shown=shown)
    with os.fdopen(fd, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        raw = fh.read(max_bytes + 1)
    if len(raw) <= max_bytes:
        return _decode(raw)[0], None
    raw = raw[:max_bytes]
    cut = raw.rfind(b"\n")
    text = _decode(raw[: cut + 1])[0] if cut >= 0 else _decode(raw)[0].rstrip("\ufffd")  # no half character
    return text, max(size, max_bytes + 1)
