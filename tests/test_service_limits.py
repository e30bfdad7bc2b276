"""Bounded resources of ``mdmem serve`` under a lowered ``ulimit -n``: many agents, idle and partial
connections, endless header lines and stalled bodies, over real sockets to a real uvicorn process."""

from __future__ import annotations

import select
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from mdmem.service.budget import plan
from tests.service_bodies import openai_entry, recall_body, retain_body
from tests.service_server import Service, open_fds, write_config

TOKEN = "limits-token-3e8d"
FD_LIMIT = 256


def _service(tmp_path: Path, fd_limit: int | None = FD_LIMIT, **service: Any) -> Service:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe ferry to the island leaves at 07:40.\n")
    settings = {"recallWorkers": 0, **service}
    cfg = write_config(tmp_path / "config.json", {"main": ws}, provider="none", **settings)
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log", fd_limit=fd_limit)
    svc.start()
    return svc


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Service]:
    svc = _service(tmp_path, autoAgents=True, headerTimeoutMs=2000, bodyTimeoutMs=2000)
    yield svc
    svc.stop()


def _connect(svc: Service) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", svc.port), timeout=10)
    return s


def _read_all(s: socket.socket, timeout: float) -> bytes:
    """What the server sends until it closes the connection (or ``timeout`` passes: then what came so far)."""
    s.settimeout(timeout)
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def test_hundreds_of_agents_keep_working_under_a_low_fd_limit(limited: Service) -> None:
    """Each agent's index takes descriptors; past the cap the least recently used idle ones are closed and
    reopened on demand, so 240 agents under ``ulimit -n 256`` all retain and recall, and so do the first
    ones again at the end."""
    svc = limited
    assert svc.proc is not None

    def visit(i: int) -> tuple[int, int, bool]:
        agent = f"bot-{i:03d}"
        entry = openai_entry(
            f"what is the locker code of {agent}?", f"Locker {i} opens with 90{i:03d}.", id=f"hist1_{i}"
        )
        kept = svc.call("POST", "/retain", retain_body(agent, entry)).status
        reply = svc.call("POST", "/recall", recall_body(agent, f"locker code of {agent}"))
        found = reply.status == 200 and any(f"90{i:03d}" in m["text"] for m in reply.body["memories"])
        return kept, reply.status, found

    peak = 0
    with ThreadPoolExecutor(4) as pool:
        results = []
        for r in pool.map(visit, range(240)):
            results.append(r)
            peak = max(peak, open_fds(svc.proc.pid))
    assert [r for r in results if r != (202, 200, True)] == []
    assert peak < FD_LIMIT
    again = [visit(i) for i in range(10)]  # closed long ago: reopened, their turns still there
    assert again == [(202, 200, True)] * 10
    health = svc.call("GET", "/healthz")
    assert health.status == 200 and health.body["ok"] is True
    assert 1 <= health.body["openAgents"] <= 64
    status = svc.call("GET", "/agents/bot-007/status")
    assert status.status == 200 and status.body["sessions"]["retained"] == 1
    assert svc.call("GET", "/agents/bot-999/status").status == 404  # a status request creates nothing
    assert not (svc.home / "agents" / "bot-999").exists()


