"""A real ``mdmem serve`` process driven over HTTP with the bodies the proxy sends."""

from __future__ import annotations

import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mdmem.config.load import load_config, with_sessions
from mdmem.files.entry_id import entry_id
from mdmem.memory import Memory
from tests.conftest import both_backends
from tests.service_bodies import OPENAI_KEY, anthropic_entry, openai_entry, recall_body, retain_body
from tests.service_server import Service, write_config

TOKEN = "test-token-5f1c2d9e8a7b"


@pytest.fixture
def service(tmp_path: Path, store_backend: dict[str, Any], request: pytest.FixtureRequest) -> Iterator[Service]:
    """A running service; on the store of ``store_backend`` (SQLite unless a test says ``both_backends``),
    with the ``service`` settings a test gives as the fixture's parameter (``indirect``)."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe staging database is Postgres 16 on port 5433.\n")
    store = {"store": store_backend} if store_backend else None
    (tmp_path / "ws-ops").mkdir()  # an agent with an empty workspace
    settings = getattr(request, "param", {})
    cfg = write_config(
        tmp_path / "config.json", {"main": ws, "ops": tmp_path / "ws-ops"}, memory_search=store, **settings
    )
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")
    svc.start()
    yield svc
    svc.stop()


def _memories(svc: Service, text: str, agent: str = "main") -> list[dict[str, object]]:
    reply = svc.call("POST", "/recall", recall_body(agent, text))
    assert reply.status == 200, reply.raw
    return reply.body["memories"]


def test_describe_and_healthz_are_open_everything_else_needs_the_token(service: Service) -> None:
    d = service.call("GET", "/.claw-describe.json", token=None)
    assert d.status == 200 and d.body["memory"]["retain"] == {"path": "/retain"}
    assert d.body["auth"] == {"type": "bearer", "env": "MEMORY_API_TOKEN"} and d.body["version"] == 2
    assert service.call("GET", "/healthz", token=None).status == 200
    assert service.call("POST", "/recall", recall_body("main", "x"), token=None).status == 401
    assert service.call("POST", "/retain", retain_body("main", openai_entry("q", "a")), token="wrong").status == 401
    assert service.call("GET", "/agents/main/status", token=None).status == 401
    out = subprocess.run([sys.executable, "-m", "mdmem", "describe", "--json"], capture_output=True, text=True)
    assert json.loads(out.stdout) == d.body


@both_backends
@pytest.mark.parametrize("shape", ["openai-json", "openai-sse", "anthropic-json", "anthropic-sse"])
def test_retain_recall_duplicate_forget(service: Service, shape: str, store_backend: dict[str, Any]) -> None:
    provider, fmt = shape.split("-")
    make = openai_entry if provider == "openai" else anthropic_entry
    entry = make(
        f"Where does the nightly backup of the zebra cluster go? my key {OPENAI_KEY}",
        "The zebra cluster backup goes to bucket s3://zebra-nightly at 02:00.",
        sse=fmt == "sse",
        tool="read_file",
    )
    eid = entry_id(entry)  # entries without id get the proxy's id
    first = service.call("POST", "/retain", retain_body("main", entry))
    assert first.status == 202 and first.body == {"status": "retained", "id": eid}
    assert service.call("POST", "/retain", retain_body("main", entry)).body["status"] == "duplicate"
    day = Path(service.config).parent / "ws" / "sessions" / entry["ts"][:10]
    text = day.with_suffix(".md").read_text()
    assert text.count(eid) == 2 and "zebra-nightly" in text and OPENAI_KEY not in text  # heading + closing line
    assert "Tool calls: read_file" in text and "TOOL OUTPUT" not in text
    mems = _memories(service, "where does the zebra cluster backup go?")
    hit = [m for m in mems if "zebra-nightly" in str(m["text"])]
    assert hit and str(hit[0]["text"]).rstrip().splitlines()[-1].startswith("Source: sessions/")
    assert all(m["kind"] not in ("raw_transcript", "session_tail", "transcript_tail") for m in mems)
    assert OPENAI_KEY not in json.dumps(mems)
    gone = service.call("POST", "/forget", {"agent_id": "main", "entry_ids": [eid], "reason": "asked"})
    assert gone.status == 204
    assert eid not in day.with_suffix(".md").read_text()
    assert not [m for m in _memories(service, "where does the zebra cluster backup go?") if "zebra" in str(m["text"])]
    assert service.call("POST", "/retain", retain_body("main", entry)).body["status"] == "forgotten"
    config = load_config(service.config)
    with Memory(with_sessions(config.agent("main")), config) as mem:  # what another process sees right after
        assert "zebra-nightly" not in json.dumps(mem.search("zebra cluster backup bucket"))
        assert "zebra-nightly" not in json.dumps(mem.pack("zebra cluster backup bucket"))
    leaked = [p for p in service.home.rglob("*") if p.is_file() and OPENAI_KEY.encode() in p.read_bytes()]
    assert not leaked  # nor in the index, its WAL or any state file
    if store_backend:  # nor in the PostgreSQL index
        import psycopg

        with psycopg.connect(store_backend["url"]) as conn:
            sql = f"SELECT count(*) FROM {store_backend['schema']}.chunks WHERE text LIKE %s"
            assert conn.execute(sql, (f"%{OPENAI_KEY}%",)).fetchone()[0] == 0
            assert conn.execute(sql, ("%zebra-nightly%",)).fetchone()[0] == 0  # forgotten: gone from the index


def test_recall_respects_the_proxy_limits(service: Service) -> None:
    for i in range(30):
        words = " ".join(f"walrus{i} fact{j} harbour crane schedule" for j in range(40))
        service.call(
            "POST", "/retain", retain_body("main", openai_entry(f"walrus {i}: {words}", f"noted {i}", id=f"hist1_w{i}"))
        )
    reply = service.call("POST", "/recall", recall_body("main", "walrus harbour crane schedule facts"))
    mems = reply.body["memories"]
    assert 0 < len(mems) <= 8 and len(reply.raw) <= 16 * 1024
    assert sum(len(str(m["text"]).encode()) for m in mems) <= 8 * 1024


def test_errors_404_400_413(service: Service) -> None:
    assert service.call("POST", "/recall", recall_body("nobody", "x")).status == 404
    bad = service.call("POST", "/recall", recall_body("../etc", "x"))
    assert bad.status == 400 and "agent_id" in bad.body["error"]
    assert service.call("POST", "/recall", recall_body("..", "x")).status == 400
    assert service.call("POST", "/retain", raw=b"{not json").status == 400
    r = service.call("POST", "/retain", {"agent_id": "main", "entry": {"ts": "2026-01-01T00:00:00Z", "response": 3}})
    assert r.status == 400 and "entry.response" in r.body["error"]
    r = service.call("POST", "/forget", {"agent_id": "main", "entry_ids": []})
    assert r.status == 400 and "entry_ids" in r.body["error"]
    r = service.call("POST", "/retain", retain_body("main", openai_entry("q", "a"), timezone="Mars/Base"))
    assert r.status == 202 and "metadata.timezone" in r.body["warnings"][0]  # dated in UTC, not refused
    # Over the limit (service.maxBodyBytes, 64 MiB): refused from the Content-Length alone, and a chunked body
    # (no Content-Length) as soon as what has arrived passes it (1,025 pieces of 64 KiB: the last one crosses).
    assert _raw_post(service, {"Content-Length": str(64 * 1024 * 1024 + 1)}, []) == 413
    assert _raw_post(service, {"Transfer-Encoding": "chunked"}, [b"x" * 65536] * 1025, chunked=True) == 413
    assert service.call("POST", "/recall", recall_body("main", "x")).status == 200  # its place given back


def _raw_post(service: Service, headers: dict[str, str], pieces: list[bytes], chunked: bool = False) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
    conn.putrequest("POST", "/retain")
    conn.putheader("Authorization", f"Bearer {TOKEN}")
    conn.putheader("Content-Type", "application/json")
    for k, v in headers.items():
        conn.putheader(k, v)
    conn.endheaders()
    for piece in pieces:
        conn.send(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
    try:
        return conn.getresponse().status
    finally:
        conn.close()


@both_backends
def test_status_and_no_secret_in_logs(service: Service) -> None:
    service.call(
        "POST", "/retain", retain_body("ops", openai_entry(f"token {OPENAI_KEY} for the ops", "ok", id="hist1_s"))
    )
    st = service.call("GET", "/agents/ops/status")
    assert st.status == 200 and st.body["sessions"]["retained"] == 1
    assert service.call("GET", "/agents/nobody/status").status == 404
    service.stop()
    log = service.log.read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    ops = [line for line in lines if line.get("type") == "memory_op"]
    assert {
        "ts",
        "type",
        "agent_id",
        "memory_op",
        "memory_status",
        "memory_blocks",
        "memory_bytes",
        "memory_removed",
        "ms",
    } <= set(ops[0])
    assert OPENAI_KEY not in log and TOKEN not in log


def test_a_retain_into_a_missing_workspace_fails_and_creates_nothing(service: Service, tmp_path: Path) -> None:
    """An unmounted volume or a renamed folder: the retain answers 503 naming the workspace and the fix, and
    no folder is created in its place (what it held would be hidden once the volume is mounted again)."""
    ws = tmp_path / "ws"
    ws.rename(tmp_path / "ws-away")
    reply = service.call("POST", "/retain", retain_body("main", openai_entry("q", "a", id="hist1_away")))
    assert reply.status == 503 and str(ws) in reply.body["error"] and "Fix:" in reply.body["error"]
    assert not ws.exists()
    (tmp_path / "ws-away").rename(ws)
    reply = service.call("POST", "/retain", retain_body("main", openai_entry("q", "a", id="hist1_away")))
    assert reply.status == 202 and reply.body["status"] == "retained"  # the workspace back: retained


def test_a_public_address_without_a_configured_token_requires_the_generated_one(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.json", {"main": tmp_path / "ws"}, recallWorkers=0)
    svc = Service(cfg, tmp_path / "home", None, tmp_path / "serve.log", host="0.0.0.0")
    svc.start()
    try:
        generated = (tmp_path / "home" / "state" / "service-token").read_text().strip()
        assert svc.token == generated
        assert svc.call("POST", "/recall", recall_body("main", "x"), token=None).status == 401
        assert svc.call("POST", "/recall", recall_body("main", "x")).status == 200
    finally:
        svc.stop()


def test_auto_agents_creates_a_workspace_inside_home(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.json", {"main": tmp_path / "ws"}, autoAgents=True)
    svc = Service(cfg, tmp_path / "home", TOKEN, tmp_path / "serve.log")
    svc.start()
    try:
        r = svc.call("POST", "/retain", retain_body("new.bot", openai_entry("hello walrus", "hi", id="hist1_n")))
        assert r.status == 202
        assert (tmp_path / "home" / "agents" / "new.bot" / "sessions" / "2026-11-23.md").is_file()
        assert svc.call("POST", "/retain", retain_body("..", openai_entry("x", "y"))).status == 400
    finally:
        svc.stop()


def _ledger(path: Path, entries: list[dict[str, object]], extra: list[str] = ()) -> Path:  # type: ignore[assignment]
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(e, separators=(",", ":")) for e in entries] + list(extra)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _backfill(*args: str, home: Path) -> tuple[int, dict[str, object], str]:
    env = {"MDMEMORY_HOME": str(home), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "mdmem", "backfill", *args], capture_output=True, text=True, env=env, timeout=300
    )
    return out.returncode, json.loads(out.stdout.strip().splitlines()[-1]) if out.stdout.strip() else {}, out.stderr


def test_backfill_local_and_over_http_honours_tombstones(service: Service, tmp_path: Path) -> None:
    ledger_dir = tmp_path / "history" / "main"
    old = [openai_entry(f"old question {i} about otters", f"old answer {i}", id=f"hist1_old{i}") for i in range(2)]
    _ledger(ledger_dir / "history.jsonl.1", old)
    no_id = anthropic_entry("where do the otters sleep?", "In the north pen.")  # an older line without id
    live = [openai_entry("otter feeding time?", "At 09:00.", id="hist1_live"), no_id]
    ledger = _ledger(ledger_dir / "history.jsonl", live, extra=['{"version":1,"ts":', "not json"])
    raw_no_id = ledger.read_text().splitlines()[1].encode()
    from mdmem.files.entry_id import id_from_json

    code, summary, err = _backfill(str(ledger), "--config", str(service.config), home=service.home)
    assert code == 0, err
    assert summary == {"read": 6, "retained": 4, "duplicates": 0, "tombstoned": 0, "skipped": 0, "invalid": [5, 6]}
    assert "malformed ledger line 5" in err
    sessions = Path(service.config).parent / "ws" / "sessions"
    text = "".join(p.read_text() for p in sessions.glob("*.md"))
    assert id_from_json(raw_no_id) in text and "hist1_old0" in text
    assert service.call("POST", "/forget", {"agent_id": "main", "entry_ids": ["hist1_live"]}).status == 204
    code, summary, err = _backfill(str(ledger), "--url", service.url, "--token", TOKEN, home=service.home)
    assert code == 0, err
    assert (summary["retained"], summary["duplicates"], summary["tombstoned"]) == (0, 3, 1)
    assert "hist1_live" not in "".join(p.read_text() for p in sessions.glob("*.md"))  # not resurrected
    assert not [m for m in _memories(service, "otter feeding time?") if "09:00" in str(m["text"])]
    code, summary, err = _backfill(str(ledger), "--url", service.url, "--token", "wrong", home=service.home)
    assert code == 1 and "401" in err


def test_sigterm_drains_a_request_in_flight(service: Service) -> None:
    assert service.proc is not None
    body = json.dumps(retain_body("main", openai_entry("drain " + "y" * 200_000, "done", id="hist1_drain"))).encode()
    conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
    conn.putrequest("POST", "/retain")
    conn.putheader("Authorization", f"Bearer {TOKEN}")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(len(body)))
    conn.endheaders()
    conn.send(body[:1000])
    time.sleep(0.3)  # the request is in flight
    service.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    conn.send(body[1000:])
    reply = conn.getresponse()
    assert reply.status == 202 and json.loads(reply.read())["status"] == "retained"
    conn.close()
    assert service.proc.wait(30) == 0
    assert "hist1_drain" in (Path(service.config).parent / "ws" / "sessions" / "2026-11-23.md").read_text()


def test_backfill_after_skips_older_entries(service: Service, tmp_path: Path) -> None:
    entries = [openai_entry(f"q{i}", f"a{i}", id=f"hist1_t{i}", ts=f"2026-11-2{i}T10:00:00Z") for i in range(3)]
    ledger = _ledger(tmp_path / "h" / "main" / "history.jsonl", entries)
    code, summary, err = _backfill(
        str(ledger),
        "--after",
        "2026-11-21T00:00:00Z",
        "--limit",
        "5",
        "--config",
        str(service.config),
        home=service.home,
    )
    assert code == 0, err
    assert (summary["read"], summary["skipped"], summary["retained"]) == (3, 1, 2)
    code, _, err = _backfill(str(ledger), "--after", "last tuesday", home=service.home)
    assert code == 2 and "--after" in err


# A recall that waits for a core on a busy machine is answered late rather than dropped: this is about
# writers and readers side by side, not the budget (tests/test_recall_budget.py).
@pytest.mark.parametrize("service", [{"recallBudgetMs": 60_000}], indirect=True)
def test_mixed_load_of_recalls_retains_forgets_and_hand_edits_answers_without_errors(service: Service) -> None:
    """Recalls search through read connections while retains, forgets, the background indexer and a person
    editing notes write: every request answers, and what was written is found right after."""

    ws = Path(service.config).parent / "ws"
    stop = time.monotonic() + 6.0
    errors: list[str] = []
    retained: list[str] = []
    forgotten: list[str] = []
    lock = threading.Lock()

    def recaller(k: int) -> None:
        while time.monotonic() < stop:
            r = service.call("POST", "/recall", recall_body("main", f"what about the heron plan {k}?"))
            if r.status != 200:
                errors.append(f"recall {r.status} {r.raw[:200]!r}")

    def retainer(k: int) -> None:
        i = 0
        while time.monotonic() < stop:
            eid = f"hist1_mix{k}_{i}"
            entry = openai_entry(f"heron turn {k} {i}", "noted", id=eid)
            r = service.call("POST", "/retain", retain_body("main", entry))
            if r.status != 202 or r.body["status"] != "retained":
                errors.append(f"retain {r.status} {r.raw[:200]!r}")
            with lock:
                retained.append(eid)
            i += 1

    def forgetter() -> None:
        while time.monotonic() < stop:
            time.sleep(0.5)
            with lock:
                ids = retained[len(forgotten) : len(forgotten) + 5]  # the oldest not forgotten yet
            r = service.call("POST", "/forget", {"agent_id": "main", "entry_ids": ids})
            if r.status != 204:
                errors.append(f"forget {r.status} {r.raw[:200]!r}")
            with lock:
                forgotten.extend(ids)

    def editor() -> None:
        i = 0
        while time.monotonic() < stop:
            (ws / "memory" / f"2026-04-{i % 28 + 1:02d}.md").write_text(f"# Day\n\nHand note {i} about the heron.\n")
            i += 1
            time.sleep(0.2)

    threads = [threading.Thread(target=recaller, args=(k,)) for k in range(3)]
    threads += [threading.Thread(target=retainer, args=(k,)) for k in range(2)]
    threads += [threading.Thread(target=forgetter), threading.Thread(target=editor)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:5]
    assert len(retained) > 10 and forgotten

    (ws / "memory" / "2026-05-01.md").write_text("# Day\n\nThe cormorant dried its wings on the pier.\n")
    albatross = openai_entry("where is the albatross colony?", "Kerguelen")
    r = service.call("POST", "/retain", retain_body("main", albatross))
    assert r.status == 202
    found = _memories(service, "albatross colony")  # a retain makes the next recall catch up at once
    assert any("Kerguelen" in str(m["text"]) for m in found)
    deadline = time.monotonic() + 5
    while not any("cormorant" in str(m["text"]) for m in _memories(service, "cormorant wings")):
        assert time.monotonic() < deadline, "a hand edit was not recalled within 5 s"
        time.sleep(0.2)
    said = re.findall(r"heron turn (\d+) (\d+)", json.dumps(_memories(service, "heron turn noted")))
    recalled = {f"hist1_mix{k}_{i}" for k, i in said}  # recall shows the turn as said, not its entry id
    assert recalled and not recalled & set(forgotten)  # forgotten turns never come back
    sessions = "".join(p.read_text() for p in (ws / "sessions").glob("*.md"))
    assert not [f for f in forgotten if re.search(re.escape(f) + r"\b", sessions)]
