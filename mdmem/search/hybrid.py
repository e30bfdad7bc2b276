"""Hybrid search: escaped keyword queries, vector KNN, score fusion and snippets.

Scoring rules (also in the README):

- Vector score = cosine similarity (1 - cosine distance), clamped to [0, 1].
- Keyword score: FTS5 ``bm25()`` (porter-stemmed, diacritics removed) is negative, more negative is better.
  A compound identifier in the query (``Nimbus-14``, ``v2.3.1``, ``snake_case``) is searched as its parts
  and as the phrase of its parts (``mdmem.search.query.keyword_query``): one more BM25 term, held only by
  chunks where the parts stand adjacent and in order.
  ``query.keywordScore`` maps it to [0, 1]: ``relative`` negates it and divides by the best candidate's,
  so the best keyword match scores 1.0; ``coverage`` divides by the score of an average chunk holding
  every query term once (the sum of the terms' IDFs); ``blend`` (default) is ``relative`` times the IDF
  share of the query's terms the chunk holds, so one rare word of five scores low even as the best match.
  CJK text is matched through the trigram table (and a substring scan for one- or two-character words,
  normalised relative to the best); a chunk's keyword score is the best of its normalised scores.
- Every candidate is scored on both sides: a chunk found only by keywords gets its stored vectors
  similarity to the query (a chunk's vector score is its best vector: whole chunk or one of its windows).
- A chunk with no vector yet (written by a sync whose embeddings are pending, e.g. during a provider outage)
  is scored as in keyword-only mode: its keyword score alone (RRF: its keyword rank's share), and ``minScore``
  does not hide it, so a new note is found by its keywords while its vectors are missing.
- Weighted fusion (default): ``vectorWeight * vector + textWeight * keyword`` (weights sum to 1).
  Reciprocal-rank fusion: ``sum(weight / (k + rank))`` divided by its maximum ``1 / (k + 1)``.
- Temporal decay (``hybrid.temporalDecay``, off by default) multiplies the score of a dated daily log
  (``memory/YYYY-MM-DD*.md``) by ``0.5 ** (age_days / halfLifeDays)``, age counted from the agent's today;
  MEMORY.md, undated files and future dates never decay. It applies after ``minScore``, so it reorders
  results without hiding old ones.
- MMR (``hybrid.mmr``, off by default) then picks results greedily by
  ``lambda * score / best - (1 - lambda) * max Jaccard(words, already picked)``; each result keeps its
  own score, so scores need not decrease down an MMR-ordered list.
- ``minScore`` filters fused scores, but never hides an exact keyword hit: a chunk that contains every
  query term (case- and accent-insensitive; CJK terms as substrings) is kept whatever its score. In
  keyword-only mode (no provider, or the query could not be embedded) every candidate literally contains
  a query term, so ``minScore`` is not applied at all.
- ``minScore`` never empties an answer that has candidates: when no candidate reaches it and no exact keyword
  hit or not-yet-embedded keyword match is kept (those already answer, and rank by their own scores), the best
  ``lowConfidenceResults`` (default 3, at most ``maxResults``) of those scoring at least
  ``LOW_CONFIDENCE_SHARE`` of the best score are returned anyway, each marked ``low_confidence``, with a
  note saying that nothing reached ``minScore``. The top-ranked candidate is therefore always returned
  (unless it scores 0: no similarity at all), whatever the model's cosine range; a query that matches
  nothing gets a few results that are clearly marked, neither an empty list nor a confident-looking one.
  Exact keyword hits kept by the rule above are not marked.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING

from mdmem.config.load import HybridConfig
from mdmem.files.supersession import Supersession
from mdmem.search.grouping import implicit_supersessions, newer_first, span_lines
from mdmem.search.query import (
    cjk_match,
    contains_all_terms,
    identifier_phrases,
    keyword_query,
    keyword_terms,
    query_terms,
)
from mdmem.search.scoring import (
    coverage_bm25,
    decay_factor,
    fuse_rrf,
    fuse_weighted,
    keyword_only_scores,
    low_confidence_picks,
    mmr_order,
    normalise_bm25,
    term_weights,
)
from mdmem.store import ChunkRow
from mdmem.store.api import SearchStore
from mdmem.util.tokens import CJK_RUN

if TYPE_CHECKING:
    import numpy as np

# In a large index a term found in more than PRUNE_FRACTION of all chunks (a name in every line of a chat
# log, say) is dropped from the keyword query when rarer terms remain: FTS5 would score every one of those
# rows for a term whose BM25 weight is small. Below PRUNE_MIN_CHUNKS only terms found in at least half of
# all chunks are dropped (when rarer terms remain): FTS5 gives those an IDF of zero (floored at 1e-6), so
# they add nothing to any score, while scoring every row holding them costs ~1.5 us each.
PRUNE_MIN_CHUNKS = 20_000
PRUNE_FRACTION = 0.10


@dataclass(frozen=True)
class Hit:
    chunk: ChunkRow
    score: float
    vector_score: float | None = None
    text_score: float | None = None
    low_confidence: bool = False  # returned only because no candidate reached minScore


@dataclass(frozen=True)
class SearchOutcome:
    hits: list[Hit]
    mode: str  # "hybrid", "vector" or "keyword"
    terms: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # why the answer may be weaker than it looks
    supersessions: list[Supersession] = field(default_factory=list)  # those touching the hits' files
    via: dict[int, str] = field(default_factory=dict)  # a neighbour's chunk id -> the hit it came through


# -- the search entry point ----------------------------------------------------------------------------
def search(
    store: SearchStore,
    query: str,
    *,
    query_vector: np.ndarray | None,
    max_results: int,
    min_score: float,
    hybrid: HybridConfig,
    keyword_score: str = "coverage",
    today: date | None = None,
    low_confidence_results: int = 3,
    sources: Collection[str] | None = None,
    current_first: bool = True,
    hidden: tuple[str, ...] = (),
) -> SearchOutcome:
    """Search ``store``. With ``query_vector`` None the search is keyword-only. ``today`` is the day temporal
    decay counts ages from (default: the machine's local date). When no candidate reaches ``min_score``,
    up to ``low_confidence_results`` of the closest are returned marked low-confidence (0: none). With
    ``sources``, chunks of other sources are left out (an index may hold rows another process searches).
    ``current_first`` (``query.currentFirst``) adds the implicit supersessions (mdmem.search.grouping).
    Chunks whose path starts with one of ``hidden`` are left out (the archive, unless asked for)."""
    terms = query_terms(query)
    candidates = max(1, max_results * hybrid.candidate_multiplier)
    # Chunks still waiting for their vectors are only reachable by keywords, even in vector mode.
    use_keywords = query_vector is None or hybrid.enabled or store.pending_count() > 0
    # the vector search may run beside the keyword search (PostgreSQL: on a second connection, same snapshot)
    nearest = store.start_knn(query_vector, candidates) if query_vector is not None else None
    text_scores = _keyword_scores(store, query, terms, candidates, keyword_score) if use_keywords else {}
    vec_ranked: list[tuple[int, float]] = nearest() if nearest is not None else []
    vec_scores = {rid: min(1.0, max(0.0, 1.0 - dist)) for rid, dist in vec_ranked}
    no_vector: set[int] = set()
    if query_vector is not None and text_scores:
        # Score every candidate on both sides: a chunk found only by keywords gets its real vector
        # similarity rather than 0, so the vector weight does not bury exact keyword hits.
        unseen = [rid for rid in text_scores if rid not in vec_scores]
        similarities = store.chunk_similarities(unseen, query_vector)
        no_vector = {rid for rid in unseen if rid not in similarities}
        if hybrid.enabled:
            for rid, sim in similarities.items():
                vec_scores[rid] = min(1.0, max(0.0, sim))

    text_ranked = sorted(text_scores, key=lambda r: -text_scores[r])
    if query_vector is None:
        mode = "keyword"
        scores = dict(text_scores)
    elif not hybrid.enabled:
        mode = "vector"
        scores = dict(vec_scores)
    elif hybrid.fusion == "rrf":
        mode = "hybrid"
        scores = fuse_rrf(
            [r for r, _ in vec_ranked], text_ranked, hybrid.vector_weight, hybrid.text_weight, hybrid.rrf_k
        )
    else:
        mode = "hybrid"
        scores = fuse_weighted(vec_scores, text_scores, hybrid.vector_weight, hybrid.text_weight)
    if no_vector:
        scores.update(keyword_only_scores(no_vector, text_scores, text_ranked, hybrid, mode))

    low: set[int] = set()
    notes: list[str] = []
    if mode != "keyword":
        below = [rid for rid, s in scores.items() if s < min_score and text_scores.get(rid) and rid not in no_vector]
        exact = {rid for rid, c in store.chunks_by_ids(below).items() if contains_all_terms(c.text, terms, query)}
        if scores and max(scores.values()) < min_score and not exact and not no_vector:  # an answer exists
            low = set(low_confidence_picks(scores, min(low_confidence_results, max_results))) - exact - no_vector
            if low:
                notes.append(
                    f"no result reached minScore {min_score:g}; the {len(low)} closest are shown with "
                    "lowConfidence: true and may be unrelated: read them before relying on them"
                )
        kept = exact | no_vector | low
        scores = {rid: s for rid, s in scores.items() if s >= min_score or rid in kept}
    decay, mmr = hybrid.temporal_decay, hybrid.mmr
    reorder = decay.enabled or mmr.enabled
    ranked = sorted(scores, key=lambda rid: -scores[rid])
    # Re-ranking needs every candidate (an old log's neighbours may overtake it); otherwise the top suffice.
    # (twice the results asked for: ties at the cut are then broken by path and line, as below, on every store)
    left_out: set[int] = set()  # candidates under ``hidden`` (the archive)
    chunks = _chunks(store, ranked if reorder else ranked[: max_results * 2], sources, hidden, left_out)
    if not reorder and len(chunks) < max_results and len(ranked) > max_results * 2:
        # some vanished meanwhile (a writer replaced their file) or are of other sources: look deeper
        chunks.update(_chunks(store, ranked[max_results * 2 :], sources, hidden, left_out))
    if decay.enabled:
        day = today or date.today()
        scores = {
            rid: s * decay_factor(chunks[rid].path, day, decay.half_life_days) if rid in chunks else s
            for rid, s in scores.items()
        }
    hits: list[Hit] = []
    for rid in ranked:
        chunk = chunks.get(rid)
        if chunk is None:
            continue
        hits.append(Hit(chunk, scores[rid], vec_scores.get(rid), text_scores.get(rid), rid in low))
    hits.sort(key=lambda h: (-h.score, h.chunk.path, h.chunk.start_line))
    if mmr.enabled:
        by_id = {h.chunk.id: h for h in hits if h.chunk.id is not None}
        texts = {rid: h.chunk.text for rid, h in by_id.items()}
        hits = [by_id[rid] for rid in mmr_order(list(by_id), scores, texts, mmr.lambda_, max_results)]
    snippet_terms = keyword_terms(terms) + identifier_phrases(query) + [run for run in CJK_RUN.findall(query)]
    hits = hits[:max_results]
    if not hits and left_out:
        notes.append(
            f"nothing found outside {', '.join(hidden)}; {len(left_out)} archived chunk(s) match: search again "
            "with includeArchive (--include-archive) to see them"
        )
    supersessions = store.supersessions_touching(sorted({h.chunk.path for h in hits})) if hits else []
    if hits and current_first:  # implicit supersessions among the hits' lines, then the newer of a group first
        spans = [(h.chunk.path, h.chunk.start_line, h.chunk.end_line, h.chunk.text) for h in hits]
        supersessions += implicit_supersessions([line for s in spans for line in span_lines(s)], supersessions)
        hits = [hits[i] for i in newer_first(spans, supersessions)]
    return SearchOutcome(hits, mode, snippet_terms, notes, supersessions)


def _chunks(
    store: SearchStore,
    ids: list[int],
    sources: Collection[str] | None,
    hidden: tuple[str, ...] = (),
    left_out: set[int] | None = None,
) -> dict[int, ChunkRow]:
    found = store.chunks_by_ids(ids)
    if hidden:
        if left_out is not None:
            left_out.update(rid for rid, c in found.items() if c.path.startswith(hidden))
        found = {rid: c for rid, c in found.items() if not c.path.startswith(hidden)}
    return found if sources is None else {rid: c for rid, c in found.items() if c.source in sources}


def _prune_common(store: SearchStore, terms: list[str]) -> list[str]:
    total = store.chunk_count()
    if len(terms) < 2 or total < 2:
        return terms
    limit = int(total * PRUNE_FRACTION) if total >= PRUNE_MIN_CHUNKS else (total + 1) // 2
    counts = {t: store.term_frequency_at_least(t, limit) for t in terms}
    rare = [t for t in terms if counts[t] < limit]
    # only when a rarer term matches something: else the query would match nothing (a tiny index, where one
    # chunk of two is half of them, or rare terms that are in no chunk at all)
    return rare if any(counts[t] > 0 for t in rare) else terms


def _keyword_scores(store: SearchStore, query: str, terms: list[str], k: int, scoring: str) -> dict[int, float]:
    scores: dict[int, float] = {}

    def merge(found: dict[int, float]) -> None:
        for rid, s in found.items():
            scores[rid] = max(scores.get(rid, 0.0), s)

    kept = [t for t in _prune_common(store, keyword_query(query, terms)) if t]
    if kept:
        if scoring == "blend":
            found = store.keyword_matches(kept, k)
        else:
            found = [(rid, rank, set()) for rid, rank in store.keyword(kept, k)]
        ranked = [(rid, rank) for rid, rank, _ in found]
        if scoring == "relative":
            merge(normalise_bm25(ranked))
        else:
            ideal, held = term_weights(store, kept, {rid: words for rid, _, words in found})
            if scoring == "coverage":
                merge(coverage_bm25(ranked, ideal))
            else:  # "blend": relative BM25 times the IDF share of the query's terms the chunk holds
                merge(
                    {
                        rid: s * held.get(rid, 0.0) / ideal if ideal > 0 else s
                        for rid, s in normalise_bm25(ranked).items()
                    }
                )
    tri, short = cjk_match(query)
    if tri:
        merge(normalise_bm25(store.trigram(tri, k)))
    if short:
        merge(normalise_bm25(store.substring(short, k)))
    return scores