def test_idle_and_partial_connections_cannot_take_the_service_down(tmp_path: Path) -> None:
    """400 connections that send half a request, under ``ulimit -n 256``: those past the connection cap are
    answered 503 at once, the rest are closed when their headers do not arrive in time (408), the server's
    descriptors stay below the limit, and recalls work again right after."""
    svc = _service(tmp_path, headerTimeoutMs=8000)
    assert svc.proc is not None
    head = b"POST /recall HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n"
    held: list[socket.socket] = []
    try:
        for _ in range(400):
            s = _connect(svc)
            s.sendall(head)
            held.append(s)
        # While every slot is taken a new client is told why (503), not left hanging or reset.
        probe = _connect(svc)
        probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert b"service.maxConnections" in _read_all(probe, 5)
        probe.close()
        assert open_fds(svc.proc.pid) < FD_LIMIT
        readable = set(select.select(held, [], [], 0.5)[0])
        refused = [_read_all(s, 5) for s in held if s in readable]
        admitted = [s for s in held if s not in readable]
        assert len(refused) >= 200 and len(admitted) >= 50  # the cap here: ~100 (mdmem.service.budget)
        assert all(a.startswith(b"HTTP/1.1 503") and b"service.maxConnections" in a for a in refused)
        late = [_read_all(s, 12) for s in admitted]  # the header timeout closes them, each with a 408
        assert all(a.startswith(b"HTTP/1.1 408") for a in late)
        reply = svc.call("POST", "/recall", recall_body("main", "when does the ferry leave"))
        assert reply.status == 200 and "07:40" in reply.body["memories"][0]["text"]
        health = svc.call("GET", "/healthz")
        assert health.status == 200 and health.body["ok"] is True
    finally:
        for s in held:
            s.close()
        svc.stop()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_an_endless_header_line_is_refused_without_the_server_growing(limited: Service) -> None:
    svc = limited
    assert svc.proc is not None
    before = _rss_kb(svc.proc.pid)
    for start in (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: ", b"GET /"):  # a header, a URL
        s = _connect(svc)
        s.sendall(start)
        sent = 0
        try:
            while sent < 200 * 1024 * 1024:
                s.sendall(b"a" * 65536)
                sent += 65536
        except OSError:
            pass  # the server closed the connection
        assert sent < 32 * 1024 * 1024  # it stopped reading long before the 200 MB
        answer = _read_all(s, 5)
        s.close()
        assert answer == b"" or answer.startswith(b"HTTP/1.1 431")
    assert _rss_kb(svc.proc.pid) - before < 20 * 1024
    assert svc.call("GET", "/healthz").status == 200


def test_silent_partial_and_stalled_requests_are_closed_after_the_timeouts(limited: Service) -> None:
    svc = limited
    t0 = time.monotonic()
    silent = _connect(svc)
    assert _read_all(silent, 10) == b"" and 1.5 < time.monotonic() - t0 < 6  # nothing sent: closed after 2 s

    t0 = time.monotonic()
    drip = _connect(svc)  # a byte every 0.3 s: the header deadline is from the first byte, not the last
    for byte in b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"z" * 200:
        if select.select([drip], [], [], 0)[0] or time.monotonic() - t0 > 8:
            break  # the server answered (or gave up)
        drip.sendall(bytes([byte]))
        time.sleep(0.3)
    assert _read_all(drip, 5).startswith(b"HTTP/1.1 408") and 1.5 < time.monotonic() - t0 < 6

    t0 = time.monotonic()
    stalled = _connect(svc)  # headers, then 10 of the 500 body bytes promised
    stalled.sendall(
        b"POST /retain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: 500\r\n\r\n" + b'{"agent_id'
    )
    assert _read_all(stalled, 10) == b"" and 1.5 < time.monotonic() - t0 < 6  # closed after the 2 s
    reply = svc.call("POST", "/recall", recall_body("main", "when does the ferry leave"))
    assert reply.status == 200


def test_the_budget_splits_the_fd_limit() -> None:
    low = plan(256, readers=2, sockets=1, workers=0)
    assert low.max_open_agents >= 1 and low.max_connections >= 16
    assert low.max_open_agents * 11 + low.max_connections + 64 + 4 <= 256
    high = plan(65536, readers=8, sockets=4, workers=4)
    assert high.max_open_agents == 64 and high.max_connections > 30_000
    with pytest.raises(Exception, match="ulimit -n"):
        plan(100, readers=2, max_open_agents=50)
    with pytest.raises(Exception, match="service.maxConnections"):
        plan(1024, readers=2, max_connections=5000)
    assert plan(1024, readers=2, max_connections=10).max_connections == 10


def test_a_slow_client_does_not_block_others(limited: Service) -> None:
    """One connection sitting on a half-sent body does not hold up another client's requests."""
    svc = limited
    s = _connect(svc)
    s.sendall(
        b"POST /recall HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 99\r\n\r\n"
    )
    done = threading.Event()

    def other() -> None:
        assert svc.call("POST", "/recall", recall_body("main", "ferry")).status == 200
        done.set()

    t = threading.Thread(target=other)
    t.start()
    t.join(10)
    s.close()
    assert done.is_set()


def test_healthz_says_degraded_while_an_agents_index_cannot_be_opened_and_recovers(tmp_path: Path) -> None:
    svc = _service(tmp_path, fd_limit=None, autoAgents=True)
    blocker = svc.home / "state" / "memory"
    try:
        blocker.parent.mkdir(parents=True, exist_ok=True)
        if blocker.is_dir():
            shutil.rmtree(blocker)
        blocker.write_text("not a folder")  # where every index goes
        entry = openai_entry("which berth is ours?", "Berth 12.", id="hist1_berth")
        assert svc.call("POST", "/retain", retain_body("dock-bot", entry)).status == 202  # the files take it
        reply = svc.call("POST", "/recall", recall_body("dock-bot", "which berth"))
        assert reply.status == 503 and reply.body["error"]
        health = svc.call("GET", "/healthz")
        assert health.status == 503 and health.body["ok"] is False
        assert any("'dock-bot' failing" in why for why in health.body["degraded"]), health.body
        blocker.unlink()
        reply = svc.call("POST", "/recall", recall_body("dock-bot", "which berth"))
        assert reply.status == 200 and "Berth 12" in reply.body["memories"][0]["text"]
        health = svc.call("GET", "/healthz")
        assert health.status == 200 and health.body["ok"] is True
    finally:
        svc.stop()
