"""A recall within its budget, against a real ``mdmem serve`` (mdmem.service.startup, .timebox).

The embedding provider is real: MiniLM (skipped when the model is absent), or the OpenAI-compatible server
of tests/fake_openai.py on 127.0.0.1 that the tests make slow or hang, so that "the recall did not wait for
the vectors" and "the recall was not computed" can be seen from outside: the provider never received the
query of a recall that was dropped.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MINILM
from tests.fake_openai import FakeOpenAIServer, Fault
from tests.service_bodies import openai_entry, recall_body, retain_body
from tests.service_server import Service, write_config

TOKEN = "budget-token-61c0e2"
MEMORY = "# Memory\n\n## Boats\n\nThe heron boat is moored at pier 4.\n\n## People\n\nDana owns the billing service.\n"


def telemetry(svc: Service, op: str = "recall") -> list[dict[str, Any]]:
    """The service's telemetry lines for ``op``, in order."""
    lines = (json.loads(x) for x in svc.log.read_text().splitlines() if x.startswith('{"ts"'))
    return [e for e in lines if e.get("memory_op") == op]


def workspaces(tmp_path: Path, names: list[str], notes: int = 0) -> dict[str, Path]:
    out = {}
    for name in names:
        ws = tmp_path / f"ws-{name}"
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text(MEMORY)
        for i in range(notes):
            (ws / "memory" / f"2026-01-{i % 28 + 1:02d}-{i}.md").write_text(
                f"# Day {i}\n\nThe {name} team counted {i * 7} herons at pier {i}. Dana signed invoice {i}.\n"
            )
        out[name] = ws
    return out


def remote_service(tmp_path: Path, server: FakeOpenAIServer, **service: Any) -> Service:
    remote = {"baseUrl": server.url, "apiKey": "sk-budget-test-key", "dimensions": 8, "maxRetries": 0}
    settings = {"fallback": "none", "remote": {**remote, "timeoutSeconds": 30}}
    cfg = write_config(
        tmp_path / "config.json", workspaces(tmp_path, ["main"]), "openai", memory_search=settings, **service
    )
    return Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")


@pytest.fixture
def fake_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(dims=8) as server:
        yield server


def queried(server: FakeOpenAIServer, word: str) -> bool:
    """Whether the provider was asked to embed a text holding ``word``."""
    return any(word in text for batch in server.inputs() for text in batch)


def _llama() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


minilm = pytest.mark.skipif(not (MINILM.is_file() and _llama()), reason=f"needs {MINILM} and llama-cpp-python")


@minilm
def test_nothing_answers_before_every_agent_is_open_then_each_first_recall_is_in_budget(
    tmp_path: Path, probe_cache: Path
) -> None:
    """From the moment the process starts: the port refuses, or ``/healthz`` says 503 ``ready: false`` and a
    recall 503; a retain meanwhile is taken. Once ready, every agent is open in the service and in both
    recall workers, and the first recall of each is answered within the budget with the model's vectors."""
    names = ["north", "south", "east"]
    local = {"modelPath": str(MINILM), "modelCacheDir": str(tmp_path / "models")}
    cfg = write_config(
        tmp_path / "config.json",
        workspaces(tmp_path, names, notes=40),
        "local",
        memory_search={"local": local, "fallback": "none"},
        recallWorkers=2,
    )
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")
    svc.env["MDMEMORY_PROBE_CACHE"] = str(probe_cache)
    svc.start(wait=False)
    seen: list[tuple[str, int, Any]] = []
    retained = None
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                health = svc.call("GET", "/healthz", timeout=5)
            except OSError:
                seen.append(("refused", 0, None))
                time.sleep(0.02)
                continue
            if health.status == 200:
                break
            seen.append(("healthz", health.status, health.body))
            recall = svc.call("POST", "/recall", recall_body("north", "where is the heron boat?"), timeout=5)
            seen.append(("recall", recall.status, recall.body))
            if retained is None:
                entry = openai_entry("which pier for the kayak?", "The kayak is at pier 9.", id="hist1_kayak")
                retained = svc.call("POST", "/retain", retain_body("south", entry), timeout=30)
            time.sleep(0.05)
        assert health.status == 200 and health.body["ready"] is True, health.body
        starting = [s for s in seen if s[0] != "refused"]
        assert starting, "the service bound its port only once ready: nothing to check"
        for i, (kind, status, body) in enumerate(starting):
            if kind == "recall" and status == 200 and i == len(starting) - 1:
                continue  # ready between that health check and this recall: the next health check says 200
            assert status == 503, (kind, status, body)
            if kind == "healthz":
                assert body["ready"] is False and body["ok"] is False and body["starting"]["of"] == 3
            else:
                assert "starting" in body["error"]
        assert retained is not None and retained.status == 202 and retained.body["status"] == "retained"
        assert health.body["openAgents"] == 3 and health.body["recallWorkers"] == 2

        first = {}
        for name in names:
            reply = svc.call("POST", "/recall", recall_body(name, "where is the heron boat moored?"))
            assert reply.status == 200 and "pier 4" in reply.body["memories"][0]["text"], reply.body
            first[name] = telemetry(svc)[-1]
        for name, line in first.items():
            # hybrid: the query was embedded in time, so nothing (model, index, vectors) was left to load
            assert line["memory_status"] == "succeeded" and line["memory_result"] == "hybrid", (name, line)
            assert line["ms"] <= 250, (name, line)
        kayak = svc.call("POST", "/recall", recall_body("south", "which pier is the kayak at?"))
        assert "pier 9" in json.dumps(kayak.body)  # the retain taken while it started
    finally:
        svc.stop()


