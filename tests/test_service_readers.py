"""Recall readers: extra connections to an agent's index that search side by side and never write."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

from mdmem.config.load import load_config
from mdmem.service.agents import Agent, Agents
from mdmem.service.readers import Readers
from tests.conftest import write


@contextlib.contextmanager
def served(tmp_path: Path, workspace: Path, note: str) -> Iterator[Agent]:
    """The service's agent for ``workspace`` (keyword-only), holding ``note``, caught up."""
    write(workspace / "memory" / "2026-03-01.md", note)
    cfg = tmp_path / "cfg.json"
    ms = {"provider": "none", "store": {"path": str(tmp_path / "state" / "{agentId}.sqlite")}}
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace), "memorySearch": ms}}}))
    agents = Agents(load_config(cfg))
    try:
        with agents.use("main") as agent:
            agent.catch_up()
            yield agent
    finally:
        agents.close()


def test_recalls_borrow_separate_connections_up_to_the_pool_size(tmp_path: Path, workspace: Path) -> None:
    with served(tmp_path, workspace, "# Day\n\nThe kingfisher nests by the mill.\n") as agent:
        pool = Readers(agent.memory, size=2)
        inside = threading.Barrier(2, timeout=10)
        seen: list[int] = []

        def recall() -> None:
            with pool.reader() as mem:
                assert mem.search("kingfisher")["results"][0]["path"] == "memory/2026-03-01.md"
                seen.append(id(mem.store.conn))
                inside.wait()  # both hold a reader at once: two connections

        threads = [threading.Thread(target=recall) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert len(set(seen)) == 2 and id(agent.memory.store.conn) not in seen

        third: list[int] = []
        with pool.reader() as mem:  # a third recall gets one of the two back, no new connection
            third.append(id(mem.store.conn))
        assert third[0] in seen
        pool.close()


def test_a_reader_sees_a_hand_edit_only_after_the_agent_caught_up(tmp_path: Path, workspace: Path) -> None:
    with served(tmp_path, workspace, "# Day\n\nThe otter swam upstream.\n") as agent:
        write(workspace / "memory" / "2026-03-02.md", "# Day 2\n\nA heron waited on the weir.\n")
        with agent.readers.reader() as mem:
            assert mem.search("heron")["results"] == []  # a reader never indexes: the agent's memory does
        agent.memory.changed()  # what a retain or forget through the service says
        agent.catch_up()
        with agent.readers.reader() as mem:
            assert mem.search("heron")["results"][0]["path"] == "memory/2026-03-02.md"
