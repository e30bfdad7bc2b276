"""Session-start context: which files, in which sessions, in whose time zone, within what size."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from mdmem.agent.context import session_context
from mdmem.config.load import AgentConfig
from mdmem.files.memory_get import get_file
from mdmem.files.workspace import Workspace
from mdmem.util.errors import ConfigError
from tests.agent_helpers import agent_config, run_cli, write_config
from tests.conftest import write

SECRET = "PRIVATE-LONG-TERM-FACT"


@pytest.fixture
def agent(tmp_path: Path, workspace: Path) -> AgentConfig:
    write(workspace / "MEMORY.md", f"# Long-term memory\n\n- {SECRET}: Dana's passport number lives in 1Password.\n")
    write(workspace / "memory/2026-03-08.md", "# 2026-03-08\n\n- yesterday: booked the vet.\n")
    write(workspace / "memory/2026-03-09.md", "# 2026-03-09\n\n- today: chose hybrid search.\n")
    write(workspace / "memory/2026-03-07.md", "# 2026-03-07\n\n- two days ago: not loaded.\n")
    return agent_config(tmp_path, workspace)


def test_main_session_gets_memory_md_yesterday_and_today(agent: AgentConfig, workspace: Path) -> None:
    ctx = session_context(agent, "main", today="2026-03-09")
    assert ctx["text"] == (
        f"## MEMORY.md (long-term)\n# Long-term memory\n\n- {SECRET}: Dana's passport number lives in 1Password."
        "\n\n## memory/2026-03-08.md (yesterday)\n# 2026-03-08\n\n- yesterday: booked the vet."
        "\n\n## memory/2026-03-09.md (today)\n# 2026-03-09\n\n- today: chose hybrid search."
    )
    assert [f["path"] for f in ctx["files"]] == ["MEMORY.md", "memory/2026-03-08.md", "memory/2026-03-09.md"]
    size = len((workspace / "MEMORY.md").read_text().rstrip())
    assert ctx["files"][0] == {
        "path": "MEMORY.md",
        "role": "long-term",
        "chars": size,
        "includedChars": size,
        "cutLines": None,
    }
    assert (ctx["kind"], ctx["today"], ctx["truncated"], ctx["chars"]) == (
        "main",
        "2026-03-09",
        False,
        len(ctx["text"]),
    )
    assert "two days ago" not in ctx["text"]


@pytest.mark.parametrize("max_chars", [None, 1000, 5000])
def test_group_session_never_gets_memory_md(agent: AgentConfig, workspace: Path, max_chars: int | None) -> None:
    write(workspace / "memory.md", f"lower-case {SECRET}\n")  # both spellings are long-term memory
    ctx = session_context(agent, "group", today="2026-03-09", max_chars=max_chars)
    assert SECRET not in ctx["text"]
    assert [f["path"] for f in ctx["files"]] == ["memory/2026-03-08.md", "memory/2026-03-09.md"]
    main = session_context(agent, "main", today="2026-03-09", max_chars=max_chars)
    assert SECRET in main["text"]


def test_group_session_without_daily_logs_is_empty(agent: AgentConfig) -> None:
    ctx = session_context(agent, "group", today="2030-01-01")
    assert (ctx["text"], ctx["files"]) == ("", [])


def test_missing_and_symlinked_files_are_left_out(tmp_path: Path, workspace: Path) -> None:
    outside = write(tmp_path / "outside.md", "OUTSIDE-SECRET\n")
    (workspace / "MEMORY.md").symlink_to(outside)
    write(workspace / "memory/2026-03-09.md", "# today\n")
    ctx = session_context(agent_config(tmp_path, workspace), "main", today="2026-03-09")
    assert "OUTSIDE-SECRET" not in ctx["text"]
    assert [f["path"] for f in ctx["files"]] == ["memory/2026-03-09.md"]


def test_today_defaults_to_the_user_time_zone(tmp_path: Path, workspace: Path) -> None:
    east, west = "Pacific/Kiritimati", "Pacific/Pago_Pago"  # UTC+14 and UTC-11: always different dates
    dates = []
    for zone in (east, west):
        ctx = session_context(agent_config(tmp_path, workspace, userTimezone=zone), "main")
        assert ctx["today"] == datetime.now(ZoneInfo(zone)).date().isoformat()
        assert ctx["timezone"] == zone
        dates.append(ctx["today"])
    assert dates[0] != dates[1]
    local = session_context(agent_config(tmp_path, workspace), "main")
    assert local["timezone"].startswith("local (")
    assert local["today"] == datetime.now().astimezone().date().isoformat()


def _log(day: str, entries: int) -> str:
    return f"# {day}\n\n" + "\n".join(f"- {day} entry {i:03d}: " + "x" * 40 for i in range(1, entries + 1)) + "\n"


@pytest.mark.parametrize("limit, memory_cut, yesterday_kept", [(4000, True, False), (9000, False, True)])
def test_size_bound_cuts_whole_lines_and_says_what_was_cut(
    tmp_path: Path, workspace: Path, limit: int, memory_cut: bool, yesterday_kept: bool
) -> None:
    write(workspace / "MEMORY.md", "# Long-term memory\n\n" + "".join(f"- fact {i:03d}\n" for i in range(1, 301)))
    write(workspace / "memory/2026-03-08.md", _log("2026-03-08", 200))
    write(workspace / "memory/2026-03-09.md", _log("2026-03-09", 30))
    agent = agent_config(tmp_path, workspace, sessionContext={"maxChars": limit})
    ctx = session_context(agent, "main", today="2026-03-09")
    assert len(ctx["text"]) <= limit and ctx["chars"] == len(ctx["text"]) and ctx["truncated"]
    files = {f["path"]: f for f in ctx["files"]}
    assert (files["MEMORY.md"]["cutLines"] is not None) == memory_cut  # MEMORY.md keeps its room before yesterday
    assert (files["memory/2026-03-08.md"]["includedChars"] > 0) == yesterday_kept
    today = files["memory/2026-03-09.md"]
    assert today["cutLines"] is None and today["includedChars"] == today["chars"]  # today's log first
    assert "entry 030" in ctx["text"]

    workspace_rules = Workspace(workspace)
    for path, f in files.items():
        if f["cutLines"] is None:
            continue
        first, last = f["cutLines"]
        note = re.search(rf'memory_get path="{re.escape(path)}" from=(\d+) lines=(\d+) reads them', ctx["text"])
        assert note and (int(note[1]), int(note[2])) == (first, last - first + 1)
        cut = get_file(workspace_rules, path, first, last - first + 1)["text"]
        full = get_file(workspace_rules, path)["text"].rstrip("\n")
        section = ctx["text"].split(f"## {path} ")[1].split("\n\n## ")[0].split("\n")[1:]
        if path == "MEMORY.md":  # long-term memory keeps its beginning; the note comes after it
            kept = "\n".join(section[:-1])
            assert section[-1].startswith("[") and kept + "\n" + cut == full and "fact 001" in kept
        else:  # a daily log keeps its newest lines; the note comes before them
            kept = "\n".join(section[1:])
            assert section[0].startswith("[") and (cut + "\n" + kept if kept else cut) == full
            assert "entry 001" not in kept and ("entry 200" in kept) == yesterday_kept


@pytest.mark.parametrize("limit", [1000, 1500, 2500, 6000, 9000])
def test_text_never_exceeds_the_bound(tmp_path: Path, workspace: Path, limit: int) -> None:
    write(workspace / "MEMORY.md", "# M\n\n" + "- a very long line " * 300 + "\n" + "- short\n" * 50)
    write(workspace / "memory/2026-03-08.md", _log("2026-03-08", 150))
    write(workspace / "memory/2026-03-09.md", _log("2026-03-09", 150))
    agent = agent_config(tmp_path, workspace)
    for kind in ("main", "group"):
        ctx = session_context(agent, kind, today="2026-03-09", max_chars=limit)
        assert len(ctx["text"]) <= limit and ctx["truncated"]
        assert ctx["text"].count("## memory/") == 2  # every file keeps its heading and its note


def test_invalid_arguments(agent: AgentConfig) -> None:
    with pytest.raises(ConfigError, match="unknown session kind"):
        session_context(agent, "public")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="YYYY-MM-DD"):
        session_context(agent, "main", today="09/03/2026")
    with pytest.raises(ConfigError, match="max_chars"):
        session_context(agent, "main", max_chars=0)


def test_cli_context(tmp_path: Path, workspace: Path, agent: AgentConfig, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(write_config(tmp_path / "c.json5", workspace))
    assert run_cli(["context", "--config", cfg, "--kind", "group", "--today", "2026-03-09", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "group" and SECRET not in out["text"]
    assert run_cli(["context", "--config", cfg, "--today", "2026-03-09"]) == 0
    assert SECRET in capsys.readouterr().out
    assert run_cli(["context", "--config", cfg, "--today", "2030-01-01", "--kind", "group"]) == 0
    assert capsys.readouterr().out.strip() == "(no memory files for a group session on 2030-01-01)"
