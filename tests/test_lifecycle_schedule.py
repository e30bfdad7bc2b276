"""``lifecycle.schedule`` (docs/lifecycle.md) in a real ``mdmem serve``: the agent's lifecycle is applied once
per period, counted from the last apply its receipts hold, so a restarted serve does not apply again early;
and the schedule's own rules (due time from the receipts, a failed apply retried later) on real receipt files."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from mdmem.config.load import load_config
from mdmem.engine.archiving import receipts_file
from mdmem.engine.lifecycle_schedule import RETRY_SECONDS, Schedule, next_due
from mdmem.memory import Memory
from tests.fleet import eventually
from tests.service_bodies import recall_body
from tests.service_server import Service, write_config
from tests.test_lifecycle import OLD, tree, workspace_with_history

TOKEN = "schedule-token-7d1e"


def test_serve_applies_on_schedule_once_per_period(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    texts = workspace_with_history(ws)
    cfg = write_config(
        tmp_path / "config.json", {"main": ws}, provider="none", memory_search={"lifecycle": {"schedule": "daily"}}
    )
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")
    svc.start()
    try:
        assert eventually(lambda: "memory/archive/2025/2025-02-01.md" in tree(ws), 30), svc.log.read_text()[-2000:]
        after = tree(ws)
        assert after["memory/archive/2024/2024-01-05.md"] == texts[OLD[0]]
        assert not set(OLD) & set(after)  # moved, not copied
        assert after["memory/2024-06-01.md"] == texts["memory/2024-06-01.md"]  # pinned: stays
        reply = svc.call("POST", "/recall", recall_body("main", "when did we book the ferry to Murano?"))
        assert reply.status == 200, reply.raw
        assert not any("ferry" in m["text"] for m in reply.body["memories"])  # archived: out of recalls
        assert eventually(lambda: '"event": "lifecycle"' in svc.log.read_text(), 10)
    finally:
        assert svc.stop() == 0
    events = [json.loads(line) for line in svc.log.read_text().splitlines() if '"event": "lifecycle"' in line]
    assert events == [{"event": "lifecycle", "agent": "main", "archived": 3, "revived": 0, "skipped": 0}]
    again = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve2.log")
    again.start()  # the day has not passed: the next serve does not apply again
    try:
        assert again.call("POST", "/recall", recall_body("main", "boiler code")).status == 200
        time.sleep(3)  # three background passes
    finally:
        assert again.stop() == 0
    assert '"event": "lifecycle"' not in again.log.read_text()
    monkeypatch.setenv("MDMEMORY_HOME", str(tmp_path / "home"))
    with Memory.open(config_path=cfg) as mem:
        assert mem.status()["lifecycle"]["runs"] == 1


def _agent(tmp_path: Path, schedule: str) -> Any:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True, exist_ok=True)
    cfg = write_config(
        tmp_path / "c.json", {"main": ws}, provider="none", memory_search={"lifecycle": {"schedule": schedule}}
    )
    return load_config(cfg, env={"MDMEMORY_HOME": str(tmp_path / "home")}).agents[0]


def _receipt(agent: Any, action: str, at: float) -> None:
    path = receipts_file(agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps({"action": action, "at": at}) + "\n")


def test_due_time_comes_from_the_last_apply_in_the_receipts(tmp_path: Path) -> None:
    off = _agent(tmp_path / "off", "off")
    assert next_due(off) == float("inf")
    hourly = _agent(tmp_path / "h", "hourly")
    assert next_due(hourly) == 0.0  # never applied: due now
    _receipt(hourly, "apply", 1000.0)
    _receipt(hourly, "revive", 9000.0)  # a revive is not an apply
    with receipts_file(hourly).open("a") as f:
        f.write('{"action": "apply", "at": 50')  # a torn last line
    assert next_due(hourly) == 1000.0 + 3600


def test_a_failed_apply_is_retried_later_and_a_due_one_runs_once(tmp_path: Path) -> None:
    agent = _agent(tmp_path, "daily")
    now = [10_000.0]
    schedule = Schedule(agent, clock=lambda: now[0])
    calls: list[str] = []

    token = "gh" + "p_" + "Zq8Wm3Kx7Lp2Vn9Rt4Bc6Yd1Hf5Js0Ga2" + "E"

    def failing() -> dict[str, Any]:
        calls.append("fail")
        raise OSError(f"disk full writing memory/deploy-{token}.md")

    event = schedule.run_if_due(failing)
    assert event is not None and event["event"] == "error" and "disk full writing memory/deploy-" in event["error"]
    assert token not in event["error"] and token[4:16] not in event["error"]  # a path naming a secret: redacted
    now[0] += RETRY_SECONDS - 1
    assert schedule.run_if_due(failing) is None and calls == ["fail"]  # not before the retry time

    def applying() -> dict[str, Any]:
        calls.append("apply")
        _receipt(agent, "apply", now[0])
        return {"receipt": {"archived": {"daily": {"age-unused": 2}}, "revived": {"use": 1}, "skipped": {}}}

    now[0] += 1
    event = schedule.run_if_due(applying)
    assert event == {"event": "lifecycle", "agent": "main", "archived": 2, "revived": 1, "skipped": 0}
    now[0] += 86_400 - 1
    assert schedule.run_if_due(applying) is None  # within the day
    now[0] += 1
    assert schedule.run_if_due(applying) is not None
    assert calls == ["fail", "apply", "apply"]
