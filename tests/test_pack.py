"""mdmem.pack.build, pure: trimming, merging, duplicates, the budget and the receipts (table-driven), plus a
property test over random files, candidates, budgets and tokenizers."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mdmem.index.chunker import chunk_markdown
from mdmem.pack.build import FOCUS_LINES, HEADER, build_pack
from mdmem.pack.items import Pack, PackItem, cite, kind_of
from mdmem.pack.trim import Window
from mdmem.search.hybrid import Hit
from mdmem.store import ChunkRow
from mdmem.util.tokens import estimate_tokens

DAILY = """# 2026-03-09

## Morning

- Coffee with Mika at the station.
- Booked the vet for Pixel on Thursday.
- Restic backup failed at 02:30: disk full on vault.
- Cleared old snapshots on vault; backups ok again.
- Lunch was ramen.
- Watered the basil.
- Read a chapter of Dune.
"""
MEMORY = """# Long-term memory

## Infra

- Backups run nightly at 02:30 with restic.
- The NAS is called vault.

## People

- Dana prefers oat milk.
"""
FILES = {"memory/2026-03-09.md": DAILY, "MEMORY.md": MEMORY}


def lines_of(files: dict[str, str]) -> Callable[[str], list[str] | None]:
    def read(path: str) -> list[str] | None:
        return files[path].split("\n") if path in files else None

    return read


def chunk(path: str, start: int, end: int, cid: int, files: dict[str, str] = FILES, source: str = "memory") -> ChunkRow:
    text = "\n".join(files[path].split("\n")[start - 1 : end])
    return ChunkRow(path, source, start, end, f"h{cid}", f"e{cid}", "", text, id=cid)


def hit(c: ChunkRow, score: float, vec: float | None = None, kw: float | None = None) -> Hit:
    return Hit(c, score, vec if vec is not None else score, kw if kw is not None else score)


def pack(hits: list[Hit], query: str = "backup vault", budget: int = 1000, files: dict[str, str] = FILES, **kw) -> Pack:
    terms = kw.pop("terms", [t for t in query.lower().split()])
    kw.setdefault("span", 1)  # the selection tests: one focus line, one line of context, no widening
    kw.setdefault("widen_after", None)
    return build_pack(
        hits,
        query=query,
        terms=terms,
        mode=kw.pop("mode", "hybrid"),
        lines_of=lines_of(files),
        budget_tokens=budget,
        **kw,
    )


def file_lines(path: str, start: int, end: int, files: dict[str, str] = FILES) -> str:
    return "\n".join(files[path].split("\n")[start - 1 : end])


# -- trimming ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "window", "expected", "heading"),
    [
        ("disk full", None, (3, 8), None),  # terms on 7: pair 6-7 (first of the ties) + 5 and 8; heading joins
        ("dune chapter", None, (9, 11), (3, "## Morning")),  # last line: the pair 10-11, context only above
        ("coffee mika", None, (3, 7), None),  # first line: pair 5-6, context 7, the heading above joins
        ("zzz", None, (3, 11), None),  # no line holds a term: the chunk stays whole, with its heading
        ("zzz", Window(9, 10, 0.9), (8, 11), (3, "## Morning")),  # only a window points at lines 9-10
        ("vault", Window(5, 6, 0.3), (6, 9), (3, "## Morning")),  # two lines with the term beat a weak window
    ],
)
def test_trimming_keeps_the_best_pair_with_context_and_exact_text(query, window, expected, heading) -> None:
    c = chunk("memory/2026-03-09.md", 5, 11, 1)
    windows = {1: [window]} if window else {}
    p = pack([hit(c, 0.8)], query=query, windows=windows, span=FOCUS_LINES)
    [item] = p.items
    assert (item.start_line, item.end_line) == expected
    assert item.text == file_lines(item.path, *expected)
    assert (item.heading_line, item.heading) == (heading or (None, None))
    assert item.ref == cite(item.path, *expected)


def test_the_top_candidates_grow_to_their_whole_chunks_before_deeper_ones_are_trimmed() -> None:
    hits = [
        hit(chunk("memory/2026-03-09.md", 5, 11, 1), 0.9),
        hit(chunk("MEMORY.md", 5, 7, 2), 0.8),
        hit(chunk("MEMORY.md", 10, 10, 3), 0.7),  # third: considered after the widening
    ]
    p = build_pack(hits, query="disk", terms=["disk"], mode="hybrid", lines_of=lines_of(FILES), budget_tokens=1000)
    assert [i.ref for i in p.items] == ["memory/2026-03-09.md#L3-L11", "MEMORY.md#L3-L6", "MEMORY.md#L8-L10"]
    assert [(r.ref, r.reason) for r in p.receipts] == [
        ("memory/2026-03-09.md#L3-L11", "selected"),  # widened from its trimmed range 3-8 to the chunk
        ("MEMORY.md#L3-L6", "selected"),
        ("MEMORY.md#L8-L10", "selected"),
    ]
    assert p.receipts[0].tokens == estimate_tokens(p.items[0].block() + "\n\n")
    tight = build_pack(hits, query="disk", terms=["disk"], mode="hybrid", lines_of=lines_of(FILES), budget_tokens=90)
    assert tight.items[0].ref == "memory/2026-03-09.md#L3-L8"  # no room to grow: it stays trimmed
    assert tight.used_tokens <= 90 and tight.receipts[0].reason == "selected"


def test_a_small_chunk_stays_whole_and_a_one_line_ref_has_no_range() -> None:
    p = pack([hit(chunk("MEMORY.md", 6, 6, 1), 0.9)], query="nas")
    [item] = p.items
    assert (item.ref, item.text, item.heading_line) == ("MEMORY.md#L6", "- The NAS is called vault.", 3)
    [item] = pack([hit(chunk("MEMORY.md", 10, 10, 1), 0.9)], query="oat milk").items
    assert (item.ref, item.heading_line) == ("MEMORY.md#L8-L10", None)  # the heading above joins the range


def test_item_fields_kind_date_and_bundle() -> None:
    p = pack([hit(chunk("memory/2026-03-09.md", 5, 11, 1), 0.9), hit(chunk("MEMORY.md", 5, 6, 2), 0.7)])
    daily, curated = (i.to_dict() for i in p.items)
    assert daily["kind"] == "daily" and daily["date"] == "2026-03-09" and daily["source"] == "memory"
    assert curated["kind"] == "curated" and "date" not in curated
    assert p.bundle_text == "\n\n".join(
        [
            HEADER,
            "## Morning\n" + file_lines("memory/2026-03-09.md", 6, 8) + "\nSource: memory/2026-03-09.md#L6-L8",
            file_lines("MEMORY.md", 3, 6) + "\nSource: MEMORY.md#L3-L6",
        ]
    )
    assert p.used_tokens == estimate_tokens(p.bundle_text) <= p.budget_tokens


@pytest.mark.parametrize(
    ("path", "source", "kind"),
    [
        ("MEMORY.md", "memory", "curated"),
        ("memory.md", "memory", "curated"),
        ("memory/2026-03-09.md", "memory", "daily"),
        ("memory/2026-03-09-standup.md", "memory", "daily"),
        ("memory/projects.md", "memory", "curated"),
        ("notes/2026-03-09.md", "extra", "extra"),
    ],
)
def test_kind_of(path: str, source: str, kind: str) -> None:
    assert kind_of(path, source) == kind


# -- selection: merge, duplicates, budget, caps, threshold, stale ---------------------------------------------


def reasons(p: Pack) -> list[tuple[str, str, str]]:
    return [(r.ref, r.decision, r.reason) for r in p.receipts]


def test_overlapping_chunks_of_one_file_merge_and_the_receipt_names_the_final_item() -> None:
    first = chunk("memory/2026-03-09.md", 5, 8, 1)  # "disk full" -> focus 7 -> 6-8
    second = chunk("memory/2026-03-09.md", 8, 11, 2)  # "ramen" -> focus 9 -> 8-10, overlapping 6-8
    p = pack([hit(first, 0.9), hit(second, 0.6)], query="disk full ramen")
    [item] = p.items
    assert (item.start_line, item.end_line, item.score) == (6, 10, 0.9)
    assert item.text == file_lines(item.path, 6, 10)
    ref = "memory/2026-03-09.md#L6-L10"
    assert reasons(p) == [
        ("memory/2026-03-09.md#L6-L8", "included", "selected"),
        ("memory/2026-03-09.md#L8-L10", "included", f"merged_into {ref}"),
    ]


def test_a_candidate_bridging_two_items_merges_them_into_one() -> None:
    hits = [
        hit(chunk("memory/2026-03-09.md", 5, 5, 1), 0.9),  # 3-5 (with the heading)
        hit(chunk("memory/2026-03-09.md", 7, 7, 2), 0.8),  # 7
        hit(chunk("memory/2026-03-09.md", 6, 6, 3), 0.7),  # 6 touches both
    ]
    p = pack(hits, query="vault")
    assert [i.ref for i in p.items] == ["memory/2026-03-09.md#L3-L7"]
    assert reasons(p)[2] == ("memory/2026-03-09.md#L6", "included", "merged_into memory/2026-03-09.md#L3-L7")
    assert p.used_tokens == estimate_tokens(p.bundle_text)


def test_a_candidate_inside_an_included_item_is_a_duplicate() -> None:
    whole = chunk("memory/2026-03-09.md", 5, 11, 1)
    inner = chunk("memory/2026-03-09.md", 6, 8, 2)
    p = pack([hit(whole, 0.9), hit(inner, 0.8)], query="disk full")
    assert [i.ref for i in p.items] == ["memory/2026-03-09.md#L6-L8"]
    assert reasons(p)[1] == ("memory/2026-03-09.md#L6-L8", "excluded", "duplicate_of memory/2026-03-09.md#L6-L8")


def test_the_same_note_in_another_file_is_a_duplicate() -> None:
    files = {
        **FILES,
        "memory/copy.md": "## Infra\n\n- Backups run nightly at 02:30 with restic.\n- The NAS is called vault.\n",
    }
    p = pack(
        [hit(chunk("MEMORY.md", 3, 6, 1), 0.9), hit(chunk("memory/copy.md", 1, 4, 2, files), 0.85)],
        query="backups nightly",
        files=files,
    )
    assert [i.path for i in p.items] == ["MEMORY.md"]
    assert reasons(p)[1] == ("memory/copy.md#L1-L4", "excluded", "duplicate_of MEMORY.md#L3-L6")


def test_over_budget_skips_a_big_candidate_but_a_smaller_one_further_down_fits() -> None:
    big = "\n".join(f"- line {i} about the backup of vault number {i} " + "x" * 60 for i in range(3))
    files = {**FILES, "memory/big.md": big}
    hits = [
        hit(chunk("MEMORY.md", 10, 10, 1), 0.9),
        hit(chunk("memory/big.md", 1, 3, 2, files), 0.8),
        hit(chunk("memory/2026-03-09.md", 12, 12, 3), 0.7),
    ]
    budget = estimate_tokens(HEADER) + 30
    p = pack(hits, query="backup", budget=budget, files=files, terms=["backup"])
    assert [r[1:] for r in reasons(p)] == [
        ("included", "selected"),
        ("excluded", "over_budget"),
        ("included", "selected"),
    ]
    assert p.used_tokens <= budget and p.receipts[1].tokens and p.receipts[1].tokens > 30


def test_the_best_match_left_out_for_the_budget_is_named_with_the_budget_that_holds_it() -> None:
    """A best match that cannot be narrowed (no line holds a term) is left out; a smaller one further down
    fits. The pack names the best one and the smallest budget that packs it, and that budget does."""
    big = "\n".join(f"- line {i} of a long note " + "x" * 80 for i in range(6))
    files = {**FILES, "memory/big.md": big}
    hits = [hit(chunk("memory/big.md", 1, 6, 1, files), 0.9), hit(chunk("MEMORY.md", 10, 10, 2), 0.5)]
    budget = estimate_tokens(HEADER) + 30
    p = pack(hits, query="zzz", budget=budget, files=files, terms=["zzz"])
    assert [i.ref for i in p.items] == ["MEMORY.md#L8-L10"] and p.matched == 2
    assert p.best_left_out is not None and p.best_left_out.ref == "memory/big.md#L1-L6"
    need = p.best_left_out.budget_tokens
    assert need > budget and p.to_dict()["bestLeftOut"] == {"ref": "memory/big.md#L1-L6", "budgetTokens": need}
    alone = pack(hits[:1], query="zzz", budget=need, files=files, terms=["zzz"])
    assert [i.ref for i in alone.items] == ["memory/big.md#L1-L6"] and alone.used_tokens <= need
    assert alone.best_left_out is None
    assert pack(hits[:1], query="zzz", budget=need - 1, files=files, terms=["zzz"]).items == []
    nothing = pack([], query="zzz")
    assert (nothing.matched, nothing.best_left_out) == (0, None) and "bestLeftOut" not in nothing.to_dict()


def test_a_tight_budget_narrows_a_candidate_to_its_best_line() -> None:
    c = chunk("memory/2026-03-09.md", 5, 11, 1)
    wide = pack([hit(c, 0.8)], query="disk full", span=FOCUS_LINES)
    assert wide.items[0].ref == "memory/2026-03-09.md#L3-L8"  # the pair 6-7, a line each side, the heading
    block = f"## Morning\n{file_lines('memory/2026-03-09.md', 7, 7)}\nSource: memory/2026-03-09.md#L7\n\n"
    line = estimate_tokens(HEADER) + estimate_tokens(block)  # the line, its heading beside it, its citation
    tight = pack([hit(c, 0.8)], query="disk full", span=FOCUS_LINES, budget=line)
    [item] = tight.items
    assert (item.start_line, item.end_line, item.heading) == (7, 7, "## Morning")  # the line that holds the terms
    assert tight.used_tokens <= line and tight.receipts[0].ref == "memory/2026-03-09.md#L7"


def test_max_items_and_below_min_score() -> None:
    hits = [
        hit(chunk("MEMORY.md", 10, 10, 1), 0.9),
        hit(chunk("MEMORY.md", 5, 6, 2), 0.2, kw=0.5),  # below 0.35 but holds every query term: kept
        hit(chunk("memory/2026-03-09.md", 12, 12, 3), 0.1, kw=0.0),  # below, no exact hit
        hit(chunk("memory/2026-03-09.md", 5, 6, 4), 0.5),
    ]
    p = pack(hits, query="backups nightly", min_score=0.35, max_items=2)
    assert [r[1:] for r in reasons(p)] == [
        ("included", "selected"),
        ("included", "selected"),
        ("excluded", "below_min_score"),
        ("excluded", "max_items"),
    ]
    keyword = pack(hits, query="backups nightly", min_score=0.35, mode="keyword")
    assert [r.decision for r in keyword.receipts] == ["included"] * 4  # no threshold in keyword mode


def test_min_score_as_memory_search_applies_it_pending_vectors_and_low_confidence() -> None:
    pending = Hit(chunk("MEMORY.md", 10, 10, 1), 0.2, None, 0.2)  # no vector yet: found by keywords, kept
    weak = hit(chunk("memory/2026-03-09.md", 12, 12, 2), 0.1, kw=0.0)
    p = pack([pending, weak], query="oat coffee", min_score=0.35, low_confidence=3)
    assert [r.reason for r in p.receipts] == ["selected", "below_min_score"]
    assert not any(i.low_confidence for i in p.items)
    # nothing reaches minScore and nothing is exact or pending: the closest (>= 70% of the best) come marked
    hits = [hit(chunk("MEMORY.md", 10, 10, 1), 0.3, kw=0.0), hit(chunk("memory/2026-03-09.md", 12, 12, 2), 0.1, kw=0.0)]
    p = pack(hits, query="oat coffee", min_score=0.35, low_confidence=3)
    assert [r.reason for r in p.receipts] == ["selected", "below_min_score"]
    assert [i.to_dict().get("lowConfidence") for i in p.items] == [True]
    assert pack(hits, query="oat coffee", min_score=0.35).items == []  # low_confidence 0: none


def test_a_file_changed_since_indexing_or_gone_is_stale() -> None:
    c = chunk("MEMORY.md", 5, 6, 1)
    edited = {**FILES, "MEMORY.md": "# moved\n" + MEMORY}
    gone = {k: v for k, v in FILES.items() if k != "MEMORY.md"}
    for files in (edited, gone):
        p = pack([hit(c, 0.9)], files=files)
        assert p.items == [] and reasons(p) == [("MEMORY.md#L5-L6", "excluded", "stale")]
        assert p.bundle_text == "" and p.used_tokens == 0


def test_a_budget_below_the_header_gives_an_empty_pack() -> None:
    p = pack([hit(chunk("MEMORY.md", 10, 10, 1), 0.9)], budget=5)
    assert (p.items, p.bundle_text, p.used_tokens) == ([], "", 0)
    assert reasons(p) == [("MEMORY.md#L8-L10", "excluded", "over_budget")]


def test_a_tokenizer_that_is_not_additive_is_caught_by_the_final_count() -> None:
    """Parts priced alone undercount the whole: the last additions are undone until the bundle fits."""

    def count(text: str) -> int:
        return len(text) // 4 + (len(text) // 100) ** 2

    hits = [hit(chunk("memory/2026-03-09.md", s, s, s), 0.9 - s / 100) for s in (5, 7, 9, 11)]
    hits.append(hit(chunk("MEMORY.md", 10, 10, 10), 0.5))
    p = pack(hits, query="the", terms=["the"], budget=90, count=count)
    assert p.used_tokens == count(p.bundle_text) <= 90
    greedy = count(HEADER) + sum(r.tokens or 0 for r in p.receipts[:3])
    assert greedy <= 90  # the third item fitted by its own price, but not in the bundle as a whole
    assert [r.reason for r in p.receipts] == ["selected", "selected"] + ["over_budget"] * 3
    assert sum(r.decision == "included" for r in p.receipts) == len(p.items)


def test_the_trace_has_one_receipt_per_candidate_and_no_memory_text() -> None:
    hits = [hit(chunk("memory/2026-03-09.md", 5, 11, 1), 0.9), hit(chunk("MEMORY.md", 1, 10, 2), 0.1, kw=0.0)]
    p = pack(hits, min_score=0.35)
    trace = p.to_dict(trace=True)["trace"]
    assert [r["rank"] for r in trace] == [1, 2]
    assert set(trace[0]) == {"rank", "ref", "vectorScore", "keywordScore", "score", "decision", "reason", "tokens"}
    dumped = json.dumps(trace)
    for text in FILES.values():
        for line in text.split("\n"):
            if line.startswith("- "):
                assert line[2:] not in dumped and line[2:12] not in dumped
    assert "trace" not in p.to_dict()


# -- property: any files, candidates, budget and tokenizer ----------------------------------------------------

WORDS = ["backup", "vault", "Dana", "oat", "milk", "vet", "Pixel", "ramen", "寿司", "京都", "the", "at", "02:30"]
line_st = st.one_of(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(lambda w: "- " + " ".join(w)),
    st.sampled_from(["", "", "## Section", "# 2026-03-09", "```", "x" * 300]),
)
file_st = st.lists(line_st, min_size=1, max_size=40).map("\n".join)
counters = {
    "estimate": estimate_tokens,
    "words": lambda t: len(t.split()) + 2,  # a tokenizer that adds [CLS]/[SEP]
    "superadditive": lambda t: len(t) // 4 + (len(t) // 120) ** 2,
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    files=st.lists(file_st, min_size=1, max_size=4),
    picks=st.lists(st.tuples(st.integers(0, 10_000), st.floats(0, 1)), min_size=0, max_size=25),
    budget=st.integers(1, 1500),
    max_items=st.one_of(st.none(), st.integers(1, 6)),
    counter=st.sampled_from(sorted(counters)),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
    mode=st.sampled_from(["hybrid", "keyword", "vector"]),
    by_line=st.booleans(),
)
def test_property_budget_ranges_and_receipts(files, picks, budget, max_items, counter, query, mode, by_line) -> None:
    texts = {f"memory/2026-01-{i + 1:02d}.md": t for i, t in enumerate(files)}
    chunks = [c for path, t in texts.items() for c in chunk_markdown(t, path, tokens=60, overlap=15)]
    if not chunks:
        return
    hits = []
    for n, (i, s) in enumerate(picks):
        c = chunks[i % len(chunks)]
        hits.append(
            Hit(ChunkRow(c.path, "memory", c.start_line, c.end_line, c.hash, c.hash, c.heading, c.text, n), s, s, s)
        )
    windows = {
        h.chunk.id: [Window(h.chunk.start_line, h.chunk.start_line, s)] for h, (_, s) in zip(hits, picks, strict=True)
    }
    count = counters[counter]
    p = build_pack(
        hits,
        query=query,
        terms=query.lower().split(),
        mode=mode,
        lines_of=lines_of(texts),
        budget_tokens=budget,
        windows=windows,
        count=count,
        min_score=0.3,
        max_items=max_items,
        price_by_line=by_line,
    )
    base = count("")
    assert p.used_tokens <= budget
    assert p.used_tokens == (count(p.bundle_text) - base if p.bundle_text else 0)
    assert len(p.receipts) == len(hits) and [r.rank for r in p.receipts] == list(range(1, len(hits) + 1))
    if max_items is not None:
        assert len(p.items) <= max_items
    for item in p.items:
        assert item.text == "\n".join(texts[item.path].split("\n")[item.start_line - 1 : item.end_line])
        if item.heading_line is not None:
            assert (
                item.heading_line < item.start_line
                and texts[item.path].split("\n")[item.heading_line - 1] == item.heading
            )
    for a in p.items:  # merged: no two items of one file overlap or touch
        for b in p.items:
            if a is not b and a.path == b.path:
                assert a.end_line + 1 < b.start_line or b.end_line + 1 < a.start_line
    for r in p.receipts:
        if r.decision == "included":
            path, _, span = r.ref.partition("#L")
            start, _, end = span.partition("-L")
            assert any(
                i.path == path and i.start_line <= int(start) and int(end or start) <= i.end_line for i in p.items
            )
    assert all(isinstance(i, PackItem) for i in p.items)


def test_without_explain_the_same_items_are_packed_and_only_max_items_reasons_differ() -> None:
    """A recall asks for no trace: candidates beyond ``max_items`` are then not compared with the items in."""
    words = "kiwi fig plum lime pear date yuzu sloe rowan quince medlar lychee guava mango papaya".split()
    lines = [f"- vault {' '.join(words[(i * 7 + j) % 15] + str(i) for j in range(6))}" for i in range(1, 41)]
    lines[30] = lines[0]  # the candidate on line 33 repeats the one on line 3: a near-duplicate
    files = {"memory/2026-03-09.md": "# Log\n\n" + "\n".join(lines)}
    hits = [hit(chunk("memory/2026-03-09.md", n, n, n, files), 0.9 - n / 100) for n in range(3, 40, 3)]
    hits.append(hit(chunk("memory/2026-03-09.md", 4, 4, 99, files), 0.1))  # touches an item: merged either way
    explained = pack(hits, files=files, max_items=4, span=1)
    quick = pack(hits, files=files, max_items=4, span=1, explain=False)
    assert quick.items == explained.items and quick.bundle_text == explained.bundle_text
    assert quick.used_tokens == explained.used_tokens
    for a, b in zip(quick.receipts, explained.receipts, strict=True):
        assert (a.ref, a.decision) == (b.ref, b.decision)
        assert a.reason == b.reason or (a.reason == "max_items" and b.decision == "excluded")
    assert any(r.reason.startswith("merged_into") for r in quick.receipts)
    assert sum(r.decision == "included" for r in quick.receipts) == 5
    assert any(r.reason.startswith("duplicate_of") for r in explained.receipts)
