"""Reading memory files safely: only regular files with one link, never through a symlink, never a FIFO,
a device or a socket (``open_regular``: ``lstat`` first, then ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat`` on
the open fd), decoded as UTF-8 with invalid sequences counted, whole or capped at whole lines.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mdmemory.errors import SpecialFileError


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


def open_regular(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o644, *, shown: str | None = None) -> int:
    """Open a memory file that is a regular file with one link; return the fd (blocking mode).

    Never follows a final symlink and never opens a FIFO, a device or a socket: an ``lstat`` refuses them
    before the open, and ``O_NOFOLLOW | O_NONBLOCK`` then an ``fstat`` of the open fd close the race of a
    file swapped in between (a FIFO opened non-blocking does not wait for a writer). With ``O_CREAT`` in
    ``flags`` a missing file is created. Raises ``SpecialFileError`` (an ``OSError``) for a special file or a
    hard link, ``OSError`` otherwise.
    """
    name = shown or os.fspath(path)
    try:
        kind = special_kind(os.lstat(path))
    except FileNotFoundError:
        if not flags & os.O_CREAT:
            raise
        kind = None
    if kind is not None:
        raise _special(name, kind)
    extra = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags | extra, mode)
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
        f"{name} is {kind}, not a regular file{why}: mdmemory never opens it. Fix: replace it with a regular file."
    )


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
