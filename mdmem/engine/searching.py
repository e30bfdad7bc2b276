"""A search as an engine runs it: catch up first (``sync.onSearch``), embed the query within the search's
budget, run the hybrid search, and say in notes what the answer could not do (``fallback``, ``stale``,
``warnings``). ``Memory.search`` and ``Memory.pack`` both start here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mdmem.engine.catchup import CatchUp
from mdmem.engine.keeper import IndexKeeper
from mdmem.files import clock, roots
from mdmem.providers import deadline
from mdmem.util.errors import ProviderError, ProviderPaused

# Imported where they are used (a keyword-only search needs neither numpy nor the Markdown parser).
if TYPE_CHECKING:
    import numpy as np

    from mdmem.providers.base import EmbeddingProvider
    from mdmem.search.hybrid import SearchOutcome


def search_outcome(
    keeper: IndexKeeper, catch: CatchUp, query: str, limit: int, threshold: float, hidden: tuple[str, ...] = ()
) -> tuple[SearchOutcome, np.ndarray | None, dict[str, Any]]:
    """Sync if due, embed the query and search: the outcome, the query vector (None: keyword-only) and
    the notes a response carries (``fallback``, ``stale``, ``warnings``). Paths under ``hidden`` are left out."""
    from mdmem.index.identity import identity_change
    from mdmem.search.hybrid import search as run_search

    agent, settings = keeper.agent, keeper.settings  # the store is asked for each time: a failed sync closes it
    q = settings.query
    notes: list[str] = []
    keeper.store.refresh()
    until = keeper.embedding_deadline()
    stale = False
    if settings.sync.on_search:
        with deadline.until(until):  # catching up and the query embedding share the search's budget
            stale, more = catch.run()
        notes.extend(more)
    missing = keeper.workspace.missing_roots() if agent.files_here else []
    if missing:
        notes.extend(roots.warnings(missing, keeper.store.files()))
    choice = keeper.providers.choice
    provider = choice.provider
    vector = None
    if provider is not None and keeper.indexer.identity_matches():
        vector = _embed_query(provider, query, until, notes)
    elif provider is not None and not settings.sync.on_search:  # with onSearch, the catch-up said it
        stored = keeper.store.get_meta("identity") or {}
        notes.append(f"{identity_change(stored, keeper.indexer.identity())}: run `mdmem index` to rebuild")
    store = keeper.store
    with store.reading():  # one connection and one snapshot for the search's queries on PostgreSQL
        outcome = run_search(
            store,
            query,
            query_vector=vector,
            max_results=limit,
            min_score=threshold,
            hybrid=q.hybrid,
            keyword_score=q.keyword_score,
            today=clock.day(agent),
            low_confidence_results=q.low_confidence_results,
            sources=keeper.workspace.sources,
            current_first=q.current_first,
            hidden=hidden,
        )
    notes.extend(outcome.notes)
    extra: dict[str, Any] = {}
    if choice.fallback:
        extra["fallback"] = choice.fallback
    if outcome.mode == "keyword" and provider is None:
        notes.append(choice.hint or "keyword-only search: no embedding provider is configured")
    if stale:
        extra["stale"] = True
    if notes:
        extra["warnings"] = notes
    return outcome, vector, extra


def _embed_query(provider: EmbeddingProvider, query: str, until: float, notes: list[str]) -> Any:
    """The query vector, or None with a note saying why the search answers from keywords; back by ``until``."""
    try:
        return provider.embed_query_within(query, until)
    except ProviderPaused as exc:
        notes.append(f"query embedding skipped, answered from keywords only: {exc}")
    except ProviderError as exc:
        notes.append(f"query embedding failed, answered from keywords only: {exc}")
    return None