def test_a_recall_right_after_a_retain_finds_the_turn_by_keywords_while_its_vectors_cannot_be_made(
    tmp_path: Path, fake_server: FakeOpenAIServer
) -> None:
    """The provider hangs: the retain answers at once (its text indexed), the next recall answers within
    the budget with the new turn (keywords), and the vectors follow once the provider answers again."""
    svc = remote_service(tmp_path, fake_server, recallWorkers=1)
    svc.start()
    try:
        fake_server.outage(Fault.hang())
        for i, code in enumerate(["zephyr-4411", "quokka-2093", "marlin-7730"]):
            said = f"Remember: the code word for project Kestrel{i} is {code}."
            entry = openai_entry(said, "Noted.", id=f"hist1_k{i}")
            started = time.monotonic()
            assert svc.call("POST", "/retain", retain_body("main", entry)).status == 202
            assert time.monotonic() - started < 2.0  # the proxy's retain budget
            reply = svc.call("POST", "/recall", recall_body("main", f"What is the code word for project Kestrel{i}?"))
            assert reply.status == 200 and code in reply.body["memories"][0]["text"], reply.body
            line = telemetry(svc)[-1]
            assert line["memory_status"] == "succeeded" and line["memory_result"] == "keyword", line
            assert line["ms"] <= 400, line  # the budget (250 ms), and no wait for the hanging provider
        status = svc.call("GET", "/agents/main/status").body
        assert status["pendingEmbeddings"] >= 1, status  # the turns are there, their vectors are not

        fake_server.outage(None)
        deadline = time.monotonic() + 90
        while svc.call("GET", "/agents/main/status").body["pendingEmbeddings"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert svc.call("GET", "/agents/main/status").body["pendingEmbeddings"] == 0
        assert queried(fake_server, "zephyr-4411")  # embedded by the background indexer
    finally:
        svc.stop()


def _recall_then_hang_up(svc: Service, text: str, after: float) -> None:
    """A client that sends a recall and closes its connection after ``after`` seconds, answered or not."""
    conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=after)
    body = json.dumps(recall_body("main", text)).encode()
    headers = {"Authorization": f"Bearer {svc.token}", "Content-Type": "application/json"}
    try:
        conn.request("POST", "/recall", body=body, headers=headers)
        conn.getresponse().read()
    except OSError:  # a timeout too
        pass
    finally:
        conn.close()


