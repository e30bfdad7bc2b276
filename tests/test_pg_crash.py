"""kill -9 of an ``mdmem index`` process on PostgreSQL, mid-sync and mid-rebuild: what it leaves is never
half-visible, searches keep answering, and the next writer converges on the files (as a fresh index)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from mdmem.config.load import load_config
from mdmem.memory import Memory
from mdmem.store.api import IndexStore
from mdmem.store.pg.store import PgStore
from tests.test_crash_safety import mutate, seed_and_index, write_config

KILLS = 12  # kills that landed while the process ran


def check_invariants(store: PgStore) -> None:
    """Every chunk has its vectors or is pending, never both or neither; every file row has its chunks;
    no row belongs to a generation that is not live, retired or being built."""
    with store.session():  # one connection for the checks
        store.refresh()
        s, a, g = store.schema, store.agent_id, store.gen
        bad = store.conn.execute(
            f"SELECT count(*) FROM {s}.chunks c WHERE agent_id = %s AND gen = %s AND pending = EXISTS "
            f"(SELECT 1 FROM {s}.vectors v WHERE v.chunk_id = c.id)",
            (a, g),
        ).fetchone()[0]
        assert bad == 0
        for path, row in store.files().items():
            assert row.chunks == len(store.chunks_of(path)) > 0, path
        stray = store.conn.execute(
            f"SELECT count(*) FROM {s}.chunks c WHERE agent_id = %s AND NOT EXISTS (SELECT 1 FROM {s}.generations "
            "g WHERE g.agent_id = c.agent_id AND g.gen = c.gen)",
            (a,),
        ).fetchone()[0]
        store.conn.commit()
        assert stray == 0


def snapshot(store: IndexStore) -> set[tuple[str, int, int, str]]:
    return {(c.path, c.start_line, c.end_line, c.text) for p in store.files() for c in store.chunks_of(p)}


@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
def test_kill_9_of_index_mid_sync_and_mid_rebuild(
    workspace: Path, tmp_path: Path, store_backend: dict[str, Any]
) -> None:
    rng = random.Random(13)
    config, cmd, env, full = seed_and_index(workspace, tmp_path, rng, store_backend)
    agent = load_config(config).agent()
    killed, rebuilds, round_no = 0, 0, 0
    store = PgStore(store_backend["url"], agent.id, store_backend["schema"])
    try:
        while killed < KILLS:
            round_no += 1
            assert round_no <= 60, f"only {killed} of 60 kills landed while the process was running"
            mutate(workspace, rng)
            rebuild = round_no % 4 == 2  # a chunking change: the kill lands in a rebuild
            if rebuild:
                write_config(config, workspace, rng.choice([120, 200, 300]), store_backend)
            store.refresh()
            before = store.gen
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.3, full * 1.1))
            proc.send_signal(signal.SIGKILL)
            landed = proc.wait(timeout=30) == -signal.SIGKILL
            killed += landed
            store.refresh()
            rebuilds += landed and rebuild and store.gen == before  # killed before its switch
            check_invariants(store)
            with Memory(load_config(config).agent()) as reader:  # the interrupted index answers
                assert isinstance(reader.search("alpha bravo")["results"], list)
        assert rebuilds >= 1
        with Memory(load_config(config).agent()) as mem:  # the next writer converges
            mem.sync()
            status = mem.status()
            assert status["staleFiles"] == [] and status["pendingEmbeddings"] == 0 and status["backend"] == "postgres"
        check_invariants(store)
        tokens = json.loads(config.read_text())["agents"]["defaults"]["memorySearch"]["chunking"]["tokens"]
        fresh_config = write_config(tmp_path / "fresh.json5", workspace, tokens, {"path": str(tmp_path / "f.sqlite")})
        with Memory(load_config(fresh_config).agent()) as fresh:  # a fresh SQLite index of the same files
            fresh.sync()
            assert snapshot(store) == snapshot(fresh.store)
    finally:
        store.close()
