"""The circuit breaker on its own: state machine, the shared JSON file beside the index, odd files.

A settable clock stands in for time; the files are real, and "another process" is another breaker object on
the same file (tests/test_deadlines.py runs a real second process through Memory).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mdmem.providers.breaker import BreakerPolicy, CircuitBreaker, breaker_path
from mdmem.util.errors import ProviderPaused

KEY = "0123456789abcdef0123456789abcdef"
POLICY = BreakerPolicy(failures=2, cool_down=30.0, max_cool_down=100.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def make(path: Path | None, clock: Clock, policy: BreakerPolicy = POLICY) -> CircuitBreaker:
    return CircuitBreaker(path, KEY, "openai", "text-embedding-3-small", policy, clock=clock)


def entry(path: Path) -> dict:
    return json.loads(path.read_text())["providers"][KEY]


def test_opens_after_consecutive_failures_and_refuses_until_the_pause_ends(tmp_path: Path) -> None:
    clock, path = Clock(), breaker_path(tmp_path / "main.sqlite")
    breaker = make(path, clock)

    assert breaker.admit(lease=5) is False
    breaker.failed(False, "HTTP 500")
    assert breaker.status() == {"state": "closed", "until": None, "reason": "HTTP 500", "failures": 1}
    breaker.succeeded(False)  # not consecutive: a success in between resets the count
    breaker.failed(False, "first")
    breaker.failed(False, "request to http://127.0.0.1/v1 timed out after 2s")

    with pytest.raises(ProviderPaused) as info:
        breaker.admit(lease=5)
    assert info.value.until == clock.now + 30 and "timed out" in info.value.reason
    message = str(info.value)
    assert "paused until 2027-01-15T08:00:30Z (30 s left), after 2 failed call(s)" in message
    assert "last error: request to http://127.0.0.1/v1 timed out after 2s" in message
    assert breaker.status() == {
        "state": "open",
        "until": "2027-01-15T08:00:30Z",
        "reason": "request to http://127.0.0.1/v1 timed out after 2s",
        "failures": 2,
    }
    saved = entry(path)
    assert (saved["state"], saved["until"], saved["coolDownSeconds"]) == ("open", clock.now + 30, 30.0)
    assert (saved["provider"], saved["model"]) == ("openai", "text-embedding-3-small")
    clock.now += 29.9
    with pytest.raises(ProviderPaused):
        breaker.admit(lease=5)


def test_half_open_lets_one_probe_through_and_its_success_closes(tmp_path: Path) -> None:
    clock, path = Clock(), breaker_path(tmp_path / "main.sqlite")
    breaker, other = make(path, clock), make(path, clock)  # two processes on one index
    breaker.failed(False, "down")
    breaker.failed(False, "down")
    clock.now += 31

    assert other.status()["state"] == "half-open"
    assert other.admit(lease=10) is True  # the probe
    with pytest.raises(ProviderPaused, match="a probe call is testing it"):
        breaker.admit(lease=10)  # the other process waits for the probe...
    clock.now += 11
    assert breaker.admit(lease=10) is True  # ...unless the probe never reports within its lease
    breaker.succeeded(True)

    assert other.status() == {"state": "closed", "until": None, "reason": None, "failures": 0}
    assert other.admit(lease=10) is False
    assert entry(path)["state"] == "closed"


def test_a_failed_probe_doubles_the_pause_up_to_the_cap(tmp_path: Path) -> None:
    clock = Clock()
    breaker = make(breaker_path(tmp_path / "main.sqlite"), clock)
    breaker.failed(False, "down")
    breaker.failed(False, "down")
    pauses = []
    for _ in range(4):
        clock.now = entry(breaker.path)["until"] + 0.1
        assert breaker.admit(lease=1) is True
        breaker.failed(True, "still down")
        pauses.append(entry(breaker.path)["coolDownSeconds"])
    assert pauses == [60.0, 100.0, 100.0, 100.0]


def test_a_call_without_an_outcome_gives_the_probe_back(tmp_path: Path) -> None:
    clock = Clock()
    breaker = make(breaker_path(tmp_path / "main.sqlite"), clock, BreakerPolicy(failures=1))
    breaker.failed(False, "down")
    clock.now += 31
    assert breaker.admit(lease=60) is True
    breaker.released(True)  # e.g. no time was left in the caller's budget to try
    assert breaker.admit(lease=60) is True  # the next caller probes at once, not after the lease


def test_works_in_process_when_the_file_cannot_be_written(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the index directory should be")
    clock = Clock()
    breaker = make(breaker_path(blocker / "main.sqlite"), clock, BreakerPolicy(failures=1))

    breaker.failed(False, "down")

    with pytest.raises(ProviderPaused):
        breaker.admit(lease=1)
    assert breaker.status()["state"] == "open"


def test_a_damaged_or_foreign_file_is_ignored_and_replaced(tmp_path: Path) -> None:
    path = breaker_path(tmp_path / "main.sqlite")
    clock = Clock()
    for content in ("{not json", json.dumps({"version": 99}), json.dumps({"version": 1, "providers": {KEY: 7}})):
        path.write_text(content)
        breaker = make(path, clock, BreakerPolicy(failures=1))
        assert breaker.admit(lease=1) is False
        breaker.failed(False, "down")
        assert entry(path)["state"] == "open"


def test_other_providers_in_the_file_are_kept(tmp_path: Path) -> None:
    path = breaker_path(tmp_path / "main.sqlite")
    clock = Clock()
    local = CircuitBreaker(path, "f" * 32, "local", "model.gguf", BreakerPolicy(failures=1), clock=clock)
    local.failed(False, "llama.cpp failed")
    make(path, clock, BreakerPolicy(failures=1)).failed(False, "HTTP 500")
    providers = json.loads(path.read_text())["providers"]
    assert {k: v["state"] for k, v in providers.items()} == {"f" * 32: "open", KEY: "open"}


def test_a_real_second_process_sees_the_open_breaker(tmp_path: Path) -> None:
    path = breaker_path(tmp_path / "main.sqlite")
    make(path, Clock(), BreakerPolicy(failures=1)).failed(False, "HTTP 503 from the server")
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from mdmem.util.errors import ProviderPaused\n"
        "from mdmem.providers.breaker import CircuitBreaker\n"
        "b = CircuitBreaker(Path(sys.argv[1]), sys.argv[2], 'openai', 'm', clock=lambda: 1_800_000_001.0)\n"
        "try:\n"
        "    b.admit(lease=1)\n"
        "except ProviderPaused as exc:\n"
        "    print(exc.reason)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path), KEY], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "HTTP 503 from the server"
