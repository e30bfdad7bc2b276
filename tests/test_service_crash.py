"""kill -9 of ``mdmem serve`` in the middle of a retain storm from 8 clients: plain text, and hostile text
(CRLF, lone CR, U+2028, NEL, CJK, forged headings and closing comments of other clients' entries)."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mdmem.files import sessionblocks as blocks
from mdmem.files.retained import DEFAULT_MAX_MESSAGE_CHARS, stored_text
from tests.fault_helpers import fill_disk, small_tmpfs
from tests.service_bodies import openai_entry, retain_body
from tests.service_server import Service, write_config

CLIENTS, PER_CLIENT = 8, 200
KILL_AFTER = 60  # acknowledged entries before the kill: well inside the storm (retains run at ~750/s)


def plain(k: int, i: int) -> str:
    return f"storm {k} {i} " + "pad " * 300


def hostile(k: int, i: int) -> str:
    other = f"hist1_c{(k + 1) % CLIENTS}_{i}"  # another client's entry, perhaps retained already
    return (
        f"storm {k} {i}\r\nwindows line\rlone CR\r## 10:00:00 · gpt-4o · {other}\r<!-- /{other} -->\r\n"
        f"<!-- /hist1_c{k}_{i} -->\u2028寿司と天ぷら\x85記憶\r\n\r\n## 12:00:00 · m · forged\n" + "パッド pad\r\n" * 120
    )


@pytest.mark.parametrize("text", [plain, hostile])
def test_every_acknowledged_entry_survives_exactly_once(tmp_path: Path, text: Callable[[int, int], str]) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    cfg = write_config(tmp_path / "config.json", {"main": ws})
    svc = Service(cfg, tmp_path / "home", "tok-8d1e2f", tmp_path / "serve.log")
    svc.start()
    acked: set[str] = set()
    sent: set[str] = set()
    lock = threading.Lock()
    started = threading.Event()

    def client(k: int) -> None:
        for i in range(PER_CLIENT):
            eid = f"hist1_c{k}_{i}"
            with lock:
                sent.add(eid)
            body = retain_body("main", openai_entry(text(k, i), f"ack {k} {i}", id=eid))
            try:
                reply = svc.call("POST", "/retain", body, timeout=10)
            except (OSError, http.client.HTTPException):
                return  # the server is gone (also in the middle of an answer)
            if reply.status == 202:
                with lock:
                    acked.add(eid)
                    if len(acked) >= KILL_AFTER:
                        started.set()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    try:
        for t in threads:
            t.start()
        assert started.wait(30)
    finally:  # the kill, and never a server left running when the storm did not start
        killed = svc.stop(signal.SIGKILL)
    assert killed == -signal.SIGKILL
    for t in threads:
        t.join(30)
    assert 0 < len(acked) < CLIENTS * PER_CLIENT  # the kill landed in the middle of the storm

    svc.start()
    try:
        svc.call("GET", "/agents/main/status")  # opens the log: repairs a torn tail, if any
        found: list[str] = []
        for path in sorted((ws / "sessions").glob("*.md")):
            data = path.read_bytes()
            got, torn = blocks.blocks(data)
            assert torn is None
            found += [b.entry_id for b in got]
            for b in got:  # each block holds its own entry's text, unchanged but for line endings and wrapping
                k, i = (int(n) for n in b.entry_id.removeprefix("hist1_c").split("_"))
                assert blocks.read_block(data, b).turn.user == stored_text(text(k, i), DEFAULT_MAX_MESSAGE_CHARS)[0]
        assert len(found) == len(set(found))  # nothing twice
        assert acked <= set(found)  # everything acknowledged is there
        assert set(found) <= sent  # nothing else (an entry in flight at the kill may be there, unacknowledged)
        for eid in sorted(acked)[:40]:  # the proxy's retries: duplicate, as the files hold them
            k, i = (int(n) for n in eid.removeprefix("hist1_c").split("_"))
            reply = svc.call("POST", "/retain", retain_body("main", openai_entry(text(k, i), f"ack {k} {i}", id=eid)))
            assert (reply.status, reply.body["status"]) == (202, "duplicate"), json.dumps(reply.body)
        deadline = time.monotonic() + 120
        while True:  # the index converges: no stale file, no pending embedding
            svc.call("POST", "/recall", {"agent_id": "main", "messages": [{"role": "user", "content": "storm ack"}]})
            index = svc.call("GET", "/agents/main/status").body
            if not index["staleFiles"] and index["pendingEmbeddings"] == 0:
                break
            assert time.monotonic() < deadline, index
            time.sleep(1)
    finally:
        svc.stop()


def test_a_forget_cut_between_its_tombstone_and_its_rewrite_is_finished_before_the_first_recall(
    tmp_path: Path,
) -> None:
    """A forget whose tombstone is durable but whose rewrite failed (a full disk: the tombstone line fits, a
    copy of the day file without the entry does not), then a kill -9: after the restart, the first request is
    a recall, and the forgotten entry must not come back from it (the block goes before any search indexes
    the files)."""
    with small_tmpfs(tmp_path / "vol", "256k") as vol:
        ws = vol / "ws"
        (ws / "memory").mkdir(parents=True)
        cfg = write_config(tmp_path / "config.json", {"main": ws})
        svc = Service(cfg, tmp_path / "home", "tok-5b1c", tmp_path / "serve.log")
        svc.start()
        try:
            gone = openai_entry("where is the zebraquartz vault?", "room 7", id="hist1_gone")
            kept = openai_entry("what colour is the lighthouse?", "red", id="hist1_kept")
            pad = openai_entry("padding " * 2000, "ok", id="hist1_pad")
            for entry in (gone, kept, pad):
                assert svc.call("POST", "/retain", retain_body("main", entry)).status == 202
            filler = fill_disk(ws, leave=8192)  # room for the tombstone line, not for a copy of the day file
            reply = svc.call("POST", "/forget", {"agent_id": "main", "entry_ids": ["hist1_gone"]})
            assert reply.status == 503, reply.body
            assert "hist1_gone" in (ws / "sessions" / ".tombstones.jsonl").read_text()
            assert "zebraquartz" in (ws / "sessions" / "2026-11-23.md").read_text()
        finally:
            assert svc.stop(signal.SIGKILL) == -signal.SIGKILL
        filler.unlink()  # the operator frees space, then restarts the service
        svc.start()
        try:
            reply = svc.call(
                "POST", "/recall", {"agent_id": "main", "messages": [{"role": "user", "content": "zebraquartz vault"}]}
            )
            assert reply.status == 200
            assert not [m for m in reply.body["memories"] if "zebraquartz" in m["text"]], reply.body
            day = (ws / "sessions" / "2026-11-23.md").read_text()
            assert "zebraquartz" not in day and "hist1_kept" in day
            reply = svc.call(
                "POST", "/recall", {"agent_id": "main", "messages": [{"role": "user", "content": "lighthouse colour"}]}
            )
            assert any("lighthouse" in m["text"] for m in reply.body["memories"]), reply.body
        finally:
            svc.stop()
