"""Supersession: the Markdown convention, ``remember --supersedes`` on real files (concurrent writers, a hand edit in
between), and the labels results carry, on both stores, rebuilt by ``index --force``."""

from __future__ import annotations

import json
import multiprocessing
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mdmem.agent.remember import remember
from mdmem.agent.supersede import StaleReference, locate, mark
from mdmem.config.load import AgentConfig
from mdmem.files.supersession import Supersession, parse_ref, parse_supersessions, strip_markers
from mdmem.files.workspace import Workspace
from mdmem.memory import Memory
from mdmem.util.errors import ConfigError, WorkspaceError
from tests.agent_helpers import agent_config, run_cli, write_config
from tests.conftest import both_backends, write

AT = datetime(2026, 10, 2, 9, 30, tzinfo=UTC)
OLD = "memory/2026-03-01.md"
DAY = "# 2026-03-01\n\n- [09:10] Priya lives in Berlin\n- [09:12] Bob drinks tea\n"


@pytest.fixture
def agent(tmp_path: Path, workspace: Path) -> AgentConfig:
    return agent_config(tmp_path, workspace, userTimezone="UTC")


# -- the convention -----------------------------------------------------------------------------------------
P = "memory/2026-03-01.md"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "- [09:10] Priya lives in Berlin (superseded 2026-10-02 → memory/2026-10-02.md#L4)",
            [(P, 1, "memory/2026-10-02.md", 4, "2026-10-02")],
        ),
        ("- Priya lives in Berlin (Superseded -> memory/2026-10-02.md#L4-L6)", [(P, 1, "memory/2026-10-02.md", 4, "")]),
        (
            "- Priya lives in Berlin (superseded by [the move](2026-10-02.md#L4))",
            [(P, 1, "memory/2026-10-02.md", 4, "")],
        ),
        ("- Priya lives in Berlin (replaced on 2026-10-02 by <MEMORY.md#L9>)", [(P, 1, "MEMORY.md", 9, "2026-10-02")]),
        ("- Priya lives in Berlin (outdated)", [(P, 1, "", 0, "")]),
        ("- [09:10] ~~Priya lives in Berlin~~", [(P, 1, "", 0, "")]),
        ("* ~~Priya lives in Berlin~~ (superseded 2026-10-02)", [(P, 1, "", 0, "2026-10-02")]),
        ("- [x] ~~ship the beta~~", [(P, 1, "", 0, "")]),
        ("- Priya lives in ~~Berlin~~ Lisbon", []),  # an edit in place, not a superseded line
        ("- Priya (who once superseded Bob) lives in Berlin", []),
        ("- the word superseded alone says nothing", []),
        ("- Priya lives in Berlin (superseded → ../../etc/passwd#L1)", [(P, 1, "", 0, "")]),  # out: ignored
        ("- Priya lives in Berlin (superseded → https://example.com/x.md#L1)", [(P, 1, "", 0, "")]),
    ],
)
def test_old_line_markers(line: str, expected: list[tuple[str, int, str, int, str]]) -> None:
    found = parse_supersessions(line, P)
    assert found == [Supersession(P, 1, old, n, new, m, d) for old, n, new, m, d in expected]


@pytest.mark.parametrize(
    ("line", "target"),
    [
        ("- [10:00] Priya is back in Lisbon (supersedes memory/2026-03-01.md#L3)", ("memory/2026-03-01.md", 3)),
        ("- Priya is back in Lisbon (replaces [Berlin](./2026-03-01.md#L3))", ("memory/2026-03-01.md", 3)),
        ("- Priya is back in Lisbon (supersedes: MEMORY.md#L2)", ("MEMORY.md", 2)),
        ("- Priya 回到了里斯本 (supersedes memory/人物/普丽雅.md#L2)", ("memory/人物/普丽雅.md", 2)),
    ],
)
def test_new_line_markers(line: str, target: tuple[str, int]) -> None:
    assert parse_supersessions(line, "memory/2026-10-02.md") == [
        Supersession("memory/2026-10-02.md", 1, *target, "memory/2026-10-02.md", 1)
    ]


