"""Links as edges: parsing (wikilinks to files, headings and aliases, CJK names, relative Markdown links, links out
of the workspace refused), neighbours on search (``via``) on both stores, ``mdmem links`` and broken links in
status."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from mdmem.files.links import Link, Resolver, heading_slug, parse_links
from mdmem.memory import Memory
from mdmem.util.errors import InvalidArgumentError
from tests.agent_helpers import run_cli, write_config
from tests.conftest import both_backends, write

P = "memory/people/priya.md"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Met [[Bob]] today", [("", "bob", "", "link")]),
        ("Met [[Bob Stone|Bob]] today", [("", "bob stone", "", "link")]),
        ("see [[bob.md]]", [("", "bob", "", "link")]),
        ("see [[people/bob#Work life]]", [("people/bob.md", "", "work-life", "link")]),
        ("see [[#Lisbon years]]", [(P, "", "lisbon-years", "link")]),
        ("[[普丽雅]]和[[東京#旅行]]", [("", "普丽雅", "", "link"), ("", "東京", "旅行", "link")]),
        ("see [the move](../2026-10-02.md#lisbon)", [("memory/2026-10-02.md", "", "lisbon", "link")]),
        ("see [bob](<bob notes.md>) and [b](bob%20notes.md)", [("memory/people/bob notes.md", "", "", "link")] * 2),
        ("see [x](../../../etc/passwd.md)", [("../../../etc/passwd.md", "", "", "refused")]),
        ("see [x](/etc/passwd.md)", [("/etc/passwd.md", "", "", "refused")]),
        ("see [[../../outside]]", [("../../outside", "", "", "refused")]),
        ("web [x](https://example.com/a.md) mail [m](mailto:a@b.c) img ![i](pic.md) pdf [p](a.pdf)", []),
        ("code `[[not a link]]` and ``[x](a.md)``", []),
        ("a supersession ref [old](2026-03-01.md#L4) is no heading", [("memory/people/2026-03-01.md", "", "", "link")]),
        ("![[embedded.png]] is an embed", []),
    ],
)
def test_links_in_a_line(line: str, expected: list[tuple[str, str, str, str]]) -> None:
    assert [(k.target, k.name, k.heading, k.kind) for k in parse_links(line, P)] == expected


def test_front_matter_aliases_and_fenced_code() -> None:
    text = "---\naliases: [PR, 'Priya R.']\n---\n# Priya\n```\n[[in code]]\n```\n- [[Bob]]\n"
    assert parse_links(text, P) == [
        Link(P, 2, "", "pr", "", "alias"),
        Link(P, 2, "", "priya r.", "", "alias"),
        Link(P, 8, "", "bob", "", "link"),
    ]
    listed = "---\ntitle: x\naliases:\n  - PR\n  - Пря\n---\n"
    assert [k.name for k in parse_links(listed, P)] == ["pr", "пря"]


def test_heading_slugs() -> None:
    assert heading_slug("Work life (2026)!") == "work-life-2026"
    assert heading_slug("  東京 旅行 ") == "東京-旅行"


def test_resolver() -> None:
    files = ["memory/people/priya.md", "memory/people/bob.md", "memory/archive/bob.md", "MEMORY.md"]
    r = Resolver(files, [Link("memory/people/priya.md", 2, "", "pr", "", "alias")])
    assert r.target(Link("x", 1, "", "pr", "", "link")) == "memory/people/priya.md"
    assert r.target(Link("x", 1, "", "bob", "", "link")) == "memory/archive/bob.md"  # shallowest, then by name
    assert r.target(Link("x", 1, "people/bob.md", "", "", "link")) == "memory/people/bob.md"  # under memory/
    assert r.target(Link("x", 1, "", "nobody", "", "link")) is None
    assert r.target(Link("x", 1, "../etc/passwd.md", "", "", "refused")) is None
    assert r.names_of("memory/people/priya.md") == {"priya", "pr"}


def linked(workspace: Path) -> None:
    write(
        workspace / "memory/2026-05-01.md",
        "# 2026-05-01\n\n- [10:00] Lunch with [[Priya]]; ask [[bob#Work life|Bob]]\n",
    )
    write(workspace / "memory/people/priya.md", "---\naliases: [PR]\n---\n# Priya\n\n- plays the cello\n")
    write(workspace / "memory/people/bob.md", "# Bob\n\n- likes trains\n\n## Work life\n\n- glassblower in Murano\n")
    write(workspace / "memory/人物/普丽雅.md", "# 普丽雅\n\n- 住在里斯本\n")
    write(workspace / "MEMORY.md", "# Notes\n\n- [[PR]] and [[普丽雅]]; [gone](memory/missing.md); [out](../x.md)\n")


@both_backends
def test_neighbors_bring_the_linked_notes_marked_via(make_memory: Callable[..., Memory], workspace: Path) -> None:
    linked(workspace)
    mem = make_memory(provider="none")
    plain = mem.search("lunch")["results"]
    assert [r["path"] for r in plain] == ["memory/2026-05-01.md"]
    got = mem.search("lunch", neighbors=1)["results"]
    via = "memory/2026-05-01.md#L1-L3"
    assert [(r["path"], r.get("via")) for r in got] == [
        ("memory/2026-05-01.md", None),
        ("memory/people/priya.md", via),
        ("memory/people/bob.md", via),
    ]
    # backlinks: the cello note is linked from the daily log (by name) and from MEMORY.md (by its alias)
    back = {r["path"]: r.get("via") for r in mem.search("cello", neighbors=1)["results"]}
    assert back["MEMORY.md"] == back["memory/2026-05-01.md"] == "memory/people/priya.md#L1-L6"
    cjk = {r["path"] for r in mem.search("里斯本", neighbors=1)["results"]}
    assert cjk == {"memory/人物/普丽雅.md", "MEMORY.md"}
    with pytest.raises(InvalidArgumentError, match="neighbors must be 0 or 1"):
        mem.search("lunch", neighbors=2)
    mem.sync(force=True)
    assert mem.search("lunch", neighbors=1)["results"] == got


def test_links_command_and_broken_links_in_status(
    tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    linked(workspace)
    cfg = str(write_config(tmp_path / "c.json5", workspace, {"memorySearch": {"provider": "none"}}))
    assert run_cli(["index", "--config", cfg]) == 0
    capsys.readouterr()
    assert run_cli(["links", "--config", cfg, "--json", "memory/people/priya.md"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {
        "path": "memory/people/priya.md",
        "links": [],
        "backlinks": [
            {"ref": "MEMORY.md#L3", "to": "[[pr]]"},
            {"ref": "memory/2026-05-01.md#L3", "to": "[[priya]]"},
        ],
        "aliases": ["pr"],
    }
    assert run_cli(["links", "--config", cfg, "MEMORY.md"]) == 0
    text = capsys.readouterr().out
    assert "L3     memory/missing.md  → broken: no such memory file" in text
    assert "L3     ../x.md  → broken: outside the workspace" in text
    assert "L3     [[普丽雅]]  → memory/人物/普丽雅.md#L1" in text
    assert run_cli(["links", "--config", cfg, "memory/2026-05-01.md", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["links"][1] == {
        "line": 3,
        "to": "[[bob]]#work-life",
        "ref": "memory/people/bob.md#L5",
    }
    assert run_cli(["status", "--config", cfg, "--json"]) == 0
    broken = json.loads(capsys.readouterr().out)["brokenLinks"]
    assert broken == {
        "count": 2,
        "shown": [
            {"ref": "MEMORY.md#L3", "to": "memory/missing.md", "reason": "no such memory file"},
            {"ref": "MEMORY.md#L3", "to": "../x.md", "reason": "outside the workspace"},
        ],
    }
    assert run_cli(["links", "--config", cfg, "../outside.md"]) != 0
    assert "traversal" in capsys.readouterr().err


@both_backends
def test_pack_neighbors_within_the_budget_marked_via(make_memory: Callable[..., Memory], workspace: Path) -> None:
    linked(workspace)
    mem = make_memory(provider="none")
    assert [i["path"] for i in mem.pack("lunch")["items"]] == ["memory/2026-05-01.md"]
    pack = mem.pack("lunch", budget_tokens=300, neighbors=1, trace=True)
    via = "memory/2026-05-01.md#L1-L3"
    assert [(i["path"], i.get("via")) for i in pack["items"]] == [
        ("memory/2026-05-01.md", None),
        ("memory/people/priya.md", via),
        ("memory/people/bob.md", via),
    ]
    assert "glassblower in Murano" in pack["bundleText"]  # the linked heading's section
    assert [t.get("via") for t in pack["trace"]] == [None, via, via]
    for budget in (30, 60):
        small = mem.pack("lunch", budget_tokens=budget, neighbors=1)
        assert small["usedTokens"] <= budget
        assert [i["path"] for i in small["items"]][:1] in ([], ["memory/2026-05-01.md"])  # the match comes first
