"""The rows both stores exchange with the indexer and search: a file, a chunk, a chunk's vectors."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class FileRow:
    path: str
    source: str
    hash: str
    mtime: float
    size: int
    encoding_errors: int = 0
    chunks: int = 0
    indexed_at: float = 0.0


ChunkVectors = tuple[Sequence[str], "np.ndarray"]
"""One chunk's vectors: the hashes of the embedded inputs and a (n, dims) array, row per input."""


@dataclass(frozen=True)
class ChunkRow:
    path: str
    source: str
    start_line: int
    end_line: int
    hash: str
    embed_hash: str
    heading: str
    text: str
    id: int | None = None


USE_KINDS = ("search", "pack", "get")
"""What a use is: a search hit shown, a pack (or recall) item included, a memory_get read."""


@dataclass(frozen=True)
class UsageRow:
    """How often one kind of use (``USE_KINDS``) reached a chunk (``chunk``: its hash) or a whole file (``chunk``
    empty: a memory_get), and when last (a UNIX time). Kept in the index, never in the Markdown."""

    path: str
    chunk: str
    kind: str
    uses: int
    last_used_at: float


def uses_since(live: Sequence[UsageRow], copied: Sequence[UsageRow]) -> list[UsageRow]:
    """The uses ``live`` has beyond ``copied`` (the counts a rebuild copied when it began): what was written to
    the live index meanwhile, for the rebuilt one before it is swapped in (counts only ever grow)."""
    before = {(r.path, r.chunk, r.kind): r.uses for r in copied}
    out = []
    for r in live:
        more = r.uses - before.get((r.path, r.chunk, r.kind), 0)
        if more > 0:
            out.append(UsageRow(r.path, r.chunk, r.kind, more, r.last_used_at))
    return out
