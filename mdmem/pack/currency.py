"""Which candidates a pack keeps when some of them are history: the current line first, one older line only when
the question asks about the past. Pure: the candidates' spans, the supersessions, the query in; kept indices out.

A candidate is *history* when every fact line it holds (not blank, not a heading) is superseded, by a mark
(mdmem.files.supersession) or by its group (mdmem.search.grouping), and the lines that superseded them are
held by other candidates. For a question about the present, history is left out (the current line is there,
and its own label cites what it replaced). For a question about the past ("before", "previously", "used to",
"when did … change"...), the first history candidate (the best-ranked) is kept, labelled, and no other.
A candidate holding a superseded line among current ones is always kept: its labels say which line is old.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mdmem.files.supersession import Supersession

__all__ = ["asks_history", "prefer_current"]

_HISTORY = re.compile(
    r"\b(?:before|previous(?:ly)?|used to|former(?:ly)?|earlier|originally|prior|history|no longer|any ?more|"
    r"(?:when|how) did .{0,60}\b(?:change|move|switch|start|become|leave|join)\w*|changed?|until|old)\b",
    re.IGNORECASE,
)

Span = tuple[str, int, int, str]  # path, first line, last line, text


def asks_history(query: str) -> bool:
    """Whether ``query`` asks about a past value or a change."""
    return bool(_HISTORY.search(query))


def prefer_current(spans: Sequence[Span], supersessions: Sequence[Supersession], query: str) -> list[int]:
    """The indices of ``spans`` (candidates, best first) a pack considers; see the module docstring."""
    newer = {(s.old_path, s.old_line): (s.new_path, s.new_line) for s in supersessions}
    held: dict[tuple[str, int], int] = {}
    for i, (path, start, end, _) in enumerate(spans):
        for n in range(start, end + 1):
            held.setdefault((path, n), i)
    keep_one = asks_history(query)
    kept: list[int] = []
    for i, (path, start, end, text) in enumerate(spans):
        parts = text.split("\n")
        facts = (
            [(path, n) for n, t in enumerate(parts, start=start) if t.strip() and not t.lstrip().startswith("#")]
            if len(parts) == end - start + 1
            else [(path, start)]
        )
        history = bool(facts) and all(f in newer and newer[f][0] and held.get(newer[f], i) != i for f in facts)
        if history:
            if not keep_one:
                continue
            keep_one = False
        kept.append(i)
    return kept
