"""The command line never waits long for a daemon, and nothing a socket peer sends makes it fail.

Real `mdmem watch` processes stopped with SIGSTOP before and during a request, or killed during one
(their search held up by a real embeddings server that does not answer); real peers on real Unix sockets
that accept and never answer, trickle, or answer garbage: the command gives up within the connect time or
the search budget the daemon declared, and answers in its own process with the same output.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mdmem.cli import entry
from mdmem.config import paths as configpath
from mdmem.config.load import load_config
from mdmem.runtime import ipc_protocol as ipc
from mdmem.runtime.ipc_server import reply_seconds
from tests.conftest import write
from tests.daemon_helpers import Daemon
from tests.fake_openai import FakeOpenAIServer, Fault
from tests.test_daemon_socket import run, socket_of, two_agent_config

SLACK = 1.5  # scheduling on a loaded machine, on top of each bound


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return two_agent_config(tmp_path)


@pytest.fixture
def daemon(config: Path) -> Iterator[Daemon]:
    d = Daemon(config)
    try:
        wanted = {(event, agent) for event in ("socket", "sync") for agent in ("main", "work")}
        d.wait_for(lambda _: wanted <= {(e.get("event"), e.get("agent")) for e in d.log})
        yield d
    finally:
        if d.proc.poll() is None:
            os.kill(d.proc.pid, signal.SIGCONT)
        d.stop()


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.monotonic()
    out = call()
    return out, time.monotonic() - start


def test_a_stopped_daemon_is_given_up_within_the_connect_time(config: Path, daemon: Daemon) -> None:
    cfg = ["--config", str(config)]
    expected = run("search", "backups", *cfg, "--json", daemon=False)
    assert not run("search", "backups", *cfg, "--json")["inProcess"]  # the daemon answers while it runs
    os.kill(daemon.proc.pid, signal.SIGSTOP)  # the kernel still accepts connections for it
    asked, seconds = timed(lambda: entry.ask(["search", "backups", *cfg], os.environ))
    assert asked.reply is None and seconds < entry.CONNECT_SECONDS + SLACK
    assert (
        asked.note == f"the mdmem daemon (pid {daemon.proc.pid}) did not answer within 1 s; answering in this process"
    )
    here = run("search", "backups", *cfg, "--json")
    assert here["inProcess"] and (here["code"], here["out"]) == (0, expected["out"])
    assert here["err"] == f"mdmem: {asked.note}\n"
    assert run("get", "MEMORY.md", "--agent", "work", *cfg)["inProcess"]  # each agent's socket: the same
    os.kill(daemon.proc.pid, signal.SIGCONT)
    again = run("search", "backups", *cfg, "--json")
    assert not again["inProcess"] and again["out"] == expected["out"]  # answering again once it runs


def test_an_argument_in_another_encoding_is_answered_here(config: Path, daemon: Daemon) -> None:
    """A byte that is not UTF-8 on the command line cannot go over the socket as JSON text: no traceback,
    the command runs here, as it would without a daemon."""
    query = b"gate code \xff".decode("utf-8", "surrogateescape")  # what Python makes of the byte in argv
    cfg = ["--config", str(config), "--json"]
    here = run("search", query, *cfg)
    assert here["inProcess"] and here["code"] == 0 and here["err"] == ""
    assert here["out"] == run("search", query, *cfg, daemon=False)["out"]
    assert not run("search", "gate code", *cfg)["inProcess"]
    assert not [e for e in daemon.log if e.get("event") == "error"]


def slow_query_config(tmp_path: Path, server: FakeOpenAIServer, budget_ms: int) -> Path:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n\nThe gate code is 4711.\n")
    remote = {"baseUrl": server.url, "dimensions": 8, "maxRetries": 0, "timeoutSeconds": 30}
    ms = {"provider": "openai", "remote": remote, "query": {"embedTimeoutMs": budget_ms}}
    cfg = tmp_path / "cfg.json5"
    cfg.write_text(json.dumps({"agents": {"defaults": {"workspace": str(ws), "memorySearch": ms}}}))
    return cfg


def seen(event: dict[str, Any]) -> str:
    """A daemon event's name; ``synced`` for a sync that left nothing to embed."""
    return "synced" if event.get("event") == "sync" and event.get("pending") == 0 else str(event.get("event"))