def test_a_recall_whose_client_hung_up_while_it_waited_is_not_computed(
    tmp_path: Path, fake_server: FakeOpenAIServer
) -> None:
    """One worker, busy with a slow recall; a second recall waits for it and its client hangs up: the second is
    never computed (the provider never sees its query) and telemetry says ``abandoned``, not ``succeeded``."""
    svc = remote_service(tmp_path, fake_server, recallWorkers=1, recallBudgetMs=8000)
    svc.start()
    try:
        fake_server.outage(Fault.slow(4.0))  # every embedding takes 4 s
        busy = threading.Thread(target=svc.call, args=("POST", "/recall", recall_body("main", "alpha heron question")))
        busy.start()
        deadline = time.monotonic() + 10
        while not queried(fake_server, "alpha heron") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert queried(fake_server, "alpha heron")  # the worker is computing it
        started = time.monotonic()
        _recall_then_hang_up(svc, "bravo heron question", after=0.5)
        busy.join(30)
        time.sleep(0.5)
        lines = telemetry(svc)
        dropped = lines[-2] if lines[-1]["memory_status"] == "succeeded" else lines[-1]
        assert dropped["memory_status"] == "abandoned" and dropped["status_code"] == 499, lines[-2:]
        assert dropped["ms"] < 2000 and time.monotonic() - started < 8  # dropped when it left, not at the budget
        assert not queried(fake_server, "bravo heron")  # never computed
        assert any(e["memory_status"] == "succeeded" for e in lines[-2:])  # the busy one was answered
    finally:
        svc.stop()


def _late_recall(svc: Service, text: str, delay: float) -> tuple[int, Any]:
    """A recall whose body arrives ``delay`` seconds after its headers: its budget runs while it waits."""
    body = json.dumps(recall_body("main", text)).encode()
    head = (
        f"POST /recall HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {svc.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", svc.port), timeout=30) as sock:
        sock.sendall(head.encode())
        time.sleep(delay)
        sock.sendall(body)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    status = int(reply.split(b" ", 2)[1])
    return status, json.loads(reply.partition(b"\r\n\r\n")[2])


def test_a_burst_of_recalls_past_their_budget_is_shed_and_the_rest_answer_in_time(
    tmp_path: Path, fake_server: FakeOpenAIServer
) -> None:
    """A burst of recalls, the provider slow: 20 that waited past their budget before they could start are
    shed with 503 ``timed_out`` and never computed (the provider never sees them); 60 more at once, far
    more than the service can embed in their budget, are each answered within about it (by keywords when
    there is no time to embed) or shed; none is answered late, and telemetry counts each as what it was."""
    budget_ms = 300
    svc = remote_service(tmp_path, fake_server, recallWorkers=1, recallBudgetMs=budget_ms)
    svc.start()
    try:
        fake_server.outage(Fault.slow(10.0))
        before = len(telemetry(svc))
        asked = len(fake_server.inputs())
        results: list[tuple[str, int, Any]] = []
        lock = threading.Lock()

        def one(i: int) -> None:
            reply = svc.call("POST", "/recall", recall_body("main", f"where is the heron boat {i}?"), timeout=30)
            with lock:
                results.append(("now", reply.status, reply.body))

        def late(i: int) -> None:
            status, body = _late_recall(svc, f"where is the lateboat{i} moored?", budget_ms / 1000 + 0.2)
            with lock:
                results.append(("late", status, body))

        threads = [threading.Thread(target=late, args=(i,)) for i in range(20)]
        threads += [threading.Thread(target=one, args=(i,)) for i in range(60)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == 80
        late_ones = [r for r in results if r[0] == "late"]
        assert all(r[1] == 503 and "budget of 300 ms" in r[2]["error"] for r in late_ones), late_ones
        shed = [r for r in results if r[1] == 503]
        answered = [r for r in results if r[1] == 200]
        assert len(shed) + len(answered) == 80, [r for r in results if r[1] not in (200, 503)]
        assert all("budget of 300 ms" in r[2]["error"] for r in shed)
        assert answered and all("pier 4" in json.dumps(r[2]) for r in answered)
        time.sleep(0.3)
        lines = telemetry(svc)[before:]
        statuses = sorted(e["memory_status"] for e in lines)
        assert statuses == sorted(["succeeded"] * len(answered) + ["timed_out"] * len(shed)), statuses
        assert all(e["ms"] <= budget_ms * 1.5 for e in lines if e["memory_status"] == "succeeded"), lines
        assert all(e["status_code"] == 503 for e in lines if e["memory_status"] == "timed_out")
        assert not queried(fake_server, "lateboat")  # the shed ones were never computed
        # the provider was asked for at most the recalls that started while there was time to embed
        assert len(fake_server.inputs()) - asked <= len(answered)
    finally:
        svc.stop()
