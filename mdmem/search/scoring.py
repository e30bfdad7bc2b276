"""Search scoring, pure: BM25 normalisation, term weights, fusion, low-confidence picks, temporal decay, MMR.

The rules are listed in mdmem.search.hybrid's docstring (and the README); no I/O besides the ``SearchStore``
counts ``term_weights`` asks for.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import date

from mdmem.config.load import HybridConfig
from mdmem.search.query import WORD, fold
from mdmem.store.api import SearchStore

# When no candidate reaches minScore, the low-confidence results are those scoring at least this share of the
# best one: a match that stands out comes back alone, while a query that matches nothing (a flat score
# distribution) gets its lowConfidenceResults closest candidates. Measured with MiniLM: see the README.
LOW_CONFIDENCE_SHARE = 0.7
# A dated daily log: memory/YYYY-MM-DD.md, or memory/YYYY-MM-DD-<slug>.md as session hooks write them.
_DAILY = re.compile(r"^(?:memory|sessions)/(?:[^/]+/)*(\d{4})-(\d{2})-(\d{2})(?:[-_ .][^/]*)?\.md$", re.IGNORECASE)


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
            weights[fold(term)] = max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6)  # FTS5's idf and floor
    terms_of: dict[str, frozenset[str]] = {}  # a highlighted word -> the query terms it is a form of
    held: dict[int, float] = {}
    for rid, words in matched.items():
        found: set[str] = set()
        for word in words:
            hit = terms_of.get(word)
            if hit is None:
                folded = fold(word)
                hit = terms_of[word] = frozenset(t for t in weights if same_stem(folded, t))
            found |= hit
        held[rid] = sum(weights[t] for t in found)
    return sum(weights.values()), held


def same_stem(word: str, term: str) -> bool:
    """Whether a highlighted ``word`` is a form of ``term`` (the stemmer only strips suffixes). A phrase
    (a term holding a space: an identifier's parts) is only ever itself."""
    if word == term:
        return True
    if " " in word or " " in term:
        return False
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
    words = {rid: set(WORD.findall(fold(texts[rid]))) for rid in pool}
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
