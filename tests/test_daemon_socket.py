"""The command line as a thin client of a running daemon: real `mdmem watch` processes, real Unix sockets.

Each command runs in a fresh interpreter through ``mdmem.cli.entry`` (what the console script runs) and says
whether it had to import ``mdmem.cli.commands`` (run the command itself) or the daemon answered; its output is
compared with the same command run with ``MDMEMORY_DAEMON=off``.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mdmem.cli import entry
from mdmem.cli.commands import SocketCommands
from mdmem.config import paths as configpath
from mdmem.config.load import load_config
from mdmem.runtime import ipc_protocol as ipc
from mdmem.runtime.ipc_server import IpcServer, load_pinned
from tests.conftest import REPO, write
from tests.daemon_helpers import Daemon
from tests.service_bodies import openai_entry, retain_body
from tests.service_server import Service

CLIENT = """
import contextlib, io, json, sys
from mdmem.cli import entry
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        code = entry.main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
report = {"code": code, "out": out.getvalue(), "err": err.getvalue(), "inProcess": "mdmem.cli.commands" in
sys.modules}
print(json.dumps(report))
"""


def run(*args: str, daemon: bool = True) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if not daemon:
        env[ipc.DISABLE_ENV] = "off"
    proc = subprocess.run(
        [sys.executable, "-c", CLIENT, *args], capture_output=True, text=True, env=env, timeout=120, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return report


def same_as_in_process(*args: str) -> dict[str, Any]:
    """Run ``args`` through the daemon and in-process; assert equal output; return the daemon's report."""
    via_daemon, here = run(*args), run(*args, daemon=False)
    assert not via_daemon["inProcess"], f"the daemon did not answer `{' '.join(args)}`"
    assert here["inProcess"]
    assert {k: via_daemon[k] for k in ("code", "out", "err")} == {k: here[k] for k in ("code", "out", "err")}
    return via_daemon


def two_agent_config(tmp_path: Path) -> Path:
    for agent, fact in (("main", "The gate code is 4711."), ("work", "The deploy window is Tuesday.")):
        ws = tmp_path / f"ws-{agent}"
        write(ws / "MEMORY.md", f"# Memory\n\n{fact}\n")
        write(ws / "memory" / "2026-11-20.md", f"# 2026-11-20\n\n- {agent}: met Dana about the {agent} backups.\n")
    agents = [
        {"id": "main", "default": True, "workspace": str(tmp_path / "ws-main")},
        {"id": "work", "workspace": str(tmp_path / "ws-work")},
    ]
    cfg = tmp_path / "cfg.json5"
    ms = {"provider": "hash", "sync": {"watchDebounceMs": 200}}
    cfg.write_text(json.dumps({"agents": {"defaults": {"memorySearch": ms}, "list": agents}}))
    return cfg


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
        d.stop()


def socket_of(config: Path, agent: str) -> Path:
    return Path(ipc.socket_path(load_config(config).agent(agent).store_path))


def test_sockets_are_owner_only_and_linked_by_config_and_agent(config: Path, daemon: Daemon) -> None:
    home = configpath.home_dir(os.environ)
    for agent, names in (("main", ["main", None]), ("work", ["work"])):
        path = socket_of(config, agent)
        info = os.lstat(path)
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        for name in names:
            assert os.readlink(ipc.rendezvous(home, str(config), name)) == str(path)
    assert stat.S_IMODE(os.stat(ipc.run_dir(home)).st_mode) == 0o700
    status = run("status", "--config", str(config), "--json")  # never asked of the daemon
    assert status["inProcess"] and json.loads(status["out"])["watcher"]["socket"] == str(socket_of(config, "main"))
    assert "answers search/get/pack" in run("status", "--config", str(config))["out"]
    assert daemon.stop() == 0
    assert not socket_of(config, "main").exists()  # a clean stop removes its sockets and links
    assert not os.path.lexists(ipc.rendezvous(home, str(config), None))


