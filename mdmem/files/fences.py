"""Fenced code blocks in Markdown: the lines outside them (what a file says, as against its examples)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

__all__ = ["outside_fences"]

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


def outside_fences(lines: Sequence[str], start: int = 0) -> Iterator[tuple[int, str]]:
    """``(index, line)`` of each line from ``start`` on that is neither inside a fenced code block nor one of its
    fences (a fence closes on the same character, at least as long, as CommonMark has it)."""
    fence: str | None = None
    for n in range(start, len(lines)):
        line = lines[n]
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        yield n, line
