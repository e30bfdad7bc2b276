"""Runs a ContextPack for one agent's memory: gathers what ``mdmem.pack.build`` needs, then calls it.

- the search, with a wider net (``PACK_NET`` x ``query.maxResults`` candidates), ranked and scored exactly
  as memory_search; ``minScore`` is applied by the pack so that its receipts show what the threshold drops;
- each candidate's window similarities: its windows are rebuilt as the indexer embedded them and matched
  to the stored vectors by input hash (no embedding at query time);
- the candidates' files, read through the workspace rules (no symlinks, memory files only);
- the provider's tokenizer for the budget (the project's estimate without a provider).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mdmem.index.late import late_setup
from mdmem.pack.arguments import check_pack_arguments
from mdmem.pack.build import LinesOf, Window, build_pack, min_budget
from mdmem.pack.currency import asks_history, prefer_current
from mdmem.pack.inputs import counter, window_similarities
from mdmem.pack.items import kind_of
from mdmem.search.neighbors import with_neighbours, with_predecessors, with_replacements
from mdmem.search.supersession import span_labels
from mdmem.util.errors import InvalidArgumentError
from mdmem.util.redaction import redact_path
from mdmem.util.tokens import TokenCounter, estimate_tokens

if TYPE_CHECKING:
    import numpy as np

    from mdmem.config.load import MemorySearchConfig
    from mdmem.providers.factory import ProviderChoice
    from mdmem.search.hybrid import Hit, SearchOutcome
    from mdmem.store.api import IndexStore

# A search as the engine runs it: (query, limit, threshold) -> (outcome, query vector or None, notes)
Search = Callable[[str, int, float], "tuple[SearchOutcome, np.ndarray | None, dict[str, Any]]"]

PACK_NET = 4  # candidates = PACK_NET x query.maxResults ...
TOKENS_PER_CANDIDATE = 50  # ... and at least one per this many tokens of budget, so big budgets can fill


def candidate_count(max_results: int, budget_tokens: int) -> int:
    return max(max_results * PACK_NET, math.ceil(budget_tokens / TOKENS_PER_CANDIDATE))


def run_pack(
    search: Search,
    settings: MemorySearchConfig,
    choice: Callable[[], ProviderChoice],
    store: Callable[[], IndexStore],
    lines_of: Callable[[], LinesOf],
    query: str,
    budget_tokens: int = 1000,
    *,
    max_items: int | None = None,
    sources: Sequence[str] | None = None,
    trace: bool = False,
    neighbors: int = 0,
    hidden: tuple[str, ...] = (),
    used: Callable[[list[tuple[str, str]]], bool] | None = None,
) -> dict[str, Any]:
    """``Memory.pack``: ``{query, budgetTokens, usedTokens, items, bundleText, provider, model, mode}`` plus
    ``trace`` when asked and ``fallback`` / ``stale`` / ``warnings`` as memory_search has them. Over ``search``
    (the engine's, which catches up first); ``choice``, ``store`` and ``lines_of`` (the files' lines:
    mdmem.pack.inputs.lines_reader) are asked for after it, as the search may have changed them. Paths under
    ``hidden`` are left out (the archive), also when a link or a supersession points there; ``used`` gets the
    (path, chunk hash) of the chunks the items came from and says whether it counted them (mdmem.engine.usage):
    with ``trace``, ``refreshed`` lists those chunks (``ref``: path and lines), whose last use is now."""
    query, budget_tokens, max_items, sources = check_pack_arguments(query, budget_tokens, max_items, sources)
    q = settings.query
    before = choice()
    smallest = min_budget(counter(before.provider) if before.provider is not None else estimate_tokens)
    if budget_tokens < smallest:
        by = f"the {before.name} provider's tokenizer" if before.provider is not None else "the token estimate"
        raise InvalidArgumentError(
            f"a budget of {budget_tokens} tokens cannot hold any memory: the pack's header alone takes "
            f"{smallest - 1} tokens ({by}). Fix: ask for at least "
            f"{smallest} tokens; one cited line needs a few more"
        )
    outcome, vector, notes = search(query, candidate_count(q.max_results, budget_tokens), 0.0)
    with store().reading():
        if q.current_first:  # the current line wherever an older one was found; the one before it when asked
            outcome = with_replacements(store(), outcome, query)
            if asks_history(query):
                outcome = with_predecessors(store(), outcome, query)
        if neighbors:
            outcome = with_neighbours(store(), outcome, q.max_results)
    hits = outcome.hits
    if q.current_first:
        spans = [(h.chunk.path, h.chunk.start_line, h.chunk.end_line, h.chunk.text) for h in hits]
        hits = [hits[i] for i in prefer_current(spans, outcome.supersessions, query)]
    if sources is not None:
        hits = [h for h in hits if kind_of(h.chunk.path, h.chunk.source) in sources]
    if hidden:
        hits = [h for h in hits if not h.chunk.path.startswith(hidden)]
    chosen = choice()
    provider = chosen.provider
    count: TokenCounter = counter(provider) if provider is not None else estimate_tokens
    windows: dict[int, list[Window]] = {}
    if vector is not None and settings.chunking.window_tokens:
        late = late_setup(provider, settings.chunking) if provider is not None else (0, 0)
        windows = window_similarities(store(), hits, vector, settings.chunking.window_tokens, count, late)
    pack = build_pack(
        hits,
        query=query,
        terms=outcome.terms,
        mode=outcome.mode,
        lines_of=lines_of(),
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
    sources = _item_chunks(pack.items, hits) if used is not None and pack.items else []
    counted = bool(sources) and used is not None and used([(c.path, c.hash) for c in sources])
    body = pack.to_dict(trace)
    if trace:
        body["refreshed"] = [_chunk_ref(c) for c in sources] if counted else []
    head = {k: body.pop(k) for k in ("query", "budgetTokens", "usedTokens", "items", "bundleText")}
    if outcome.supersessions:
        for item, made in zip(head["items"], pack.items, strict=True):
            item.update(span_labels(made.path, made.start_line, made.end_line, made.text, outcome.supersessions))
    if outcome.via:
        _mark_via(head["items"], pack.items, hits, outcome.via, body.get("trace"))
    model = provider.model if provider is not None else None
    return {**head, "provider": chosen.name, "model": model, **body, **notes}


def _item_chunks(items: Sequence[Any], hits: Sequence[Hit]) -> list[Any]:
    """The chunk each item was cut from, each once."""
    found: dict[tuple[str, str, int], Any] = {}
    for item in items:
        for h in hits:
            if h.chunk.path == item.path and h.chunk.start_line <= item.start_line <= h.chunk.end_line:
                found.setdefault((h.chunk.path, h.chunk.hash, h.chunk.start_line), h.chunk)
                break
    return list(found.values())


def _chunk_ref(chunk: Any) -> dict[str, str]:
    """A refreshed record as the trace shows it: its path redacted as every path a pack shows."""
    return {"ref": redact_path(f"{chunk.path}#L{chunk.start_line}-L{chunk.end_line}"), "kind": "pack"}


def _mark_via(
    shown: list[dict[str, Any]], items: Sequence[Any], hits: Sequence[Hit], via: dict[int, str], trace: Any
) -> None:
    """``via`` on the items (and trace receipts) that come from a neighbour (mdmem.search.neighbors)."""
    for out, item in zip(shown, items, strict=True):
        source = next(
            (
                h
                for h in hits
                if h.chunk.path == item.path and h.chunk.start_line <= item.start_line <= h.chunk.end_line
            ),
            None,
        )
        cid = source.chunk.id if source is not None else None
        if cid is not None and cid in via:
            out["via"] = via[cid]
    for receipt in trace or []:
        rank = receipt.get("rank")  # 1-based
        cid = hits[rank - 1].chunk.id if isinstance(rank, int) and 1 <= rank <= len(hits) else None
        if cid is not None and cid in via:
            receipt["via"] = via[cid]
