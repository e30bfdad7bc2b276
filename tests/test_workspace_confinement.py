"""Never outside the root: every write mdmem makes in a workspace refuses a symlink on its way (to outside the
workspace or not), names it, writes nothing, and the failure shows where the writer reports errors. Real symlinks,
real files, a real ``mdmem serve`` process."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from mdmem.agent.flush import check_flush, workspace_writable
from mdmem.agent.remember import remember
from mdmem.config.load import AgentConfig, load_config
from mdmem.files.sessionlog import SessionLog
from mdmem.memory import Memory
from mdmem.util.errors import WorkspaceError
from mdmem.util.filewrite import Folder
from tests.agent_helpers import agent_config
from tests.conftest import write
from tests.service_bodies import openai_entry, retain_body
from tests.service_server import Service, write_config
from tests.test_sessions_source import TRANSCRIPT, _transcript

DAY = "2026-11-23"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (not following symlinks) with its bytes: what must stay as it was."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(folder))] = path.read_bytes()
    return out


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    write(folder / "victim.md", "# not mdmem's\n\nprecious\n")
    write(folder / "victim.jsonl", '{"not": "a tombstone"}\n')
    return folder


def session_log(tmp_path: Path, ws: Path) -> SessionLog:
    ws.mkdir(exist_ok=True)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"agents": {"list": [{"id": "a1", "workspace": str(ws)}]}}))
    return SessionLog(load_config(cfg).agent("a1"))


# -- retain and forget -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("link", "target", "named"),
    [
        ("sessions", "outside", "ws/sessions is a symlink to"),  # the folder: to outside the workspace
        (f"sessions/{DAY}.md", "outside/victim.md", f"ws/sessions/{DAY}.md is a symlink to"),  # today's file
        ("sessions/.mdmemory.lock", "outside/victim.md", "the lock file"),  # the lock file (older filelock truncates)
        ("sessions", "ws/elsewhere", "inside the workspace"),  # inside, but readers never follow it either
    ],
)
def test_retain_through_a_symlink_is_refused_and_writes_nothing(
    tmp_path: Path, outside: Path, link: str, target: str, named: str
) -> None:
    ws = tmp_path / "ws"
    log = session_log(tmp_path, ws)
    (ws / "elsewhere").mkdir()
    (ws / link).parent.mkdir(parents=True, exist_ok=True)
    (ws / link).symlink_to(tmp_path / target)
    before = snapshot(tmp_path / "outside"), snapshot(ws / "elsewhere")
    with pytest.raises(WorkspaceError) as info:
        log.retain(openai_entry("where is the boat?", "in the harbour", id="hist1_boat"))
    assert named in str(info.value) and str(tmp_path) in str(info.value)
    assert (snapshot(tmp_path / "outside"), snapshot(ws / "elsewhere")) == before
    stats = log.stats()
    assert named in stats["lastError"]["error"]
    if link == "sessions":
        assert named in stats["error"]  # the folder itself cannot be used: status says so, and why


def test_forget_never_rewrites_or_tombstones_through_a_symlink(tmp_path: Path, outside: Path) -> None:
    ws = tmp_path / "ws"
    log = session_log(tmp_path, ws)
    assert log.retain(openai_entry("keep", "ok", id="hist1_keep"))[0] == "retained"
    day = ws / "sessions" / f"{DAY}.md"
    write(outside / "day.md", day.read_text().replace("hist1_keep", "hist1_out"))  # an outside file with a block
    (ws / "sessions" / "2026-11-24.md").symlink_to(outside / "day.md")
    (ws / "sessions" / ".tombstones.jsonl").symlink_to(outside / "victim.jsonl")
    before = snapshot(outside)
    with pytest.raises(WorkspaceError, match=r"ws/sessions/\.tombstones\.jsonl is a symlink to .*victim\.jsonl"):
        log.forget(["hist1_out", "hist1_keep"])
    assert snapshot(outside) == before and "hist1_keep" in day.read_text()
    (ws / "sessions" / ".tombstones.jsonl").unlink()
    assert log.forget(["hist1_out", "hist1_keep"]) == (1, [f"sessions/{DAY}.md"])  # the linked file: not ours
    assert snapshot(outside) == before


def test_a_hard_linked_day_file_is_never_appended_to(tmp_path: Path, outside: Path) -> None:
    ws = tmp_path / "ws"
    log = session_log(tmp_path, ws)
    (ws / "sessions").mkdir()
    os.link(outside / "victim.md", ws / "sessions" / f"{DAY}.md")
    before = snapshot(outside)
    with pytest.raises(WorkspaceError, match="hard-linked"):
        log.retain(openai_entry("q", "a", id="hist1_q"))
    assert snapshot(outside) == before


# -- the service: never a 202 for what is not in the workspace ----------------------------------------------------
@pytest.mark.parametrize("dangling", [False, True])
def test_the_service_answers_503_naming_the_symlink_and_status_shows_it(
    tmp_path: Path, outside: Path, dangling: bool
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    target = outside / "not-yet" if dangling else outside  # a folder that does not exist (yet) must not be made
    (ws / "sessions").symlink_to(target)
    before = snapshot(outside)
    svc = Service(write_config(tmp_path / "config.json", {"main": ws}), tmp_path / "home", "tok-1", tmp_path / "log")
    svc.start()
    try:
        body = retain_body("main", openai_entry("the vault code is 4512", "noted", id="hist1_vault"))
        reply = svc.call("POST", "/retain", body)
        assert reply.status == 503 and f"{ws}/sessions is a symlink to {target}" in reply.body["error"], reply.body
        assert "4512" not in reply.body["error"]
        status = svc.call("GET", "/agents/main/status").body
        assert f"{ws}/sessions is a symlink" in status["sessions"]["error"]
        assert f"{ws}/sessions is a symlink" in status["sessions"]["lastError"]["error"]
        assert svc.call("POST", "/forget", {"agent_id": "main", "entry_ids": ["hist1_vault"]}).status == 503
        assert snapshot(outside) == before and os.path.exists(target) is not dangling
        (ws / "sessions").unlink()  # fixed: a real folder
        assert svc.call("POST", "/retain", body).status == 202
        status = svc.call("GET", "/agents/main/status").body["sessions"]
        assert status["retained"] == 1 and "error" not in status and "lastError" not in status
        assert "hist1_vault" in (ws / "sessions" / f"{DAY}.md").read_text()
    finally:
        svc.stop()


# -- transcript copies ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("link", ["sessions", "sessions/transcripts"])
def test_transcript_copies_never_go_through_a_symlink(
    tmp_path: Path, workspace: Path, outside: Path, make_memory: Callable[..., Memory], link: str
) -> None:
    oc = tmp_path / "openclaw/agents/main/sessions"
    write(oc / "s-1.jsonl", _transcript(TRANSCRIPT))
    write(workspace / "MEMORY.md", "# Memory\n\nthe walrus lives here too\n")
    (workspace / link).parent.mkdir(parents=True, exist_ok=True)
    (workspace / link).symlink_to(outside)
    before = snapshot(outside)
    mem = make_memory({"sources": ["memory", "sessions"], "sessions": {"transcriptsDir": str(tmp_path / "openclaw")}})
    report = mem.sync()
    assert snapshot(outside) == before
    errors = [e for e in report["errors"] if e["path"] == "sessions/transcripts/"]
    assert errors and f"{workspace / link} is a symlink to {outside}" in errors[0]["error"]
    assert any(f"{workspace / link} is a symlink" in w for w in mem.status()["warnings"])
    assert [h["path"] for h in mem.search("walrus", min_score=0.0)["results"]] == ["MEMORY.md"]  # the rest works


# -- remember and the flush's probe --------------------------------------------------------------------------------
@pytest.fixture
def agent(tmp_path: Path, workspace: Path) -> AgentConfig:
    return agent_config(tmp_path, workspace, userTimezone="UTC")


@pytest.mark.parametrize("long_term", [False, True])
def test_remember_refuses_a_symlinked_lock_file(
    agent: AgentConfig, workspace: Path, outside: Path, long_term: bool
) -> None:
    folder = workspace if long_term else workspace / "memory"
    (folder / ".mdmemory.lock").symlink_to(outside / "victim.md")
    before = snapshot(outside)
    with pytest.raises(WorkspaceError, match=r"the lock file .*\.mdmemory\.lock is a symlink"):
        remember(agent, "a note", long_term=long_term)
    assert snapshot(outside) == before


def test_remember_and_the_flush_probe_refuse_a_symlinked_memory_folder(
    tmp_path: Path, agent: AgentConfig, workspace: Path, outside: Path
) -> None:
    (workspace / "memory").rmdir()
    (workspace / "memory").symlink_to(outside)
    before = snapshot(outside)
    with pytest.raises(WorkspaceError, match=f"{workspace}/memory is a symlink to {outside}"):
        remember(agent, "a note")
    ok, why = workspace_writable(workspace)
    assert not ok and f"{workspace}/memory is a symlink to {outside}" in why
    decision = check_flush(agent, "agent:main:main", 10**6, 200_000)
    assert not decision.due and "symlink" in decision.reason
    assert snapshot(outside) == before and sorted(os.listdir(outside)) == ["victim.jsonl", "victim.md"]


def test_folder_opens_never_follow_a_symlink_below_the_root_but_the_root_may_be_one(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "sessions").mkdir(parents=True)
    (tmp_path / "ws").symlink_to(real)  # the workspace as configured: a symlink is fine
    with Folder(tmp_path / "ws", ["sessions", "transcripts"], create=True) as folder:
        assert folder.path == tmp_path / "ws" / "sessions" / "transcripts"
    assert (real / "sessions" / "transcripts").is_dir()
    (real / "memory").symlink_to(real / "sessions")
    with pytest.raises(WorkspaceError, match="inside the workspace"):
        Folder(tmp_path / "ws", ["memory"])
    write(real / "file", "x")
    with pytest.raises(WorkspaceError, match="is a file, not a folder"):
        Folder(tmp_path / "ws", ["file", "x"], create=True)
