"""A real ``mdmem serve`` fed the bodies cllama sends (tests/cllama_shapes.py, byte for byte): big
conversations, long messages, bad time zones, empty entries and wrong types; what it answers, stores, recalls
and logs. "Injected" below is what cllama would put into the prompt from the recall answer (its policy and
format, rebuilt in tests/cllama_shapes.py)."""

from __future__ import annotations

import http.client
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import cllama_shapes as cs
from tests import provider_shapes as ps
from tests.service_server import Reply, Service, write_config

TOKEN = "cllama-bodies-7c1d"
META = {"service": "assistant", "type": "openclaw"}  # metadata.json: the agent's own service, not memory's
FILLER = [
    "The quarterly planning meeting moved to Thursday afternoon.",
    "Ops rotated the staging certificates without downtime.",
    "Marketing wants the new landing page live before the conference.",
    "The data team finished migrating the nightly jobs to the new scheduler.",
]


def filler(chars: int, seed: int) -> str:
    r = random.Random(seed)
    out, n = [], 0
    while n < chars:
        s = f"{r.choice(FILLER)} (item {r.randint(1, 99999)})"
        out.append(s)
        n += len(s) + 1
    return " ".join(out)[:chars]


def turn(
    agent: str,
    messages: list[dict[str, Any]],
    answer: str,
    *,
    api: str = "openai",
    sse: bool = False,
    ts: str = "2026-11-23T10:00:00Z",
    meta: dict[str, Any] | None = None,
) -> cs.Turn:
    """cllama's recall and retain bodies for an agent request with ``messages`` answered by ``answer``."""
    request: dict[str, Any] = {"model": "gpt-4o" if api == "openai" else "claude-haiku-4-5", "messages": messages}
    if api == "anthropic":
        request["max_tokens"] = 1024
    if sse:
        request["stream"] = True
    response, _ = ps.reply_bytes(api, ps.Reply(ps.words(answer) if answer else []), sse)
    model = "openai/gpt-4o" if api == "openai" else "anthropic/claude-haiku-4-5"
    return cs.turn(agent, meta or META, json.dumps(request).encode(), response, ts=ts, provider_model=model, sse=sse)


def user(text: str, api: str = "openai") -> dict[str, Any]:
    return {"role": "user", "content": text if api == "openai" else [{"type": "text", "text": text}]}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("cllama-bodies")
    for name in ("main", "ops"):
        (root / name / "memory").mkdir(parents=True)
        (root / name / "MEMORY.md").write_text("# Memory\n\nThe office plants are watered on Mondays.\n")
    cfg = write_config(root / "config.json", {"main": root / "main", "ops": root / "ops"}, recallWorkers=1)
    svc = Service(cfg, root / "home", TOKEN, root / "serve.log")
    svc.start()
    yield svc
    svc.stop()


def retain(svc: Service, t: cs.Turn) -> Reply:
    return svc.call("POST", "/retain", raw=t.retain)


def injected(svc: Service, agent: str, question: str, api: str = "openai") -> str:
    """What cllama would inject for ``question``: the recall answer through its policy and format."""
    reply = svc.call("POST", "/recall", raw=turn(agent, [user(question, api)], "", api=api).recall)
    assert reply.status == 200, reply.raw[:300]
    kept, _ = cs.apply_recall_memory_policy(reply.body["memories"])
    return cs.format_memory_blocks("mdmemory", kept)


def sessions(svc: Service, agent: str = "main") -> str:
    folder = Path(svc.config).parent / agent / "sessions"
    return "".join(p.read_text() for p in sorted(folder.glob("*.md"))) if folder.is_dir() else ""


def log_lines(svc: Service) -> list[dict[str, Any]]:
    return [json.loads(line) for line in svc.log.read_text().splitlines() if line.startswith("{")]


def test_a_3_mb_retain_stores_the_turn_and_only_the_turn(service: Service) -> None:
    messages: list[dict[str, Any]] = []
    i = 0
    while sum(len(m["content"]) for m in messages) < 1_500_000:
        messages += [user(f"Log chunk {i}: " + filler(4000, i)), {"role": "assistant", "content": f"Noted chunk {i}."}]
        i += 1
    messages.append(user("One more thing: my locker number at the gym is 4471-K. Please remember it."))
    t = turn("main", messages, "Noted: locker 4471-K.", ts="2026-11-23T09:00:00Z")
    assert len(t.retain) > 3_000_000 and len(t.recall) > 1_500_000
    reply = retain(service, t)
    assert (reply.status, reply.body["status"], reply.body["id"]) == (202, "retained", t.entry.ensure_id())
    assert "truncated" not in reply.body and "warnings" not in reply.body
    text = sessions(service)
    eid = reply.body["id"]
    stored = text[text.index(f"· {eid}") : text.index(f"<!-- /{eid} -->")]
    assert "my locker number at the gym is 4471-K" in stored and "Noted: locker 4471-K." in stored
    assert "Log chunk" not in text and len(stored) < 500  # the turn, not the conversation it ended
    assert "4471-K" in injected(service, "main", "What is my locker number at the gym?")
    assert service.call("POST", "/recall", raw=t.recall).status == 200  # the 1.5 MB recall body is answered too


