"""Index file names that cannot collide: one agent's tidying never deletes another agent's index, whatever
its id looks like (``main.sqlite.g1`` beside ``main``), on real SQLite files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mdmem.config.load import load_config, with_sessions
from mdmem.config.store import DEFAULT_STORE_PATH, store_path_clash
from mdmem.memory import Memory
from mdmem.service.agents import Agents
from mdmem.store.generations import next_generation, remove_orphans
from mdmem.util.errors import ConfigError, InvalidArgumentError
from tests.service_bodies import openai_entry, recall_body, retain_body
from tests.service_server import Service, write_config


def _config(tmp_path: Path, store_path: str | None = None, agents: list[str] | None = None) -> Path:
    ms: dict[str, Any] = {"provider": "none"}
    if store_path:
        ms["store"] = {"path": store_path}
    entries = [{"id": a, "workspace": str(tmp_path / f"ws-{a}")} for a in agents or ["main"]]
    for entry in entries:
        (Path(entry["workspace"]) / "memory").mkdir(parents=True, exist_ok=True)
    cfg = {"agents": {"defaults": {"memorySearch": ms}, "list": entries}, "service": {"autoAgents": True}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_an_agent_named_like_a_generation_keeps_its_index_through_the_others_rebuilds(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path), env={"MDMEMORY_HOME": str(tmp_path / "home")})
    agents = Agents(config)
    main = Memory(with_sessions(config.agent("main")), config)
    twin_config = with_sessions(agents.config_of("main.sqlite.g1"))  # created as autoAgents creates it
    (twin_config.workspace / "memory" / "note.md").write_text("# Note\n\nThe lighthouse keeper is Ingrid.\n")
    twin = Memory(twin_config, config)
    try:
        assert twin.agent.store_path.parent == main.agent.store_path.parent  # the same folder
        twin.sync()
        twin.sync(force=True)  # a rebuild: its index is now a symlink to a generation file
        twin.sync(force=True)
        live = twin.agent.store_path.resolve()
        assert live.name.startswith("main.sqlite.g1.sqlite.g")
        main.sync()
        main.sync(force=True)  # main's rebuilds tidy its folder: its own old generations go, the twin's stay
        main.sync(force=True)
        assert live.exists() and twin.agent.store_path.resolve() == live
        hits = twin.search("lighthouse keeper")["results"]
        assert hits and hits[0]["path"] == "memory/note.md"
        folder = main.agent.store_path.parent
        mains = [p.name for p in folder.iterdir() if re.fullmatch(r"main\.sqlite\.g\d+", p.name)]
        assert mains == [main.agent.store_path.resolve().name]  # of main's generations, the live one is left
    finally:
        main.close()
        twin.close()


def test_tidying_matches_exact_generation_and_swap_names_only(tmp_path: Path) -> None:
    index = tmp_path / "main.sqlite"
    index.write_bytes(b"")
    others = ["main.sqlite.g1.sqlite", "main.sqlite.g1.sqlite.g3", ".main.sqlite.swap-1.sqlite", "main.sqlite.gx"]
    orphans = ["main.sqlite.g2", "main.sqlite.g2-wal", "main.sqlite.g17", ".main.sqlite.swap-4242"]
    for name in others + orphans:
        (tmp_path / name).write_bytes(b"x")
    assert next_generation(index).name == "main.sqlite.g18"
    remove_orphans(index)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([*others, "main.sqlite"])


@pytest.mark.parametrize(
    ("template", "agent_id", "clash"),
    [
        (DEFAULT_STORE_PATH, "main.sqlite.g1", None),
        (DEFAULT_STORE_PATH, "main.sqlite-wal", None),
        (DEFAULT_STORE_PATH, ".main.sqlite.swap-3", None),
        ("{home}/idx/{agentId}", "main.g1", "main"),
        ("{home}/idx/{agentId}", "main-wal", "main"),
        ("{home}/idx/{agentId}", "main.lock", "main"),
        ("{home}/idx/{agentId}", "main.embed", "main"),  # its lock would be main's embedding lock
        ("{home}/idx/{agentId}", "main.health.json", "main"),
        ("{home}/idx/{agentId}", ".main.swap-12", "main"),
        ("{home}/idx/{agentId}", "main.corrupt-20260101T000000Z", "main"),
        ("{home}/idx/{agentId}", "new.bot", None),
        ("{home}/idx/{agentId}", "work-bot", None),
        ("{home}/idx/{agentId}.db", "main.db.g1", None),
        ("{home}/{agentId}/index.sqlite", "main.lock", None),  # a folder per agent: nothing to collide
        ("/srv/one.sqlite", "main.g1", None),
    ],
)
def test_store_path_clash(template: str, agent_id: str, clash: str | None) -> None:
    assert store_path_clash(template, "/home/u/.mdmemory", agent_id) == clash


def test_a_configured_agent_that_would_be_anothers_file_is_refused(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "{home}/idx/{agentId}", ["main", "main-wal"])
    with pytest.raises(ConfigError) as err:
        load_config(cfg, env={"MDMEMORY_HOME": str(tmp_path / "home")})
    assert "agents.list[1].id" in str(err.value) and "'main'" in str(err.value) and "Fix:" in str(err.value)


def test_an_auto_agent_that_would_be_anothers_file_is_refused_and_others_are_served(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "{home}/idx/{agentId}"), env={"MDMEMORY_HOME": str(tmp_path / "home")})
    agents = Agents(config)
    with pytest.raises(InvalidArgumentError) as err:
        agents.config_of("main.g2")
    assert str(err.value).startswith("agent_id:") and "'main'" in str(err.value)
    assert not (tmp_path / "home" / "agents" / "main.g2").exists()
    assert agents.config_of("new.bot").store_path.name == "new.bot"


def test_over_http_the_twin_agent_is_recalled_after_mains_rebuild(tmp_path: Path) -> None:
    """The service's view: retain into ``main.sqlite.g1`` and ``main``, rebuild both (a provider change makes
    every index rebuild on the next sync), and the twin's turn is still recalled."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    cfg = write_config(tmp_path / "c.json", {"main": ws}, provider="none", autoAgents=True, recallWorkers=0)
    svc = Service(cfg, tmp_path / "home", "tok-names", tmp_path / "serve.log")
    svc.start()
    try:
        for agent, word in (("main.sqlite.g1", "walrus"), ("main", "heron")):
            entry = openai_entry(f"where does the {word} sleep?", f"The {word} sleeps on pier 9.", id=f"hist1_{word}")
            assert svc.call("POST", "/retain", retain_body(agent, entry)).status == 202
            assert svc.call("POST", "/recall", recall_body(agent, f"{word} sleep")).body["memories"]
    finally:
        svc.stop()
    cfg = write_config(tmp_path / "c.json", {"main": ws}, provider="hash", autoAgents=True, recallWorkers=0)
    svc.start()  # another identity: each index is rebuilt into a new generation on its next sync
    try:
        for agent in ("main.sqlite.g1", "main", "main.sqlite.g1", "main"):
            word = "walrus" if agent != "main" else "heron"
            memories = svc.call("POST", "/recall", recall_body(agent, f"{word} sleep")).body["memories"]
            assert memories and word in memories[0]["text"], agent
        status = svc.call("GET", "/agents/main.sqlite.g1/status")
        assert status.status == 200 and status.body["sessions"]["retained"] == 1
    finally:
        svc.stop()


