"""Only regular files with one link are memory: FIFOs, devices, sockets and hard links are never opened.

Every call that could hang on a FIFO runs under a timeout guard: in a thread joined with a deadline, or in
a subprocess with a timeout, so a regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from mdmem.agent.context import session_context
from mdmem.agent.remember import MAX_NOTE_BYTES, remember
from mdmem.files.workspace import Workspace
from mdmem.memory import Memory
from mdmem.util.errors import ConfigError, SpecialFileError, WorkspaceError
from mdmem.util.fileread import open_regular, read_text
from tests.agent_helpers import agent_config, write_config
from tests.conftest import REPO, write

T = TypeVar("T")
NOON = datetime(2026, 3, 9, 12, 0, tzinfo=UTC)
PROMPT = 10.0  # seconds; a hang on a FIFO would last forever


def promptly(call: Callable[[], T], timeout: float = PROMPT) -> T:
    """``call()`` in a thread; fail (instead of hanging) when it does not return within ``timeout``."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"{call} did not return within {timeout} s (blocked on a special file?)")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def cli(config: Path, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MDMEMORY_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "tests.agent_helpers", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )


@pytest.fixture
def fifo(workspace: Path) -> Iterator[Path]:
    write(workspace / "MEMORY.md", "# Memory\n\nThe gate code is 4711.\n")
    path = workspace / "memory" / "2026-03-09.md"
    os.mkfifo(path)
    yield path
    with contextlib.suppress(OSError):  # unblock anything that did open it for reading (a failing test)
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)


def test_fifo_is_never_opened_by_get_context_index_or_status(
    fifo: Path, workspace: Path, make_memory: Callable[..., Memory], tmp_path: Path
) -> None:
    mem = make_memory()
    got = promptly(lambda: mem.get("memory/2026-03-09.md"))
    assert got["text"] == "" and "is a FIFO (named pipe), not a regular file" in got["error"]
    report = promptly(mem.sync)
    assert report["indexed"] == 1 and set(mem.store.files()) == {"MEMORY.md"}
    status = promptly(mem.status)
    assert (
        "memory/2026-03-09.md is a FIFO (named pipe): not indexed; replace it with a regular file"
        in (status["warnings"])
    )
    agent = agent_config(tmp_path, workspace, userTimezone="UTC")
    ctx = promptly(lambda: session_context(agent, "main", today="2026-03-09"))
    assert [f["path"] for f in ctx["files"]] == ["MEMORY.md"]
    assert ctx["skipped"][0]["path"] == "memory/2026-03-09.md" and "FIFO" in ctx["skipped"][0]["error"]
    assert promptly(lambda: mem.search("gate code"))["results"][0]["path"] == "MEMORY.md"
    with pytest.raises(SpecialFileError, match="FIFO"):
        promptly(lambda: remember(agent, "never appended to a pipe", at=NOON))


def test_fifo_through_the_command_line(fifo: Path, workspace: Path, tmp_path: Path, isolated_env: Path) -> None:
    config = write_config(tmp_path / "cfg.json5", workspace)
    got = cli(config, "get", "memory/2026-03-09.md", home=isolated_env)
    assert got.returncode == 1 and "FIFO" in got.stderr and "Traceback" not in got.stderr
    ctx = cli(config, "context", "--json", home=isolated_env)
    assert ctx.returncode == 0, ctx.stderr
    indexed = cli(config, "index", "--json", home=isolated_env)
    assert indexed.returncode == 0 and json.loads(indexed.stdout)["indexed"] == 1


def test_mcp_memory_get_on_a_fifo_answers_and_the_server_keeps_serving(
    fifo: Path, workspace: Path, tmp_path: Path, isolated_env: Path
) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK is the 'mcp' extra: pip install 'mdmem[mcp]'")
    from tests.test_mcp import drive, structured

    config = write_config(tmp_path / "cfg.json5", workspace)
    seen: dict[str, Any] = {}

    async def body(session: Any) -> None:
        seen["fifo"] = await session.call_tool("memory_get", {"path": "memory/2026-03-09.md"})
        seen["after"] = await session.call_tool("memory_get", {"path": "MEMORY.md"})

    drive(["-m", "mdmem.mcp.server", "--config", str(config)], isolated_env, body)  # 60 s guard inside
    assert seen["fifo"].is_error and "FIFO" in structured(seen["fifo"])["error"]
    assert "4711" in structured(seen["after"])["text"]