def test_markers_in_fenced_code_are_examples_not_facts() -> None:
    text = (
        "# How to\n\n```md\n- old (superseded)\n- ~~old~~\n```\n\n~~~\n- x (supersedes a.md#L1)\n~~~\n"
        "- real (outdated)\n"
    )
    assert [s.line for s in parse_supersessions(text, P)] == [11]


@pytest.mark.parametrize(
    ("ref", "base", "expected"),
    [
        ("memory/a.md#L3", "memory/b.md", ("memory/a.md", 3)),
        ("a.md#L3", "memory/x/b.md", ("memory/x/a.md", 3)),
        ("../a.md#L3", "memory/x/b.md", ("memory/a.md", 3)),
        ("MEMORY.md#L2", "memory/b.md", ("MEMORY.md", 2)),
        ("#L7", "memory/b.md", ("memory/b.md", 7)),
        ("../../a.md#L3", "memory/b.md", None),
        ("/etc/a.md#L3", "memory/b.md", None),
        ("C:/a.md#L3", "memory/b.md", None),
        ("memory/a.md", "memory/b.md", None),
        ("memory/a.md#L0", "memory/b.md", None),
    ],
)
def test_references(ref: str, base: str, expected: tuple[str, int] | None) -> None:
    assert parse_ref(ref, base) == expected


def test_strip_markers_leaves_the_fact() -> None:
    assert strip_markers("- [09:10] ~~Priya lives in Berlin~~ (superseded 2026-10-02 → a.md#L1)") == (
        "- [09:10] Priya lives in Berlin"
    )


# -- remember --supersedes ----------------------------------------------------------------------------------
def test_supersedes_marks_the_old_line_and_nothing_else(agent: AgentConfig, workspace: Path) -> None:
    raw = b"# 2026-03-01\r\n\r\n- [09:10] Priya lives in Berlin\r\n- [09:12] Bob drinks tea\r\n\r\ntail without newline"
    (workspace / OLD).write_bytes(raw)
    result = remember(agent, "Priya is back in Lisbon", at=AT, supersedes=f"{OLD}#L3")
    assert result == {
        "path": "memory/2026-10-02.md",
        "line": f"- [09:30] Priya is back in Lisbon (supersedes {OLD}#L3)",
        "created": True,
        "indexed": False,
        "ref": "memory/2026-10-02.md#L3",
        "supersedes": f"{OLD}#L3",
        "marked": True,
    }
    marked = b"- [09:10] Priya lives in Berlin (superseded 2026-10-02 \xe2\x86\x92 memory/2026-10-02.md#L3)\r\n"
    assert (workspace / OLD).read_bytes() == raw.replace(b"- [09:10] Priya lives in Berlin\r\n", marked)
    new = (workspace / "memory/2026-10-02.md").read_text()
    assert new == f"# 2026-10-02\n\n- [09:30] Priya is back in Lisbon (supersedes {OLD}#L3)\n"
    both = parse_supersessions((workspace / OLD).read_text(), OLD) + parse_supersessions(new, "memory/2026-10-02.md")
    assert {(s.old_path, s.old_line, s.new_path, s.new_line) for s in both} == {(OLD, 3, "memory/2026-10-02.md", 3)}


def test_supersedes_in_the_same_file_numbers_the_new_line(agent: AgentConfig, workspace: Path) -> None:
    write(workspace / "memory/2026-10-02.md", "# 2026-10-02\n\n- [08:00] Priya lives in Berlin")  # no final newline
    result = remember(agent, "Priya is back in Lisbon", at=AT, supersedes="memory/2026-10-02.md:3")
    assert (workspace / "memory/2026-10-02.md").read_text() == (
        "# 2026-10-02\n\n- [08:00] Priya lives in Berlin (superseded 2026-10-02 → memory/2026-10-02.md#L4)\n"
        "- [09:30] Priya is back in Lisbon (supersedes memory/2026-10-02.md#L3)\n"
    )
    assert result["ref"] == "memory/2026-10-02.md#L4"


