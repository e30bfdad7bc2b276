"""Search: FTS escaping, BM25 normalisation, CJK, fusion, minScore rule, snippets, result shape."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mdmemory.errors import InvalidArgumentError
from mdmemory.memory import Memory
from mdmemory.search import (
    cjk_match,
    contains_all_terms,
    fts_match,
    fuse_rrf,
    fuse_weighted,
    make_snippet,
    normalise_bm25,
    query_terms,
)
from mdmemory.tools import RESULT_KEYS
from tests.conftest import write

HOSTILE = [
    '"',
    '""',
    "'",
    "NEAR(",
    "NEAR(a b",
    "*",
    "a*",
    "^a",
    "a:b",
    "text:foo",
    "heading:x",
    "(",
    ")",
    "((a)",
    "a OR",
    "AND",
    "NOT a",
    "a AND NOT b",
    "-a",
    "+",
    "\\",
    "%",
    "_",
    "{a b}",
    "a;DROP TABLE chunks;--",
    "\x00",
    "   ",
    "",
    "🙂",
    "寿",
    '寿司"',
    "NEAR(寿司拉面 x)",
    "a" * 5000,
]


@pytest.fixture
def notes(workspace: Path) -> Path:
    write(workspace / "MEMORY.md", "# Infra\n\nBackups run nightly with restic to the NAS vault.\n")
    write(workspace / "memory" / "2026-01-02.md", "# Food\n\n我喜欢吃寿司和拉面，不喜欢香菜。\n\nカレーが好きです。\n")
    write(workspace / "memory" / "2026-01-03.md", "# Misc\n\nThe café serves crème brûlée. 김치찌개를 좋아해요.\n")
    write(
        workspace / "memory" / "2026-01-04.md",
        "# Pets\n\nPixel the border collie. Pixel loves the park. Pixel chases balls.\n\n"
        "# Other\n\nA note that mentions a pixel once among many other unrelated words about weather.\n",
    )
    return workspace


@pytest.mark.parametrize("provider", ["none", "hash"])
def test_hostile_queries_raise_no_sql_error(notes: Path, make_memory: Callable[..., Memory], provider: str) -> None:
    mem = make_memory(provider=provider)
    mem.sync()
    for q in HOSTILE:
        if not q.strip():  # a blank query is an argument error, like in the memory_search schema
            with pytest.raises(InvalidArgumentError, match="query must not be empty"):
                mem.search(q)
            continue
        res = mem.search(q)
        assert isinstance(res["results"], list), q
        assert "error" not in res, q


def test_fts_match_quotes_every_term() -> None:
    assert (
        fts_match(query_terms('NEAR(a b) "x" col:y *z ^w'))
        == '"near" OR "a" OR "b" OR "x" OR "col" OR "y" OR "z" OR "w"'
    )
    assert fts_match([]) is None
    assert query_terms("Restic restic RESTIC café") == ["restic", "café"]


def test_cjk_match_builds_trigrams_and_short_needles() -> None:
    tri, short = cjk_match("寿司和拉面 好 吃饭")
    assert tri == '"寿司和" OR "司和拉" OR "和拉面"'
    assert short == ["好", "吃饭"]


def test_bm25_normalisation_puts_best_first_at_one() -> None:
    scores = normalise_bm25([(1, -4.0), (2, -1.0), (3, -2.0)])
    assert scores == {1: 1.0, 2: 0.25, 3: 0.5}
    assert normalise_bm25([]) == {}


def test_fusion_math() -> None:
    assert fuse_weighted({1: 1.0, 2: 0.5}, {2: 1.0, 3: 0.2}, 0.7, 0.3) == pytest.approx({1: 0.7, 2: 0.65, 3: 0.06})
    rrf = fuse_rrf([1, 2], [2, 3], 0.5, 0.5, 60)
    assert rrf[2] > rrf[1] > rrf[3]
    assert fuse_rrf([1], [1], 0.5, 0.5, 60)[1] == pytest.approx(1.0)


def test_best_keyword_match_ranks_first_keyword_only(notes: Path, make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(provider="none")
    mem.sync()
    res = mem.search("pixel")
    assert res["mode"] == "keyword" and res["provider"] == "none"
    top = res["results"][0]
    assert top["path"] == "memory/2026-01-04.md" and top["startLine"] == 1
    assert top["score"] == 1.0
    assert all(r["score"] <= top["score"] for r in res["results"])
    assert any("keyword-only" in w for w in res["warnings"])


def test_exact_keyword_hit_is_never_hidden_by_min_score(notes: Path, make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(provider="none")
    mem.sync()
    res = mem.search("restic", min_score=0.99)
    assert [r["path"] for r in res["results"]] == ["MEMORY.md"]
    hybrid = make_memory(provider="hash")
    hybrid.sync()
    res = hybrid.search("restic vault", min_score=0.99)
    assert [r["path"] for r in res["results"]] == ["MEMORY.md"]
    assert res["results"][0]["score"] < 0.99  # kept by the exact-hit rule, not by its score


def test_min_score_filters_weak_vector_only_matches(notes: Path, make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(provider="hash")
    mem.sync()
    assert mem.search("zzzunrelated qqqword", min_score=0.35)["results"] == []
    assert mem.search("zzzunrelated qqqword", min_score=0.0)["results"] != []


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ("寿司和拉面", "memory/2026-01-02.md"),
        ("寿司", "memory/2026-01-02.md"),
        ("カレー", "memory/2026-01-02.md"),
        ("김치찌개를", "memory/2026-01-03.md"),
        ("creme brulee", "memory/2026-01-03.md"),
    ],
)
def test_cjk_and_diacritics(notes: Path, make_memory: Callable[..., Memory], query: str, path: str) -> None:
    mem = make_memory(provider="none")
    mem.sync()
    res = mem.search(query)
    assert res["results"] and res["results"][0]["path"] == path, res


def test_results_shape_unique_sorted_and_cut(notes: Path, workspace: Path, make_memory: Callable[..., Memory]) -> None:
    for i in range(12):
        write(workspace / "memory" / f"2026-02-{i + 1:02d}.md", f"# Day {i}\n\nRestic backup report {i}.\n")
    mem = make_memory(provider="hash")
    mem.sync()
    res = mem.search("restic backup", max_results=5)
    assert set(res) >= {"results", "provider", "model", "mode"}
    assert len(res["results"]) == 5
    assert all(tuple(r) == RESULT_KEYS for r in res["results"])
    keys = [(r["path"], r["startLine"], r["endLine"]) for r in res["results"]]
    assert len(set(keys)) == len(keys)
    scores = [r["score"] for r in res["results"]]
    assert scores == sorted(scores, reverse=True)


def test_snippet_is_bounded_and_centred_on_the_match() -> None:
    text = "\n".join(f"line {i} filler words about nothing in particular" for i in range(200)) + "\nthe kiwi password"
    snip = make_snippet(text, ["kiwi", "password"], heading="Secrets > Wifi")
    assert len(snip) <= 700
    assert "kiwi password" in snip
    assert snip.startswith("[Secrets > Wifi]\n…")
    assert make_snippet("short text", ["x"]) == "short text"
    cjk = "无关的文字。" * 300 + "我喜欢吃寿司和拉面" + "其他内容。" * 300
    snip = make_snippet(cjk, ["寿司和拉面"])
    assert len(snip) <= 700 and "寿司和拉面" in snip


def test_contains_all_terms() -> None:
    assert contains_all_terms("Backups with Restic to vault", ["restic", "vault"])
    assert not contains_all_terms("Backups with Restic", ["restic", "vault"])
    assert contains_all_terms("Crème brûlée", ["creme", "brulee"])
    assert contains_all_terms("我喜欢吃寿司和拉面", ["寿司"])
    assert not contains_all_terms("anything", [])


def test_common_terms_are_pruned_only_in_large_indexes(
    workspace: Path, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    import mdmemory.search as search_mod

    for i in range(30):
        extra = " quokka sighting" if i == 7 else ""
        write(workspace / "memory" / f"2026-03-{i + 1:02d}.md", f"# Day {i}\n\nCaroline wrote notes{extra}.\n")
    mem = make_memory(provider="none")
    mem.sync()
    calls: list[str] = []
    original = mem.store.keyword_matches

    def spy(match: str, k: int) -> list[tuple[int, float, set[str]]]:
        calls.append(match)
        return original(match, k)

    monkeypatch.setattr(mem.store, "keyword_matches", spy)
    mem.search("caroline quokka")
    assert calls[-1] == '"caroline" OR "quokka"'  # small index: exact query
    monkeypatch.setattr(search_mod, "PRUNE_MIN_CHUNKS", 10)
    res = mem.search("caroline quokka")
    assert calls[-1] == '"quokka"'  # "caroline" is in every chunk: dropped
    assert res["results"][0]["path"] == "memory/2026-03-08.md"
    mem.search("caroline")
    assert calls[-1] == '"caroline"'  # never prune the only term
    mem.search("what did caroline say")
    assert calls[-1] == '"caroline"'  # stop words dropped, the content word kept


def test_snippet_centres_on_content_words_not_stop_words(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    filler = "\n".join(f"- the note {i} is about the plan and the day" for i in range(60))
    write(workspace / "MEMORY.md", f"# Notes\n\n{filler}\n- backups run nightly with restic\n")
    mem = make_memory(provider="none")
    mem.sync()
    hit = mem.search("when do the backups run")["results"][0]
    assert "backups run nightly" in hit["snippet"] and len(hit["snippet"]) <= 700


def test_term_weights_survive_a_total_that_is_behind_the_index() -> None:
    """A concurrent writer can add chunks between reading the chunk count and counting a term."""
    from mdmemory.search import term_weights

    class Racing:
        def chunk_count(self) -> int:
            return 0  # read before another process committed

        def term_frequency_at_least(self, match: str, limit: int) -> int:
            return 3

    ideal, held = term_weights(Racing(), ["heron"], {1: {"heron"}})  # type: ignore[arg-type]
    assert ideal > 0 and held == {1: ideal}