def ask_in_background(argv: list[str]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def ask() -> None:
        out["asked"], out["seconds"] = timed(lambda: entry.ask(argv, os.environ))

    thread = threading.Thread(target=ask)
    thread.start()
    return thread, out


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.parametrize("stop", [signal.SIGSTOP, signal.SIGKILL], ids=["SIGSTOP", "SIGKILL"])
def test_a_daemon_stopped_or_killed_mid_request(tmp_path: Path, stop: signal.Signals) -> None:
    """The daemon accepted the search and waits for its query embedding (the server hangs) when it is
    stopped: the command waits out the budget it was promised, then answers itself; killed: at once."""
    with FakeOpenAIServer(dims=8) as server:
        config = slow_query_config(tmp_path, server, budget_ms=1500)
        promised = reply_seconds(load_config(config).agent())
        assert promised == 3.5  # 1.5 s of embedding budget, 1 s of text catch-up, 1 s of margin
        argv = ["search", "gate code", "--config", str(config), "--json"]
        d = Daemon(config)
        try:
            d.wait_for(lambda _: {"socket", "synced"} <= {seen(e) for e in d.log})
            before = len(server.requests)
            server.enqueue(Fault.hang())  # the daemon's query embedding: never answered
            thread, out = ask_in_background(argv)
            wait_for(lambda: len(server.requests) > before, "the daemon's query embedding")
            os.kill(d.proc.pid, stop)
            thread.join(30)
            asked = out["asked"]
            assert asked.reply is None
            if stop == signal.SIGSTOP:
                assert promised <= out["seconds"] < promised + SLACK
                assert asked.note.endswith("did not answer within 3.5 s; answering in this process")
            else:
                assert out["seconds"] < 1.5 + SLACK and asked.note is None  # no waiting for the dead
                d.proc.wait(10)
                assert socket_of(config, "main").exists()  # left behind by the killed daemon
                stale, seconds = timed(lambda: entry.ask(argv, os.environ))
                assert stale == entry.Asked(None) and seconds < 0.5  # refused by the kernel: no waiting
            here = run(*argv)  # the command itself answers, from the same index (its embedding is answered)
            assert here["inProcess"] and here["code"] == 0
            assert json.loads(here["out"])["results"][0]["path"] == "MEMORY.md"
        finally:
            if d.proc.poll() is None:
                os.kill(d.proc.pid, signal.SIGCONT)
            server.stop()  # wakes the hanging handler
            d.stop()
    if stop == signal.SIGKILL:  # a new daemon replaces the stale socket
        with FakeOpenAIServer(dims=8) as server:
            config = slow_query_config(tmp_path, server, budget_ms=1500)
            restarted = Daemon(config)
            try:
                restarted.wait_for(lambda e: e.get("event") == "socket")
                assert not run("get", "MEMORY.md", "--config", str(config))["inProcess"]
            finally:
                assert restarted.stop() == 0


# -- peers that are not a daemon --------------------------------------------------------------------------
class Peer:
    """A real Unix socket at the rendezvous of ``config``'s default agent: each connection gets ``answer``
    (the request it read, the connection) on a thread of its own."""

    def __init__(self, tmp_path: Path, config: Path, answer: Callable[[socket.socket], None]) -> None:
        home = configpath.home_dir(os.environ)
        os.makedirs(ipc.run_dir(home), mode=0o700, exist_ok=True)
        self.path = str(tmp_path / "peer.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(8)
        os.symlink(self.path, ipc.rendezvous(home, str(config), None))
        self.answer = answer
        self.stopping = threading.Event()
        self.conns: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.accepter = threading.Thread(target=self._accept)
        self.accepter.start()

    def _accept(self) -> None:
        self.listener.settimeout(0.05)
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,))
            self.threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self.answer(conn)
        except OSError:
            pass  # the client gave up and left

    def stop(self) -> None:
        self.stopping.set()
        self.accepter.join()
        for conn in self.conns:
            conn.close()
        for thread in self.threads:
            thread.join(10)
        self.listener.close()


