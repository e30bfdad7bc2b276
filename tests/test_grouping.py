"""Implicit supersession: near-duplicate dated lines about the same subject with a different value group, newer
first; look-alikes (two people, two projects, numbered events) never do; results and packs carry the labels."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from mdmem.files.supersession import Supersession
from mdmem.memory import Memory
from mdmem.search.grouping import implicit_supersessions, newer_first
from tests.conftest import both_backends, write

D1, D2, D3 = "memory/2026-03-01.md", "memory/2026-06-15.md", "memory/2026-10-02.md"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("- [09:00] Priya moved to Berlin", "- [18:00] Priya moved to Lisbon"),
        ("- Priya lives in Berlin", "- Priya now lives in Lisbon"),
        ("- The build server is jenkins-01", "- The build server is buildkite"),
        ("- Kai's locker code is 4512", "- Kai's locker code is 7789"),
        ("- Bob uses vim", "- Bob uses emacs nowadays"),
        ("- Wifi password: hunter2", "- Wifi password: correct-horse"),
        ("- Priya's employer is Globex", "- Priya's new employer is Initech"),
        ("- Our team standup is at 9:30", "- Our team standup is at 10:00"),
        ("- 普丽雅 lives in 柏林", "- 普丽雅 lives in 里斯本"),
    ],
)
def test_a_changed_value_groups_newer_first(old: str, new: str) -> None:
    lines = [(D1, 3, old), (D3, 3, new)]
    assert implicit_supersessions(lines) == [Supersession("", 0, D1, 3, D3, 3, "2026-10-02")]
    assert implicit_supersessions(lines[::-1]) == [Supersession("", 0, D1, 3, D3, 3, "2026-10-02")]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("- Priya moved to Berlin", "- Bob moved to Berlin"),  # two people
        ("- Priya moved to Berlin", "- Bob moved to Lisbon"),
        ("- Project Atlas ships in May", "- Project Orion ships in June"),  # two projects
        ("- The Atlas deadline is March 3", "- The Orion deadline is March 3"),
        ("- Restic backup report 3.", "- Restic backup report 7."),  # numbered events
        ("- Sprint 12 review is on Monday", "- Sprint 13 review is on Tuesday"),
        ("- Priya moved to Berlin", "- Priya moved to Berlin"),  # the same fact said twice
        ("- Priya moved to Berlin", "- Priya moved to Berlin for a conference in May with the whole team"),
        ("- Priya moved to Berlin?", "- Priya moved to Lisbon"),  # a question
        ("- Priya likes the new office in Berlin a lot", "- Priya likes the old bakery"),  # too little shared
    ],
)
def test_look_alikes_never_group(a: str, b: str) -> None:
    assert implicit_supersessions([(D1, 3, a), (D3, 3, b)]) == []


def test_a_chain_of_three_and_what_is_marked_by_hand_or_undated() -> None:
    lines = [
        (D1, 3, "- Priya moved to Berlin"),
        (D2, 3, "- Priya moved to Porto"),
        (D3, 3, "- Priya moved to Lisbon"),
        ("MEMORY.md", 5, "- Priya moved to Rome"),  # undated: never grouped
        (D2, 4, "- Kai uses vim (superseded)"),  # marked by hand: the explicit convention speaks
        (D3, 4, "- Kai uses emacs"),
    ]
    assert implicit_supersessions(lines) == [
        Supersession("", 0, D2, 3, D3, 3, "2026-10-02"),
        Supersession("", 0, D1, 3, D2, 3, "2026-06-15"),
    ]
    explicit = [Supersession(D3, 3, D2, 3, D3, 3, "")]
    assert implicit_supersessions(lines, explicit) == []  # D1 groups only with D2, which an explicit one covers


def test_newer_first_moves_only_a_wholly_superseded_result() -> None:
    spans = [
        (D1, 1, 3, "# d\n\n- Priya moved to Berlin"),
        (D2, 1, 3, "# d\n\n- unrelated"),
        (D3, 3, 3, "- Priya moved to Lisbon"),
    ]
    sup = [Supersession("", 0, D1, 3, D3, 3, "2026-10-02")]
    assert newer_first(spans, sup) == [1, 2, 0]
    mixed = [(D1, 3, 4, "- Priya moved to Berlin\n- Bob likes tea"), spans[1], spans[2]]
    assert newer_first(mixed, sup) == [0, 1, 2]  # Bob's line is still current: the result stays


@both_backends
def test_results_and_packs_label_the_older_line(make_memory: Callable[..., Memory], workspace: Path) -> None:
    write(workspace / D1, "# 2026-03-01\n\n- [09:00] Priya moved to Berlin\n")
    write(workspace / D3, "# 2026-10-02\n\n- [18:00] Priya moved to Lisbon\n")
    write(workspace / "memory/2026-04-01.md", "# 2026-04-01\n\n- [10:00] Bob moved to Berlin\n")
    mem = make_memory()
    got = mem.search("where did Priya move", max_results=3, min_score=0)["results"]
    assert got[0]["path"] == D3
    by_path = {r["path"]: r for r in got}
    assert by_path[D1]["superseded"] is True
    assert by_path[D1]["supersededBy"] == [{"line": 3, "by": f"{D3}#L3", "date": "2026-10-02", "implicit": True}]
    assert "supersededBy" not in by_path.get("memory/2026-04-01.md", {})  # Bob: another subject
    items = {i["path"]: i for i in mem.pack("where did Priya move", budget_tokens=300)["items"]}
    assert D3 in items and D1 not in items  # about the present: the history is left out of the pack
    items = {i["path"]: i for i in mem.pack("where did Priya move before", budget_tokens=300)["items"]}
    assert items[D1]["supersededBy"][0]["by"] == f"{D3}#L3" and "supersededBy" not in items[D3]  # kept, labelled
    off = make_memory({"query": {"currentFirst": False}})
    plain = {r["path"]: r for r in off.search("where did Priya move", max_results=3, min_score=0)["results"]}
    assert "supersededBy" not in plain[D1]  # no grouping: the search as it was


def test_a_pack_keeps_one_older_line_for_a_question_about_the_past() -> None:
    from mdmem.pack.currency import asks_history, prefer_current

    spans = [
        (D3, 3, 3, "- Priya moved to Lisbon"),
        (D2, 3, 3, "- Priya moved to Porto"),
        (D1, 3, 3, "- Priya moved to Berlin"),
    ]
    sups = [Supersession("", 0, D2, 3, D3, 3, ""), Supersession("", 0, D1, 3, D2, 3, "")]
    assert prefer_current(spans, sups, "where does Priya live") == [0]
    assert prefer_current(spans, sups, "where did Priya live before Lisbon") == [0, 1]
    for q in (
        "what did Kai use previously",
        "Kai used to live where",
        "when did the build server change",
        "old address",
    ):
        assert asks_history(q), q
    for q in ("where does Kai live", "what is the build server", "who is Kai's manager"):
        assert not asks_history(q), q
