"""Hybrid search: escaped keyword queries, vector KNN, score fusion and snippets.

Scoring rules (also in the README):

- Vector score = cosine similarity (1 - cosine distance), clamped to [0, 1].
- Keyword score: FTS5 ``bm25()`` (porter-stemmed, diacritics removed) is negative, more negative is better.
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

import math
import re
import unicodedata
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import TYPE_CHECKING

from mdmemory.config import HybridConfig
from mdmemory.store import ChunkRow
from mdmemory.store.api import SearchStore
from mdmemory.tokens import CJK_RUN

if TYPE_CHECKING:
    import numpy as np

# Function words dropped from the keyword query when it has other terms: they match nearly every chunk,
# carry almost no BM25 weight, and make FTS5 score every row. Exact-hit detection still uses all terms.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves
    tell say said know remember recall""".split()
)
SNIPPET_CHARS = 700
# In a large index a term found in more than PRUNE_FRACTION of all chunks (a name in every line of a chat
# log, say) is dropped from the keyword query when rarer terms remain: FTS5 would score every one of those
# rows for a term whose BM25 weight is small. Below PRUNE_MIN_CHUNKS only terms found in at least half of
# all chunks are dropped (when rarer terms remain): FTS5 gives those an IDF of zero (floored at 1e-6), so
# they add nothing to any score, while scoring every row holding them costs ~1.5 us each.
PRUNE_MIN_CHUNKS = 20_000
PRUNE_FRACTION = 0.10
MAX_QUERY_TERMS = 64
# When no candidate reaches minScore, the low-confidence results are those scoring at least this share of the
# best one: a match that stands out comes back alone, while a query that matches nothing (a flat score
# distribution) gets its lowConfidenceResults closest candidates. Measured with MiniLM: see the README.
LOW_CONFIDENCE_SHARE = 0.7
_WORD = re.compile(r"\w+", re.UNICODE)
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
# A dated daily log: memory/YYYY-MM-DD.md, or memory/YYYY-MM-DD-<slug>.md as session hooks write them.
_DAILY = re.compile(r"^(?:memory|sessions)/(?:[^/]+/)*(\d{4})-(\d{2})-(\d{2})(?:[-_ .][^/]*)?\.md$", re.IGNORECASE)


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


# -- query building (pure) ---------------------------------------------------------------------------
def query_terms(query: str) -> list[str]:
    """Unicode word tokens of ``query``, lower-cased and de-duplicated, in order."""
    seen: dict[str, None] = {}
    for tok in _WORD.findall(query.lower()):
        tok = tok.strip("_")
        if tok:
            seen.setdefault(tok, None)
    return list(seen)[:MAX_QUERY_TERMS]


def keyword_terms(terms: Sequence[str]) -> list[str]:
    """The terms worth sending to FTS5: stop words are dropped unless nothing else is left."""
    content = [t for t in terms if t not in STOP_WORDS]
    return content or list(terms)


def cjk_match(query: str) -> tuple[list[str], list[str]]:
    """For CJK runs in ``query``: the overlapping character trigrams of runs of 3+ characters, and the
    shorter runs, which a trigram index cannot match, as substrings."""
    trigrams: dict[str, None] = {}
    short: dict[str, None] = {}
    for run in CJK_RUN.findall(query):
        if len(run) >= 3:
            for i in range(len(run) - 2):
                trigrams.setdefault(run[i : i + 3], None)
        else:
            short.setdefault(run, None)
    return list(trigrams)[:MAX_QUERY_TERMS], list(short)[:8]


def _fold(text: str) -> str:
    """Lower-case and strip accents, as the FTS5 tokenizer does."""
    lower = text.lower()
    if lower.isascii():
        return lower
    decomposed = unicodedata.normalize("NFKD", lower)  # only non-ASCII characters can be combining marks
    return _NON_ASCII.sub(lambda m: "" if unicodedata.combining(m[0]) else m[0], decomposed)


def contains_all_terms(text: str, terms: Sequence[str], query: str = "") -> bool:
    """True when ``text`` contains every query term: words as whole words, CJK runs as substrings."""
    if not terms:
        return False
    folded = _fold(text)
    words = set(_WORD.findall(CJK_RUN.sub(" ", folded)))
    for term in terms:
        t = _fold(term)
        if CJK_RUN.search(t):
            if not all(run in folded for run in CJK_RUN.findall(t)):
                return False
            rest = CJK_RUN.sub(" ", t).split()
            if any(w not in words for w in rest):
                return False
        elif not all(w in words for w in _WORD.findall(t)):
            return False
    return True


