"""``POST /remember`` on a real ``mdmem serve`` process driven over HTTP: a changed fact written with
``supersedes``, then recalled current first; bad input refused naming the field, nothing written."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import both_backends
from tests.fleet import Fleet
from tests.service_bodies import OPENAI_KEY, recall_body
from tests.service_server import Service, write_config

TOKEN = "test-token-3c9e1a7b5d2f"
OLD = "memory/2026-03-01.md"
DAY = "# 2026-03-01\n\n- [09:10] Priya lives in Berlin\n- [09:12] Bob drinks tea\n"


@pytest.fixture
def service(tmp_path: Path, store_backend: dict[str, Any]) -> Iterator[Service]:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / OLD).write_text(DAY)
    store = {"store": store_backend} if store_backend else None
    cfg = write_config(tmp_path / "config.json", {"main": ws}, memory_search=store)
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")
    svc.start()
    yield svc
    svc.stop()


def _ws(svc: Service) -> Path:
    return svc.config.parent / "ws"


def _files(svc: Service) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((_ws(svc) / "memory").iterdir())}


@both_backends
def test_remember_supersedes_then_recall_gives_the_current_line_first(
    service: Service, store_backend: dict[str, Any]
) -> None:
    plain = service.call(
        "POST", "/remember", {"agent_id": "main", "text": "Pixel is a border collie", "longTerm": True}
    )
    assert plain.status == 200, plain.raw
    assert plain.body == {
        "path": "MEMORY.md",
        "line": plain.body["line"],
        "ref": "MEMORY.md#L3",
        "created": True,
        "indexed": False,
    }
    assert re.fullmatch(r"- \[\d{4}-\d\d-\d\d \d\d:\d\d\] Pixel is a border collie", plain.body["line"])

    body = {"agent_id": "main", "text": "Priya is back in Lisbon", "supersedes": f"{OLD}#L3", "longTerm": None}
    reply = service.call("POST", "/remember", body)
    assert reply.status == 200, reply.raw
    today = reply.body["path"]
    assert re.fullmatch(r"memory/\d{4}-\d\d-\d\d\.md", today)
    new_ref = f"{today}#L3"
    assert (reply.body["ref"], reply.body["supersedes"], reply.body["marked"]) == (new_ref, f"{OLD}#L3", True)
    assert reply.body["line"].endswith(f"Priya is back in Lisbon (supersedes {OLD}#L3)")
    old_lines = (_ws(service) / OLD).read_text().splitlines()
    assert old_lines[2] == f"- [09:10] Priya lives in Berlin (superseded {today[7:17]} → {new_ref})"
    assert (_ws(service) / OLD).read_text() == DAY.replace(
        "Berlin\n", f"Berlin (superseded {today[7:17]} → {new_ref})\n"
    )

    recalled = service.call("POST", "/recall", recall_body("main", "where does Priya live now?"))
    assert recalled.status == 200, recalled.raw
    texts = [str(m["text"]) for m in recalled.body["memories"]]
    priya = [t for t in texts if "Priya" in t]
    assert priya and "Priya is back in Lisbon" in priya[0], texts  # the current line first
    for text in texts:  # where the old line comes along, it says it is history
        if "Priya lives in Berlin" in text:
            assert f"Priya lives in Berlin (superseded {today[7:17]} → {new_ref})" in text

    again = service.call("POST", "/remember", {**body, "text": "Priya moved to Porto"})
    assert again.status == 409 and f"already superseded by {new_ref}" in again.body["error"]
    assert "Fix:" in again.body["error"]

    service.stop()
    ops = [json.loads(x) for x in service.log.read_text().splitlines() if x.startswith("{")]
    mine = [
        (o["memory_op"], o["memory_status"], o.get("memory_result"), o["status_code"])
        for o in ops
        if o.get("memory_op") == "remember"
    ]
    assert mine == [
        ("remember", "succeeded", "remembered", 200),
        ("remember", "succeeded", "superseded", 200),
        ("remember", "failed", None, 409),
    ]
    assert "Lisbon" not in service.log.read_text() and "Porto" not in service.log.read_text()


def test_bad_input_is_refused_naming_the_field_and_writes_nothing(service: Service) -> None:
    before = _files(service)
    cases: list[tuple[Any, int, str]] = [
        ({"agent_id": "main"}, 400, "missing required field 'text'"),
        ({"agent_id": "main", "text": "   "}, 400, "'text' must not be empty"),
        (
            {"agent_id": "main", "text": "x", "long_term": True},
            400,
            "unknown field 'long_term' (did you mean 'longTerm'?)",
        ),
        ({"agent_id": "main", "text": "x", "longTerm": "yes"}, 400, "'longTerm' must be a boolean"),
        ({"agent_id": "main", "text": "x", "supersedes": 3}, 400, "'supersedes' must be a string"),
        ({"agent_id": "main", "text": "x", "supersedes": OLD}, 400, "is not a line reference"),
        ({"agent_id": "main", "text": "x", "supersedes": f"{OLD}#L1"}, 400, "holds 0 fact lines"),
        ({"agent_id": "main", "text": "x", "supersedes": f"{OLD}#L40"}, 400, "no line 40"),
        ({"agent_id": "main", "text": "x", "supersedes": "memory/none.md#L3"}, 400, "does not exist"),
        ({"agent_id": "main", "text": "x", "supersedes": "../../etc/passwd#L1"}, 400, "'..'"),
        ({"agent_id": "main", "text": "x" * (64 * 1024 + 1)}, 400, "at most 65536 bytes"),
        ({"text": "x"}, 400, "agent_id"),
        ({"agent_id": "main", "text": "x", "metadata": "m"}, 400, "metadata"),
        ({"agent_id": "nobody", "text": "x"}, 404, "nobody"),
    ]
    for body, status, says in cases:
        reply = service.call("POST", "/remember", body)
        assert (reply.status, says in reply.body["error"]) == (status, True), (body, reply.body)
    assert service.call("POST", "/remember", {"agent_id": "main", "text": "x"}, token=None).status == 401
    assert service.call("POST", "/remember", {"agent_id": "main", "text": "x"}, token="wrong").status == 401
    data = json.dumps({"agent_id": "main", "text": "x"}).encode()
    assert service.call("POST", "/remember", raw=data, headers={"Origin": "https://evil.example"}).status == 403
    plain = {"Content-Type": "text/plain"}
    req = urllib.request.Request(service.url + "/remember", data=data, method="POST", headers=plain)
    req.add_header("Authorization", f"Bearer {TOKEN}")
    try:
        urllib.request.urlopen(req, timeout=30)
        status = 200
    except urllib.error.HTTPError as exc:
        status = exc.code
    assert status == 415
    assert _files(service) == before and not (_ws(service) / "MEMORY.md").exists()


def test_a_line_edited_by_hand_since_indexing_is_409_and_secrets_are_stored_redacted(service: Service) -> None:
    ws = _ws(service)
    (ws / OLD).write_text(DAY.replace("Priya lives in Berlin", f"Priya's key is {OPENAI_KEY}"))  # after indexing
    reply = service.call("POST", "/remember", {"agent_id": "main", "text": "Priya is back", "supersedes": f"{OLD}#L3"})
    assert reply.status == 409 and "changed since it was indexed" in reply.body["error"]
    assert OPENAI_KEY not in reply.raw.decode()  # the error quotes the line, redacted
    assert [p.name for p in (ws / "memory").iterdir()] == ["2026-03-01.md"]

    reply = service.call("POST", "/remember", {"agent_id": "main", "text": f"the deploy key is {OPENAI_KEY}"})
    assert reply.status == 200 and "[REDACTED:openai_key]" in reply.body["line"]
    assert "openai_key" in reply.body["warnings"][0] and OPENAI_KEY not in reply.raw.decode()
    assert OPENAI_KEY not in (ws / reply.body["path"]).read_text()
    service.stop()
    log = service.log.read_text()
    assert OPENAI_KEY not in log and TOKEN not in log
    [op] = [json.loads(x) for x in log.splitlines() if '"memory_op": "remember"' in x and '"succeeded"' in x]
    assert op["memory_warnings"] == ["secrets_redacted"]


@pytest.mark.parametrize("store_backend", ["postgres"], indirect=True)
def test_a_replica_without_the_agent_s_files_refuses_with_409(fleet: Fleet) -> None:
    replica = fleet.replica("a")
    reply = replica.call("POST", "/remember", {"agent_id": "main", "text": "Priya is back in Lisbon"})
    assert reply.status == 409 and "service.remoteAgents" in reply.body["error"] and "Fix:" in reply.body["error"]
    assert not any(p.is_file() for p in (fleet.root / "replica-a").rglob("*.md"))
    assert [p.name for p in (fleet.workspace / "memory").iterdir()] == []


def test_a_note_that_would_take_its_file_over_max_file_bytes_is_409(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    cfg = write_config(tmp_path / "config.json", {"main": ws}, memory_search={"maxFileBytes": 400})
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")
    svc.start()
    try:
        assert svc.call("POST", "/remember", {"agent_id": "main", "text": "a short note"}).status == 200
        reply = svc.call("POST", "/remember", {"agent_id": "main", "text": "a long note " * 40})
        assert reply.status == 409 and "over maxFileBytes (400)" in reply.body["error"]
        assert "Fix:" in reply.body["error"]
        [day] = (ws / "memory").glob("*.md")
        assert day.read_text().count("\n- [") == 1  # the first note alone
    finally:
        svc.stop()


def test_recall_says_which_line_an_unmarked_change_superseded(tmp_path: Path) -> None:
    """A change written without a mark (grouped at search time) reaches the model too: the recalled block says
    which of its lines is superseded, by what and since when, in its text (the only field the proxy passes on)."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / OLD).write_text(DAY)
    (ws / "memory/2026-10-02.md").write_text("# 2026-10-02\n\n- [18:00] Priya relocated to Lisbon\n")
    cfg = write_config(tmp_path / "config.json", {"main": ws}, provider="none")
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")
    svc.start()
    try:
        now = svc.call("POST", "/recall", recall_body("main", "where does Priya live now?"))
        assert now.status == 200, now.raw
        assert "- [18:00] Priya relocated to Lisbon\n" in str(now.body["memories"][0]["text"]), now.body
        before = svc.call("POST", "/recall", recall_body("main", "where did Priya live before?"))
        texts = [str(m["text"]) for m in before.body["memories"]]
        old = next(t for t in texts if "Priya lives in Berlin" in t)
        assert "Superseded since 2026-10-02 by memory/2026-10-02.md#L3: Priya lives in Berlin\nSource: " in old
    finally:
        svc.stop()
