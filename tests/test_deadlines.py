"""Bounded waits off the happy path, with real faults from the fake OpenAI server on 127.0.0.1.

During an embeddings outage (a server that hangs, trickles bytes, answers 500 or sends a huge body) every
search answers from keywords within ``query.embedTimeoutMs`` and says why; the circuit breaker opens and is
shared through the index with other Memory objects and processes; once the server is back, the first call
after the pause closes it again. Every test runs under a SIGALRM guard, so a hang fails instead of stalling.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdmem.config.load import load_config
from mdmem.memory import Memory
from mdmem.providers import deadline
from mdmem.providers.breaker import BreakerPolicy, CircuitBreaker, breaker_path
from mdmem.providers.factory import ProviderChoice
from mdmem.providers.hashing import HashEmbeddingProvider
from mdmem.providers.remote import OpenAIEmbeddingProvider
from mdmem.util.errors import InputRejected, ProviderError
from tests.conftest import write
from tests.fake_openai import FakeOpenAIServer, Fault

pytest.importorskip("openai")

KEY = "sk-test-SECRET-deadlines"
BUDGET_MS = 800
BUDGET = BUDGET_MS / 1000
MARGIN = 1.5  # generous: the machine is shared; the benchmark measures the real overshoot
INSTANT = 0.5  # a search whose query embedding is skipped by the open breaker
NOTES = {
    "MEMORY.md": "# Memory\n\n## Birds\nA grey heron fishes by the river every morning.\n",
    "memory/2026-04-01.md": "# 2026-04-01\n\nMet Alice about the vector index project.\n",
    "memory/2026-04-02.md": "# 2026-04-02\n\nThe backup job copied the photo archive to the NAS.\n",
}
OUTAGES = {
    "hang": (Fault.hang(), "timed out"),
    "trickle-body": (Fault.trickle(0.2), "timed out"),
    "trickle-headers": (Fault.trickle(0.2, headers=True), "timed out"),
    "http-500": (Fault.server_error(), "HTTP 500"),
    "huge-body": (Fault.huge(256 * 1024 * 1024, declared=False), "too large"),
}


@pytest.fixture(autouse=True)
def guard(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail any test here that runs past 120 s; keep proxies away from the loopback server."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError("test ran past its 120 s guard")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, 120)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(dims=8) as srv:
        yield srv


@pytest.fixture
def notes(workspace: Path) -> Path:
    for rel, text in NOTES.items():
        write(workspace / rel, text)
    return workspace


@pytest.fixture
def open_memory(tmp_path: Path, notes: Path, server: FakeOpenAIServer) -> Iterator[Callable[..., Memory]]:
    """``open_memory(**breaker)`` writes a config file for the fake server and returns ``Memory.open`` of it."""
    opened: list[Memory] = []

    def factory(failures: int = 2, cool_down: float = 30.0, max_cool_down: float = 300.0) -> Memory:
        memory_search = {
            "provider": "openai",
            "remote": {"baseUrl": server.url, "apiKey": KEY, "dimensions": 8, "timeoutSeconds": 30},
            "query": {"embedTimeoutMs": BUDGET_MS},
            "breaker": {"failures": failures, "coolDownSeconds": cool_down, "maxCoolDownSeconds": max_cool_down},
            "sync": {"watch": False},
        }
        body = json.dumps({"agents": {"defaults": {"workspace": str(notes), "memorySearch": memory_search}}})
        path = tmp_path / f"config-{failures}-{cool_down}.json5"
        path.write_text(body)
        mem = Memory.open(config_path=path)
        opened.append(mem)
        return mem

    yield factory
    for mem in opened:
        mem.close()


def timed(mem: Memory, query: str = "heron river") -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    response = mem.search(query)
    return response, time.monotonic() - started


def embedding_requests(server: FakeOpenAIServer) -> int:
    return len(server.inputs())


def assert_keyword_answer(response: dict[str, Any]) -> None:
    assert response["mode"] == "keyword" and response["provider"] == "openai"
    assert [r["path"] for r in response["results"]] == ["MEMORY.md"]


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.05)


# -- searches during an outage ------------------------------------------------------------------------


@pytest.mark.parametrize(("fault", "symptom"), list(OUTAGES.values()), ids=list(OUTAGES))
def test_searches_during_an_outage_answer_from_keywords_within_the_budget(
    open_memory: Callable[..., Memory], server: FakeOpenAIServer, fault: Fault, symptom: str
) -> None:
    mem = open_memory(failures=2)
    assert mem.sync()["indexed"] == len(NOTES)
    assert mem.search("heron river")["mode"] == "hybrid"
    server.outage(fault)

    failing = [timed(mem) for _ in range(2)]  # two failed calls open the breaker
    tried = embedding_requests(server)
    skipped = [timed(mem) for _ in range(3)]

    for response, seconds in failing:
        assert seconds < BUDGET + MARGIN, seconds
        assert_keyword_answer(response)
        (warning,) = response["warnings"]
        assert warning.startswith("query embedding failed, answered from keywords only") and symptom in warning
    for response, seconds in skipped:
        assert seconds < INSTANT, seconds
        assert_keyword_answer(response)
        (warning,) = response["warnings"]
        assert warning.startswith("query embedding skipped, answered from keywords only: openai embeddings are paused")
        assert "after 2 failed call(s)" in warning and symptom in warning
    assert embedding_requests(server) == tried  # paused: the server is left alone
    breaker = mem.status()["breaker"]
    assert breaker["state"] == "open" and breaker["failures"] == 2 and symptom in breaker["reason"]
    assert KEY not in json.dumps([r for r, _ in failing + skipped]) and KEY not in json.dumps(breaker)


def test_the_budget_covers_the_catch_up_of_changed_notes_too(
    open_memory: Callable[..., Memory], server: FakeOpenAIServer, notes: Path
) -> None:
    mem = open_memory()
    mem.sync()
    server.outage(Fault.hang())
    write(notes / "memory" / "2026-04-03.md", "# 2026-04-03\n\nA second heron by the river.\n")

    response, seconds = timed(mem)

    assert seconds < BUDGET + MARGIN, seconds  # one budget for the changed note and the query together
    assert response["mode"] == "keyword" and "MEMORY.md" in [r["path"] for r in response["results"]]
    assert any("timed out" in w for w in response["warnings"])  # the catch-up's embedding, cut by the budget
    assert any("answered from keywords only" in w for w in response["warnings"])


# -- the breaker is shared and converges ------------------------------------------------------------


def test_an_open_breaker_is_shared_with_other_memories_and_processes(
    open_memory: Callable[..., Memory], server: FakeOpenAIServer
) -> None:
    first = open_memory(failures=1)
    first.sync()
    server.outage(Fault.hang())
    response, _ = timed(first)
    assert "query embedding failed" in response["warnings"][0]
    tried = embedding_requests(server)

    second = open_memory(failures=1)  # another Memory on the same index (say, the MCP server)
    response, seconds = timed(second)
    assert seconds < INSTANT and "paused until" in response["warnings"][0]
    assert_keyword_answer(response)

    code = (
        "import json, sys, time\n"
        "from mdmem.memory import Memory\n"
        "with Memory.open(config_path=sys.argv[1]) as mem:\n"
        "    started = time.monotonic()\n"
        "    response = mem.search('heron river')\n"
        "    response['seconds'] = time.monotonic() - started\n"
        "    response['breaker'] = mem.status()['breaker']\n"
        "    response['sdk'] = 'openai' in sys.modules\n"
        "print(json.dumps(response))\n"
    )
    config = first.config.source if first.config else None
    done = subprocess.run([sys.executable, "-c", code, str(config)], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    other = json.loads(done.stdout)
    assert other["seconds"] < INSTANT and other["mode"] == "keyword"
    assert "paused until" in other["warnings"][0] and "timed out" in other["warnings"][0]
    assert other["breaker"]["state"] == "open" and other["sdk"] is False  # paused: not even the SDK is imported
    assert embedding_requests(server) == tried  # neither the second object nor the other process called it

    state = breaker_path(first.agent.store_path).read_text()
    assert KEY not in state and json.loads(state)["providers"][first.choice.provider.provider_key]["state"] == "open"


def test_after_the_outage_the_first_call_after_the_pause_closes_the_breaker(
    open_memory: Callable[..., Memory], server: FakeOpenAIServer
) -> None:
    mem = open_memory(failures=1, cool_down=0.5, max_cool_down=4)
    mem.sync()
    server.outage(Fault.server_error())
    assert "HTTP 500" in mem.search("heron river")["warnings"][0]
    assert mem.status()["breaker"]["state"] == "open"

    wait_for(lambda: mem.status()["breaker"]["state"] == "half-open")
    probe = mem.search("heron river")  # still down: the probe fails, the pause doubles
    assert probe["warnings"][0].startswith("query embedding failed")
    saved = json.loads(breaker_path(mem.agent.store_path).read_text())["providers"]
    assert [v["coolDownSeconds"] for v in saved.values()] == [1.0]

    server.outage(None)  # the server is back
    assert mem.search("heron river")["warnings"][0].startswith("query embedding skipped")  # still paused
    wait_for(lambda: mem.status()["breaker"]["state"] == "half-open")
    response = mem.search("heron river")
    assert response["mode"] == "hybrid" and "warnings" not in response
    assert mem.status()["breaker"] == {"state": "closed", "until": None, "reason": None, "failures": 0}
    assert open_memory(failures=1, cool_down=0.5, max_cool_down=4).status()["breaker"]["state"] == "closed"


def test_indexing_while_the_breaker_is_open_fails_fast_without_calling_the_server(
    open_memory: Callable[..., Memory], server: FakeOpenAIServer, notes: Path
) -> None:
    mem = open_memory(failures=1)
    mem.sync()
    server.outage(Fault.hang())
    mem.search("heron river")
    tried = embedding_requests(server)
    write(notes / "memory" / "2026-04-03.md", "# 2026-04-03\n\nA second heron by the river.\n")

    started = time.monotonic()
    try:
        mem.sync()  # vectors for the new note stay pending
    except ProviderError as exc:
        assert "paused until" in str(exc)
    assert time.monotonic() - started < INSTANT
    assert embedding_requests(server) == tried


# -- the retry loop and one request -----------------------------------------------------------------


def provider(server: FakeOpenAIServer, **kwargs: Any) -> OpenAIEmbeddingProvider:
    options: dict[str, Any] = {"base_url": server.url, "api_key": KEY, "dimensions": 8, "env": {}}
    return OpenAIEmbeddingProvider(**{**options, **kwargs})


def test_retries_never_start_an_attempt_or_a_sleep_that_ends_past_the_deadline(server: FakeOpenAIServer) -> None:
    p = provider(server, timeout=30, max_retries=10)
    p.warm_up()
    server.outage(Fault.unavailable(retry_after="0.4"))  # each retry waits 0.4 s
    started = time.monotonic()
    try:
        with deadline.until(started + 1.0), pytest.raises(ProviderError, match="no time left in the budget to retry"):
            p.embed_query("a")
        elapsed = time.monotonic() - started
    finally:
        p.close()
    assert elapsed < 1.0  # the sleep that would have ended at ~1.2 s was never started
    assert 2 <= embedding_requests(server) <= 3


@pytest.mark.parametrize("fault", [Fault.hang(), Fault.trickle(0.1), Fault.trickle(0.1, headers=True)])
def test_a_request_ends_at_its_own_timeout_whatever_the_server_does(server: FakeOpenAIServer, fault: Fault) -> None:
    p = provider(server, timeout=0.6, max_retries=0)
    p.warm_up()
    server.outage(fault)
    started = time.monotonic()
    try:
        with pytest.raises(ProviderError, match=r"timed out after 0\.6s"):
            p.embed_documents(["a"])
        elapsed = time.monotonic() - started
    finally:
        p.close()
    assert 0.55 < elapsed < 0.6 + MARGIN


def test_the_total_time_cap_holds_on_the_last_attempt(server: FakeOpenAIServer) -> None:
    p = provider(server, timeout=1.0, max_retries=5)
    p.retry = type(p.retry)(max_retries=5, base_delay=0.1, max_total_seconds=1.5)
    p.warm_up()
    server.outage(Fault.hang())
    started = time.monotonic()
    try:
        with pytest.raises(ProviderError, match="no time left in the budget to retry"):
            p.embed_documents(["a"])
        elapsed = time.monotonic() - started
    finally:
        p.close()
    assert elapsed < 1.5 + 0.3  # before: the last attempt could start at 1.4 s and run its full second


def test_a_refused_input_does_not_count_against_the_provider(server: FakeOpenAIServer) -> None:
    p = provider(server, timeout=5, max_retries=0)
    p.breaker = CircuitBreaker(None, p.provider_key, p.id, p.model, BreakerPolicy(failures=1))
    try:
        server.enqueue(Fault.status_error(413, "input is too large to process"))
        with pytest.raises(InputRejected, match="too large"):
            p.embed_documents(["a very long note"])
        assert p.breaker.status()["state"] == "closed"  # one bad input does not pause every query
        server.enqueue(Fault.status_error(401, "bad key"))
        with pytest.raises(ProviderError, match="HTTP 401"):
            p.embed_query("a")
        assert p.breaker.status()["state"] == "open"  # a rejected key fails every call: pause
    finally:
        p.close()


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "no-length"])
@pytest.mark.parametrize("status", [200, 500])
def test_a_huge_response_is_refused_without_reading_it(declared: bool, status: int) -> None:
    size = 512 * 1024 * 1024
    with FakeOpenAIServer(dims=8) as server:
        p = provider(server, timeout=30, max_retries=0)
        server.outage(Fault.huge(size, declared=declared, status=status))
        started = time.monotonic()
        try:
            with pytest.raises(ProviderError) as info:
                p.embed_documents(["a", "b"])
            elapsed = time.monotonic() - started
        finally:
            p.close()
    assert elapsed < 10
    sent = server.requests[-1].sent
    assert sent < 64 * 1024 * 1024, sent  # what the client read plus the kernel's socket buffers
    expected = "too large an embeddings response" if status == 200 else "HTTP 500"
    assert expected in str(info.value)


# -- a provider that cannot be interrupted (llama.cpp) ------------------------------------------------


class WedgedProvider(HashEmbeddingProvider):
    """Hash vectors, but while ``wedged`` each call blocks until ``release`` is set (a stuck llama.cpp call)."""

    def __init__(self) -> None:
        super().__init__(dims=64)
        self.wedged = False
        self.release = threading.Event()

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        if self.wedged:
            self.release.wait(60)
        return super().embed_batch(texts)


def test_a_wedged_local_call_does_not_hold_searches_past_the_budget(
    tmp_path: Path, notes: Path, no_thread_leaks: None
) -> None:
    path = tmp_path / "config.json5"
    memory_search = {"provider": "hash", "query": {"embedTimeoutMs": BUDGET_MS}, "sync": {"watch": False}}
    path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(notes), "memorySearch": memory_search}}}))
    config = load_config(path)
    wedged = WedgedProvider()
    with Memory(config.agent(), config, choice=ProviderChoice(wedged, "hash")) as mem:
        mem.sync()
        wedged.wedged = True

        stuck, seconds = timed(mem)
        assert seconds < BUDGET + MARGIN and stuck["mode"] == "keyword"
        assert "did not embed the query within its time budget" in stuck["warnings"][0]
        busy, seconds = timed(mem)
        assert seconds < INSTANT and "still busy with an earlier query" in busy["warnings"][0]
        assert busy["results"][0]["path"] == "MEMORY.md"
        assert mem.status()["breaker"]["state"] == "closed"  # slow is not down: nothing is paused

        wedged.wedged = False
        wedged.release.set()
        wait_for(lambda: "warnings" not in mem.search("heron river"))
        assert mem.search("heron river")["mode"] == "hybrid"
