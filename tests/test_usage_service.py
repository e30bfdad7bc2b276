"""Recalls count as uses (kind ``pack``) on a real ``mdmem serve``: answered in the service's process or by its
recall workers, the counts reach the index by the time the service has stopped (SIGTERM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mdmem.memory import Memory
from tests.service_bodies import recall_body
from tests.service_server import Service, write_config

TOKEN = "usage-token-51c2"


@pytest.mark.parametrize("workers", [0, 2])
def test_recalls_are_counted_as_pack_uses(tmp_path: Path, workers: int, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2026-03-01.md").write_text("# Log\n\n- the heron count at the pier was 12\n")
    (ws / "MEMORY.md").write_text("# Facts\n\n- the boiler code is 4417\n")
    cfg = write_config(tmp_path / "config.json", {"main": ws}, recallWorkers=workers)
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")
    svc.start()
    try:
        for _ in range(3):
            reply = svc.call("POST", "/recall", recall_body("main", "how many herons at the pier?"))
            assert reply.status == 200, reply.raw
            assert any("heron" in m["text"] for m in reply.body["memories"])
    finally:
        assert svc.stop() == 0
    monkeypatch.setenv("MDMEMORY_HOME", str(tmp_path / "home"))
    with Memory.open(config_path=cfg) as mem:
        rows = mem.store.usage_rows()
    assert {(r.path, r.kind) for r in rows} == {("memory/2026-03-01.md", "pack")}
    assert sum(r.uses for r in rows) == 3
