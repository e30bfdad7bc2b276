"""Recalls answered by worker processes (mdmem.service.recallpool), against a real ``mdmem serve``.

The workers are real child processes: the tests find them in /proc, kill them at rest and in the middle of
a burst of recalls, and check that every recall is still answered (in the service's own process while a
replacement starts), that a replacement comes, and that no worker outlives the service, however it ends.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_helpers import alive
from tests.service_bodies import openai_entry, recall_body, retain_body
from tests.service_server import Service, write_config

TOKEN = "workers-token-3a9d"


def workers_of(pid: int) -> list[int]:
    """The recall workers among the children of ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid and b"mdmem.service.recall_worker" in cmd:
            found.append(int(entry))
    return sorted(found)


def wait_for(what, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def start(tmp_path: Path, workers: int | None, **settings: Any) -> Service:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    lines = "\n".join(f"- Note {i}: the heron count at pier {i} was {i * 3}." for i in range(200))
    (ws / "memory" / "2026-03-01.md").write_text(f"# Log\n\n{lines}\n")
    service = {**settings} if workers is None else {"recallWorkers": workers, **settings}
    cfg = write_config(tmp_path / "config.json", {"main": ws}, **service)
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")
    svc.start()
    return svc


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    svc = start(tmp_path, 2)
    yield svc
    svc.stop()


def recall_ok(svc: Service, text: str) -> list[dict[str, object]]:
    reply = svc.call("POST", "/recall", recall_body("main", text))
    assert reply.status == 200, reply.raw
    return reply.body["memories"]


def test_recalls_are_answered_by_worker_processes(service: Service) -> None:
    assert service.proc is not None
    pids = wait_for(lambda: len(workers_of(service.proc.pid)) == 2 and workers_of(service.proc.pid))
    assert service.call("GET", "/healthz").body["recallWorkers"] == 2
    eid = "hist1_workers_retained"
    body = retain_body("main", openai_entry("where did the kingfisher nest?", "Under the old stone bridge.", id=eid))
    assert service.call("POST", "/retain", body).status == 202
    memories = recall_ok(service, "where did the kingfisher nest?")  # a worker reads what the service wrote
    assert any(eid in str(m["text"]) or "stone bridge" in str(m["text"]) for m in memories)
    assert service.call("POST", "/forget", {"agent_id": "main", "entry_ids": [eid]}).status == 204
    assert not any("stone bridge" in str(m["text"]) for m in recall_ok(service, "where did the kingfisher nest?"))
    assert workers_of(service.proc.pid) == pids  # the same two answered throughout


@pytest.fixture
def unhurried(tmp_path: Path) -> Iterator[Service]:
    """Recalls with a budget of a minute: a recall that waits for a core is answered late, never dropped
    (what a worker's death costs is measured here, not the budget: tests/test_recall_budget.py)."""
    svc = start(tmp_path, 2, recallBudgetMs=60_000)
    yield svc
    svc.stop()


def test_a_worker_killed_at_rest_or_mid_burst_is_replaced_and_no_recall_fails(unhurried: Service) -> None:
    service = unhurried
    assert service.proc is not None
    pids = wait_for(lambda: len(workers_of(service.proc.pid)) == 2 and workers_of(service.proc.pid))
    os.kill(pids[0], signal.SIGKILL)  # at rest: noticed and replaced without waiting for a recall
    pid = service.proc.pid
    replaced = wait_for(lambda: len(set(workers_of(pid)) - set(pids)) == 1 and workers_of(pid))
    for i in range(6):
        assert recall_ok(service, f"heron count at pier {i}")
    failures: list[str] = []

    def burst(k: int) -> None:
        for i in range(80):
            reply = service.call("POST", "/recall", recall_body("main", f"heron count at pier {(k * 80 + i) % 200}"))
            if reply.status != 200 or not reply.body["memories"]:
                failures.append(f"{reply.status} {reply.raw[:200]!r}")

    threads = [threading.Thread(target=burst, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    for worker in workers_of(service.proc.pid):
        os.kill(worker, signal.SIGKILL)  # both, in the middle of the burst
    assert all(t.is_alive() for t in threads)  # (it was the middle)
    for t in threads:
        t.join()
    assert failures == []
    after = wait_for(lambda: len(workers_of(service.proc.pid)) == 2 and workers_of(service.proc.pid))
    assert not set(after) & set(replaced)
    assert service.call("GET", "/healthz").body["recallWorkers"] == 2


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_no_worker_outlives_the_service(tmp_path: Path, how: signal.Signals) -> None:
    svc = start(tmp_path, 2)
    assert svc.proc is not None
    pids = wait_for(lambda: len(workers_of(svc.proc.pid)) == 2 and workers_of(svc.proc.pid))
    assert recall_ok(svc, "heron count at pier 7")
    svc.stop(how)
    wait_for(lambda: not any(alive(p) for p in pids), timeout=15)


def test_zero_workers_answer_in_the_service_process(tmp_path: Path) -> None:
    svc = start(tmp_path, 0)
    try:
        assert svc.proc is not None
        assert "pier 7" in str(recall_ok(svc, "heron count at pier 7"))
        assert workers_of(svc.proc.pid) == [] and svc.call("GET", "/healthz").body["recallWorkers"] == 0
    finally:
        svc.stop()
