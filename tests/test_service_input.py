"""Hostile request bodies get a 400 naming the field, never a 500, and change nothing; a missing workspace
still answers recalls from the last index. Against a real ``mdmem serve`` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mdmem.memory import Memory
from tests.service_bodies import openai_entry, recall_body, retain_body
from tests.service_server import Service, write_config

TOKEN = "input-token-51be"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe boiler room key hangs behind the blue door.\n")
    cfg = write_config(
        tmp_path / "config.json", {"main": ws}, autoAgents=True, recallWorkers=1, recallBudgetMs=5000
    )  # these tests are about bodies, not speed: a loaded 2-core machine must not turn a recall into a 503
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
        status = service.call("GET", "/agents/main/status")  # says what is wrong rather than failing
        assert status.status == 200 and "error" in status.body["sessions"]
        assert any(str(ws) in w for w in status.body.get("warnings", [])), status.body.get("warnings")
        assert not ws.exists()  # nothing was created in its place
    finally:
        (tmp_path / "ws-unmounted").rename(ws)


# -- any body of the request shapes: an answer below 500 ---------------------------------------------------
WORDS = ["role", "content", "type", "text", "format", "json", "choices", "message", "delta", "messages", "index"]
WORDS += ["id", "ts", "usage", "prompt_tokens", "name", "tool_calls", "function", "content_block", "timezone"]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "user", "assistant", "text", "tool_use", "sse", "json", "2026-11-23T10:00:00Z", "UTC"]),
    st.sampled_from(["content_block_start", "content_block_delta", "text_delta", "Pacific/Kiritimati", "hist1_p"]),
    st.text(max_size=30),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(WORDS) | st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=25,
)
CALLS = st.lists(st.fixed_dictionaries({}, optional={"index": VALUES, "function": VALUES, "id": VALUES})) | VALUES
DELTAS = st.fixed_dictionaries({}, optional={"content": VALUES, "tool_calls": CALLS, "type": VALUES, "text": VALUES})
EVENTS = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["content_block_start", "content_block_delta", "message_stop"]) | VALUES,
        "content_block": st.fixed_dictionaries({}, optional={"type": VALUES, "name": VALUES, "text": VALUES}) | VALUES,
        "delta": DELTAS | VALUES,
        "index": VALUES,
        "choices": st.lists(st.fixed_dictionaries({}, optional={"delta": DELTAS | VALUES}) | VALUES) | VALUES,
    },
)
SSE = st.lists(EVENTS | VALUES, max_size=4).map(lambda events: "".join(f"data: {json.dumps(e)}\n\n" for e in events))
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"])},
    optional={"content": VALUES | st.lists(st.fixed_dictionaries({"type": VALUES}, optional={"text": VALUES}))},
)
RESPONSE_JSON = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.lists(st.fixed_dictionaries({}, optional={"message": VALUES | MESSAGE})) | VALUES,
        "content": st.lists(st.fixed_dictionaries({}, optional={"type": VALUES, "name": VALUES, "text": VALUES})),
    },
)
ENTRIES = st.fixed_dictionaries(
    {"ts": st.sampled_from(["2026-11-23T10:00:00Z", "2026-11-23", "0001-01-02T00:00:00Z"])},
    optional={
        "id": st.sampled_from(["hist1_p1", "hist1_p2", ""]) | VALUES,
        "request_original": st.fixed_dictionaries({"messages": st.lists(MESSAGE | VALUES, max_size=4)}) | VALUES,
        "request_effective": VALUES,
        "response": st.fixed_dictionaries(
            {"format": st.sampled_from(["sse", "json", ""])},
            optional={"json": RESPONSE_JSON | VALUES, "text": SSE | VALUES},
        )
        | VALUES,
        "usage": VALUES,
        "version": VALUES,
        "status_code": VALUES,
        "stream": VALUES,
        "effective_model": VALUES,
    },
)
AGENT = st.sampled_from(["main", "probe.bot"])
META = st.fixed_dictionaries({}, optional={"timezone": st.sampled_from(["UTC", "Pacific/Kiritimati"]) | VALUES})
BODIES = st.one_of(
    st.tuples(
        st.just("/retain"), st.fixed_dictionaries({"agent_id": AGENT, "entry": ENTRIES}, optional={"metadata": META})
    ),
    st.tuples(
        st.just("/recall"),
        st.fixed_dictionaries(
            {"agent_id": AGENT},
            optional={"messages": st.lists(MESSAGE | VALUES) | VALUES, "system": VALUES, "metadata": META | VALUES},
        ),
    ),
    st.tuples(
        st.just("/forget"),
        st.fixed_dictionaries(
            {"agent_id": AGENT, "entry_ids": st.lists(st.sampled_from(["hist1_p1", "hist1_p2"]) | VALUES, max_size=3)},
            optional={"reason": VALUES, "metadata": VALUES},
        ),
    ),
)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("fuzz")
    (root / "ws" / "memory").mkdir(parents=True)
    cfg = write_config(
        root / "config.json", {"main": root / "ws"}, autoAgents=True, recallWorkers=0, recallBudgetMs=5000
    )
    svc = Service(cfg, root / "home", TOKEN, root / "serve.log")
    svc.start()
    yield svc
    svc.stop()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=BODIES)
def test_no_body_of_the_request_shapes_gets_a_server_error(shared: Service, request: tuple[str, Any]) -> None:
    path, body = request
    reply = shared.call("POST", path, body)
    assert reply.status < 500, (reply.status, reply.raw[:300])


def test_pack_answers_from_the_last_index_while_the_workspace_is_missing(
    make_memory: Callable[..., Memory], workspace: Path, tmp_path: Path
) -> None:
    (workspace / "memory" / "2026-03-01.md").write_text("# Day\n\nThe pump house fuse is in drawer C.\n")
    mem = make_memory()
    mem.sync()
    before = mem.pack("pump house fuse", budget_tokens=200)["items"]
    workspace.rename(tmp_path / "away")  # an unmounted volume
    try:
        pack = mem.pack("pump house fuse", budget_tokens=200)
        assert [i["ref"] for i in pack["items"]] == [i["ref"] for i in before]
        assert "drawer C" in pack["bundleText"]
        assert any("answering from the last index" in w for w in pack.get("warnings", []))
    finally:
        (tmp_path / "away").rename(workspace)


def test_backfill_reports_hostile_ledger_lines_and_keeps_the_rest(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    cfg = write_config(tmp_path / "c.json", {"main": ws}, provider="none")
    good = openai_entry("when is the bin collected?", "On Thursdays.", id="hist1_bin")
    lines = [
        json.dumps(good),
        '{"ts": "2026-11-23T10:00:00Z", "x": ' + _nested(100_000) + "}",
        json.dumps(openai_entry("\ud800", "x", id="hist1_surrogate")),
        json.dumps(openai_entry("q", "a", id="hist1_ancient", ts="0001-01-01T00:00:00+01:00")),
        json.dumps({**openai_entry("q", "a", id="hist1_big"), "version": 10**30}),
    ]
    ledger = tmp_path / "history" / "main" / "history.jsonl"
    ledger.parent.mkdir(parents=True)
    ledger.write_text("\n".join(lines) + "\n")
    env = {"MDMEMORY_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-m", "mdmem", "backfill", str(ledger), "--config", str(cfg)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["retained"] == 1 and summary["invalid"] == [2, 3, 4, 5]
    assert "Traceback" not in out.stderr


KEY = "sk-proj-" + "Q7mZp2Xk9LrT4vWb8NcY1dFh6JsA3eGu"  # real-shaped, made up
GH = "gh" + "p_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"


def test_no_error_status_or_log_line_repeats_a_secret_sent_or_found(service: Service, tmp_path: Path) -> None:
    """A 400 quotes the value it refuses, a 503 the path a symlink points to, status the last failure: each
    redacted. A token sent as an agent id is refused (it would name a folder and show in telemetry), and a
    token in a model name becomes one whole marker in the block's heading."""
    replies = [
        service.call("POST", "/retain", {**retain_body("main", _entry()), "metadata": {"timezone": "Europe/" + KEY}}),
        service.call("POST", "/retain", {"agent_id": "main", "entry": _entry(ts="2026-01-01 " + KEY)}),
        service.call("POST", "/recall", {"agent_id": "x/" + KEY, "messages": []}),
        service.call("POST", "/recall", recall_body(GH, "which door?")),
        service.call("GET", f"/agents/{GH}/status"),
    ]
    # a bad time zone costs no turn (the turn is dated in UTC): its warning quotes the value, redacted
    assert [r.status for r in replies] == [202, 400, 400, 400, 400], [r.raw for r in replies]
    assert replies[0].body["warnings"][0].startswith("metadata.timezone: 'Europe/[REDACTED:"), replies[0].raw
    assert [r.body["error"].split(":", 1)[0] for r in replies[1:4]] == ["entry.ts", "agent_id", "agent_id"]
    assert not (service.home / "agents" / GH).exists()

    secret_dir = tmp_path / f"vault-{GH}"
    secret_dir.mkdir()
    sessions = tmp_path / "ws" / "sessions"
    sessions.mkdir(exist_ok=True)
    sessions.rename(tmp_path / "sessions-away")
    sessions.symlink_to(secret_dir)
    refused = service.call("POST", "/retain", retain_body("main", _entry(id="hist1_symlinked")))
    assert refused.status == 503 and "symlink" in refused.body["error"], refused.raw
    status = service.call("GET", "/agents/main/status")
    assert status.status == 200 and "lastError" in status.body["sessions"], status.raw
    sessions.unlink()
    (tmp_path / "sessions-away").rename(sessions)

    entry = _entry(id="hist1_model")
    entry["effective_model"] = f"gpt-4o {KEY}"
    assert service.call("POST", "/retain", retain_body("main", entry)).status == 202
    assert "gpt-4o_[REDACTED:openai_key] · hist1_model" in _sessions(service)

    service.stop()
    seen = b"".join(r.raw for r in [*replies, refused, status]) + service.log.read_bytes() + _sessions(service).encode()
    for secret in (KEY, GH):
        assert secret.encode() not in seen
        assert secret[12:30].encode() not in seen
