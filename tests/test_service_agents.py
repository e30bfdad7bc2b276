"""The service's open agents: at most ``maxOpenAgents`` at once, least recently used idle ones closed and
reopened on demand, never one a request holds; in-process on real SQLite indexes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from mdmem.config.load import load_config, with_sessions
from mdmem.memory import Memory
from mdmem.service import agents as agents_module
from mdmem.service.agents import Agents, AgentsBusy, UnknownAgent
from mdmem.service.app import health_problems
from mdmem.service.budget import Budget, open_fds
from mdmem.service.protocol import Connections
from tests.service_bodies import openai_entry


def _agents(tmp_path: Path, max_open: int) -> Agents:
    cfg = tmp_path / "cfg.json"
    ms = {"provider": "none"}
    (tmp_path / "ws" / "memory").mkdir(parents=True)
    entries = [{"id": "main", "workspace": str(tmp_path / "ws")}]
    cfg.write_text(
        json.dumps({"agents": {"defaults": {"memorySearch": ms}, "list": entries}, "service": {"autoAgents": True}})
    )
    return Agents(load_config(cfg, env={"MDMEMORY_HOME": str(tmp_path / "home")}), max_open=max_open)


def test_at_most_max_open_agents_are_open_and_closed_ones_reopen(tmp_path: Path) -> None:
    agents = _agents(tmp_path, 3)
    try:
        first = {}
        for i in range(8):
            with agents.use(f"a{i}") as agent:
                first.setdefault(i, agent)
                assert len(agents.opened()) <= 3
        assert agents.opened() == ["a5", "a6", "a7"] and agents.closed_idle == 5
        with agents.use("a0") as again:  # closed long ago: opened anew, its files still there
            assert again is not first[0] and again.config.workspace == first[0].config.workspace
        assert "a5" not in agents.opened()  # the least recently used made room
    finally:
        agents.close()


def test_an_agent_in_use_is_never_closed_and_others_wait_for_a_free_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agents_module, "BUSY_SECONDS", 1.0)
    agents = _agents(tmp_path, 2)
    try:
        a = agents.acquire("a")
        b = agents.acquire("b")
        with agents.use("a") as same:  # already open: no room needed
            assert same is a
        t0 = time.monotonic()
        with pytest.raises(AgentsBusy, match="service.maxOpenAgents"):
            agents.acquire("c")  # both held: waits, then says so
        assert 0.9 < time.monotonic() - t0 < 5
        got: list[str] = []
        waiter = threading.Thread(target=lambda: got.append(agents.acquire("c").config.id))
        monkeypatch.setattr(agents_module, "BUSY_SECONDS", 10.0)
        waiter.start()
        time.sleep(0.3)
        agents.release(b)  # b idle: closed to make room for c
        waiter.join(10)
        assert got == ["c"] and sorted(agents.opened()) == ["a", "c"]
        assert a.memory.search("anything")["results"] == []  # a was never closed under its user
        agents.release(a)
    finally:
        agents.close()


def test_an_idle_agent_with_unindexed_retains_is_indexed_before_it_closes(tmp_path: Path) -> None:
    agents = _agents(tmp_path, 1)
    try:
        with agents.use("keeper") as agent:
            entry = openai_entry("where is the spare key?", "Under the blue flowerpot.", id="hist1_key")
            assert agent.log.retain(entry, {})[0] == "retained"
            agent.dirty = True
            config = agent.config
        with agents.use("other"):
            pass  # keeper closed to make room: synced first
        reader = Memory(with_sessions(config), agents.config)
        reader.catches_up = False  # what keeper's index holds, without indexing anything itself
        try:
            hits = reader.search("spare key flowerpot")["results"]
            assert hits and hits[0]["path"].startswith("sessions/")
        finally:
            reader.close()
    finally:
        agents.close()


def test_a_status_lookup_creates_no_agent(tmp_path: Path) -> None:
    agents = _agents(tmp_path, 4)
    try:
        with pytest.raises(UnknownAgent, match="not on a status request"):
            agents.acquire("ghost", create=False)
        assert not (tmp_path / "home" / "agents" / "ghost").exists() and agents.opened() == []
        with agents.use("ghost"):
            pass
        agents.close()
        agents = _agents_again(tmp_path, agents)
        with agents.use("ghost", create=False) as found:  # it exists now (its folder): found after a restart
            assert found.config.id == "ghost"
    finally:
        agents.close()


def _agents_again(tmp_path: Path, old: Agents) -> Agents:
    return Agents(old.config, max_open=old.max_open)


def test_health_problems_name_what_is_short(tmp_path: Path) -> None:
    agents = _agents(tmp_path, 2)
    try:
        assert health_problems(agents, Connections(4), Budget(100_000, 2, 4)) == []
        full = Connections(1)
        assert full.admit() and not full.admit() and full.refused == 1
        used = open_fds()
        assert used is not None
        problems = health_problems(agents, full, Budget(used, 2, 1))
        assert any(p.startswith("file descriptors:") for p in problems)
        assert any(p.startswith("connections: all 1 in use") for p in problems)
        agents.failed("a", OSError(24, "Too many open files"))
        assert "agent 'a' failing since 0 s: OSError: Too many open files" in health_problems(agents, None, None)
        agents.succeeded("a")
        assert health_problems(agents, None, None) == []
    finally:
        agents.close()
