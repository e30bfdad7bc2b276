"""``truth``: the current line about a subject, its history with dates and refs, the notes supporting each; the
pure view, then Memory.truth on both stores, the CLI and the memory_truth tool."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from mdmem.files.supersession import Supersession, parse_supersessions
from mdmem.memory import Memory
from mdmem.search.truth import FactLine, facts_about, line_date, mentions
from mdmem.util.errors import ConfigError
from tests.agent_helpers import run_cli, write_config
from tests.conftest import both_backends, write


@pytest.mark.parametrize(
    ("path", "text", "expected"),
    [
        ("memory/2026-03-01.md", "- [09:10] Priya lives in Berlin", "2026-03-01 09:10"),
        ("memory/2026-03-01.md", "- [9:05] early", "2026-03-01 09:05"),
        ("memory/2026-03-01.md", "- no stamp", "2026-03-01"),
        ("memory/2026-03-01-standup.md", "- x", "2026-03-01"),
        ("MEMORY.md", "- [2026-05-04 10:00] long-term fact", "2026-05-04 10:00"),
        ("MEMORY.md", "- undated fact", ""),
        ("memory/people/priya.md", "- [x] [2026-05-04 10:00] done", "2026-05-04 10:00"),
    ],
)
def test_line_dates(path: str, text: str, expected: str) -> None:
    assert line_date(path, text) == expected


def test_mentions_counts_the_subject_s_words() -> None:
    assert mentions("Priya", "- Priya lives in Berlin") == 1
    assert mentions("where does Priya live", "- Priya lives in Berlin") == 2  # a word's inflection counts
    assert mentions("the build server", "- The build server is jenkins-02") == 2  # stop words aside
    assert mentions("普丽雅", "- 普丽雅住在柏林") == 1
    assert mentions("Priya", "- Priyanka lives in Rome") == 0  # a name is not a prefix of another


A, B, C = "memory/2026-01-10.md", "memory/2026-05-02.md", "memory/2026-09-20.md"


def sup(old: tuple[str, int], new: tuple[str, int] | None, date: str = "", at: str | None = None) -> Supersession:
    where = at or old[0]
    line = old[1] if where == old[0] else (new[1] if new else 0)
    return Supersession(where, line, old[0], old[1], new[0] if new else "", new[1] if new else 0, date)


def test_a_chain_of_three_versions_newest_first_with_the_days_they_changed() -> None:
    lines = {
        (A, 3): "- [09:00] The build server is jenkins-01 (superseded 2026-05-02 → memory/2026-05-02.md#L3)",
        (B, 3): "- [10:00] The build server is jenkins-02 (supersedes memory/2026-01-10.md#L3)",
        (C, 4): "- [11:00] The build server is buildkite (supersedes memory/2026-05-02.md#L3)",
        (C, 5): "- [11:30] Moved the nightly jobs to buildkite, the build server works",
        (A, 4): "- [09:30] jenkins-01 build server needs a disk",
    }
    sups = [sup((A, 3), (B, 3), "2026-05-02"), sup((B, 3), (C, 4), at=C), sup((B, 3), (C, 4), at=C)]
    about = [(C, 5), (A, 3), (A, 4), (B, 3)]
    (fact,) = facts_about("build server", about, lines, sups)
    assert fact.current == FactLine(C, 4, "The build server is buildkite", "2026-09-20 11:00")
    assert [(old.ref, on) for old, on in fact.history] == [(f"{B}#L3", "2026-09-20"), (f"{A}#L3", "2026-05-02")]
    assert fact.supports == {(C, 4): [f"{C}#L5"], (A, 3): [f"{A}#L4"]}  # each note backs the version it names
    shown = fact.to_dict()
    assert shown["current"] == {
        "ref": f"{C}#L4",
        "text": "The build server is buildkite",
        "date": "2026-09-20 11:00",
        "supportedBy": [f"{C}#L5"],
    }
    assert shown["history"][1]["supersededOn"] == "2026-05-02"


def test_unrelated_lines_and_a_fact_whose_newest_line_is_only_marked_outdated() -> None:
    lines = {
        (A, 3): "- [09:00] ~~Priya's locker code is 4512~~",
        (A, 5): "- [09:10] Priya likes oat milk",
    }
    facts = facts_about("Priya", [(A, 3), (A, 5)], lines, parse_supersessions("\n\n" + lines[(A, 3)], A))
    assert [f.to_dict() for f in facts] == [
        {"current": None, "history": [{"ref": f"{A}#L3", "text": "Priya's locker code is 4512",
                                       "date": "2026-01-10 09:00", "supersededOn": None, "supportedBy": []}]},
        {"current": {"ref": f"{A}#L5", "text": "Priya likes oat milk", "date": "2026-01-10 09:10",
                     "supportedBy": []}, "history": []},
    ]  # fmt: skip


def test_max_facts_keeps_those_with_history_first() -> None:
    said = ["plays the cello", "was born in May", "has a dog named Rex", "runs on Sundays", "drinks green tea"]
    lines = {(A, n): f"- Kai {text}" for n, text in enumerate(said, start=3)}
    lines[(A, 8)] = "- Kai works at Acme"
    lines[(B, 3)] = "- Kai now works at Initech (supersedes memory/2026-01-10.md#L8)"
    facts = facts_about("Kai", [(A, n) for n in range(3, 9)], lines, [sup((A, 8), (B, 3), at=B)], max_facts=2)
    assert [f.current.ref for f in facts if f.current] == [f"{B}#L3", f"{A}#L3"]


# -- on the stores, the CLI and the tool -------------------------------------------------------------------
def notes(workspace: Path) -> None:
    write(
        workspace / "memory/2026-03-01.md",
        "# 2026-03-01\n\n- [09:10] ~~Priya lives in Berlin~~ (superseded by [the move](2026-10-02.md#L3))\n"
        "- [09:15] Bob lives in Berlin\n",
    )
    write(workspace / "memory/2026-10-02.md", "# 2026-10-02\n\n- [18:00] She is back in Lisbon now\n")
    write(workspace / "memory/2026-10-05.md", "# 2026-10-05\n\n- [20:00] Dinner with Priya in Lisbon\n")
    write(workspace / "MEMORY.md", "# Long-term memory\n\n- 普丽雅住在里斯本 (supersedes memory/2026-03-01.md#L3)\n")


@both_backends
def test_memory_truth_follows_hand_written_marks(make_memory: Callable[..., Memory], workspace: Path) -> None:
    notes(workspace)
    mem = make_memory()
    got = mem.truth("Priya")
    fact = got["facts"][0]
    assert fact["history"] == [
        {
            "ref": "memory/2026-03-01.md#L3",
            "text": "Priya lives in Berlin",
            "date": "2026-03-01 09:10",
            "supersededOn": "2026-10-02",
            "supportedBy": [],
        }
    ]
    # two lines supersede it: the dated daily log and the undated MEMORY.md line; the dated one is current, the
    # other backs it, and so does the dinner in Lisbon
    assert fact["current"]["ref"] == "memory/2026-10-02.md#L3"
    assert fact["current"]["supportedBy"] == ["MEMORY.md#L3", "memory/2026-10-05.md#L3"]
    assert all("Bob" not in json.dumps(f) for f in got["facts"])  # Bob lives in Berlin too: another subject
    mem.sync(force=True)
    assert mem.truth("Priya")["facts"][0] == fact


def test_cli_truth_and_the_tool(tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes(workspace)
    cfg = str(write_config(tmp_path / "c.json5", workspace, {"memorySearch": {"provider": "none"}}))
    assert run_cli(["truth", "--config", cfg, "Priya"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("now      She is back in Lisbon now\n         2026-10-02 18:00 · memory/2026-10-02.md#L3")
    assert "before   Priya lives in Berlin\n         2026-03-01 09:10 → superseded 2026-10-02 · " in out
    assert run_cli(["truth", "--config", cfg, "--json", "nobody-we-know"]) == 0
    assert json.loads(capsys.readouterr().out)["facts"] == []
    mem = Memory.open(config_path=cfg)
    try:
        assert mem.call_tool("memory_truth", {"subject": "Priya"})["facts"][0]["current"]["text"] == (
            "She is back in Lisbon now"
        )
        bad = mem.call_tool("memory_truth", {"subject": "Priya", "maxFacts": 0})
        assert bad["facts"] == [] and "maxFacts" in bad["error"]
        assert "'subject' must not be empty" in mem.call_tool("memory_truth", {"subject": "  "})["error"]
        with pytest.raises(ConfigError, match="the subject is empty"):
            mem.truth(" ")
    finally:
        mem.close()
