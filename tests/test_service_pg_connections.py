"""One ``mdmem serve`` for many agents on PostgreSQL: its connections stay within ``store.maxConnections``
per process (the service's and each recall worker's).

Stores borrow a connection per operation from one pool per process (``mdmem.store.pg.connection``), so
the number of agents served does not set the number of connections; a writer keeps one only while it holds
its agent's lock. Counted on the real server, in ``pg_stat_activity``, by the service's application name.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.service_bodies import openai_entry, recall_body, retain_body
from tests.service_server import Service, write_config

AGENTS = 300
MAX_CONNECTIONS = 6
WORKERS = 2  # recall worker processes (service.recallWorkers): each has a pool of its own
CLIENTS = 8


@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
def test_a_service_for_many_agents_keeps_within_its_connection_budget(
    tmp_path: Path, store_backend: dict[str, Any]
) -> None:
    import psycopg

    name = "svc-" + uuid.uuid4().hex[:8]
    url = f"{store_backend['url']}&application_name={name}"
    store = {**store_backend, "url": url, "maxConnections": MAX_CONNECTIONS}
    (tmp_path / "ws").mkdir()
    cfg = write_config(
        tmp_path / "config.json", {"main": tmp_path / "ws"}, memory_search={"store": store}, autoAgents=True
    )
    svc = Service(cfg, tmp_path / "home", None, tmp_path / "serve.log")
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        with psycopg.connect(store_backend["url"], autocommit=True) as admin:
            while not stop.is_set():
                seen.append(
                    admin.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
                    ).fetchone()[0]
                )
                stop.wait(0.02)

    def one_agent(i: int) -> tuple[int, int, bool]:
        agent = f"bot{i:03d}"
        word = f"walrus{i:03d}"
        stored = svc.call("POST", "/retain", retain_body(agent, openai_entry(f"where is {word}", "on the ice")))
        found = svc.call("POST", "/recall", recall_body(agent, f"where is {word}"))
        texts = [m["text"] for m in found.body["memories"]] if found.status == 200 else []
        return stored.status, found.status, any(word in t for t in texts)

    svc.start()
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(CLIENTS) as clients:
            results = list(clients.map(one_agent, range(AGENTS)))
    finally:
        stop.set()
        watcher.join(10)
        svc.stop()
    assert [r for r in results if r[:2] != (202, 200)] == []
    assert all(found for _, _, found in results)  # every agent recalled its own retained turn at once
    assert max(seen) <= (1 + WORKERS) * MAX_CONNECTIONS  # the service's process and each worker: a pool each
    assert max(seen) >= 2  # the watcher did see the service's connections
