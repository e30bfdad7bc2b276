"""The ``mdmem`` command: a running daemon answers ``search``, ``get`` and ``pack``; the rest runs here.

When ``mdmem watch`` or ``mdmem serve`` runs for the agent, the command sends its argv over the
agent's socket (mdmem.runtime.ipc_protocol) and prints the reply: what the command prints in-process, from a process
that has the model loaded and the index open. Nothing listening (no daemon, or one that was killed and
left its socket), a refusal (another config, another agent, arguments it leaves to the command line) or a
daemon that dies mid-request: the command runs in this process (mdmem.cli.commands), at once. So does every
other command, and every command when ``MDMEMORY_DAEMON=off``.

The waits are bounded: connecting and being accepted take at most ``CONNECT_SECONDS`` (a stopped daemon
or a peer that never answers is given up then), and the reply must come within the search budget the
daemon declares on accepting (the agent's ``query.embedTimeoutMs`` and its margin, mdmem.runtime.ipc_server).
A daemon too slow, or a reply that is not a well-formed one (garbage, cut short, wrong types, text that
cannot be printed), makes the command run here too, after a one-line note on stderr.

Until it knows the daemon answers, this module imports only the standard library and mdmem.runtime.ipc_protocol.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from mdmem.cli.output import write
from mdmem.config import paths as configpath
from mdmem.runtime import ipc_protocol as ipc

COMMANDS = ("search", "get", "pack")
CONNECT_SECONDS = 1.0  # to connect and be accepted: a live daemon does both at once, a stale socket refuses
MAX_REPLY_SECONDS = 610.0  # the longest a daemon may say it takes (query.embedTimeoutMs is at most 600 s)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    asked = ask(args, os.environ)
    if asked.reply is None:
        if asked.note:
            write(0, "", f"mdmem: {asked.note}\n")
        from mdmem.cli.commands import main as run_here

        return run_here(args)
    return write(asked.reply["code"], asked.reply["stdout"], asked.reply["stderr"])


def scan(argv: Sequence[str]) -> tuple[str | None, str | None] | None:
    """``(--config, --agent)`` of a ``search``/``get``/``pack`` command line as argparse would read them
    (the command's own options win over those before it); None for any other command line.

    The daemon parses the argv again with the real parser and refuses it if this reading was wrong."""
    command: str | None = None
    found: dict[tuple[bool, str], str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if name in ("--config", "--agent"):
            if not eq:
                if i + 1 >= len(argv):
                    return None
                i += 1
                value = argv[i]
            found[(command is not None, name)] = value
        elif command is None:
            if arg != "--json" and (arg.startswith("-") or arg not in COMMANDS):
                return None
            command = None if arg == "--json" else arg
        i += 1
    if command is None:
        return None
    config = found.get((True, "--config"), found.get((False, "--config")))
    agent = found.get((True, "--agent"), found.get((False, "--agent")))
    return config, agent


class Asked(NamedTuple):
    """What asking the daemon gave: its ``reply`` ``{code, stdout, stderr}``, or None (run the command in
    this process) with a ``note`` for the user when the daemon failed them (too slow, a malformed reply)."""

    reply: dict[str, Any] | None
    note: str | None = None


def ask_daemon(argv: Sequence[str], env: Mapping[str, str]) -> dict[str, Any] | None:
    """The daemon's reply ``{code, stdout, stderr}``, or None: run the command in this process."""
    return ask(argv, env).reply


def ask(argv: Sequence[str], env: Mapping[str, str]) -> Asked:
    """Ask the daemon serving this config and agent to run ``argv`` (see the module docstring)."""
    if env.get(ipc.DISABLE_ENV, "").lower() in ("off", "0", "no", "false"):
        return Asked(None)
    scanned = scan(argv)
    if scanned is None or not all(_utf8(arg) for arg in argv):
        return Asked(None)  # (an argument in another encoding cannot be sent: this process reads it)
    config_arg, agent_arg = scanned
    home = configpath.home_dir(env)
    if not os.path.isdir(ipc.run_dir(home)):
        return Asked(None)  # no daemon ever ran with this home
    source, _ = configpath.config_file(config_arg, env, home)
    link = ipc.rendezvous(home, source, agent_arg)
    if not os.path.islink(link):
        return Asked(None)  # no daemon serves this config and agent (and the socket module is not even loaded)
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    pid: int | None = None
    waited = CONNECT_SECONDS
    try:
        start = time.monotonic()
        sock.settimeout(CONNECT_SECONDS)
        ipc.on_path(sock.connect, link)
        pid, uid = ipc.peer(sock)
        if not _ours(sock, uid, home):
            return Asked(None)  # someone else's socket: never trust its answers
        fingerprint = ipc.fingerprint(source, env)
        if fingerprint is None:
            return Asked(None)
        request = {"v": ipc.PROTOCOL, "argv": list(argv), "config": config_arg, "agent": agent_arg}
        ipc.send(sock, {**request, "fingerprint": fingerprint})
        reply = ipc.receive(sock, ipc.MAX_REPLY_BYTES, start + CONNECT_SECONDS)
        if "accepted" in reply:
            waited = _budget(reply["accepted"])
            reply = ipc.receive(sock, ipc.MAX_REPLY_BYTES, time.monotonic() + waited)
    except TimeoutError:  # stopped (SIGSTOP), hung, or a peer that never answers
        return Asked(None, f"{_daemon(pid)} did not answer within {waited:g} s; answering in this process")
    except ipc.Closed:
        return Asked(None)  # killed mid-request, or busy (it closes what it cannot serve): this process answers
    except ipc.ProtocolError as exc:
        return Asked(None, f"{_daemon(pid)} sent a malformed reply ({exc}); answering in this process")
    except OSError:
        return Asked(None)  # nothing listening (a stale socket): this process answers
    finally:
        sock.close()
    if "refused" in reply:
        return Asked(None)  # another config, another agent, arguments the command line reports itself
    if not _well_formed(reply):
        return Asked(None, f"{_daemon(pid)} sent a malformed reply; answering in this process")
    return Asked(reply)


def _budget(value: object) -> float:
    """The seconds an accepting daemon says it answers within (its agent's search budget), checked."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_REPLY_SECONDS:
        raise ipc.ProtocolError(f"an acceptance of {str(value)[:40]!r} seconds")
    return float(value)


def _well_formed(reply: Mapping[str, Any]) -> bool:
    """A reply the command line can print: an exit code 0-255 and text that encodes as UTF-8."""
    code, out, err = reply.get("code"), reply.get("stdout"), reply.get("stderr")
    if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
        return False
    if not (isinstance(out, str) and isinstance(err, str)):
        return False
    return _utf8(out) and _utf8(err)  # a lone surrogate would fail when printed


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _daemon(pid: int | None) -> str:
    return "the mdmem daemon" + (f" (pid {pid})" if pid else "")


def _ours(sock: Any, uid: int | None, home: str) -> bool:
    """Whether the daemon runs as this user: its credentials, else (no ``SO_PEERCRED``) a 0700 run folder."""
    if uid is not None:
        return uid == os.getuid()
    info = os.stat(ipc.run_dir(home))
    return info.st_uid == os.getuid() and not info.st_mode & 0o077