# -- scoring (pure) ------------------------------------------------------------------------------------
def normalise_bm25(ranked: Sequence[tuple[int, float]]) -> dict[int, float]:
    """Map FTS5 bm25 values (negative, lower is better) to (0, 1] with the best match at 1.0."""
    if not ranked:
        return {}
    positive = {rid: max(-rank, 0.0) for rid, rank in ranked}
    best = max(positive.values())
    if best <= 0:
        return {rid: 1.0 for rid in positive}
    return {rid: value / best for rid, value in positive.items()}


def coverage_bm25(ranked: Sequence[tuple[int, float]], ideal: float) -> dict[int, float]:
    """Map FTS5 bm25 values to [0, 1] against ``ideal``: the score of an average-length chunk that holds
    every query term once (the sum of the terms' IDFs). Matching one term of five scores low even when
    no candidate does better; matching them all scores 1."""
    if not ranked:
        return {}
    if ideal <= 0:
        return normalise_bm25(ranked)
    return {rid: min(1.0, max(-rank, 0.0) / ideal) for rid, rank in ranked}


def term_weights(
    store: SearchStore, terms: Sequence[str], matched: dict[int, set[str]]
) -> tuple[float, dict[int, float]]:
    """FTS5's BM25 IDF of each term (a term absent from the index counts as if in one chunk): their sum,
    and for each candidate the sum over the terms it holds.

    Document frequencies are counted inside FTS5; ``matched`` holds the words FTS5 highlighted in each
    candidate, which are attributed to the query terms they share a stem-like prefix with.
    """
    total = store.chunk_count()
    weights: dict[str, float] = {}
    for term in terms:
        if term:
            df = max(1, store.term_frequency_at_least(term, total + 1))
            n = max(total, df)  # another process may have added chunks since the total was read
            weights[_fold(term)] = max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6)  # FTS5's idf and floor
    terms_of: dict[str, frozenset[str]] = {}  # a highlighted word -> the query terms it is a form of
    held: dict[int, float] = {}
    for rid, words in matched.items():
        found: set[str] = set()
        for word in words:
            hit = terms_of.get(word)
            if hit is None:
                folded = _fold(word)
                hit = terms_of[word] = frozenset(t for t in weights if _same_stem(folded, t))
            found |= hit
        held[rid] = sum(weights[t] for t in found)
    return sum(weights.values()), held


def _same_stem(word: str, term: str) -> bool:
    """Whether a highlighted ``word`` is a form of ``term`` (the stemmer only strips suffixes)."""
    if word == term:
        return True
    n = min(len(word), len(term), 5)
    return n >= 3 and word[:n] == term[:n]


def fuse_weighted(vec: dict[int, float], text: dict[int, float], wv: float, wt: float) -> dict[int, float]:
    return {i: wv * vec.get(i, 0.0) + wt * text.get(i, 0.0) for i in set(vec) | set(text)}


def fuse_rrf(vec_ranked: Sequence[int], text_ranked: Sequence[int], wv: float, wt: float, k: int) -> dict[int, float]:
    scores: dict[int, float] = {}
    for weight, ranked in ((wv, vec_ranked), (wt, text_ranked)):
        for rank, rid in enumerate(ranked, start=1):
            scores[rid] = scores.get(rid, 0.0) + weight / (k + rank)
    top = 1.0 / (k + 1)
    return {rid: s / top for rid, s in scores.items()}


def low_confidence_picks(scores: dict[int, float], limit: int, share: float = LOW_CONFIDENCE_SHARE) -> list[int]:
    """The candidates to return when none reached minScore: at most ``limit`` of the best, each scoring at
    least ``share`` of the best score, best first. The best is always one of them, unless ``limit`` is 0 or
    it scores 0 (no similarity at all on either side)."""
    ranked = sorted(scores, key=lambda rid: -scores[rid])[: max(0, limit)]
    if not ranked or scores[ranked[0]] <= 0:
        return []
    floor = scores[ranked[0]] * share
    return [rid for rid in ranked if scores[rid] >= floor]


