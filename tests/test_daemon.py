"""`mdmem watch` as a real process: JSON log lines, one daemon per agent, graceful stop, bad files, outages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mdmem.config.load import load_config
from mdmem.memory import Memory
from tests.conftest import REPO, write
from tests.daemon_helpers import Daemon
from tests.fake_openai import FakeOpenAIServer, Fault


@pytest.fixture
def config(workspace: Path, tmp_path: Path) -> Path:
    write(workspace / "MEMORY.md", "# Memory\n\nThe gate code is 4711.\n")
    cfg = tmp_path / "cfg.json5"
    ms = {"provider": "hash", "sync": {"watchDebounceMs": 200}}
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": ms}}}))
    return cfg


@pytest.fixture
def daemon(config: Path) -> Iterator[Daemon]:
    d = Daemon(config)
    yield d
    d.stop()


def test_watch_logs_syncs_and_status_tells_the_truth(daemon: Daemon, config: Path, workspace: Path) -> None:
    first = daemon.wait_for(lambda e: e["event"] == "sync")
    assert first["files"] == 1 and first["embedded"] == 1 and isinstance(first["ms"], int)
    assert {"agent", "chunks", "fromCache", "ts"} <= set(first)
    agent = load_config(config).agent()
    with Memory(agent) as mem:
        deadline = time.monotonic() + 10
        while not mem.status()["watcher"]["running"] and time.monotonic() < deadline:
            time.sleep(0.1)
        watcher = mem.status()["watcher"]
        assert watcher["running"] and watcher["mode"] == "native" and watcher["pid"] == daemon.proc.pid
        write(workspace / "memory" / "2026-06-01.md", "met the locksmith about the gate")
        event = daemon.wait_for(lambda e: e["event"] == "sync" and e["indexed"] == 1)
        assert event["files"] == 2
        assert mem.search("locksmith")["results"][0]["path"] == "memory/2026-06-01.md"
    assert daemon.stop() == 0
    assert daemon.log[-1]["event"] == "stopped"
    with Memory(agent) as mem:
        assert mem.status()["watcher"]["running"] is False  # a stopped daemon is not reported as watching


def test_second_daemon_for_the_same_agent_exits_with_a_clear_message(daemon: Daemon, config: Path) -> None:
    daemon.wait_for(lambda e: e["event"] == "watching")
    second = subprocess.run(
        [sys.executable, "-m", "mdmem", "watch", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert second.returncode == 1
    assert "already running" in second.stderr and "Traceback" not in second.stderr


def test_sigterm_stops_gracefully_and_releases_the_lock(daemon: Daemon, config: Path) -> None:
    daemon.wait_for(lambda e: e["event"] == "sync")
    assert daemon.stop() == 0
    events = [e["event"] for e in daemon.log]
    assert events[-2:] == ["stopping", "stopped"]
    again = Daemon(config)  # the lock was released: a new daemon starts
    try:
        again.wait_for(lambda e: e["event"] == "watching")
    finally:
        assert again.stop() == 0


def test_a_bad_file_is_logged_and_skipped(daemon: Daemon, workspace: Path) -> None:
    daemon.wait_for(lambda e: e["event"] == "sync")
    bad = os.path.join(os.fsencode(workspace / "memory"), b"caf\xe9.md")  # a name that is not UTF-8
    with open(bad, "wb") as fh:
        fh.write(b"bad name")
    write(workspace / "memory" / "good.md", "a good file next to it")
    error = daemon.wait_for(lambda e: e["event"] == "error" and "caf" in e.get("path", ""))
    assert error["path"] == "memory/caf\ufffd.md" and "rename" in error["error"]
    sync = next(e for e in daemon.log if e["event"] == "sync" and e["errors"])
    assert sync["indexed"] == 1  # the good file next to it was indexed in the same sync
    assert daemon.proc.poll() is None  # still running


def test_provider_outage_is_retried_while_keyword_search_works(workspace: Path, tmp_path: Path) -> None:
    write(workspace / "MEMORY.md", "# Memory\n\nThe gate code is 4711.\n")
    with FakeOpenAIServer(dims=8) as server:
        cfg = tmp_path / "remote.json5"
        ms = {
            "provider": "openai",
            "remote": {"baseUrl": server.url, "maxRetries": 1, "dimensions": 8},
            "sync": {"watchDebounceMs": 200, "onSearch": False},
            "breaker": {"coolDownSeconds": 1, "maxCoolDownSeconds": 1},  # paused briefly: the test waits less
        }
        cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": ms}}}))
        with Memory(load_config(cfg).agent()) as mem:
            mem.sync()
        server.enqueue(*[Fault.server_error()] * 4)  # two failed syncs: the first retry comes 2 s later, then 4 s
        write(workspace / "memory" / "2026-07-01.md", "the outage note about the heron")
        d = Daemon(cfg)
        try:
            error = d.wait_for(lambda e: e["event"] == "error" and "retryInSeconds" in e)
            assert error["retryInSeconds"] >= 1 and "waiting for embeddings" in error["error"]
            # during the backoff a new file is still indexed after the debounce, as text only
            write(workspace / "memory" / "2026-07-02.md", "the second outage note about the otter")
            text_only = d.wait_for(lambda e: e["event"] == "sync" and e["pending"] == 2, timeout=5)
            assert text_only["indexed"] == 1 and text_only["embedded"] == 0
            with Memory(load_config(cfg).agent()) as reader:  # searching still works meanwhile...
                assert reader.search("gate code")["results"][0]["path"] == "MEMORY.md"
                # ...and the notes written during the outage are already found by their keywords
                assert reader.search("outage heron")["results"][0]["path"] == "memory/2026-07-01.md"
                assert reader.search("outage otter")["results"][0]["path"] == "memory/2026-07-02.md"
                assert reader.status()["pendingEmbeddings"] == 2
            recovered = d.wait_for(lambda e: e["event"] == "sync" and e["embedded"] >= 1, timeout=30)
            assert recovered["pending"] == 0 and recovered["embedded"] == 2
            with Memory(load_config(cfg).agent()) as reader:
                status = reader.status()
                assert status["pendingEmbeddings"] == 0 and status["vectors"] == status["chunks"] == 3
        finally:
            assert d.stop() == 0


def test_starts_with_a_missing_workspace_waits_for_it_and_status_says_so(workspace: Path, tmp_path: Path) -> None:
    """The daemon does not die: it reports the missing workspace, arms when it appears, and syncs."""
    missing = tmp_path / "not-yet"
    cfg = tmp_path / "late.json5"
    ms = {"provider": "hash", "sync": {"watchDebounceMs": 200}}
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(missing), "memorySearch": ms}}}))
    agent = load_config(cfg).agent()
    d = Daemon(cfg)
    try:
        waiting = d.wait_for(lambda e: e["event"] == "waiting")
        assert waiting["waitingFor"] == str(missing)
        error = d.wait_for(lambda e: e["event"] == "error" and "does not exist" in e["error"])
        assert "retryInSeconds" in error and d.proc.poll() is None
        with Memory(agent) as mem:
            watcher = mem.status()["watcher"]
            assert watcher["running"] is True
            assert (watcher["armed"], watcher["waitingFor"], watcher["mode"]) == (False, str(missing), None)
            assert "does not exist" in mem.status()["lastError"]["error"]
        write(missing / "memory" / "2026-08-01.md", "the workspace arrived with the quokka")
        d.wait_for(lambda e: e["event"] == "sync" and e["indexed"] == 1)  # the resync after arming
        armed = next(e for e in d.log if e["event"] == "watching")  # logged when armed, before that sync
        assert armed["mode"] == "native" and armed["rearms"] == 1
        with Memory(agent) as mem:
            assert mem.search("quokka")["results"][0]["path"] == "memory/2026-08-01.md"
            deadline = time.monotonic() + 10
            while not mem.status()["watcher"].get("armed") and time.monotonic() < deadline:
                time.sleep(0.1)
            watcher = mem.status()["watcher"]
            assert (watcher["armed"], watcher["waitingFor"]) == (True, None)
            assert mem.status()["lastError"] is None
        write(missing / "memory" / "2026-08-02.md", "a later note about the wombat")
        d.wait_for(lambda e: e["event"] == "sync" and e["indexed"] == 1)
        with Memory(agent) as mem:
            assert mem.search("wombat")["results"][0]["path"] == "memory/2026-08-02.md"
    finally:
        assert d.stop() == 0


def test_workspace_renamed_away_and_back_under_the_daemon(daemon: Daemon, config: Path, workspace: Path) -> None:
    daemon.wait_for(lambda e: e["event"] == "sync")
    away = workspace.with_name("ws-away")
    workspace.rename(away)
    assert daemon.wait_for(lambda e: e["event"] == "waiting")["waitingFor"] == str(workspace)
    agent = load_config(config).agent()
    with Memory(agent) as mem:
        deadline = time.monotonic() + 10
        while mem.status()["watcher"].get("armed") is not False and time.monotonic() < deadline:
            time.sleep(0.1)
        assert mem.status()["watcher"]["waitingFor"] == str(workspace)
        assert mem.search("gate code")["results"][0]["path"] == "MEMORY.md"  # answered from the last index
    away.rename(workspace)
    daemon.wait_for(lambda e: e["event"] == "watching" and e["rearms"] >= 1)
    time.sleep(1)
    write(workspace / "memory" / "2026-09-01.md", "back home with the capercaillie")
    daemon.wait_for(lambda e: e["event"] == "sync" and e["indexed"] == 1)
    with Memory(agent) as mem:
        assert mem.search("capercaillie")["results"][0]["path"] == "memory/2026-09-01.md"