def test_an_auto_agent_never_shares_a_configured_agents_workspace(tmp_path: Path) -> None:
    """A configured agent whose workspace is ``{home}/agents/<name>`` (where auto agents live) under another id:
    a request for an auto agent ``<name>`` would read its notes and write into its sessions. Refused (400),
    as is an id that would put an auto agent inside a configured agent's ``memory/`` (one whose workspace is
    ``{home}/agents`` itself); other ids are served."""
    home = tmp_path / "home"
    ws = home / "agents" / "main"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe assistant's zebra launch code is 4417.\n")
    cfg = write_config(tmp_path / "c.json", {"assistant": ws, "all": home / "agents"}, autoAgents=True, recallWorkers=0)
    svc = Service(cfg, home, "tok-owner", tmp_path / "serve.log")
    svc.start()
    try:
        for agent, owner in (("main", "'assistant'"), ("memory", "'all'")):
            reply = svc.call("POST", "/recall", recall_body(agent, "zebra launch code"))
            assert reply.status == 400 and owner in reply.body["error"], reply.raw
            entry = openai_entry("hello from an impostor", "hi", id="hist1_impostor")
            assert svc.call("POST", "/retain", retain_body(agent, entry)).status == 400
        assert not (ws / "sessions").exists() or not list((ws / "sessions").glob("*.md"))
        assert not (home / "agents" / "memory").exists()
        reply = svc.call("POST", "/recall", recall_body("assistant", "zebra launch code"))
        assert reply.status == 200 and "4417" in reply.body["memories"][0]["text"]
        reply = svc.call("POST", "/recall", recall_body("newcomer", "zebra launch code"))
        assert reply.status == 200 and "4417" not in json.dumps(reply.body)
    finally:
        svc.stop()


def test_an_auto_agent_differing_from_another_only_by_case_is_refused(tmp_path: Path) -> None:
    """``Main`` beside ``main``, ``BOB`` beside ``bob``: one folder and one index on a case-insensitive file
    system (macOS, Windows), two agents here. Refused, whatever the file system, so that a home moved there
    keeps its agents apart; an agent whose folder exists already keeps working."""
    config = load_config(_config(tmp_path), env={"MDMEMORY_HOME": str(tmp_path / "home")})
    agents = Agents(config)
    assert agents.config_of("bob").id == "bob"  # creates home/agents/bob
    for agent_id, twin in (("Main", "'main'"), ("BOB", "'bob'")):
        with pytest.raises(InvalidArgumentError) as err:
            agents.config_of(agent_id)
        assert str(err.value).startswith("agent_id:") and twin in str(err.value) and "Fix:" in str(err.value)
        assert not (tmp_path / "home" / "agents" / agent_id).exists()
    (tmp_path / "home" / "agents" / "Bob").mkdir()  # made before this rule, on this file system
    assert agents.config_of("Bob").id == "Bob"