@pytest.mark.parametrize(
    ("ref", "error", "says"),
    [
        ("memory/2026-03-01.md", ConfigError, "not a line reference"),
        ("memory/2026-03-01.md#L1", ConfigError, "holds 0 fact lines"),  # a heading
        ("memory/2026-03-01.md#L2", ConfigError, "holds 0 fact lines"),  # blank
        ("memory/2026-03-01.md#L3-L4", ConfigError, "holds 2 fact lines"),
        ("memory/2026-03-01.md#L40", ConfigError, "no line 40"),
        ("memory/missing.md#L3", WorkspaceError, "does not exist"),
        ("../outside.md#L1", WorkspaceError, "'..'"),
        ("notes.txt#L1", WorkspaceError, "not a Markdown"),
    ],
)
def test_supersedes_refuses_a_bad_reference_and_writes_nothing(
    agent: AgentConfig, workspace: Path, ref: str, error: type[Exception], says: str
) -> None:
    write(workspace / OLD, DAY)
    write(workspace.parent / "outside.md", "- a fact\n")
    with pytest.raises(error, match=re.escape(says)):
        remember(agent, "Priya is back in Lisbon", at=AT, supersedes=ref)
    assert (workspace / OLD).read_text() == DAY
    assert not (workspace / "memory/2026-10-02.md").exists()


def test_an_extra_path_outside_the_workspace_is_refused(tmp_path: Path, workspace: Path) -> None:
    extra = write(tmp_path / "elsewhere" / "notes.md", "# Notes\n\n- Priya lives in Berlin\n")
    agent = agent_config(tmp_path, workspace, userTimezone="UTC", memorySearch={"extraPaths": [str(extra.parent)]})
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        remember(agent, "Priya is back in Lisbon", at=AT, supersedes=f"{extra}#L3")
    assert extra.read_text() == "# Notes\n\n- Priya lives in Berlin\n"


def test_an_already_superseded_line_is_refused(agent: AgentConfig, workspace: Path) -> None:
    write(workspace / OLD, DAY)
    remember(agent, "Priya is back in Lisbon", at=AT, supersedes=f"{OLD}#L3")
    before = (workspace / OLD).read_text(), (workspace / "memory/2026-10-02.md").read_text()
    with pytest.raises(StaleReference, match="already superseded by memory/2026-10-02.md#L3"):
        remember(agent, "Priya moved to Porto", at=AT, supersedes=f"{OLD}#L3")
    assert ((workspace / OLD).read_text(), (workspace / "memory/2026-10-02.md").read_text()) == before


def test_a_line_moved_by_a_hand_edit_since_indexing_is_found(
    make_memory: Callable[..., Memory], workspace: Path
) -> None:
    write(workspace / OLD, DAY)
    mem = make_memory(provider="none")
    mem.sync()
    hit = mem.search("Priya Berlin")["results"][0]
    assert (hit["path"], hit["startLine"]) == (OLD, 1)
    # edited by hand after the search: two lines above the fact, which is now line 5
    write(
        workspace / OLD,
        "# 2026-03-01\n\n- [08:00] woke early\n- [08:05] coffee\n"
        "- [09:10] Priya lives in Berlin\n- [09:12] Bob drinks tea\n",
    )
    result = mem.remember("Priya is back in Lisbon", supersedes=f"{OLD}#L3")
    assert result["supersedes"] == f"{OLD}#L5"
    lines = (workspace / OLD).read_text().split("\n")
    assert lines[2] == "- [08:00] woke early" and lines[4].startswith("- [09:10] Priya lives in Berlin (superseded ")
    assert result["line"].endswith(f"(supersedes {OLD}#L5)")


def test_a_line_changed_by_hand_since_indexing_is_refused(make_memory: Callable[..., Memory], workspace: Path) -> None:
    write(workspace / OLD, DAY)
    mem = make_memory(provider="none")
    mem.sync()
    edited = DAY.replace("Priya lives in Berlin", "Priya lives in Hamburg")
    write(workspace / OLD, edited)
    with pytest.raises(StaleReference, match="changed since it was indexed"):
        mem.remember("Priya is back in Lisbon", supersedes=f"{OLD}#L3")
    assert (workspace / OLD).read_text() == edited
    assert not any(p.name != "2026-03-01.md" for p in (workspace / "memory").iterdir())