def test_search_get_and_pack_answer_as_in_process(config: Path, daemon: Daemon) -> None:
    cfg = ["--config", str(config)]
    found = same_as_in_process("search", "backups", *cfg, "--json")
    assert json.loads(found["out"])["results"]
    same_as_in_process("search", "gate code", *cfg)  # text output
    same_as_in_process("--json", "search", "gate", "--max-results", "1", "--min-score", "0", *cfg)
    same_as_in_process("get", "MEMORY.md", *cfg, "--json")
    same_as_in_process("get", "memory/2026-11-20.md", "--from", "3", "--lines", "1", *cfg)
    same_as_in_process("pack", "backups", "--budget-tokens", "200", "--trace", *cfg, "--json")
    # errors keep their exit codes and messages: a usage error (2) and a refused path (1)
    assert same_as_in_process("search", "  ", *cfg)["code"] == 2
    assert same_as_in_process("get", "../secret.md", *cfg, "--json")["code"] == 1


def test_each_agent_has_its_own_socket(config: Path, daemon: Daemon) -> None:
    main = same_as_in_process("get", "MEMORY.md", "--config", str(config), "--json")
    work = same_as_in_process("--agent", "work", "get", "MEMORY.md", "--config", str(config), "--json")
    assert "4711" in json.loads(main["out"])["text"]
    assert "Tuesday" in json.loads(work["out"])["text"]
    explicit = same_as_in_process("get", "MEMORY.md", "--agent", "main", "--config", str(config), "--json")
    assert explicit["out"] == main["out"]


