"""Snippets, pure: at most ``SNIPPET_CHARS`` of a chunk centred on the densest cluster of query terms."""

from __future__ import annotations

import re
from collections.abc import Sequence

from mdmem.search.query import phrase_pattern

SNIPPET_CHARS = 700


def make_snippet(text: str, terms: Sequence[str], heading: str = "", limit: int = SNIPPET_CHARS) -> str:
    """At most ``limit`` characters of ``text`` centred on the densest cluster of query terms.

    The heading path is prefixed in brackets when the window does not start at that heading.
    """
    prefix = f"[{heading}]\n" if heading else ""
    budget = max(limit - len(prefix), 80)
    if len(text) <= budget:
        body = text
    else:
        body = _window(text, terms, budget)
    if prefix and body.lstrip("# ").startswith(heading.split(" > ")[-1]):
        prefix = ""
    return (prefix + body)[:limit]


def _window(text: str, terms: Sequence[str], budget: int) -> str:
    positions: list[tuple[int, int, str]] = []
    for term in terms:
        pattern = phrase_pattern(term.lower()) if " " in term else re.escape(term)  # an identifier's phrase
        for m in re.finditer(pattern, text, flags=re.IGNORECASE):
            positions.append((m.start(), m.end(), term.lower()))
            if len(positions) > 2000:
                break
    positions.sort()
    inner = budget - 2  # room for the two ellipses
    lo = hi = 0
    if positions:
        best_i, best_j, best_n = 0, 0, -1
        j = 0
        for i in range(len(positions)):
            while j + 1 < len(positions) and positions[j + 1][1] - positions[i][0] < inner * 0.8:
                j += 1
            distinct = len({t for _, _, t in positions[i : j + 1]})
            if distinct > best_n:
                best_i, best_j, best_n = i, j, distinct
        lo, hi = positions[best_i][0], max(p[1] for p in positions[best_i : best_j + 1])
    start = max(0, min((lo + hi) // 2 - inner // 2, len(text) - inner))
    if start:
        line_start = text.rfind("\n", 0, start) + 1
        space = text.find(" ", start, min(lo, start + 30))
        if start - line_start < 80 and line_start + inner >= hi:
            start = line_start
        elif space != -1:
            start = space + 1
    end = min(len(text), start + inner)
    if end < len(text) and (space := text.rfind(" ", max(hi, start + inner // 2), end)) > 0:
        end = space
    body = text[start:end]
    return ("…" if start > 0 else "") + body + ("…" if end < len(text) else "")