@pytest.fixture
def peer(tmp_path: Path, config: Path) -> Iterator[Callable[[Callable[[socket.socket], None]], Peer]]:
    made: list[Peer] = []

    def start(answer: Callable[[socket.socket], None]) -> Peer:
        p = Peer(tmp_path, config, answer)
        made.append(p)
        return p

    yield start
    for p in made:
        p.stop()


def read_request(conn: socket.socket) -> dict[str, Any]:
    conn.settimeout(10)
    return ipc.receive(conn, ipc.MAX_REQUEST_BYTES)


def silent(conn: socket.socket) -> None:
    read_request(conn)
    conn.recv(1)  # until the client leaves


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def frame_json(obj: Any) -> bytes:
    return frame(json.dumps(obj).encode())


def answers(*chunks: bytes, pause: float = 0.0, close: bool = True) -> Callable[[socket.socket], None]:
    """Send ``chunks`` (``pause`` seconds after each), then close the connection or (``close`` False) say
    nothing more; either way keep it open until the client leaves."""

    def answer(conn: socket.socket) -> None:
        read_request(conn)
        for chunk in chunks:
            conn.sendall(chunk)
            time.sleep(pause)
        if close:
            conn.shutdown(socket.SHUT_WR)
        conn.recv(1)

    return answer


def test_a_silent_peer_is_given_up_within_the_connect_time(config: Path, peer: Any) -> None:
    argv = ["search", "backups", "--config", str(config), "--json"]
    expected = run(*argv, daemon=False)
    peer(silent)
    asked, seconds = timed(lambda: entry.ask(argv, os.environ))
    assert asked.reply is None and entry.CONNECT_SECONDS <= seconds < entry.CONNECT_SECONDS + SLACK
    assert asked.note is not None and "did not answer within 1 s" in asked.note
    here = run(*argv)
    assert here["inProcess"] and (here["code"], here["out"]) == (0, expected["out"])


def test_a_peer_that_accepts_then_goes_silent_is_given_up_after_the_seconds_it_declared(
    config: Path, peer: Any
) -> None:
    peer(answers(frame_json({"accepted": 2}), close=False))
    asked, seconds = timed(lambda: entry.ask(["get", "MEMORY.md", "--config", str(config)], os.environ))
    assert asked.reply is None and 2.0 <= seconds < 2.0 + SLACK
    assert asked.note is not None and "did not answer within 2 s" in asked.note


def test_a_trickling_peer_is_cut_off_at_the_deadline_not_per_read(config: Path, peer: Any) -> None:
    """A byte every 0.3 s would keep a per-read timeout of 1 s waiting for ever."""
    reply = frame_json({"code": 0, "stdout": "x" * 200, "stderr": ""})
    peer(answers(frame_json({"accepted": 1.5}), *(reply[i : i + 1] for i in range(len(reply))), pause=0.3))
    asked, seconds = timed(lambda: entry.ask(["get", "MEMORY.md", "--config", str(config)], os.environ))
    assert asked.reply is None and seconds < 1.5 + 0.3 + SLACK
    assert asked.note is not None and "did not answer within 1.5 s" in asked.note