def test_a_file_swapped_for_a_fifo_after_the_check_is_caught_on_the_open_fd(
    fifo: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: lstat saw a regular file, a FIFO is there at open. O_NONBLOCK opens it at once and the
    fstat of the fd refuses it."""
    regular = os.lstat(workspace / "MEMORY.md")
    real_lstat = os.lstat
    monkeypatch.setattr(os, "lstat", lambda p, *a, **kw: regular if Path(p) == fifo else real_lstat(p, *a, **kw))
    with pytest.raises(SpecialFileError, match="FIFO"):
        promptly(lambda: read_text(fifo))
    with pytest.raises(SpecialFileError, match="FIFO"):
        promptly(lambda: open_regular(fifo, os.O_RDWR | os.O_APPEND | os.O_CREAT))


def test_character_device_is_never_read(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    zero = workspace / "memory" / "zero.md"
    try:
        os.mknod(zero, stat.S_IFCHR | 0o644, os.makedev(1, 5))  # what /dev/zero is
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot create a device file here: {exc}")
    mem = make_memory()
    got = promptly(lambda: mem.get("memory/zero.md"))
    assert got["text"] == "" and "a character device" in got["error"]
    promptly(mem.sync)
    assert "memory/zero.md" not in mem.store.files()
    assert "memory/zero.md is a character device: not indexed" in "\n".join(mem.status()["warnings"])


def test_socket_is_never_read(
    workspace: Path, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace / "memory")  # a relative name keeps the socket path under the 108-byte limit
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind("sock.md")
        server.listen(1)
        mem = make_memory()
        got = promptly(lambda: mem.get("memory/sock.md"))
        assert got["text"] == "" and "a socket" in got["error"]
        promptly(mem.sync)
        assert "memory/sock.md" not in mem.store.files()
        assert "memory/sock.md is a socket: not indexed" in "\n".join(mem.status()["warnings"])
    finally:
        server.close()


def test_a_hard_link_cannot_smuggle_an_outside_file_in(
    workspace: Path, tmp_path: Path, make_memory: Callable[..., Memory]
) -> None:
    outside = write(tmp_path / "outside" / "secrets.md", "OUTSIDE SECRET: the vault combination\n")
    os.link(outside, workspace / "memory" / "2026-03-09.md")
    write(workspace / "MEMORY.md", "# Memory\n\nnothing secret here\n")
    mem = make_memory()
    got = mem.get("memory/2026-03-09.md")
    assert got["text"] == "" and "hard-linked (2 links)" in got["error"] and "OUTSIDE SECRET" not in str(got)
    mem.sync()
    assert set(mem.store.files()) == {"MEMORY.md"}
    assert mem.search("vault combination")["results"] == []
    warnings = "\n".join(mem.status()["warnings"])
    assert "memory/2026-03-09.md is hard-linked (2 links): not indexed; replace it with a regular file" in warnings
    agent = agent_config(tmp_path, workspace, userTimezone="UTC")
    with pytest.raises(SpecialFileError, match="hard-linked"):
        remember(agent, "appended to the outside file?", at=NOON)
    assert outside.read_text() == "OUTSIDE SECRET: the vault combination\n"
    ctx = session_context(agent, "main", today="2026-03-09")
    assert "OUTSIDE SECRET" not in ctx["text"] and ctx["skipped"][0]["path"] == "memory/2026-03-09.md"


def test_a_file_that_was_indexed_and_became_a_hard_link_is_dropped(
    workspace: Path, tmp_path: Path, make_memory: Callable[..., Memory]
) -> None:
    note = write(workspace / "memory" / "a.md", "the pelican note")
    mem = make_memory()
    mem.sync()
    os.link(note, tmp_path / "second-name.md")
    assert mem.sync()["removed"] == 1 and mem.store.files() == {}


def test_memory_get_reads_at_most_max_file_bytes(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    lines = [f"line {i:04d} " + "x" * 40 for i in range(1, 201)]  # 51 bytes a line
    write(workspace / "memory" / "big.md", "\n".join(lines) + "\n")
    mem = make_memory({"maxFileBytes": 1000})
    got = mem.get("memory/big.md")
    assert got["truncated"] is True and got["text"] == "\n".join(lines[:19]) + "\n"
    assert "memory/big.md is 10200 bytes; memory_get read only its first 1000 bytes (maxFileBytes)" in got["note"]
    part = mem.get("memory/big.md", from_line=18, lines=5)
    assert part["text"] == "\n".join(lines[17:19]) + "\n" and part["truncated"] is True
    small = make_memory().get("memory/big.md")  # the default cap (5 MiB) reads it whole
    assert small == {"path": "memory/big.md", "text": "\n".join(lines) + "\n"}


def test_a_cut_never_splits_a_character(workspace: Path, make_memory: Callable[..., Memory]) -> None:
    write(workspace / "memory" / "one-line.md", "é" * 100)  # 200 bytes, no newline
    got = make_memory({"maxFileBytes": 51}).get("memory/one-line.md")
    assert got["text"] == "é" * 25 and got["truncated"] is True


def test_remember_refuses_oversized_notes(workspace: Path, tmp_path: Path) -> None:
    agent = agent_config(tmp_path, workspace)
    with pytest.raises(ConfigError, match=f"at most {MAX_NOTE_BYTES} bytes .*Fix"):
        remember(agent, "x" * (MAX_NOTE_BYTES + 1))
    assert list((workspace / "memory").iterdir()) == []
    assert remember(agent, "y" * MAX_NOTE_BYTES)["created"] is True


def test_remember_refuses_to_push_a_file_out_of_search(workspace: Path, tmp_path: Path) -> None:
    agent = agent_config(tmp_path, workspace, memorySearch={"provider": "hash", "maxFileBytes": 200})
    first = remember(agent, "a short note")
    path = workspace / first["path"]
    before = path.read_bytes()
    with pytest.raises(WorkspaceError, match="would grow to .* over maxFileBytes \\(200\\).*nothing was written"):
        remember(agent, "z" * 300)
    assert path.read_bytes() == before
    with pytest.raises(WorkspaceError, match="over maxFileBytes"):
        remember(agent, "z" * 300, long_term=True)
    assert not (workspace / "MEMORY.md").exists()  # the file it would have created is not left behind


def test_scan_reports_special_files_in_extra_paths(workspace: Path) -> None:
    (workspace / "docs").mkdir()
    os.mkfifo(workspace / "docs" / "pipe.md")
    os.mkfifo(workspace / "MEMORY.md")
    scan = Workspace(workspace, ["docs"]).scan()
    assert scan.files == []
    assert [(s.rel, s.kind) for s in scan.special] == [
        ("MEMORY.md", "a FIFO (named pipe)"),
        ("docs/pipe.md", "a FIFO (named pipe)"),
    ]
