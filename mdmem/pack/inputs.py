"""What a pack is built from besides its candidates: how similar each window of a chunk is to the query, the
lines of the candidates' files (from disk, or from the index where it holds other text than the file), and a
token counter per provider (mdmem.pack.build takes them as arguments; mdmem.engine.packing passes them)."""

from __future__ import annotations

import functools
import os
import stat
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mdmem.files.workspace import Workspace
from mdmem.pack.build import LinesOf, Window
from mdmem.providers.base import EmbeddingProvider
from mdmem.search.hybrid import Hit
from mdmem.store import ChunkRow
from mdmem.store.api import IndexStore
from mdmem.store.lines import VIRTUAL_SIZE, file_lines
from mdmem.util.errors import WorkspaceError
from mdmem.util.fileread import read_text, split_lines
from mdmem.util.tokens import TokenCounter, estimate_tokens

if TYPE_CHECKING:
    import numpy as np


def window_similarities(
    store: IndexStore,
    hits: Sequence[Hit],
    vector: np.ndarray,
    window_tokens: int,
    count: TokenCounter,
    late: tuple[int, int] = (0, 0),
) -> dict[int, list[Window]]:
    """Each candidate chunk's windows (file line spans) with the similarity of their stored vectors;
    ``late`` is the index's late-chunking setup (``index.late.late_setup``)."""
    ids = [h.chunk.id for h in hits if h.chunk.id is not None]
    sims = store.vector_similarities(ids, vector)
    out: dict[int, list[Window]] = {}
    for h in hits:
        cid = h.chunk.id
        if cid is None or cid not in sims:
            continue
        found = sims[cid]
        out[cid] = [
            Window(first, last, found[d])
            for d, first, last in _spans(h.chunk, window_tokens, count, late)
            if d in found
        ]
    return out


_SPANS: OrderedDict[tuple[Any, ...], list[tuple[str, int, int]]] = OrderedDict()


_SPANS_MAX = 8192


_SPANS_LOCK = threading.Lock()


def _spans(
    chunk: ChunkRow, window_tokens: int, count: TokenCounter, late: tuple[int, int]
) -> list[tuple[str, int, int]]:
    """A chunk's windows as (input hash, first line, last line): rebuilding them tokenizes every line, so
    they are kept per (chunk, window size, tokenizer) for the next packs (least recently used dropped)."""
    key = (chunk.hash, chunk.heading, chunk.start_line, window_tokens, count, late)
    with _SPANS_LOCK:
        hit = _SPANS.get(key)
        if hit is not None:
            _SPANS.move_to_end(key)
            return hit
    from mdmem.index.embedding import window_inputs  # the vector path only: it imports the chunker

    spans = [(key, first, last) for key, _, first, last in window_inputs(chunk, window_tokens, count, late)[0]]
    with _SPANS_LOCK:
        _SPANS[key] = spans
        while len(_SPANS) > _SPANS_MAX:
            _SPANS.popitem(last=False)
    return spans


_COUNTERS: weakref.WeakKeyDictionary[EmbeddingProvider, TokenCounter] = weakref.WeakKeyDictionary()


def counter(provider: EmbeddingProvider) -> TokenCounter:
    """The provider's tokenizer, remembering the counts of recent texts (pack lines recur across queries)."""
    with _SPANS_LOCK:
        found = _COUNTERS.get(provider)
        if found is None:
            owner = weakref.ref(provider)  # the cache must not keep the provider (and its model) alive

            @functools.lru_cache(maxsize=32768)
            def count(text: str) -> int:
                p = owner()
                return p.count_tokens(text) if p is not None else estimate_tokens(text)

            found = _COUNTERS[provider] = count
    return found


_FILES: OrderedDict[tuple[str, str], tuple[tuple[int, int, int, int], str, list[str]]] = OrderedDict()


_FILES_MAX = 512


def file_reader(workspace: Workspace) -> LinesOf:
    """Lines of memory files by agent-facing path, read through the workspace rules; None for a file that
    cannot be read. A file read by an earlier pack is reused while ``lstat`` finds the same file unchanged
    (device, inode, size, mtime): a path swapped for a symlink or another file is resolved and read again."""
    local: dict[str, list[str] | None] = {}

    def lines_of(path: str) -> list[str] | None:
        if path not in local:
            local[path] = _read_lines(workspace, path)
        return local[path]

    return lines_of


def lines_reader(files_here: bool, workspace: Workspace, store: IndexStore) -> LinesOf:
    """Lines of the candidates' files: from the workspace, or from the index where it holds other text than
    the file (a session file with entries still only in the database), the files are not on this machine, or
    the workspace is missing now (unmounted, or an empty mount point): the pack answers from the last index, as
    search does."""
    if not files_here:
        return store_reader(store)
    disk, stored = file_reader(workspace), store_reader(store)
    missing = [root for root in workspace.missing_roots() if root.kind == "workspace"]
    virtual: set[str] | None = None

    def lines_of(path: str) -> list[str] | None:
        nonlocal virtual
        if any(root.holds(path) for root in missing):
            return stored(path)
        if path.startswith("sessions/"):
            if virtual is None:
                virtual = {p for p, row in store.files().items() if row.size == VIRTUAL_SIZE}
            if path in virtual:
                return stored(path)
        return disk(path)

    return lines_of


def store_reader(store: IndexStore) -> LinesOf:
    """Lines of memory files as the index holds them (mdmem.store.lines), for a process that does not hold
    the files (a ``mdmem serve`` replica): the pack's check that a chunk is in its file always passes."""
    local: dict[str, list[str] | None] = {}

    def lines_of(path: str) -> list[str] | None:
        if path not in local:
            local[path] = file_lines(store.chunks_of(path)) or None
        return local[path]

    return lines_of


def _read_lines(workspace: Workspace, path: str) -> list[str] | None:
    key = (str(workspace.root), path)
    with _SPANS_LOCK:
        cached = _FILES.get(key)
    if cached is not None:
        identity, target, lines = cached
        try:
            st = os.lstat(target)
        except OSError:
            st = None
        if st is not None and stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and _identity(st) == identity:
            with _SPANS_LOCK:
                _FILES.move_to_end(key)
            return lines
    try:
        target_path = workspace.resolve_for_read(path)
        st = os.lstat(target_path)  # before reading: a change after this is seen as a new identity next time
        text, _, _ = read_text(target_path)
    except (WorkspaceError, OSError):
        return None
    lines = split_lines(text)
    with _SPANS_LOCK:
        _FILES[key] = (_identity(st), str(target_path), lines)
        while len(_FILES) > _FILES_MAX:
            _FILES.popitem(last=False)
    return lines


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