ACK = frame_json({"accepted": 3})
GOOD = {"code": 0, "stdout": "ok\n", "stderr": ""}
HOSTILE: dict[str, tuple[bytes, str | None]] = {
    # name: (what the peer sends after reading the request, what the note says; None: no note)
    "http": (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", "over the limit"),
    "oversized": (struct.pack(">I", ipc.MAX_REPLY_BYTES + 1) + b"{}", "over the limit"),
    "truncated": (struct.pack(">I", 100) + b'{"code": 0', None),  # as a daemon killed mid-reply
    "header cut": (b"\x00\x00", None),
    "not utf-8": (frame(b'{"code": 0, "stdout": "\xff\xfe", "stderr": ""}'), "not JSON"),
    "not json": (frame(b"<html>no</html>"), "not JSON"),
    "deep": (frame(b"[" * 200_000 + b"]" * 200_000), "RecursionError"),
    "long integer": (frame(b'{"code": 1' + b"0" * 5000 + b', "stdout": "", "stderr": ""}'), "not JSON"),
    "array": (frame_json([0, "ok", ""]), "not a JSON object"),
    "code as text": (frame_json({**GOOD, "code": "0"}), "malformed"),
    "code true": (frame_json({**GOOD, "code": True}), "malformed"),
    "code 300": (frame_json({**GOOD, "code": 300}), "malformed"),
    "code -1": (frame_json({**GOOD, "code": -1}), "malformed"),
    "code float": (frame_json({**GOOD, "code": 0.0}), "malformed"),
    "stdout null": (frame_json({**GOOD, "stdout": None}), "malformed"),
    "stdout a list": (frame_json({**GOOD, "stdout": ["ok"]}), "malformed"),
    "no stderr": (frame_json({"code": 0, "stdout": "ok"}), "malformed"),
    "lone surrogate": (frame(b'{"code": 0, "stdout": "\\ud800", "stderr": ""}'), "malformed"),
    "accepted -1": (frame_json({"accepted": -1}), "an acceptance of '-1' seconds"),
    "accepted NaN": (frame(b'{"accepted": NaN}'), "an acceptance of 'nan' seconds"),
    "accepted a day": (frame_json({"accepted": 86400}), "an acceptance of '86400' seconds"),
    "accepted text": (frame_json({"accepted": "3"}), "an acceptance of '3' seconds"),
    "accepted true": (frame_json({"accepted": True}), "an acceptance of 'True' seconds"),
    "accepted twice": (ACK + ACK, "malformed"),
    "accepted, then garbage": (ACK + b"\xde\xad\xbe\xef" * 4, "over the limit"),
    "accepted, then cut": (ACK + struct.pack(">I", 50) + b"{", None),
    "refused, no reason": (frame_json({"refused": None}), None),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_reply_makes_the_command_answer_itself(config: Path, peer: Any, name: str) -> None:
    sent, note = HOSTILE[name]
    peer(answers(sent))
    asked, seconds = timed(lambda: entry.ask(["get", "MEMORY.md", "--config", str(config)], os.environ))
    assert asked.reply is None and seconds < SLACK
    if note is None:
        assert asked.note is None
    else:
        assert asked.note is not None and note in asked.note and asked.note.endswith("answering in this process")


END_TO_END = ("http", "truncated", "deep", "long integer", "code 300", "lone surrogate", "accepted NaN")


def test_hostile_replies_never_reach_the_terminal_as_a_traceback(config: Path, peer: Any) -> None:
    """End to end, in a fresh interpreter: some of the replies above in turn, the command's own answer."""
    cases = iter(HOSTILE[name] for name in END_TO_END)
    peer(lambda conn: answers(next(cases)[0])(conn))
    expected = run("get", "MEMORY.md", "--config", str(config), daemon=False)
    for name in END_TO_END:
        note = HOSTILE[name][1]
        here = run("get", "MEMORY.md", "--config", str(config))
        assert here["inProcess"] and (here["code"], here["out"]) == (0, expected["out"]), name
        assert "Traceback" not in here["err"], name
        assert (here["err"] == "") == (note is None), name


def test_a_good_reply_from_a_peer_is_printed(config: Path, peer: Any) -> None:
    """The checks above do not refuse what a daemon really sends."""
    peer(answers(ACK, frame_json({"code": 1, "stdout": "", "stderr": "mdmem: error: über\n"})))
    asked = entry.ask(["get", "MEMORY.md", "--config", str(config)], os.environ)
    assert asked == entry.Asked({"code": 1, "stdout": "", "stderr": "mdmem: error: über\n"})
