"""The ``mdmemory`` command: a running daemon answers ``search``, ``get`` and ``pack``; the rest runs here.

When ``mdmemory watch`` or ``mdmemory serve`` runs for the agent, the command sends its argv over the
agent's socket (mdmemory.ipc) and prints the reply: what the command prints in-process, from a process
that has the model loaded and the index open. Nothing listening (no daemon, or one that was killed and
left its socket), a refusal (another config, another agent, arguments it leaves to the command line) or a
daemon that dies mid-request: the command runs in this process (mdmemory.cli), at once. So does every
other command, and every command when ``MDMEMORY_DAEMON=off``.

Until it knows the daemon answers, this module imports only the standard library and mdmemory.ipc.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from mdmemory import configpath, ipc

COMMANDS = ("search", "get", "pack")
CONNECT_SECONDS = 1.0  # a live daemon accepts at once; a stale socket refuses at once
REPLY_SECONDS = 120.0  # a search may catch up with changed files or load the model first


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    reply = ask_daemon(args, os.environ)
    if reply is None:
        from mdmemory.cli import main as run_here

        return run_here(args)
    return write(reply["code"], reply["stdout"], reply["stderr"])


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


def ask_daemon(argv: Sequence[str], env: Mapping[str, str]) -> dict[str, Any] | None:
    """The daemon's reply ``{code, stdout, stderr}``, or None: run the command in this process."""
    if env.get(ipc.DISABLE_ENV, "").lower() in ("off", "0", "no", "false"):
        return None
    scanned = scan(argv)
    if scanned is None:
        return None
    config_arg, agent_arg = scanned
    home = configpath.home_dir(env)
    if not os.path.isdir(ipc.run_dir(home)):
        return None  # no daemon ever ran with this home
    source, _ = configpath.config_file(config_arg, env, home)
    link = ipc.rendezvous(home, source, agent_arg)
    if not os.path.islink(link):
        return None  # no daemon serves this config and agent (and the socket module is not even loaded)
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_SECONDS)
        ipc.on_path(sock.connect, link)
        if not _ours(sock, home):
            return None  # someone else's socket: never trust its answers
        fingerprint = ipc.fingerprint(source, env)
        if fingerprint is None:
            return None
        sock.settimeout(REPLY_SECONDS)
        request = {"v": ipc.PROTOCOL, "argv": list(argv), "config": config_arg, "agent": agent_arg}
        ipc.send(sock, {**request, "fingerprint": fingerprint})
        reply = ipc.receive(sock, ipc.MAX_REPLY_BYTES)
    except (OSError, ipc.ProtocolError):
        return None  # nothing listening, killed mid-request, too slow: this process answers
    finally:
        sock.close()
    if not (
        isinstance(reply.get("code"), int)
        and isinstance(reply.get("stdout"), str)
        and isinstance(reply.get("stderr"), str)
    ):
        return None  # a refusal
    return reply


def _ours(sock: Any, home: str) -> bool:
    """Whether the daemon runs as this user: its credentials, else (no ``SO_PEERCRED``) a 0700 run folder."""
    uid = ipc.peer_uid(sock)
    if uid is not None:
        return uid == os.getuid()
    info = os.stat(ipc.run_dir(home))
    return info.st_uid == os.getuid() and not info.st_mode & 0o077


def write(code: int, out: str, err: str) -> int:
    """Print a command's output (the daemon's or this process's) and return its exit code."""
    try:
        if out:
            sys.stdout.write(out)
            sys.stdout.flush()
    except BrokenPipeError:  # `mdmemory ... | head`: the reader left; that is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if err:
        sys.stderr.write(err)
        sys.stderr.flush()
    return code
