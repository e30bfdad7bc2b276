"""Runs a ContextPack for one agent's memory: gathers what ``mdmemory.pack`` needs, then calls it.

- the search, with a wider net (``PACK_NET`` x ``query.maxResults`` candidates), ranked and scored exactly
  as memory_search; ``minScore`` is applied by the pack so that its receipts show what the threshold drops;
- each candidate's window similarities: its windows are rebuilt as the indexer embedded them and matched
  to the stored vectors by input hash (no embedding at query time);
- the candidates' files, read through the workspace rules (no symlinks, memory files only);
- the provider's tokenizer for the budget (the project's estimate without a provider).
"""

from __future__ import annotations

import functools
import math
import os
import stat
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mdmemory.agent.schemas import PACK_INPUT, PACK_KINDS, validate_arguments
from mdmemory.errors import InvalidArgumentError, WorkspaceError
from mdmemory.fileread import read_text, split_lines
from mdmemory.pack import LinesOf, Window, build_pack, min_budget
from mdmemory.packitems import kind_of
from mdmemory.providers.base import EmbeddingProvider
from mdmemory.search import Hit
from mdmemory.store import ChunkRow
from mdmemory.store.api import IndexStore
from mdmemory.store.lines import VIRTUAL_SIZE, file_lines
from mdmemory.tokens import TokenCounter, estimate_tokens
from mdmemory.workspace import Workspace

if TYPE_CHECKING:
    import numpy as np

    from mdmemory.memory import Memory

PACK_NET = 4  # candidates = PACK_NET x query.maxResults ...
TOKENS_PER_CANDIDATE = 50  # ... and at least one per this many tokens of budget, so big budgets can fill
SOURCE_KINDS = PACK_KINDS


# The memory_pack tool's arguments plus the Python/CLI-only ones, checked by the tool dispatcher's validator.
PACK_ARGUMENTS: dict[str, Any] = {
    **PACK_INPUT,
    "properties": {**PACK_INPUT["properties"], "maxItems": {"type": "integer", "minimum": 1}},
}
PYTHON_PACK_NAMES = {"query": "query", "budgetTokens": "budget_tokens", "maxItems": "max_items"}


def check_pack_arguments(
    query: Any,
    budget_tokens: Any,
    max_items: Any = None,
    sources: Any = None,
    names: Mapping[str, str] | None = None,
) -> tuple[str, int, int | None, tuple[str, ...] | None]:
    """Validate a pack as memory_pack's schema does (a non-blank query, a budget of 1 to 100,000 tokens,
    ``max_items`` >= 1, known source kinds); returns them normalised. Raises InvalidArgumentError naming the
    argument as ``names`` spells it (default: the Python names)."""
    args: dict[str, Any] = {"query": query, "budgetTokens": budget_tokens}
    if max_items is not None:
        args["maxItems"] = max_items
    problem = validate_arguments(PACK_ARGUMENTS, args, PYTHON_PACK_NAMES if names is None else names)
    if problem is not None:
        raise InvalidArgumentError(problem)
    kinds: tuple[str, ...] | None = None
    if sources is not None:
        name = (names or {}).get("sources", "sources")
        if isinstance(sources, str) or not all(isinstance(k, str) for k in sources):
            raise InvalidArgumentError(f"{name} must be a list of kinds ({', '.join(SOURCE_KINDS)}), got {sources!r}")
        unknown = [k for k in sources if k not in SOURCE_KINDS]
        if unknown:
            raise InvalidArgumentError(f"{name}: unknown kind {unknown[0]!r}; use some of {', '.join(SOURCE_KINDS)}")
        kinds = tuple(sources)
    return args["query"], args["budgetTokens"], args.get("maxItems"), kinds


def candidate_count(max_results: int, budget_tokens: int) -> int:
    return max(max_results * PACK_NET, math.ceil(budget_tokens / TOKENS_PER_CANDIDATE))