def test_an_old_line_that_cannot_be_marked_is_a_warning_not_an_error(agent: AgentConfig, workspace: Path) -> None:
    """The new line is written first: when the old one cannot be marked then (its folder's lock held by another
    process past the timeout), the answer says so and the new line's own mark records the change; no error
    that a caller would retry, writing the fact twice."""
    write(workspace / "MEMORY.md", "# Long-term memory\n\n- Priya lives in Berlin\n")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from filelock import FileLock; lock = FileLock(sys.argv[1]); lock.acquire(); "
            "print('held', flush=True); time.sleep(60)",
            str(workspace / ".mdmemory.lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        result = remember(agent, "Priya is back in Lisbon", at=AT, supersedes="MEMORY.md#L3", timeout=0.5)
    finally:
        holder.kill()
        holder.wait()
    assert (result["ref"], result["supersedes"], result["marked"]) == ("memory/2026-10-02.md#L3", "MEMORY.md#L3", False)
    [warning] = result["warnings"]
    assert "MEMORY.md#L3 was not marked superseded" in warning and "stayed locked" in warning
    assert (workspace / "MEMORY.md").read_text() == "# Long-term memory\n\n- Priya lives in Berlin\n"
    new = (workspace / "memory/2026-10-02.md").read_text()
    [s] = parse_supersessions(new, "memory/2026-10-02.md")
    assert (s.old_path, s.old_line, s.new_path, s.new_line) == ("MEMORY.md", 3, "memory/2026-10-02.md", 3)


def test_a_line_another_writer_superseded_meanwhile_keeps_one_mark(agent: AgentConfig, workspace: Path) -> None:
    """Two writers located the same line; the second to mark it finds it superseded already: it says so, and the
    line keeps the first mark only."""
    write(workspace / OLD, DAY)
    ws = Workspace(workspace, ())
    target = locate(ws, f"{OLD}#L3")
    mark(ws, target, "memory/2026-10-02.md#L3", "2026-10-02", lock=".mdmemory.lock", timeout=5)
    with pytest.raises(WorkspaceError, match=r"superseded by memory/2026-10-02.md#L3 by another writer"):
        mark(ws, target, "memory/2026-10-02.md#L4", "2026-10-02", lock=".mdmemory.lock", timeout=5)
    assert (workspace / OLD).read_text().splitlines()[2] == (
        "- [09:10] Priya lives in Berlin (superseded 2026-10-02 → memory/2026-10-02.md#L3)"
    )


def test_redact_secrets_stores_markers_and_says_so(agent: AgentConfig, workspace: Path) -> None:
    key = "sk-proj-" + "Zq8xW3vB7nK2mR5tY9pL4cJ6hF1dS0aG"
    write(workspace / OLD, DAY)
    result = remember(
        agent, f"Priya's deploy key is {key}\nrotated monthly", at=AT, supersedes=f"{OLD}#L3", redact_secrets=True
    )
    stored = (workspace / "memory/2026-10-02.md").read_text()
    assert key not in stored and key not in json.dumps(result)
    assert result["line"] == (
        f"- [09:30] Priya's deploy key is [REDACTED:openai_key] (supersedes {OLD}#L3)\n  rotated monthly"
    )
    assert stored.endswith(result["line"] + "\n")
    assert "1 secret(s) (openai_key)" in result["warnings"][0]
    plain = remember(agent, f"the key is {key}", at=AT)  # a person's own note keeps what they wrote
    assert key in plain["line"] and "warnings" not in plain


def _remember_many(agent: AgentConfig, worker: int, count: int, start: Any) -> None:
    start.wait()
    for i in range(count):
        if worker == 0 and i % 10 == 0:
            remember(agent, f"fact {i} is now v2", at=AT, supersedes=f"{OLD}#L{3 + i // 10}")
        else:
            remember(agent, f"worker {worker} note {i:03d}", at=AT)


def test_concurrent_writers_lose_nothing(agent: AgentConfig, workspace: Path) -> None:
    """Three processes append to today's log while one supersedes lines of another file and today's: every line
    is there once, every old line is marked with the right new line, and no other byte changed."""
    facts = "".join(f"- fact {i} is v1\n" for i in range(0, 40, 10))
    write(workspace / OLD, "# 2026-03-01\n\n" + facts)
    workers, count = 3, 40
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(workers)
    procs = [ctx.Process(target=_remember_many, args=(agent, w, count, start)) for w in range(workers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    today = (workspace / "memory/2026-10-02.md").read_text().split("\n")
    assert len(today) == 2 + workers * count + 1 and len(set(today[2:-1])) == workers * count
    old = (workspace / OLD).read_text()
    sups = parse_supersessions(old, OLD)
    assert len(sups) == 4
    for s in sups:
        n = int(re.search(r"fact (\d+)", old.split("\n")[s.old_line - 1])[1])  # type: ignore[index]
        assert today[s.new_line - 1] == f"- [09:30] fact {n} is now v2 (supersedes {OLD}#L{s.old_line})"
    assert strip_markers_all(old) == "# 2026-03-01\n\n" + facts


def strip_markers_all(text: str) -> str:
    return "\n".join(strip_markers(line) for line in text.split("\n"))


def test_cli_remember_supersedes(tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(workspace / OLD, DAY)
    cfg = str(write_config(tmp_path / "c.json5", workspace, {"userTimezone": "UTC"}))
    assert run_cli(["remember", "--config", cfg, "--json", "--supersedes", f"{OLD}#L3", "Priya is back in Lisbon"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["supersedes"] == f"{OLD}#L3" and out["ref"].endswith("#L3")
    assert run_cli(["remember", "--config", cfg, "--supersedes", f"{OLD}#L3", "again"]) != 0
    assert "already superseded" in capsys.readouterr().err


# -- the index and the results ------------------------------------------------------------------------------
@both_backends
def test_results_carry_the_labels_and_index_force_rebuilds_them(
    make_memory: Callable[..., Memory], workspace: Path
) -> None:
    write(workspace / OLD, DAY)
    mem = make_memory()
    mem.sync()
    mem.remember("Priya is back in Lisbon", supersedes=f"{OLD}#L3")
    new_ref = f"memory/{datetime.now(UTC).astimezone().date().isoformat()}.md#L3"

    def labelled() -> dict[str, dict[str, Any]]:
        out = {}
        for r in mem.search("where does Priya live Berlin Lisbon", max_results=5, min_score=0)["results"]:
            out[r["path"]] = {k: r[k] for k in ("supersededBy", "supersedes", "superseded") if k in r}
        return out

    got = labelled()
    assert got[OLD] == {"supersededBy": [{"line": 3, "by": new_ref, "date": new_ref[7:17]}]}  # Bob's line is current
    assert got[new_ref.split("#")[0]] == {"supersedes": [{"line": 3, "ref": f"{OLD}#L3"}]}
    mem.sync(force=True)
    assert labelled() == got
    # the marker removed by hand on both lines: no line says so any more; the two lines still say where Priya
    # lives, in other words, so they group implicitly (mdmem.search.frames), labelled so
    for path in (workspace / OLD, workspace / new_ref.split("#")[0]):
        path.write_text(strip_markers_all(path.read_text()))
    implicit = {"line": 3, "by": new_ref, "date": new_ref[7:17], "implicit": True}
    assert labelled() == {OLD: {"supersededBy": [implicit]}, new_ref.split("#")[0]: got[new_ref.split("#")[0]]}


@both_backends
def test_a_chunk_of_only_superseded_lines_is_superseded(make_memory: Callable[..., Memory], workspace: Path) -> None:
    write(workspace / "memory/2026-01-05.md", "# 2026-01-05\n\n- [10:00] ~~The build server is jenkins-01~~\n")
    mem = make_memory(provider="none")
    result = mem.search("build server jenkins")["results"][0]
    assert result["superseded"] is True and result["supersededBy"] == [{"line": 3, "by": None, "date": None}]


@both_backends
def test_pack_items_carry_the_labels(make_memory: Callable[..., Memory], workspace: Path) -> None:
    write(workspace / OLD, DAY)
    write(
        workspace / "memory/2026-10-02.md", f"# 2026-10-02\n\n- [09:30] Priya is back in Lisbon (supersedes {OLD}#L3)\n"
    )
    mem = make_memory(provider="none")
    items = {i["path"]: i for i in mem.pack("Priya Berlin Lisbon", budget_tokens=400)["items"]}
    assert items["memory/2026-10-02.md"]["supersedes"] == [{"line": 3, "ref": f"{OLD}#L3"}]
    old = items[OLD]
    assert old["startLine"] <= 3 <= old["endLine"]
    assert old["supersededBy"] == [{"line": 3, "by": "memory/2026-10-02.md#L3", "date": None}]


@both_backends
def test_a_pack_brings_the_current_line_the_search_did_not_find(
    make_memory: Callable[..., Memory], workspace: Path
) -> None:
    """The old line names what the question asks; its replacement says it otherwise: the pack still has it, first."""
    write(workspace / OLD, DAY)
    write(
        workspace / "memory/2026-10-02.md", f"# 2026-10-02\n\n- [09:30] She is back in Lisboa (supersedes {OLD}#L3)\n"
    )
    for n in range(5):
        write(workspace / f"memory/2026-0{n + 4}-01.md", f"# day\n\n- [10:00] Bob had lunch number {n}\n")
    mem = make_memory(provider="none")
    assert [r["path"] for r in mem.search("where does Priya live")["results"]] == [OLD]
    items = mem.pack("where does Priya live", budget_tokens=200)["items"]
    assert [i["path"] for i in items][:2] == ["memory/2026-10-02.md", OLD]
    assert items[1]["supersededBy"][0]["by"] == "memory/2026-10-02.md#L3"
    off = make_memory({"query": {"currentFirst": False}}, provider="none")
    assert [i["path"] for i in off.pack("where does Priya live", budget_tokens=200)["items"]] == [OLD]


@both_backends
def test_a_current_line_the_search_ranked_below_min_score_is_packed_first(
    make_memory: Callable[..., Memory], workspace: Path
) -> None:
    """The search found the replacement too, but below minScore (it shares one word with the question): moved up
    before the old line, it is scored as the hit that brought it, so the pack's threshold keeps it."""
    write(workspace / OLD, DAY)
    write(
        workspace / "memory/2026-10-02.md", f"# 2026-10-02\n\n- [09:30] Priya is back in Lisbon (supersedes {OLD}#L3)\n"
    )
    mem = make_memory()  # hybrid: minScore applies
    found = {r["path"]: r for r in mem.search("where does Priya live", min_score=0)["results"]}
    assert found["memory/2026-10-02.md"]["score"] < mem.agent.memory_search.query.min_score <= found[OLD]["score"]
    items = mem.pack("where does Priya live", budget_tokens=300)["items"]
    assert [i["path"] for i in items][:2] == ["memory/2026-10-02.md", OLD]


@both_backends
def test_a_question_about_the_past_packs_the_version_before(
    make_memory: Callable[..., Memory], workspace: Path
) -> None:
    """The current line says what it supersedes; the old line is found far below it (or not at all): for "before"
    the pack brings it right after the current one, labelled; for "now" it stays out."""
    write(workspace / OLD, "# 2026-03-01\n\n- [09:10] Priya works at Globex\n")
    write(
        workspace / "memory/2026-10-02.md",
        f"# 2026-10-02\n\n- [09:30] Priya Okafor works at Initech now (supersedes {OLD}#L3)\n",
    )
    for n in range(12):  # other people's jobs, closer to the words of the question than Priya's old line
        write(workspace / f"memory/2026-0{n % 5 + 4}-{n + 10}.md", f"# day\n\n- Olu {n} Okafor works at Hooli {n}\n")
    mem = make_memory(provider="none")
    past = mem.pack("Where did Priya Okafor work before?", budget_tokens=400)["items"]
    assert [i["path"] for i in past][:2] == ["memory/2026-10-02.md", OLD]
    assert past[1]["supersededBy"][0]["by"] == "memory/2026-10-02.md#L3"
    now = mem.pack("Where does Priya Okafor work now?", budget_tokens=400)["items"]
    assert OLD not in [i["path"] for i in now]
