"""Where the long runs of token characters are, found fast: the text is mapped to a byte mask (``x`` for a
character of the class, a space for any other, ``n`` for a line break where it matters) and the mask searched
for literals (``xxxx...``), which ``bytes.find`` does at memory speed. A regular expression tried at every
position costs ~20-30 ns per character in ``re``; most text holds no run long enough to be a secret, and then
the rules that need one do not run at all.
"""

from __future__ import annotations

import functools
import re
import string

Run = tuple[int, int]


def _table(chars: str, lines: bool = False) -> bytes:
    """``x`` for ``chars``, a space for any other byte; with ``lines``, ``n`` for a line feed, ``r`` for a
    carriage return and ``s`` for a space, tab or ``>`` (indentation and quoting, where a line break matters)."""
    keep = chars.encode("ascii")
    marks = {10: ord("n"), 13: ord("r"), 32: ord("s"), 9: ord("s"), 62: ord("s")} if lines else {10: ord("n")}
    return bytes(ord("x") if c in keep else marks.get(c, 32) for c in range(256))


TOKEN = _table(string.ascii_letters + string.digits + "_.=+/-")
"""Prefixed tokens, JWTs, base64: a token secret is a run of 20 or more of these."""
BASE64 = _table(string.ascii_letters + string.digits + "+/_-")
KEY_LINE = _table(string.ascii_letters + string.digits + "+/")
WRAP = _table(string.ascii_letters + string.digits + "_.=+/-", lines=True)


def mask(text: str, table: bytes) -> bytes:
    """``text`` as one byte per character (non-ASCII ones count as none of the class)."""
    return text.encode("ascii", "replace").translate(table)


@functools.lru_cache(maxsize=16)
def _run_of(length: int) -> re.Pattern[bytes]:
    return re.compile(b"x" * length + b"+")  # a literal start: ``re`` finds it at memory speed


def long_runs(masked: bytes, length: int, limit: int = 1 << 30) -> list[Run]:
    """``(start, end)`` of each run of ``x`` at least ``length`` long in ``masked``; at most ``limit`` runs."""
    runs: list[Run] = []
    for m in _run_of(length).finditer(masked):
        runs.append(m.span())
        if len(runs) >= limit:
            break
    return runs


def windows(runs: list[Run], before: int, size: int) -> list[Run]:
    """The runs widened by ``before`` characters on the left (a key's prefix glued by ``:`` or ``=``) and merged
    where they overlap; ``size`` is the text's length."""
    out: list[Run] = []
    for start, end in runs:
        start = max(0, start - before)
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, min(size, end)))
    return out
