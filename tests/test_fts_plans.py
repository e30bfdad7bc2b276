"""SQLite keyword plans (mdmem.store.fts): term by term and rare terms first give FTS5's own ranking.

Each plan must answer exactly what one ``"a" OR "b" ...`` query ranked by ``bm25()`` answers (the same rows,
the same scores to rounding), and say exactly which query terms each row holds (what a single-term query
for each term finds), on corpora where terms are spread from rare to nearly everywhere.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from mdmem.memory import Memory
from mdmem.store import fts
from tests.conftest import write

VOCAB = [f"w{i:03d}" for i in range(300)]


def corpus(workspace: Path, seed: int, days: int = 60) -> None:
    """Daily logs whose words follow a Zipf-like spread: a few in most chunks, most in a few."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) ** 1.1 for i in range(len(VOCAB))]
    for d in range(days):
        sections = []
        for s in range(rng.randint(3, 8)):
            words = rng.choices(VOCAB, weights, k=rng.randint(5, 60))
            sections.append(f"## {' '.join(rng.choices(VOCAB, weights, k=2))} {s}\n\n{' '.join(words)}.\n")
        write(workspace / "memory" / f"2026-{1 + d // 28:02d}-{1 + d % 28:02d}.md", "# Log\n\n" + "\n".join(sections))


def expected(mem: Memory, terms: list[str], k: int) -> list[tuple[int, float, set[str]]]:
    conn = mem.store.conn
    ranked = conn.execute(
        "SELECT rowid, bm25(chunks_fts, 1.0, 0.5) AS rank FROM chunks_fts WHERE chunks_fts MATCH ? "
        "ORDER BY rank, rowid LIMIT ?",
        (fts.fts_match(terms), k),
    ).fetchall()
    holding = {
        t: {r[0] for r in conn.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?", (fts.fts_match([t]),))}
        for t in terms
    }
    return [(rid, rank, {t for t in terms if rid in holding[t]}) for rid, rank in ranked]


def same(got: list[tuple[int, float, set[str]]], want: list[tuple[int, float, set[str]]]) -> bool:
    if [(r, h) for r, _, h in got] != [(r, h) for r, _, h in want]:
        return False
    return all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) for (_, a, _), (_, b, _) in zip(got, want, strict=True))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_both_plans_rank_and_attribute_exactly_as_fts5(
    workspace: Path, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    corpus(workspace, seed)
    mem = make_memory(provider="none")
    mem.sync()
    rng = random.Random(seed * 7)
    used: list[str] = []
    original = fts.FtsSearch.rare_first

    def spy(self: fts.FtsSearch, terms: list[str], k: int) -> object:
        got = original(self, terms, k)
        used.append("rare" if got is not None else "general")
        return got

    monkeypatch.setattr(fts.FtsSearch, "rare_first", spy)
    for _ in range(120):
        # one to three common words with one to three rarer ones (or absent ones), in any order
        terms = rng.sample(VOCAB[:6], rng.randint(0, 3)) + rng.sample(VOCAB[20:], rng.randint(1, 3))
        terms += ["absentword"] if rng.random() < 0.2 else []
        rng.shuffle(terms)
        k = rng.choice([1, 5, 30, 120])
        got = mem.store.keyword_matches(terms, k)
        assert same(got, expected(mem, terms, k)), (terms, k)
    assert used.count("rare") >= 10 and used.count("general") >= 10  # both plans were exercised


def test_rare_first_falls_back_when_common_only_rows_could_rank(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    # "heron" is in 3 chunks, "plan" in all 40: with k above 3 rows holding only "plan" make the top k
    for i in range(40):
        extra = " heron heron" if i < 3 else ""
        write(workspace / "memory" / f"2026-03-{1 + i % 28:02d}-n{i}.md", f"# Note {i}\n\nThe plan{extra}.\n")
    mem = make_memory(provider="none")
    mem.sync()
    assert mem.store.keyword_search.rare_first(["heron", "plan"], 10) is None
    assert same(mem.store.keyword_matches(["heron", "plan"], 10), expected(mem, ["heron", "plan"], 10))


def test_split_rare_common() -> None:
    rows = 10_000
    assert fts.split_rare_common({"a": 5000, "b": 40}, rows) == (["b"], ["a"])
    assert fts.split_rare_common({"a": 600, "b": 650}, rows) is None  # alike: nothing to gain
    assert fts.split_rare_common({"a": 9000, "b": 4000, "c": 10, "z": 0}, rows) == (["c"], ["a", "b"])
    assert fts.split_rare_common({"a": 5000}, rows) is None  # one term: nothing to split
    assert fts.idf(rows, 9999) == fts.IDF_FLOOR


@pytest.mark.parametrize("seed", [4, 5])
def test_most_terms_first_scores_exactly_and_keeps_the_rows_holding_most_terms(
    workspace: Path, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """A large index's plan (forced on here): every row it returns has its exact BM25 and term set, rows
    holding more of the terms come before any row left out, and it measures up to the exact top k."""
    corpus(workspace, seed)
    mem = make_memory(provider="none")
    mem.sync()
    keyword = mem.store.keyword_search
    assert mem.store.keyword_matches(["w001", "w002"], 5) == keyword.keyword_matches(["w001", "w002"], 5)
    monkeypatch.setattr(fts, "MOST_TERMS_MIN_CHUNKS", 1)
    rng = random.Random(seed)
    hits = total = used = 0
    for _ in range(60):
        terms = rng.sample(VOCAB[:12], rng.randint(2, 4))  # common terms only: no rare-first split
        k = rng.choice([5, 10, 24])
        want = expected(mem, terms, 100_000)  # every matching row, exactly ranked, with its terms
        exact = {rid: (rank, held) for rid, rank, held in want}
        got = keyword.most_terms_first(terms, k)
        if got is None:  # too few rows hold two terms or more: the general plan answers, exactly
            assert same(mem.store.keyword_matches(terms, k), want[:k])
            continue
        used += 1
        assert len(got) == k and same(got, sorted(got, key=lambda r: (r[1], r[0])))
        for rid, rank, held in got:
            assert abs(rank - exact[rid][0]) <= 1e-9 * max(1.0, abs(rank)) and held == exact[rid][1]
        fewest = min(len(held) for _, _, held in got)
        left_out = [rid for rid, (_, held) in exact.items() if len(held) > fewest and rid not in {r for r, _, _ in got}]
        assert not [rid for rid in left_out if exact[rid][0] < got[-1][1]]  # none better ranked and left out
        hits += len({r for r, _, _ in got} & {r for r, _, _ in want[:k]})
        total += k
        assert mem.store.keyword_matches(terms, k) == got
    assert used >= 20 and hits / total >= 0.8, (used, hits / max(total, 1))