def test_a_changed_config_is_never_answered_by_the_old_daemon(
    config: Path, daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = ["--config", str(config)]
    assert not run("get", "MEMORY.md", *cfg, "--json")["inProcess"]
    data = json.loads(config.read_text())
    data["agents"]["list"][0]["workspace"] = str(tmp_path / "ws-work")  # main now reads work's files
    config.write_text(json.dumps(data))
    after = run("get", "MEMORY.md", *cfg, "--json")
    assert after["inProcess"]  # refused by the daemon: it still has the old config
    assert "Tuesday" in json.loads(after["out"])["text"]
    assert run("search", "deploy window", *cfg, "--json")["inProcess"]
    refused = [e for e in daemon.log if e.get("event") == "refused"]
    assert len(refused) == 1 and "restart the daemon" in refused[0]["reason"]  # said once, not per command
    data["agents"]["list"][0]["workspace"] = str(tmp_path / "ws-main")
    config.write_text(json.dumps(data))  # the file as the daemon loaded it: answered again
    assert not run("get", "MEMORY.md", *cfg, "--json")["inProcess"]
    with monkeypatch.context() as env:
        env.setenv("MDMEMORY_WORKSPACE", str(tmp_path))  # an environment the daemon did not load with
        assert run("get", "MEMORY.md", *cfg, "--json")["inProcess"]


def _raw(path: Path, payload: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        address, fd = ipc.short_address(str(path))
        try:
            s.connect(address)
        finally:
            if fd is not None:
                os.close(fd)
        s.settimeout(10)
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        try:
            return b"".join(iter(lambda: s.recv(65536), b""))
        except ConnectionResetError:  # closed with our bytes unread (over the limit): that is a refusal too
            return b""


def frames(data: bytes) -> list[dict[str, Any]]:
    """The frames of a reply, decoded."""
    out = []
    while data:
        (size,) = struct.unpack(">I", data[:4])
        out.append(json.loads(data[4 : 4 + size]))
        data = data[4 + size :]
    return out


def test_bad_requests_are_refused_and_the_daemon_keeps_answering(config: Path, daemon: Daemon) -> None:
    path = socket_of(config, "main")
    fp = ipc.fingerprint(str(config), os.environ)
    argv = ["get", "MEMORY.md", "--config", str(config)]
    good = {"v": ipc.PROTOCOL, "argv": argv, "config": str(config), "agent": None}

    def frame(obj: Any) -> bytes:
        data = json.dumps(obj).encode()
        return struct.pack(">I", len(data)) + data

    bad = [
        b"",  # connects and leaves
        b"\x00\x00",  # a truncated header
        struct.pack(">I", ipc.MAX_REQUEST_BYTES + 1) + b"x" * 100,  # over the size limit
        struct.pack(">I", 5) + b"\xff\xfe{}}",  # not UTF-8 JSON
        frame([1, 2, 3]),  # not an object
        frame({**good, "fingerprint": "0" * 64}),  # another config
        frame({**good, "fingerprint": fp, "argv": "get MEMORY.md"}),  # argv not a list
        frame({**good, "fingerprint": fp, "argv": ["status", "--config", str(config)]}),  # not answered here
        frame({**good, "fingerprint": fp, "argv": ["get", "--help"]}),  # argparse would print and exit
        frame({**good, "fingerprint": fp, "agent": "work", "argv": [*good["argv"], "--agent", "work"]}),  # not ours
        frame({**good, "fingerprint": fp, "config": "/elsewhere.json5"}),  # not what the argv says
        frame({**good, "v": 1, "fingerprint": fp}),  # an older client
        struct.pack(">I", 200_001) + b"[" * 100_000 + b"]" * 100_001,  # nested too deep to parse
        struct.pack(">I", 5008) + b'{"v": 1' + b"0" * 5000 + b"}",  # an integer too long to convert
    ]
    for payload in bad:
        reply = _raw(path, payload)
        if reply:
            assert [list(f) for f in frames(reply)] == [["refused"]], reply
    assert daemon.proc.poll() is None
    assert not [e for e in daemon.log if e.get("event") == "error"]  # each was refused, none was a failure
    accepted, answer = frames(_raw(path, frame({**good, "fingerprint": fp})))
    assert accepted == {"accepted": 4.0}  # query.embedTimeoutMs (2 s) + 1 s of text catch-up + 1 s
    assert answer["code"] == 0 and "4711" in answer["stdout"]
    assert not run("get", "MEMORY.md", "--config", str(config))["inProcess"]


def test_the_server_stops_its_threads(config: Path, no_thread_leaks: None) -> None:
    """In this process: serve two agents, answer over the socket, stop: no thread, socket or link is left."""
    loaded, fp = load_pinned(str(config))
    assert fp is not None
    events: list[dict[str, Any]] = []
    server = IpcServer(loaded, fp, loaded.agents, events.append, SocketCommands())
    server.start()
    try:
        env = dict(os.environ)
        reply = entry.ask_daemon(["--agent", "work", "search", "deploy", "--config", str(config), "--json"], env)
        assert reply is not None and reply["code"] == 0
        assert json.loads(reply["stdout"])["results"][0]["path"] == "MEMORY.md"
        assert entry.ask_daemon(["status", "--config", str(config)], env) is None  # never asked
    finally:
        server.stop()
        server.stop()  # idempotent
    assert [e["event"] for e in events] == ["socket", "socket"]
    assert not socket_of(config, "work").exists()
    assert entry.ask_daemon(["get", "MEMORY.md", "--config", str(config)], dict(os.environ)) is None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["search", "q"], (None, None)),
        (["--json", "--config", "a.json", "search", "q", "--agent", "w"], ("a.json", "w")),
        (["--agent=x", "get", "MEMORY.md", "--agent", "y"], (None, "y")),  # the command's own wins
        (["--config", "a", "pack", "q", "--config=b"], ("b", None)),
        (["status"], None),
        (["--version"], None),
        (["-h"], None),
        (["search", "q", "--config"], None),  # a missing value: argparse says so, in-process
        ([], None),
        (["search", "--", "--agent"], (None, None)),
    ],
)
def test_scan_reads_config_and_agent_as_argparse_does(argv: list[str], expected: Any) -> None:
    assert entry.scan(argv) == expected


def test_serve_answers_the_command_line_too(config: Path, tmp_path: Path) -> None:
    """`mdmem serve` searches its agents' sessions too; the socket answers with the command line's config."""
    svc = Service(config, Path(os.environ["MDMEMORY_HOME"]), None, tmp_path / "serve.log")
    svc.start()
    try:
        entry = openai_entry("what is the gate code now?", "The gate code changed to 9090.")
        assert svc.call("POST", "/retain", retain_body("main", entry)).status == 202  # a session the CLI ignores
        cfg = ["--config", str(config)]
        same_as_in_process("search", "gate code", *cfg, "--json")
        same_as_in_process("--agent", "work", "pack", "deploy", *cfg)
        same_as_in_process("get", "MEMORY.md", *cfg, "--json")
    finally:
        assert svc.stop() == 0
    assert not socket_of(config, "main").exists()
