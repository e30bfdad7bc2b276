"""Search: FTS escaping, BM25 normalisation, CJK, fusion, minScore rule, snippets, result shape."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from mdmem.agent.dispatch import call_tool
from mdmem.agent.schemas import SEARCH_OUTPUT
from mdmem.config.load import load_config
from mdmem.memory import Memory
from mdmem.search.query import cjk_match, contains_all_terms, query_terms
from mdmem.search.results import CITED_RESULT_KEYS
from mdmem.search.scoring import LOW_CONFIDENCE_SHARE, fuse_rrf, fuse_weighted, low_confidence_picks, normalise_bm25
from mdmem.search.snippets import make_snippet
from mdmem.store.fts import fts_match
from mdmem.util.errors import ConfigError, InvalidArgumentError
from tests.conftest import both_backends, write
from tests.test_agent_tools import validate

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
@both_backends
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
    assert tri == ["寿司和", "司和拉", "和拉面"]
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


@both_backends
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


@both_backends
def test_exact_keyword_hit_is_never_hidden_by_min_score(notes: Path, make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(provider="none")
    mem.sync()
    res = mem.search("restic", min_score=0.99)
    assert [r["path"] for r in res["results"]] == ["MEMORY.md"]
    hybrid = make_memory(provider="hash")
    hybrid.sync()
    res = hybrid.search("restic vault", min_score=0.99)
    assert [r["path"] for r in res["results"] if not r.get("lowConfidence")] == ["MEMORY.md"]
    assert res["results"][0]["path"] == "MEMORY.md" and "lowConfidence" not in res["results"][0]
    assert res["results"][0]["score"] < 0.99  # kept by the exact-hit rule, not by its score


@both_backends
def test_min_score_never_returns_candidates_without_any_similarity(
    notes: Path, make_memory: Callable[..., Memory]
) -> None:
    mem = make_memory(provider="hash")
    mem.sync()
    assert max(r["score"] for r in mem.search("zzzunrelated qqqword", min_score=0.0)["results"]) == 0.0
    res = mem.search("zzzunrelated qqqword", min_score=0.35)
    assert res["results"] == [] and "warnings" not in res


@pytest.mark.parametrize(
    ("scores", "limit", "expected"),
    [
        ({1: 0.30, 2: 0.25, 3: 0.20, 4: 0.10}, 3, [1, 2]),  # 0.20 < 0.7 x 0.30
        ({1: 0.30, 2: 0.29, 3: 0.28, 4: 0.27}, 3, [1, 2, 3]),  # a flat distribution fills the limit
        ({4: 0.10, 3: 0.30}, 3, [3]),
        ({1: 0.30, 2: 0.29}, 1, [1]),
        ({1: 0.30, 2: 0.29}, 0, []),  # lowConfidenceResults 0: the empty answer of a strict minScore
        ({1: 0.0, 2: 0.0}, 3, []),  # no similarity at all is not an answer
        ({}, 3, []),
    ],
)
def test_low_confidence_picks(scores: dict[int, float], limit: int, expected: list[int]) -> None:
    assert low_confidence_picks(scores, limit) == expected


@both_backends
def test_nothing_reaching_min_score_returns_the_best_few_marked(
    notes: Path, make_memory: Callable[..., Memory]
) -> None:
    mem = make_memory(provider="hash")
    mem.sync()
    query = "restic collie"  # each word in a different note: no exact hit
    ranked = mem.search(query, min_score=0.0)["results"]
    res = call_tool(mem, "memory_search", {"query": query, "minScore": 0.99})
    validate(res, SEARCH_OUTPUT)
    results = res["results"]
    assert all(r["lowConfidence"] is True for r in results)
    closest = [r for r in ranked[:3] if r["score"] >= LOW_CONFIDENCE_SHARE * ranked[0]["score"]]
    assert [{k: v for k, v in r.items() if k != "lowConfidence"} for r in results] == closest
    assert 1 <= len(results) < len(ranked)  # the others were under 0.7 x the best, or past the limit
    assert res["warnings"] == [
        f"no result reached minScore 0.99; the {len(results)} closest are shown with lowConfidence: true "
        "and may be unrelated: read them before relying on them"
    ]
    assert len(mem.search(query, max_results=1, min_score=0.99)["results"]) == 1

    strict = make_memory({"query": {"lowConfidenceResults": 0}})
    res = strict.search(query, min_score=0.99)
    assert res["results"] == [] and "warnings" not in res  # the rule before lowConfidenceResults


@both_backends
def test_the_top_candidate_is_never_hidden(notes: Path, make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(provider="hash")
    mem.sync()
    words = "backups nightly restic vault collie park balls weather café crème pixel note sushi".split()
    queries = [f"{a} {b}" for a in words for b in words if a < b] + words + ["the weather in Lisbon"]
    for query in queries:
        ranked = mem.search(query, min_score=0.0)["results"]
        for threshold in (0.35, 0.6, 0.99):
            res = mem.search(query, min_score=threshold)
            if ranked and ranked[0]["score"] > 0:
                top = {k: v for k, v in res["results"][0].items() if k != "lowConfidence"}
                assert top == ranked[0], (query, threshold)
            flagged = [r for r in res["results"] if r.get("lowConfidence")]
            assert all(r["score"] < threshold for r in flagged)
            assert bool(flagged) == any("no result reached minScore" in w for w in res.get("warnings", []))
            if any(r["score"] >= threshold for r in ranked):
                assert not flagged, (query, threshold)  # confident answers are never padded


@both_backends
def test_keyword_only_results_are_never_marked(notes: Path, make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(provider="none")
    mem.sync()
    res = mem.search("pixel weather", min_score=0.99)
    assert res["results"] and not any("lowConfidence" in r for r in res["results"])
    assert not any("minScore" in w for w in res["warnings"])


def test_low_confidence_results_is_a_bounded_config_key(workspace: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.json5"
    ms = {"query": {"lowConfidenceResults": 101}}
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": ms}}}))
    with pytest.raises(ConfigError, match=r"query\.lowConfidenceResults: expected an integer from 0 to 100"):
        load_config(cfg)


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
@both_backends
def test_cjk_and_diacritics(notes: Path, make_memory: Callable[..., Memory], query: str, path: str) -> None:
    mem = make_memory(provider="none")
    mem.sync()
    res = mem.search(query)
    assert res["results"] and res["results"][0]["path"] == path, res


@both_backends
def test_results_shape_unique_sorted_and_cut(notes: Path, workspace: Path, make_memory: Callable[..., Memory]) -> None:
    for i in range(12):
        write(workspace / "memory" / f"2026-02-{i + 1:02d}.md", f"# Day {i}\n\nRestic backup report {i}.\n")
    mem = make_memory(provider="hash")
    mem.sync()
    res = mem.search("restic backup", max_results=5)
    assert set(res) >= {"results", "provider", "model", "mode"}
    assert len(res["results"]) == 5
    assert all(tuple(r) == CITED_RESULT_KEYS for r in res["results"])  # citations auto: on in main
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


def test_terms_without_weight_are_dropped_and_common_terms_only_in_large_indexes(
    workspace: Path, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    import mdmem.search.hybrid as search_mod

    for i in range(30):
        extra = " quokka sighting" if i == 7 else " wombat tracks" if i < 5 else ""
        write(workspace / "memory" / f"2026-03-{i + 1:02d}.md", f"# Day {i}\n\nCaroline wrote notes{extra}.\n")
    mem = make_memory(provider="none")
    mem.sync()
    calls: list[str] = []
    original = mem.store.keyword_matches

    def spy(terms: list[str], k: int) -> list[tuple[int, float, set[str]]]:
        calls.append(fts_match(terms) or "")
        return original(terms, k)

    monkeypatch.setattr(mem.store, "keyword_matches", spy)
    exact = [r[0] for r in original(["caroline", "quokka"], 10)]
    res = mem.search("caroline quokka")
    # "caroline" is in every chunk: FTS5 gives it an IDF of zero, so it is dropped even in a small index
    assert calls[-1] == '"quokka"'
    assert res["results"][0]["path"] == "memory/2026-03-08.md"
    assert exact[0] == [r[0] for r in original(["quokka"], 10)][0]  # the same best chunk either way
    mem.search("wombat quokka")
    assert calls[-1] == '"wombat" OR "quokka"'  # in 5 of 30 chunks: weighs something, kept (small index)
    monkeypatch.setattr(search_mod, "PRUNE_MIN_CHUNKS", 10)
    mem.search("wombat quokka")
    assert calls[-1] == '"quokka"'  # a large index also drops a term found in more than 10% of chunks
    mem.search("caroline")
    assert calls[-1] == '"caroline"'  # never prune the only term
    mem.search("what did caroline say")
    assert calls[-1] == '"caroline"'  # stop words dropped, the content word kept


@both_backends
def test_snippet_centres_on_content_words_not_stop_words(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    filler = "\n".join(f"- the note {i} is about the plan and the day" for i in range(60))
    write(workspace / "MEMORY.md", f"# Notes\n\n{filler}\n- backups run nightly with restic\n")
    mem = make_memory(provider="none")
    mem.sync()
    hit = mem.search("when do the backups run")["results"][0]
    assert "backups run nightly" in hit["snippet"] and len(hit["snippet"]) <= 700


def test_term_weights_survive_a_total_that_is_behind_the_index() -> None:
    """A concurrent writer can add chunks between reading the chunk count and counting a term."""
    from mdmem.search.scoring import term_weights

    class Racing:
        def chunk_count(self) -> int:
            return 0  # read before another process committed

        def term_frequency_at_least(self, match: str, limit: int) -> int:
            return 3

    ideal, held = term_weights(Racing(), ["heron"], {1: {"heron"}})  # type: ignore[arg-type]
    assert ideal > 0 and held == {1: ideal}


@both_backends
def test_pruning_never_leaves_a_query_that_matches_nothing(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "memory" / "2026-03-01.md", "# Day 1\n\nAnn adopted a cat.\n")
    write(workspace / "memory" / "2026-03-02.md", "# Day 2\n\nBo planted tomatoes with Ann.\n")
    mem = make_memory(provider="none")
    mem.sync()
    # two chunks: "adopt" is in half of them, "ann" in all (both weigh zero in FTS5): kept, or nothing matches
    assert mem.search("ann adopt", min_score=0)["results"][0]["path"] == "memory/2026-03-01.md"
    # "zebra" is rarer than "ann" but in no chunk at all: "ann" is kept
    assert {r["path"] for r in mem.search("ann zebra", min_score=0)["results"]} == {
        "memory/2026-03-01.md",
        "memory/2026-03-02.md",
    }
