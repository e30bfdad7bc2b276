"""A fleet on one machine for the replica tests: the agent's host (its workspace and a real ``mdmem watch``),
``mdmem serve`` replicas that do not hold the workspace (``service.remoteAgents``), each with a state folder
of its own, and what the index holds of the session files, read straight from PostgreSQL."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdmem.files import sessionblocks as blocks
from mdmem.files.sessionblocks import closing
from mdmem.store.lines import file_text
from mdmem.store.pg.connection import connect
from mdmem.store.pg.entries import PgEntryLog
from mdmem.store.pg.store import PgStore
from tests.service_bodies import recall_body
from tests.service_server import Service, write_config

TOKEN = "fleet-token-5d0b2e"


def eventually(check: Callable[[], bool], seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


@dataclass
class Fleet:
    root: Path
    store: dict[str, Any]  # memorySearch.store of every member
    workspace: Path = field(init=False)  # on the agent's host only
    agent_config: Path = field(init=False)
    replicas: list[Service] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workspace = self.root / "agent-host" / "ws"
        (self.workspace / "memory").mkdir(parents=True)
        (self.workspace / "MEMORY.md").write_text("# Memory\n\nThe staging database is Postgres 16 on port 5433.\n")
        host = self.root / "agent-host"
        self.agent_config = write_config(host / "config.json", {"main": self.workspace}, **self._ms())

    def _ms(self) -> dict[str, Any]:
        ms = {"store": self.store, "sources": ["memory", "sessions"], "sync": {"watchDebounceMs": 50}}
        return {"memory_search": ms}

    def replica(self, name: str, *, remote: bool = True, start: bool = True, **service: Any) -> Service:
        """A replica on "host" ``name``: the agent's workspace path does not exist there."""
        host = self.root / f"replica-{name}"
        host.mkdir()
        absent = host / "volume-not-here" / "ws"
        if remote:
            service.setdefault("remoteAgents", ["*"])
        cfg = write_config(host / "config.json", {"main": absent}, **self._ms(), **service)
        svc = Service(cfg, host / "home", TOKEN, host / "serve.log")
        if start:
            svc.start()
        self.replicas.append(svc)
        return svc

    def local(self) -> Service:
        """A ``serve`` on the agent's host, holding its files."""
        svc = Service(
            self.agent_config, self.root / "agent-host" / "home", TOKEN, self.root / "agent-host" / "serve.log"
        )
        svc.start()
        self.replicas.append(svc)
        return svc

    def stop(self) -> None:
        for svc in self.replicas:
            svc.stop()

    # -- what the files and the index hold ----------------------------------------------------------
    def blocks_in_files(self, entry_id: str) -> int:
        folder = self.workspace / "sessions"
        return sum(p.read_text().count(closing(entry_id)) for p in folder.glob("*.md")) if folder.is_dir() else 0

    def copies_indexed(self, entry_id: str) -> int:
        """How many times the live index holds the entry's block, over every session file it has."""
        with PgStore(self.store["url"], "main", self.store["schema"]) as store:
            paths = [p for p in store.files() if p.startswith("sessions/")]
            return sum(file_text(store.chunks_of(p)).count(closing(entry_id)) for p in paths)

    def indexed(self) -> Counter[str]:
        """Whole blocks per entry id in the live index's session files (each file's text from its chunks)."""
        with PgStore(self.store["url"], "main", self.store["schema"]) as store:
            texts = [file_text(store.chunks_of(p)) for p in store.files() if p.startswith("sessions/")]
        return Counter(b.entry_id for t in texts for b in blocks.blocks(t.encode())[0])

    def in_files(self) -> tuple[Counter[str], list[str]]:
        """Whole blocks per entry id in the agent's session files, and the files that end in a torn block."""
        found: Counter[str] = Counter()
        torn = []
        for path in sorted((self.workspace / "sessions").glob("*.md")):
            whole, cut = blocks.blocks(path.read_bytes())
            found.update(b.entry_id for b in whole)
            if cut is not None:
                torn.append(path.name)
        return found, torn

    def entry_log(self) -> PgEntryLog:
        """The agent's entries on a connection of the test's own (close ``.conn`` after)."""
        return PgEntryLog(connect(self.store["url"]), self.store["schema"], "main")

    def entry_state(self, entry_id: str) -> str | None:
        with PgStore(self.store["url"], "main", self.store["schema"]) as store, store.session() as conn:
            row = conn.execute(
                f"SELECT state FROM {store.schema}.entries WHERE agent_id = 'main' AND entry_id = %s", (entry_id,)
            ).fetchone()
        return row[0] if row else None

    def row_size(self, rel: str) -> int | None:
        with PgStore(self.store["url"], "main", self.store["schema"]) as store:
            row = store.files().get(rel)
        return row.size if row else None


def recalled(svc: Service, question: str) -> str:
    reply = svc.call("POST", "/recall", recall_body("main", question))
    assert reply.status == 200, reply.raw
    return " ".join(str(m["text"]) for m in reply.body["memories"])


def log_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