@pytest.mark.parametrize(
    ("api", "sse", "paragraphs"), [("openai", False, False), ("anthropic", True, False), ("openai", True, True)]
)
def test_a_fact_at_the_end_of_a_21_kb_message_is_recalled(
    service: Service, api: str, sse: bool, paragraphs: bool
) -> None:
    fact = {False: "the spare key is hidden under the blue flowerpot", True: "the kayak paddles are in shed 12"}[
        paragraphs
    ]
    question = {False: "Where is the spare key hidden?", True: "Where are the kayak paddles?"}[paragraphs]
    body = filler(21_000, 7 + sse)
    text = (body.replace(". ", ".\n\n", 30) if paragraphs else body) + f" Last point: {fact}."
    t = turn("ops", [user(text, api)], "Got it.", api=api, sse=sse, ts=f"2026-11-23T11:0{int(sse)}:{int(paragraphs)}0Z")
    reply = retain(service, t)
    assert reply.status == 202 and reply.body["status"] == "retained" and "truncated" not in reply.body
    assert fact in " ".join(sessions(service, "ops").split())  # whole, wrapped at most
    block = injected(service, "ops", question, api)
    assert fact in " ".join(block.split()), block[:500]
    assert len(block.encode()) < 8 * 1024 + 500


def test_a_message_over_the_cap_is_stored_cut_and_the_answer_says_so(service: Service) -> None:
    text = (
        "First: the boiler manual is in the grey cabinet. "
        + filler(300_000, 11)
        + " Finally: the drone is in locker 88."
    )
    t = turn("main", [user(text)], "Both noted.", ts="2026-11-23T12:00:00Z")
    reply = retain(service, t)
    assert reply.status == 202 and reply.body["status"] == "retained" and reply.body["truncated"] is True
    cap = 256 * 1024
    assert reply.body["truncatedParts"] == [
        {"part": "user", "chars": len(text), "keptHead": cap - cap // 4, "keptTail": cap // 4}
    ]
    assert "service.maxMessageChars" in reply.body["warnings"][0]
    stored = " ".join(sessions(service).split())
    assert "the boiler manual is in the grey cabinet" in stored and "the drone is in locker 88" in stored
    assert f"[… {len(text) - cap:,} characters cut here by mdmem" in stored
    assert "locker 88" in injected(service, "main", "Where is the drone kept?")
    again = retain(service, t)  # the proxy has no retries, but backfill does: the same answer, nothing twice
    assert again.body["status"] == "duplicate" and again.body["truncated"] is True
    assert sessions(service).count("the drone is in locker 88") == 1


ZONE_CASES = [
    ("Mars/Olympus_Mons", "2026-11-23", "23:30:00", "timezone_unknown"),  # the proxy dates its own line in UTC
    ("UTC+5", "2026-11-23", "23:30:00", "timezone_unknown"),
    ("+05:00", "2026-11-23", "23:30:00", "timezone_unknown"),
    ("asia/tokyo", "2026-11-24", "08:30:00", "timezone_case"),
    ("Asia/Tokyo", "2026-11-24", "08:30:00", None),
]
ZONES = [c[0] for c in ZONE_CASES]


@pytest.mark.parametrize(("zone", "day", "clock", "code"), ZONE_CASES)
def test_a_bad_time_zone_is_a_warning_never_a_lost_turn(
    service: Service, zone: str, day: str, clock: str, code: str | None
) -> None:
    room = f"room {ZONES.index(zone) + 401}"
    t = turn(
        "main",
        [user(f"The review is in {room}.", "anthropic")],
        "Noted.",
        api="anthropic",
        ts="2026-11-23T23:30:00Z",
        meta={**META, "timezone": zone},
    )
    reply = retain(service, t)
    assert reply.status == 202 and reply.body["status"] == "retained"
    if code is None:
        assert "warnings" not in reply.body
    else:
        assert reply.body["warnings"][0].startswith("metadata.timezone:")
    path = Path(service.config).parent / "main" / "sessions" / f"{day}.md"
    text = path.read_text()
    assert f"## {clock} · claude-haiku-4-5 · {reply.body['id']}" in text and room in text
    assert room in injected(service, "main", f"Where is the review? {room}", "anthropic")
    line = next(x for x in reversed(log_lines(service)) if x.get("memory_op") == "retain")
    assert line.get("memory_warnings") == ([code] if code else None)
    assert zone not in json.dumps(line)  # codes in telemetry, never the client's value


EMPTY = {
    "only ts": {"agent_id": "main", "entry": {"ts": "2026-11-23T10:00:00Z"}},
    "a system message and an empty reply": json.loads(
        turn("main", [{"role": "system", "content": "Be brief."}], "", ts="2026-11-23T13:00:00Z").retain
    ),
}


@pytest.mark.parametrize("body", EMPTY.values(), ids=list(EMPTY))
def test_an_empty_entry_is_refused_naming_the_field(service: Service, body: dict[str, Any]) -> None:
    before = sessions(service)
    reply = service.call("POST", "/retain", body)
    assert reply.status == 400 and reply.body["error"].startswith("entry: nothing to retain"), reply.body
    assert sessions(service) == before


WRONG = [
    ("/recall", {"agent_id": "main", "messages": "nope"}, "messages"),
    ("/recall", {"agent_id": "main", "messages": [], "metadata": "openai"}, "metadata"),
    ("/recall", {"agent_id": "main", "pod": 3}, "pod"),
    ("/retain", {"agent_id": "main", "entry": "hist1_x"}, "entry"),
    ("/retain", {"agent_id": "main", "entry": {"ts": "2026-11-23T10:00:00Z", "stream": "true"}}, "entry.stream"),
    ("/retain", {"agent_id": "main", "metadata": {"timezone": 1}, "entry": {}}, "metadata.timezone"),
    ("/forget", {"agent_id": "main", "entry_ids": "hist1_x"}, "entry_ids"),
]


@pytest.mark.parametrize(("path", "body", "field"), WRONG, ids=[w[2] + w[0] for w in WRONG])
def test_a_wrong_type_is_refused_naming_the_field(
    service: Service, path: str, body: dict[str, Any], field: str
) -> None:
    reply = service.call("POST", path, body)
    assert reply.status == 400 and reply.body["error"].startswith(field + ":"), reply.body


def test_large_bodies_at_once_are_all_answered(service: Service) -> None:
    """Six 3 MB retains at once (two are read at a time, the others wait their turn) and recalls beside them."""
    bodies = []
    for k in range(6):
        messages = [user(filler(1_500_000, 100 + k)), user(f"Parcel {k} goes to dock {k + 40}.")]
        bodies.append(turn("ops", messages, "Ok.", ts=f"2026-11-23T14:0{k}:00Z").retain)
    replies: list[int] = []
    recalls: list[int] = []

    def send(raw: bytes) -> None:
        replies.append(service.call("POST", "/retain", raw=raw).status)

    def ask() -> None:
        for _ in range(10):
            recalls.append(service.call("POST", "/recall", raw=turn("ops", [user("plants?")], "").recall).status)

    threads = [threading.Thread(target=send, args=(b,)) for b in bodies] + [threading.Thread(target=ask)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert replies == [202] * 6 and recalls == [200] * 10
    assert all(f"dock {k + 40}" in sessions(service, "ops") for k in range(6))


def test_a_recall_with_a_huge_last_message_is_answered(service: Service) -> None:
    """Its query is the end of that message; the body a recall worker would get is too big to send one, so
    the service's process answers it (no worker is lost to it)."""
    assert retain(service, turn("main", [user("The harbour crane is serviced on Fridays.")], "Ok.")).status == 202
    huge = "lorem ipsum dolor " * 120_000 + "And when is the harbour crane serviced?"  # 2 MB; no other word matches
    for messages in ([user(huge)], [user("x" * 300_000), {"role": "assistant", "content": "ok"}, user(huge)]):
        reply = service.call("POST", "/recall", raw=turn("main", messages, "").recall)
        assert reply.status == 200 and any("Fridays" in m["text"] for m in reply.body["memories"])
    assert service.call("GET", "/healthz").body["recallWorkers"] == 1


def test_memory_bytes_in_the_log_is_the_size_of_the_block_cllama_injects(service: Service) -> None:
    t = turn("main", [user("The wifi password hint is the cat's name.")], "Noted.", ts="2026-11-23T15:00:00Z")
    assert retain(service, t).status == 202
    recall = turn("main", [user("What is the wifi password hint?")], "").recall
    reply = service.call("POST", "/recall", raw=recall)
    assert reply.body["memories"]
    kept, _ = cs.apply_recall_memory_policy(reply.body["memories"])
    block = cs.format_memory_blocks("mdmemory", kept)
    line = next(x for x in reversed(log_lines(service)) if x.get("memory_op") == "recall")
    assert line["memory_blocks"] == len(reply.body["memories"])
    assert line["memory_bytes"] == len(block.encode())
    assert line["memory_text_bytes"] == sum(len(m["text"].encode()) for m in reply.body["memories"])


def _raw_post(svc: Service, headers: dict[str, str], body: bytes, chunked: bool = False) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", svc.port, timeout=60)
    try:
        conn.putrequest("POST", "/retain")
        conn.putheader("Authorization", f"Bearer {svc.token}")
        conn.putheader("Content-Type", "application/json")
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        if chunked:
            for i in range(0, len(body), 65536):
                piece = body[i : i + 65536]
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            conn.send(b"0\r\n\r\n")
        else:
            conn.send(body)
        return conn.getresponse().status
    except (ConnectionResetError, BrokenPipeError):
        return -1  # answered and closed before the whole body was sent
    finally:
        conn.close()


def test_413_only_past_service_max_body_bytes_and_a_day_file_too_big_to_index_is_said(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    small = {"maxFileBytes": 200_000}  # a day file over it is not indexed: the retain says so
    cfg = write_config(
        tmp_path / "c.json", {"main": tmp_path / "ws"}, memory_search=small, maxBodyBytes=4_000_000, recallWorkers=0
    )
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")
    svc.start()
    try:
        under = turn("main", [user(filler(1_900_000, 1) + " The pin is 5512.")], "Ok.").retain
        over = turn("main", [user(filler(2_100_000, 2) + " The pin is Q-7788-X.")], "Ok.").retain
        assert len(under) < 4_000_000 < len(over)
        first = svc.call("POST", "/retain", raw=under)
        assert first.status == 202 and first.body["truncated"] is True
        assert any("over memorySearch.maxFileBytes (200,000)" in w for w in first.body["warnings"])
        assert _raw_post(svc, {"Transfer-Encoding": "chunked"}, under, chunked=True) == 202  # a duplicate: 202
        assert _raw_post(svc, {"Content-Length": str(len(over))}, over) in (413, -1)
        assert _raw_post(svc, {"Transfer-Encoding": "chunked"}, over, chunked=True) in (413, -1)
        text = (tmp_path / "ws" / "sessions" / "2026-11-23.md").read_text()
        assert "The pin is 5512." in text and "Q-7788-X" not in text
        assert svc.call("POST", "/recall", raw=turn("main", [user("pin?")], "").recall).status == 200
    finally:
        svc.stop()
    notes = [x.get("memory_warnings") for x in log_lines(svc) if x.get("memory_op") == "retain"]
    assert notes[0] == ["truncated_user", "day_file_over_max_file_bytes"]


def test_serve_agent_serves_only_that_agent_and_says_where_it_listens(tmp_path: Path) -> None:
    for name in ("main", "ops"):
        (tmp_path / name).mkdir()
    cfg = write_config(tmp_path / "c.json", {"main": tmp_path / "main", "ops": tmp_path / "ops"}, recallWorkers=0)
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log", args=["--agent", "ops"])
    svc.start()
    try:
        start = [line for line in svc.log.read_text().splitlines() if line.startswith("mdmem serve: listening")]
        assert start == [start[0]] and start[0].startswith(
            f"mdmem serve: listening on http://127.0.0.1:{svc.port} (agents: ops; token from MEMORY_API_TOKEN)"
        )
        deadline = time.monotonic() + 30
        while "mdmem serve: ready" not in svc.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        ready = [line for line in svc.log.read_text().splitlines() if line.startswith("mdmem serve: ready")]
        assert len(ready) == 1 and "ready: 1 agent opened" in ready[0], ready  # main is not served: not opened
        assert TOKEN not in svc.log.read_text()
        assert svc.call("GET", "/healthz").body["agents"] == ["ops"]
        refused = svc.call("POST", "/recall", raw=turn("main", [user("hello")], "").recall)
        assert refused.status == 404 and "'main' is not served here" in refused.body["error"]
        assert retain(svc, turn("ops", [user("The van is blue.")], "Ok.")).status == 202
    finally:
        svc.stop()
    env = {**os.environ, "MDMEMORY_HOME": str(tmp_path / "home"), "MEMORY_API_TOKEN": TOKEN}
    out = subprocess.run(
        [sys.executable, "-m", "mdmem", "serve", "--config", str(cfg), "--agent", "nobody", "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 2 and "--agent 'nobody'" in out.stderr and "configured agents: main, ops" in out.stderr
