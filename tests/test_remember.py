"""remember: timestamped lines in today's log or MEMORY.md, atomic under concurrency, picked up by search."""

from __future__ import annotations

import json
import multiprocessing
import re
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mdmem.agent.remember import remember
from mdmem.config.load import AgentConfig
from mdmem.memory import Memory
from mdmem.util.errors import ConfigError, WorkspaceError
from tests.agent_helpers import agent_config, run_cli, write_config
from tests.conftest import write

AT = datetime(2026, 3, 9, 14, 3, tzinfo=UTC)


@pytest.fixture
def agent(tmp_path: Path, workspace: Path) -> AgentConfig:
    return agent_config(tmp_path, workspace, userTimezone="UTC")


def test_creates_today_s_log_with_a_heading(tmp_path: Path, agent: AgentConfig) -> None:
    ws = tmp_path / "fresh-ws"  # not even the workspace exists yet
    agent = agent_config(tmp_path, ws, userTimezone="UTC")
    result = remember(agent, "Dana prefers oat milk", at=AT)
    assert result == {
        "path": "memory/2026-03-09.md",
        "line": "- [14:03] Dana prefers oat milk",
        "ref": "memory/2026-03-09.md#L3",
        "created": True,
        "indexed": False,
    }
    remember(agent, "second note", at=AT)
    assert (ws / "memory/2026-03-09.md").read_text() == (
        "# 2026-03-09\n\n- [14:03] Dana prefers oat milk\n- [14:03] second note\n"
    )


def test_long_term_goes_to_memory_md(agent: AgentConfig, workspace: Path) -> None:
    write(workspace / "MEMORY.md", "# Long-term memory\n\n- existing fact")  # no final newline
    result = remember(agent, "Pixel is a border collie", long_term=True, at=AT)
    assert result["path"] == "MEMORY.md" and result["created"] is False
    text = (workspace / "MEMORY.md").read_text()
    assert text == "# Long-term memory\n\n- existing fact\n- [2026-03-09 14:03] Pixel is a border collie\n"


def test_long_term_uses_an_existing_lower_case_memory_md(agent: AgentConfig, workspace: Path) -> None:
    write(workspace / "memory.md", "# notes\n")
    assert remember(agent, "fact", long_term=True, at=AT)["path"] == "memory.md"
    assert (workspace / "memory.md").read_text() == "# notes\n- [2026-03-09 14:03] fact\n"


def test_new_memory_md_gets_a_heading(agent: AgentConfig, workspace: Path) -> None:
    remember(agent, "fact", long_term=True, at=AT)
    assert (workspace / "MEMORY.md").read_text() == "# Long-term memory\n\n- [2026-03-09 14:03] fact\n"


def test_multi_line_text_stays_one_list_item(agent: AgentConfig, workspace: Path) -> None:
    result = remember(agent, "  first line\nsecond line  \n\n", at=AT)
    assert result["line"] == "- [14:03] first line\n  second line"


def test_the_date_and_time_are_the_user_s(tmp_path: Path, workspace: Path) -> None:
    late = datetime(2026, 3, 9, 23, 30, tzinfo=UTC)
    tokyo = agent_config(tmp_path, workspace, userTimezone="Asia/Tokyo")  # UTC+9: already the 10th
    assert remember(tokyo, "x", at=late)["path"] == "memory/2026-03-10.md"
    assert (workspace / "memory/2026-03-10.md").read_text() == "# 2026-03-10\n\n- [08:30] x\n"


def test_empty_text_is_refused(agent: AgentConfig) -> None:
    with pytest.raises(ConfigError, match="nothing to remember"):
        remember(agent, " \n ")


def test_never_writes_through_a_symlink(tmp_path: Path, agent: AgentConfig, workspace: Path) -> None:
    outside = write(tmp_path / "outside.md", "outside\n")
    (workspace / "memory/2026-03-09.md").symlink_to(outside)
    with pytest.raises(WorkspaceError, match="symlink"):
        remember(agent, "x", at=AT)
    assert outside.read_text() == "outside\n"


def test_unwritable_workspace_is_an_error_that_says_so(tmp_path: Path) -> None:
    blocker = write(tmp_path / "file", "x")
    agent = agent_config(tmp_path, blocker / "ws")
    with pytest.raises(WorkspaceError, match="cannot write .*Fix"):
        remember(agent, "x", at=AT)


def test_the_next_search_finds_the_line(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "MEMORY.md", "# Long-term memory\n\n- unrelated\n")
    mem = make_memory()
    mem.sync()
    remember(mem.agent, "The storage locker code is 4512")
    assert [f["path"] for f in mem.status()["staleFiles"]] == [f"memory/{datetime.now().astimezone():%Y-%m-%d}.md"]
    hits = mem.search("storage locker code")["results"]
    assert hits and "4512" in hits[0]["snippet"]


def _append_many(agent: AgentConfig, worker: int, count: int, start: Any) -> None:
    start.wait()
    for i in range(count):
        remember(agent, f"worker {worker} note {i:03d} " + "z" * 200, at=AT)


def test_four_processes_at_once_keep_every_line_exactly_once(agent: AgentConfig, workspace: Path) -> None:
    workers, count = 4, 50
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(workers)
    procs = [ctx.Process(target=_append_many, args=(agent, w, count, start)) for w in range(workers)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    lines = (workspace / "memory/2026-03-09.md").read_text().split("\n")
    assert lines[:2] == ["# 2026-03-09", ""] and lines[-1] == ""
    body = lines[2:-1]
    pattern = re.compile(r"- \[14:03\] worker (\d) note (\d{3}) z{200}")
    assert all(pattern.fullmatch(line) for line in body)  # nothing interleaved or torn
    seen = Counter(pattern.fullmatch(line).groups() for line in body)  # type: ignore[union-attr]
    expected = {(str(w), f"{i:03d}") for w in range(workers) for i in range(count)}
    assert set(seen) == expected and set(seen.values()) == {1}


def test_cli_remember(tmp_path: Path, workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(write_config(tmp_path / "c.json5", workspace, {"userTimezone": "UTC"}))
    assert run_cli(["remember", "--config", cfg, "--json", "renew", "the", "passport"]) == 0
    out = json.loads(capsys.readouterr().out)
    today = datetime.now(UTC).date().isoformat()
    assert out["path"] == f"memory/{today}.md" and out["line"].endswith("] renew the passport")
    assert run_cli(["remember", "--config", cfg, "--long-term", "likes sushi"]) == 0
    assert capsys.readouterr().out.startswith("MEMORY.md: - [")
    assert run_cli(["remember", "--config", cfg, " "]) == 2
    assert "nothing to remember" in capsys.readouterr().err
