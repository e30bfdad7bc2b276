"""Hostile request bodies get a 400 naming the field, never a 500, and change nothing; a missing workspace
still answers recalls from the last index. Against a real ``mdmemory serve`` process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.service_bodies import openai_entry, recall_body, retain_body
from tests.service_server import Service, write_config

TOKEN = "input-token-51be"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe boiler room key hangs behind the blue door.\n")
    cfg = write_config(tmp_path / "config.json", {"main": ws}, autoAgents=True, recallWorkers=1)
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")
    svc.start()
    yield svc
    svc.stop()


def _sessions(svc: Service) -> str:
    folder = Path(svc.config).parent / "ws" / "sessions"
    return "".join(p.read_text() for p in folder.glob("*.md")) if folder.is_dir() else ""


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _entry(**changes: Any) -> dict[str, Any]:
    entry = openai_entry("which door?", "The blue one.", id="hist1_hostile")
    entry.update(changes)
    return entry


BAD_BODIES: list[tuple[str, bytes, str]] = [
    ("deep body", _nested(100_000).encode(), "body"),
    (
        "deep field",
        (
            '{"agent_id": "main", "entry": {"ts": "2026-11-23T10:00:00Z", "request_original": ' + _nested(100_000)
        ).encode()
        + b"}}",
        "body",
    ),
    (
        "deep but parseable",
        json.dumps(retain_body("main", _entry(request_original=json.loads(_nested(200))))).encode(),
        "entry.request_original",
    ),
    (
        "lone surrogate",
        json.dumps(retain_body("main", openai_entry("\ud800 the key", "ok", id="hist1_s"))).encode(),
        "entry.request_original.messages[3].content[0].text",
    ),
    (
        "lone surrogate in a key",
        json.dumps(retain_body("main", _entry(extra={"\udfff": 1}))).encode(),
        "entry.extra",
    ),
    ("recall surrogate", json.dumps(recall_body("main", "key \udc00")).encode(), "messages[2].content[0].text"),
    ("year 99999", json.dumps(retain_body("main", _entry(ts="99999-01-01T00:00:00Z"))).encode(), "entry.ts"),
    ("year 0 by offset", json.dumps(retain_body("main", _entry(ts="0001-01-01T00:00:00+01:00"))).encode(), "entry.ts"),
    (
        "year 10000 by offset",
        json.dumps(retain_body("main", _entry(ts="9999-12-31T23:59:59-01:00"))).encode(),
        "entry.ts",
    ),
    ("huge version", json.dumps(retain_body("main", _entry(version=10**30))).encode(), "entry.version"),
    (
        "infinite version",
        b'{"agent_id": "main", "entry": {"ts": "2026-11-23T10:00:00Z", "version": 1e400}}',
        "entry.version",
    ),
    ("huge usage", json.dumps(retain_body("main", _entry(usage={"prompt_tokens": 1e300}))).encode(), "entry.usage"),
    ("NaN", b'{"agent_id": "main", "entry": {"ts": "2026-11-23T10:00:00Z", "status_code": NaN}}', "body"),
    ("huge integer literal", b'{"agent_id": "main", "x": 1' + b"0" * 5000 + b"}", "body"),
]


@pytest.mark.parametrize(("name", "raw", "field"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_hostile_bodies_answer_400_naming_the_field(service: Service, name: str, raw: bytes, field: str) -> None:
    path = "/recall" if name.startswith("recall") else "/retain"
    reply = service.call("POST", path, raw=raw)
    assert reply.status == 400, reply.raw[:300]
    assert reply.body["error"].startswith(field), reply.body["error"]
    assert "hist1_" not in _sessions(service)
    assert service.call("POST", "/recall", recall_body("main", "boiler room key")).status == 200  # still serving


def test_a_time_zone_cannot_push_a_valid_time_out_of_range(service: Service) -> None:
    edge = retain_body("main", _entry(ts="9999-12-29T23:00:00Z"), timezone="Pacific/Kiritimati")
    assert service.call("POST", "/retain", edge).status == 202
    late = retain_body("main", _entry(ts="9999-12-31T22:00:00Z", id="hist1_late"), timezone="Pacific/Kiritimati")
    reply = service.call("POST", "/retain", late)
    assert reply.status == 400 and reply.body["error"].startswith("entry.ts")


def test_a_forget_reason_is_bounded(service: Service) -> None:
    entry = openai_entry("what is the wifi name?", "Harbourmaster-5G.", id="hist1_wifi")
    assert service.call("POST", "/retain", retain_body("main", entry)).status == 202
    huge = {"agent_id": "main", "entry_ids": ["hist1_wifi"], "reason": "x" * 1_900_000}
    reply = service.call("POST", "/forget", huge)
    assert reply.status == 400 and reply.body["error"].startswith("reason:") and "1024" in reply.body["error"]
    assert "hist1_wifi" in _sessions(service)  # nothing forgotten by a refused request
    ok = {"agent_id": "main", "entry_ids": ["hist1_wifi"], "reason": "é" * 512}  # 1,024 bytes: at the limit
    assert service.call("POST", "/forget", ok).status == 204
    stones = (Path(service.config).parent / "ws" / "sessions" / ".tombstones.jsonl").read_text()
    assert "é" * 512 in stones and len(stones) < 4096


def test_status_of_an_agent_that_does_not_exist_creates_nothing(service: Service) -> None:
    reply = service.call("GET", "/agents/never-seen/status")
    assert reply.status == 404 and "never-seen" in reply.body["error"]
    assert not (service.home / "agents" / "never-seen").exists()
    assert service.call("GET", "/agents/..%2F..%2Fetc/status").status in (400, 404)
    assert service.call("POST", "/recall", recall_body("never-seen", "hello")).status == 200  # created on use
    assert service.call("GET", "/agents/never-seen/status").status == 200


def test_recall_answers_from_the_last_index_while_the_workspace_is_missing(service: Service, tmp_path: Path) -> None:
    entry = openai_entry("where is the boiler manual?", "In the grey cabinet, second drawer.", id="hist1_manual")
    assert service.call("POST", "/retain", retain_body("main", entry)).status == 202
    before = service.call("POST", "/recall", recall_body("main", "boiler manual cabinet")).body["memories"]
    assert any("grey cabinet" in m["text"] for m in before)
    ws = tmp_path / "ws"
    ws.rename(tmp_path / "ws-unmounted")  # an unmounted volume
    try:
        for _ in range(3):  # through the recall worker and after the catch-up noticed
            reply = service.call("POST", "/recall", recall_body("main", "boiler manual cabinet"))
            assert reply.status == 200
            texts = [m["text"] for m in reply.body["memories"]]
            assert any("grey cabinet" in t for t in texts), texts
            keys = service.call("POST", "/recall", recall_body("main", "boiler room key")).body["memories"]
            assert any("blue door" in m["text"] for m in keys)  # MEMORY.md, from the index
        assert not ws.exists()  # nothing was created in its place
    finally:
        (tmp_path / "ws-unmounted").rename(ws)