def keyword_only_scores(
    ids: set[int], text: dict[int, float], text_ranked: Sequence[int], hybrid: HybridConfig, mode: str
) -> dict[int, float]:
    """Scores for candidates that have no vector yet (embedding pending): the keyword side alone, its weight
    renormalised to 1, so the vector weight does not bury them. Weighted fusion and vector mode give the
    keyword score; RRF gives the keyword rank's term divided by its best value."""
    if mode == "hybrid" and hybrid.fusion == "rrf":
        rank = {rid: i for i, rid in enumerate(text_ranked, start=1)}
        return {rid: (hybrid.rrf_k + 1) / (hybrid.rrf_k + rank[rid]) for rid in ids}
    return {rid: text[rid] for rid in ids}


def log_date(path: str) -> date | None:
    """The date of a daily log from its workspace-relative path; None for MEMORY.md and undated files."""
    m = _DAILY.match(path.replace("\\", "/"))
    if not m:
        return None
    try:
        return date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:  # 2026-02-30.md is not a date
        return None


def decay_factor(path: str, today: date, half_life_days: float) -> float:
    """``0.5 ** (age / half_life)`` for a dated daily log; 1.0 for anything undated or not in the past."""
    when = log_date(path)
    if when is None:
        return 1.0
    age = (today - when).days
    return 0.5 ** (age / half_life_days) if age > 0 else 1.0


def mmr_order(ranked: Sequence[int], scores: dict[int, float], texts: dict[int, str], lam: float, k: int) -> list[int]:
    """The first ``k`` of ``ranked`` re-ordered by maximal marginal relevance, then the rest unchanged.

    Relevance is the score divided by the best one; similarity is the Jaccard overlap of word sets, which
    needs no vectors (keyword-only mode works too) and sees overlapping neighbour chunks as near-duplicates.
    """
    pool = [rid for rid in ranked if rid in texts]
    if len(pool) < 2 or lam >= 1.0:
        return list(ranked)
    best = max(scores[rid] for rid in pool) or 1.0
    words = {rid: set(_WORD.findall(_fold(texts[rid]))) for rid in pool}
    picked: list[int] = []
    left = list(pool)
    while left and len(picked) < k:

        def value(rid: int) -> float:
            similar = max((_jaccard(words[rid], words[p]) for p in picked), default=0.0)
            return lam * scores[rid] / best - (1.0 - lam) * similar

        choice = max(left, key=value)  # ties keep the relevance order (max returns the first)
        picked.append(choice)
        left.remove(choice)
    chosen = set(picked)
    return picked + [rid for rid in ranked if rid not in chosen]


def _jaccard(a: set[str], b: set[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


# -- snippets (pure) -----------------------------------------------------------------------------------
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
        for m in re.finditer(re.escape(term), text, flags=re.IGNORECASE):
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
) -> SearchOutcome:
    """Search ``store``. With ``query_vector`` None the search is keyword-only. ``today`` is the day temporal
    decay counts ages from (default: the machine's local date). When no candidate reaches ``min_score``,
    up to ``low_confidence_results`` of the closest are returned marked low-confidence (0: none). With
    ``sources``, chunks of other sources are left out (an index may hold rows another process searches)."""
    terms = query_terms(query)
    candidates = max(1, max_results * hybrid.candidate_multiplier)
    # Chunks still waiting for their vectors are only reachable by keywords, even in vector mode.
    use_keywords = query_vector is None or hybrid.enabled or store.pending_count() > 0
    vec_ranked: list[tuple[int, float]] = store.knn(query_vector, candidates) if query_vector is not None else []
    vec_scores = {rid: min(1.0, max(0.0, 1.0 - dist)) for rid, dist in vec_ranked}
    text_scores = _keyword_scores(store, query, terms, candidates, keyword_score) if use_keywords else {}
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
    chunks = store.chunks_by_ids(ranked if reorder else ranked[: max_results * 2])
    if sources is not None:
        chunks = {rid: c for rid, c in chunks.items() if c.source in sources}
        if not reorder and len(chunks) < max_results and len(ranked) > max_results * 2:  # left out: look deeper
            deeper = store.chunks_by_ids(ranked[max_results * 2 :])
            chunks.update({rid: c for rid, c in deeper.items() if c.source in sources})
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
    snippet_terms = keyword_terms(terms) + [run for run in CJK_RUN.findall(query)]
    return SearchOutcome(hits[:max_results], mode, snippet_terms, notes)


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

    kept = [t for t in _prune_common(store, keyword_terms(terms)) if t]
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
