"""Which lines of a result are no longer current, and which lines it replaces: the ``supersededBy`` /
``supersedes`` labels of results, packs and recall. Pure: a chunk and the index's supersessions in, labels out.

A result is a chunk of several lines; a supersession is about one line. So the labels name the lines:
``supersededBy: [{line, by, date}]`` for each line of the chunk a later line replaced (``by`` is that line's
``path#Ln``, or None when the marker says only that it is outdated), ``supersedes: [{line, ref}]`` for each line
of the chunk that replaces an earlier one; and ``superseded: true`` when every fact line of the chunk (not a
heading, not blank) is superseded, so the whole result is history.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mdmem.files.supersession import Supersession
from mdmem.store import ChunkRow

__all__ = ["labels", "span_labels", "superseded_lines"]


def _cite(path: str, line: int) -> str:
    from mdmem.util.redaction import redact_path  # here: importing the search answers needs no rules yet

    return f"{redact_path(path)}#L{line}"


def superseded_lines(path: str, start: int, end: int, supersessions: Sequence[Supersession]) -> dict[int, Supersession]:
    """The lines of ``path`` from ``start`` to ``end`` that are superseded, each with the supersession that says
    so (one that names the new line wins over one that does not)."""
    out: dict[int, Supersession] = {}
    for s in supersessions:
        if s.old_path == path and start <= s.old_line <= end:
            known = out.get(s.old_line)
            if known is None or (not known.new_path and s.new_path):
                out[s.old_line] = s
    return out


def labels(chunk: ChunkRow, supersessions: Sequence[Supersession]) -> dict[str, Any]:
    """``{supersededBy, supersedes, superseded}`` of ``chunk`` (each only when there is something to say)."""
    return span_labels(chunk.path, chunk.start_line, chunk.end_line, chunk.text, supersessions)


def span_labels(path: str, start: int, end: int, text: str, supersessions: Sequence[Supersession]) -> dict[str, Any]:
    """The labels of lines ``start`` to ``end`` of ``path``, whose text is ``text`` (a pack item's)."""
    old = superseded_lines(path, start, end, supersessions)
    newer = sorted(
        {
            (s.new_line, s.old_path, s.old_line)
            for s in supersessions
            if s.new_path == path and start <= s.new_line <= end
        }
    )
    out: dict[str, Any] = {}
    if old:
        out["supersededBy"] = [
            {"line": n, "by": _cite(s.new_path, s.new_line) if s.new_path else None, "date": s.date or None}
            | ({"implicit": True} if not s.path else {})
            for n, s in sorted(old.items())
        ]
        if all(n in old for n in _fact_lines(start, end, text)):
            out["superseded"] = True
    if newer:
        out["supersedes"] = [{"line": n, "ref": _cite(p, line)} for n, p, line in newer]
    return out


def _fact_lines(start: int, end: int, text: str) -> list[int]:
    """The lines from ``start`` to ``end`` that hold something (not blank, not a heading)."""
    parts = text.split("\n")
    if len(parts) != end - start + 1:
        return [start]  # a slice of one long line
    return [n for n, line in enumerate(parts, start=start) if line.strip() and not line.lstrip().startswith("#")]
