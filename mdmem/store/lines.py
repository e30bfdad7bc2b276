"""A file's lines as the index holds them, rebuilt from its chunks. Pure: chunks in, lines out.

A chunk's text is exactly its lines (``"\\n".join(lines[start_line - 1 : end_line])``), or, for a line over the
chunk budget, one of consecutive slices of it (``start_line == end_line``, several chunks) whose texts join to
the line (mdmem.index.chunker). Overlapping chunks agree on the lines they share. Lines no chunk holds (blank
lines after the last chunk, a run the chunker dropped as whitespace) come back empty.

Used where the files are not on this machine: a ``mdmem serve`` replica packs from these lines, and
rewrites a session file's rows from them (mdmem.index.entries).
"""

from __future__ import annotations

from collections.abc import Sequence

from mdmem.store.rows import ChunkRow

# The size recorded for a file indexed as other text than the file's (a session file with entries the database
# holds for it, mdmem.index.entries): never the size of a file on disk, so its host reads it again.
VIRTUAL_SIZE = -1


def file_lines(chunks: Sequence[ChunkRow]) -> list[str]:
    """The lines of the file the chunks came from (1-based line n is item n - 1)."""
    lines: dict[int, str] = {}
    singles: dict[int, list[ChunkRow]] = {}
    for c in chunks:
        if c.start_line == c.end_line:
            singles.setdefault(c.start_line, []).append(c)
            continue
        parts = c.text.split("\n")
        if len(parts) != c.end_line - c.start_line + 1:
            continue  # not a chunk of whole lines: nothing to trust here
        for n, part in enumerate(parts, start=c.start_line):
            lines.setdefault(n, part)
    for n, found in singles.items():
        if n in lines:
            continue
        if len(found) == 1:
            lines[n] = found[0].text
        else:  # slices of one long line, in file order
            lines[n] = "".join(c.text for c in sorted(found, key=lambda c: c.id or 0))
    last = max(lines, default=0)
    return [lines.get(n, "") for n in range(1, last + 1)]


def file_text(chunks: Sequence[ChunkRow]) -> str:
    """The file's text (its lines joined, a final newline when it has any)."""
    lines = file_lines(chunks)
    return "\n".join(lines) + "\n" if lines else ""
