"""``memorySearch.enabled: false`` means no index and no search for that agent, said plainly everywhere."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mdmem.cli.commands import main
from mdmem.config.load import load_config
from mdmem.memory import Memory
from mdmem.runtime import watch_daemon as daemon
from tests.conftest import write

REASON = "memory search is disabled for agent 'main' (memorySearch.enabled is false)"


@pytest.fixture
def notes(workspace: Path) -> Path:
    write(workspace / "MEMORY.md", "# Infra\n\nBackups run nightly with restic to the NAS vault.\n")
    return workspace


def test_python_api_search_get_and_sync_refuse_and_create_no_index(
    notes: Path, make_memory: Callable[..., Memory]
) -> None:
    mem = make_memory({"enabled": False})
    assert mem.search("restic") == {"results": [], "disabled": True, "error": mem.engine.disabled_reason()}
    assert REASON in mem.search("restic")["error"] and "set it to true" in mem.search("restic")["error"]
    got = mem.get("MEMORY.md")
    assert got["text"] == "" and got["disabled"] is True and REASON in got["error"]
    report = mem.sync(force=True)
    assert report["disabled"] is True and REASON in report["reason"] and report["indexed"] == 0
    assert not mem.agent.store_path.exists()  # nothing was indexed, not even an empty index created
    assert mem.session_start()["sync"] is None
    status = mem.status()
    assert status["enabled"] is False and status["mode"] == "disabled" and status["files"] == 0
    assert any(REASON in w for w in status["warnings"])


def test_tools_answer_with_the_reason(notes: Path, make_memory: Callable[..., Memory]) -> None:
    mem = make_memory({"enabled": False})
    search = mem.call_tool("memory_search", {"query": "restic"})
    assert search["results"] == [] and search["disabled"] is True and REASON in search["error"]
    got = mem.call_tool("memory_get", {"path": "MEMORY.md"})
    assert got["text"] == "" and REASON in got["error"]
    assert mem.call_tool("memory_status", {})["enabled"] is False


def test_an_enabled_agent_is_unaffected(notes: Path, make_memory: Callable[..., Memory]) -> None:
    mem = make_memory()
    assert mem.search("restic")["results"] and mem.status()["enabled"] is True
    assert "disabled" not in mem.get("MEMORY.md") and "disabled" not in mem.sync()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_command_line(notes: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "off.json5"
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(notes), "memorySearch": {"enabled": False}}}}))
    c = str(cfg)
    code, out, _ = run(capsys, "index", "--config", c)
    assert code == 0 and out.startswith("nothing indexed: " + REASON)
    code, out, err = run(capsys, "search", "restic", "--config", c)
    assert code == 1 and out == "" and REASON in err
    code, out, _ = run(capsys, "get", "MEMORY.md", "--config", c, "--json")
    assert code == 1 and json.loads(out)["disabled"] is True and REASON in json.loads(out)["error"]
    code, out, _ = run(capsys, "session-start", "--config", c)
    assert code == 0 and out.startswith("no sync: memory search is disabled") and REASON in out
    code, out, _ = run(capsys, "status", "--config", c, "--json")
    assert code == 0 and json.loads(out)["enabled"] is False and json.loads(out)["mode"] == "disabled"


def test_watch_skips_a_disabled_agent(notes: Path, tmp_path: Path, no_thread_leaks: None) -> None:
    cfg = tmp_path / "off.json5"
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(notes), "memorySearch": {"enabled": False}}}}))
    config = load_config(cfg)
    events: list[dict[str, Any]] = []
    stop = threading.Event()
    stop.set()
    daemon.run(config, [], events.append, stop)
    assert events == [
        {"event": "skipped", "agent": "main", "reason": "memorySearch.enabled is false"},
        {"event": "stopped", "agents": []},
    ]
    assert not config.agent().store_path.exists()
