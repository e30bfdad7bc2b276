"""memorySearch.sources "sessions": sessions/*.md and OpenClaw transcripts as memory, over real indexes (SQLite,
FTS5, sqlite-vec; hash provider and keyword-only), real files and a real watcher."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mdmem.agent.dispatch import call_tool
from mdmem.config.load import load_config
from mdmem.files.transcripts import DELTA_MESSAGES, messages
from mdmem.memory import Memory
from mdmem.util.errors import ConfigError
from tests.conftest import both_backends, write
from tests.test_watcher import Harness, wait_for

SESSIONS = ["memory", "sessions"]
TURN = """# Sessions 2026-11-23

## 14:02:11Z · gpt-4o-mini · hist1_aaa

**user:** Which port does the reindeer tracker listen on?

**assistant:** The reindeer tracker listens on port 7443 behind the caddy proxy.
"""
KEY = "sk-" + "proj-" + "Qm9vbGVhbjEy" + "X7kPz3rT9wLq2Vn8" + "Hc4Yd6"


def _config(tmp_path: Path, ms: dict[str, Any]) -> Path:
    path = tmp_path / "c.json5"
    path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(tmp_path / "ws"), "memorySearch": ms}}}))
    return path


# -- config ------------------------------------------------------------------------------------------------------
def test_sources_default_and_openclaw_values(tmp_path: Path) -> None:
    assert load_config(_config(tmp_path, {})).agent().memory_search.sources == ("memory",)
    ms = load_config(_config(tmp_path, {"sources": SESSIONS, "sessions": {"transcriptsDir": "oc"}}))
    settings = ms.agent().memory_search
    assert settings.sources == ("memory", "sessions")
    assert settings.sessions.transcripts_dir is not None and os.path.isabs(settings.sessions.transcripts_dir)


@pytest.mark.parametrize("bad", [["memory", "chats"], [], "sessions", [1]])
def test_bad_sources_name_the_key_and_the_fix(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, {"sources": bad})).agent()
    message = str(info.value)
    assert "memorySearch.sources" in message and "Fix" in message


# -- sessions/*.md -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("provider", ["hash", "none"])
def test_session_files_are_searched_packed_and_read(
    workspace: Path, make_memory: Callable[..., Memory], provider: str
) -> None:
    write(workspace / "MEMORY.md", "# Memory\n\n- The reindeer herd lives in Lapland.\n")
    write(workspace / "sessions/2026-11-23.md", TURN)
    mem = make_memory({"sources": SESSIONS}, provider=provider)
    hits = mem.search("reindeer tracker port", min_score=0.0)["results"]
    top = hits[0]
    assert (top["path"], top["source"]) == ("sessions/2026-11-23.md", "sessions")
    pack = mem.pack("reindeer tracker port", budget_tokens=400)
    item = next(i for i in pack["items"] if i["path"] == "sessions/2026-11-23.md")
    assert (item["kind"], item["source"], item["date"]) == ("session", "sessions", "2026-11-23")
    only = mem.pack("reindeer", budget_tokens=400, sources=["session"])
    assert only["items"] and {i["kind"] for i in only["items"]} == {"session"}
    assert mem.get("sessions/2026-11-23.md")["text"] == TURN
    assert mem.status()["sources"] == ["memory", "sessions"]
    assert call_tool(mem, "memory_get", {"path": "sessions/2026-11-23.md", "from": 5, "lines": 1})["text"] == (
        "**user:** Which port does the reindeer tracker listen on?"
    )


def test_a_vanished_sessions_folder_keeps_its_index_until_it_returns(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    """Like memory/: renaming sessions/ away (a restore, a sync tool) must not drop the retained turns."""
    write(workspace / "MEMORY.md", "# Memory\n\n- The reindeer herd lives in Lapland.\n")
    write(workspace / "sessions/2026-11-23.md", TURN)
    mem = make_memory({"sources": SESSIONS}, provider="none")
    mem.sync()
    os.rename(workspace / "sessions", workspace / "sessions.moved")
    report = mem.sync()
    assert report["removed"] == 0
    assert "sessions/2026-11-23.md" in mem.store.files()
    found = mem.search("reindeer tracker port", min_score=0.0)
    assert found["results"][0]["path"] == "sessions/2026-11-23.md"
    assert any("sessions/ does not exist (root missing)" in w for w in found["warnings"])
    assert any("sessions/" in w for w in mem.status()["warnings"])
    os.rename(workspace / "sessions.moved", workspace / "sessions")
    assert not any("sessions/" in w for w in mem.search("reindeer tracker port", min_score=0.0).get("warnings", []))
    mem.sync(prune=True)
    os.rename(workspace / "sessions", workspace / "sessions.moved")
    assert mem.sync(prune=True)["removed"] == 1  # --prune drops them on purpose
    assert "sessions/2026-11-23.md" not in mem.store.files()


def test_without_the_source_session_files_are_not_memory(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "MEMORY.md", "# Memory\n\n- nothing about ports\n")
    write(workspace / "sessions/2026-11-23.md", TURN)
    mem = make_memory()
    assert all(r["source"] != "sessions" for r in mem.search("reindeer tracker", min_score=0.0)["results"])
    assert "sessions/2026-11-23.md" not in mem.store.files()
    assert "not a memory file" in mem.get("sessions/2026-11-23.md")["error"]


def test_session_paths_keep_the_workspace_rules(
    workspace: Path, make_memory: Callable[..., Memory], tmp_path: Path
) -> None:
    outside = write(tmp_path / "outside.md", "secret plans")
    (workspace / "sessions").mkdir()
    os.symlink(outside, workspace / "sessions/2026-11-24.md")
    write(workspace / "sessions/notes.txt", "not markdown")
    mem = make_memory({"sources": SESSIONS})
    mem.sync()
    assert "sessions/2026-11-24.md" not in mem.store.files()
    assert "symlink" in mem.get("sessions/2026-11-24.md")["error"]
    assert "'..'" in mem.get("sessions/../../outside.md")["error"]
    assert "Markdown" in mem.get("sessions/notes.txt")["error"]


# -- OpenClaw transcripts ------------------------------------------------------------------------------------------
def _line(role: str, content: Any, ts: str = "2026-11-23T10:00:00.000Z", kind: str = "message") -> str:
    return json.dumps({"type": kind, "id": "m1", "timestamp": ts, "message": {"role": role, "content": content}}) + "\n"


def _transcript(lines: list[str]) -> str:
    head = json.dumps({"type": "session", "version": 3, "id": "s-1", "timestamp": "2026-11-23T10:00:00Z"}) + "\n"
    return head + "".join(lines)


TRANSCRIPT = [
    _line("user", "Where did we put the walrus backups?"),
    _line(
        "assistant",
        [
            {"type": "thinking", "thinking": "the user asks about backups"},
            {"type": "text", "text": f"The walrus backups sit in bucket s3://walrus-vault; key {KEY}."},
            {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"cmd": "ls /srv"}},
        ],
    ),
    _line("toolResult", [{"type": "text", "text": "toolsecretoutput narwhal.tar"}]),
    "{not json\n",
    _line("user", [{"type": "image", "data": "AAAA"}, {"type": "text", "text": "And the octopus logs?"}]),
]


@pytest.fixture
def oc(tmp_path: Path) -> Path:
    folder = tmp_path / "openclaw/agents/main/sessions"
    folder.mkdir(parents=True)
    return folder


def test_transcript_messages_keep_user_and_assistant_text_only() -> None:
    found = messages(_transcript(TRANSCRIPT).encode())
    assert [m.role for m in found] == ["user", "assistant", "user"]
    assert found[1].text.startswith("The walrus backups") and "ls /srv" not in found[1].text
    assert found[2].text == "And the octopus logs?"


@pytest.mark.parametrize("provider", ["hash", "none"])
def test_transcripts_are_indexed_from_a_redacted_citeable_copy(
    workspace: Path, make_memory: Callable[..., Memory], oc: Path, provider: str
) -> None:
    write(oc / "s-1.jsonl", _transcript(TRANSCRIPT))
    mem = make_memory({"sources": SESSIONS, "sessions": {"transcriptsDir": str(oc.parents[2])}}, provider=provider)
    top = mem.search("walrus backups bucket", min_score=0.0)["results"][0]
    assert (top["path"], top["source"]) == ("sessions/transcripts/s-1.md", "sessions")
    copy = mem.get("sessions/transcripts/s-1.md")["text"]
    assert "walrus-vault" in copy and "[REDACTED:openai_key]" in copy and KEY not in copy
    assert "toolsecretoutput" not in copy and "ls /srv" not in copy and "the user asks" not in copy
    lines = copy.split("\n")
    cited = "\n".join(lines[top["startLine"] - 1 : top["endLine"]])
    assert "walrus backups sit" in cited
    assert "toolsecretoutput" not in json.dumps(mem.search("narwhal toolsecretoutput", min_score=0.0))


def test_transcripts_are_reindexed_after_the_openclaw_deltas(
    workspace: Path, make_memory: Callable[..., Memory], oc: Path
) -> None:
    transcript = write(oc / "s-1.jsonl", _transcript(TRANSCRIPT))
    mem = make_memory({"sources": SESSIONS, "sessions": {"transcriptsDir": str(oc.parents[2])}})
    mem.sync()
    with transcript.open("a", encoding="utf-8") as fh:
        fh.write(_line("user", "The manatee project starts in May."))
    mem.sync()
    copy = "sessions/transcripts/s-1.md"
    assert "manatee" not in mem.get(copy)["text"], "below 50 messages and 100 KB: not copied yet"
    assert all("manatee" not in r["snippet"] for r in mem.search("manatee project", min_score=0.0)["results"])
    with transcript.open("a", encoding="utf-8") as fh:
        fh.writelines(_line("assistant", f"Noted item {n} for later.") for n in range(DELTA_MESSAGES))
    mem.sync()
    top = mem.search("manatee project", min_score=0.0)["results"][0]
    assert top["path"] == "sessions/transcripts/s-1.md"
    with transcript.open("a", encoding="utf-8") as fh:
        fh.write(_line("user", "x" * 100 + " dugong " + "y" * 100_000))  # one message, over 100 KB
    mem.sync()
    assert mem.search("dugong", min_score=0.0)["results"][0]["path"] == "sessions/transcripts/s-1.md"


def test_a_half_written_last_line_waits_for_its_newline(
    workspace: Path, make_memory: Callable[..., Memory], oc: Path
) -> None:
    write(oc / "s-2.jsonl", _transcript(TRANSCRIPT) + _line("user", "the beluga question").rstrip("\n")[:-5])
    mem = make_memory({"sources": SESSIONS, "sessions": {"transcriptsDir": str(oc.parents[2])}})
    mem.sync()
    assert "beluga" not in mem.get("sessions/transcripts/s-2.md")["text"]
    assert "walrus" in mem.get("sessions/transcripts/s-2.md")["text"]


# -- the watcher ---------------------------------------------------------------------------------------------------
def test_the_watcher_watches_sessions_and_transcripts(
    tmp_path: Path, workspace: Path, make_memory: Callable[..., Memory], no_thread_leaks: None
) -> None:
    write(workspace / "MEMORY.md", "# Memory\n\nstart")
    root = tmp_path / "openclaw"
    (root / "agents/main/sessions").mkdir(parents=True)
    ms = {"sources": SESSIONS, "sessions": {"transcriptsDir": str(root)}}
    h = Harness(make_memory(ms), make_memory(ms), polling=False)
    try:
        write(workspace / "sessions/2026-11-23.md", TURN)  # sessions/ created after the watch started
        wait_for(lambda: "sessions/2026-11-23.md" in h.paths(), 15)
        write(root / "agents/main/sessions/s-9.jsonl", _transcript(TRANSCRIPT))
        wait_for(lambda: "sessions/transcripts/s-9.md" in h.paths(), 15)
        assert h.reader.search("octopus logs", min_score=0.0)["results"][0]["path"] == "sessions/transcripts/s-9.md"
    finally:
        h.stop()


@both_backends
def test_a_process_without_the_sessions_source_never_prunes_the_rows_of_one_with_it(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    """The service searches sessions/ for every agent; a CLI or watch on the same config does not. Found in
    the field: a CLI search pruned the service's retained turns from the index, and recalls lost them."""
    write(workspace / "MEMORY.md", "# Memory\n\nThe reindeer tracker is a Go program.\n")
    write(workspace / "sessions" / "2026-11-23.md", TURN)
    with_sessions = make_memory({"sources": SESSIONS}, provider="none")
    with_sessions.sync()
    without = make_memory(provider="none")
    without.sync()  # a full sync, the way every search catches up first
    assert {r["source"] for r in without.search("reindeer tracker", min_score=0)["results"]} == {"memory"}
    assert without.status()["staleFiles"] == []  # the other source's rows are not stale for it
    found = with_sessions.search("reindeer tracker port", min_score=0)["results"]
    assert found[0]["path"] == "sessions/2026-11-23.md"  # still indexed: nothing to re-index
    assert with_sessions.indexer.changed_files() == []


def test_status_counts_the_rows_of_sources_it_does_not_search(
    workspace: Path, make_memory: Callable[..., Memory]
) -> None:
    write(workspace / "MEMORY.md", "# Memory\n\nThe reindeer tracker is a Go program.\n")
    write(workspace / "sessions" / "2026-11-23.md", TURN)
    make_memory({"sources": SESSIONS}, provider="none").sync()
    without = make_memory(provider="none")
    status = without.status()
    assert status["otherSources"] == {"sessions": {"files": 1, "chunks": 1}}
    assert status["files"] == 2  # the index holds both; this config searches MEMORY.md only