def run_pack(
    memory: Memory,
    query: str,
    budget_tokens: int = 1000,
    *,
    max_items: int | None = None,
    sources: Sequence[str] | None = None,
    trace: bool = False,
) -> dict[str, Any]:
    """``Memory.pack``: ``{query, budgetTokens, usedTokens, items, bundleText, provider, model, mode}`` plus
    ``trace`` when asked and ``fallback`` / ``stale`` / ``warnings`` as memory_search has them."""
    query, budget_tokens, max_items, sources = check_pack_arguments(query, budget_tokens, max_items, sources)
    settings = memory.settings
    q = settings.query
    provider = memory.choice.provider
    count: TokenCounter = counter(provider) if provider is not None else estimate_tokens
    smallest = min_budget(count)
    if budget_tokens < smallest:
        by = f"the {memory.choice.name} provider's tokenizer" if provider is not None else "the token estimate"
        raise InvalidArgumentError(
            f"a budget of {budget_tokens} tokens cannot hold any memory: the pack's header alone takes "
            f"{smallest - 1} tokens ({by}). Fix: ask for at least "
            f"{smallest} tokens; one cited line needs a few more"
        )
    outcome, vector, notes = memory._search(query, candidate_count(q.max_results, budget_tokens), 0.0)
    hits = outcome.hits
    if sources is not None:
        hits = [h for h in hits if kind_of(h.chunk.path, h.chunk.source) in sources]
    windows: dict[int, list[Window]] = {}
    if vector is not None and settings.chunking.window_tokens:
        windows = window_similarities(memory.store, hits, vector, settings.chunking.window_tokens, count)
    pack = build_pack(
        hits,
        query=query,
        terms=outcome.terms,
        mode=outcome.mode,
        lines_of=lines_reader(memory),
        budget_tokens=budget_tokens,
        windows=windows,
        count=count,
        min_score=q.min_score,
        max_items=max_items,
        weights=(q.hybrid.vector_weight, q.hybrid.text_weight),
        price_by_line=provider is not None,
        low_confidence=min(q.low_confidence_results, q.max_results),
        explain=trace,
    )
    if any(item.low_confidence for item in pack.items):
        warning = (
            f"no candidate reached minScore {q.min_score:g}; the items with lowConfidence: true are the closest "
            "and may be unrelated: read them before relying on them"
        )
        notes = {**notes, "warnings": [*notes.get("warnings", []), warning]}
    if pack.best_left_out is not None:
        best = pack.best_left_out
        said = "none of them fits" if not pack.items else "the best one did not fit"
        warning = (
            f"{pack.matched} candidate(s) matched; {said} in {budget_tokens} tokens: the best, {best.ref}, needs a "
            f"budget of {best.budget_tokens} tokens"
        )
        notes = {**notes, "warnings": [*notes.get("warnings", []), warning]}
    body = pack.to_dict(trace)
    head = {k: body.pop(k) for k in ("query", "budgetTokens", "usedTokens", "items", "bundleText")}
    model = provider.model if provider is not None else None
    return {**head, "provider": memory.choice.name, "model": model, **body, **notes}


def window_similarities(
    store: IndexStore, hits: Sequence[Hit], vector: np.ndarray, window_tokens: int, count: TokenCounter
) -> dict[int, list[Window]]:
    """Each candidate chunk's windows (file line spans) with the similarity of their stored vectors."""
    ids = [h.chunk.id for h in hits if h.chunk.id is not None]
    sims = store.vector_similarities(ids, vector)
    out: dict[int, list[Window]] = {}
    for h in hits:
        cid = h.chunk.id
        if cid is None or cid not in sims:
            continue
        found = sims[cid]
        out[cid] = [
            Window(first, last, found[d]) for d, first, last in _spans(h.chunk, window_tokens, count) if d in found
        ]
    return out


_SPANS: OrderedDict[tuple[Any, ...], list[tuple[str, int, int]]] = OrderedDict()
_SPANS_MAX = 8192
_SPANS_LOCK = threading.Lock()


def _spans(chunk: ChunkRow, window_tokens: int, count: TokenCounter) -> list[tuple[str, int, int]]:
    """A chunk's windows as (input hash, first line, last line): rebuilding them tokenizes every line, so
    they are kept per (chunk, window size, tokenizer) for the next packs (least recently used dropped)."""
    key = (chunk.hash, chunk.heading, chunk.start_line, window_tokens, count)
    with _SPANS_LOCK:
        hit = _SPANS.get(key)
        if hit is not None:
            _SPANS.move_to_end(key)
            return hit
    from mdmemory.embedding import embedding_windows, sha256  # the vector path only: it imports the chunker

    spans = [(sha256(text), first, last) for text, first, last in embedding_windows(chunk, window_tokens, count)]
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


def lines_reader(memory: Memory) -> LinesOf:
    """Lines of the candidates' files: from the workspace, or from the index where it holds other text than
    the file (a session file with entries still only in the database), the files are not on this machine, or
    the workspace is missing now (unmounted, or an empty mount point): the pack answers from the last index, as
    search does."""
    if not memory.agent.files_here:
        return store_reader(memory.store)
    disk, stored = file_reader(memory.workspace), store_reader(memory.store)
    missing = [root for root in memory.workspace.missing_roots() if root.kind == "workspace"]
    virtual: set[str] | None = None

    def lines_of(path: str) -> list[str] | None:
        nonlocal virtual
        if any(root.holds(path) for root in missing):
            return stored(path)
        if path.startswith("sessions/"):
            if virtual is None:
                virtual = {p for p, row in memory.store.files().items() if row.size == VIRTUAL_SIZE}
            if path in virtual:
                return stored(path)
        return disk(path)

    return lines_of


def store_reader(store: IndexStore) -> LinesOf:
    """Lines of memory files as the index holds them (mdmemory.store.lines), for a process that does not hold
    the files (a ``mdmemory serve`` replica): the pack's check that a chunk is in its file always passes."""
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
