"""The daemon socket, both ends' shared half: where it is, what a config is, and how a message is framed.

``mdmem watch`` and ``mdmem serve`` answer the command line's ``search``, ``get`` and ``pack`` over a
Unix socket (mdmem.runtime.ipc_server); the command line asks it first (mdmem.cli.entry) and runs the command
itself when no daemon answers. This module is all the client imports of ours, so it uses the standard
library only (no config dataclasses, no numpy); where the config file is comes from mdmem.config.paths,
as for mdmem.config.load.

- **Socket**: ``<index>.sock`` beside each served agent's index, mode 0600 (connecting needs write access
  to it, so only its owner can). One socket per agent.
- **Rendezvous**: the client knows its config file and ``--agent``, not the index path (that takes loading
  the config), so the daemon also links ``<home>/run/<key>.sock`` (a 0700 folder) to each socket, the key a
  hash of the config file's path and the agent id; the default agent gets a second link for "no --agent".
- **Fingerprint**: a hash of everything the resolved config depends on: the config file's absolute path
  and bytes, and the environment variables that change a resolution. The daemon pins the one it loaded;
  a client whose fingerprint differs (the file was edited, another ``MDMEMORY_WORKSPACE``...) is refused
  and runs the command itself, so it never gets an answer for another config.
- **Frame**: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.
- **Exchange**: the client sends one request. The daemon answers a request it takes with
  ``{"accepted": SECONDS}`` at once (before it runs the command) and then the reply within SECONDS; one
  it refuses gets ``{"refused": REASON}`` as its only frame. So the client waits briefly for a live
  daemon's acceptance (a stopped daemon or a silent peer gives none) and then no longer than the
  search budget the daemon declared (mdmem.cli.entry).
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mdmem.config.paths import absolute

if TYPE_CHECKING:
    import socket

PROTOCOL = 2
MAX_REQUEST_BYTES = 256 * 1024  # an argv: a query and a few options
MAX_REPLY_BYTES = 256 * 1024 * 1024  # a `get` of a large file or a big pack, as JSON
DISABLE_ENV = "MDMEMORY_DAEMON"  # "off": the command line never asks a daemon
# What load_config reads from the environment besides the file (mdmem.config.load, mdmem.providers).
FINGERPRINT_ENV = (
    "MDMEMORY_HOME",
    "MDMEMORY_WORKSPACE",
    "MDMEMORY_PG_URL",
    "MDMEMORY_REMOTE_AGENTS",
    "HOME",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "TZ",
)
_PATH_ENV = ("MDMEMORY_HOME", "MDMEMORY_WORKSPACE")  # relative values resolve against the cwd
_HEADER = struct.Struct(">I")
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path, less its NUL


class ProtocolError(Exception):
    """A frame that is too large, truncated or not a JSON object."""


class Closed(ProtocolError):
    """The other end closed the connection before a whole frame came (it died, or refused by closing)."""


class Refused(Exception):
    """A request the daemon leaves to the client (which then runs the command itself); the reason goes back."""


def fingerprint(source: str | None, env: Mapping[str, str]) -> str | None:
    """What a config resolves from, hashed (see the module docstring); None when the file cannot be read."""
    import hashlib  # here: a command with no daemon to ask never needs it (OpenSSL's load is 2 ms)

    digest = None
    if source is not None:
        try:
            with open(source, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            return None
    values = {k: env.get(k) for k in FINGERPRINT_ENV}
    for key in _PATH_ENV:
        if values[key]:
            values[key] = absolute(str(values[key]), os.getcwd(), env)
    text = json.dumps({"config": source, "sha256": digest, "env": values}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


# -- addresses ---------------------------------------------------------------------------------------------
def run_dir(home: str) -> str:
    return os.path.join(home, "run")


def rendezvous(home: str, source: str | None, agent: str | None) -> str:
    """The link a client with this config file and ``--agent`` (None: the default agent) connects to."""
    import hashlib

    key = hashlib.sha256(f"{source or ''}\0{agent or ''}".encode()).hexdigest()[:20]
    return os.path.join(run_dir(home), f"{key}.sock")


def socket_path(store_path: str | os.PathLike[str]) -> str:
    """The socket beside an agent's index."""
    return f"{os.fspath(store_path)}.sock"


def short_address(path: str) -> tuple[str, int | None]:
    """An address ``connect``/``bind`` accept for ``path``, and a folder descriptor to close afterwards.

    ``sun_path`` holds 107 bytes; a longer path is reached through ``/proc/self/fd/N/`` of its folder."""
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        return path, None
    folder, name = os.path.split(path)
    fd = os.open(folder, getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY)  # /proc exists on Linux only
    return f"/proc/self/fd/{fd}/{name}", fd


def on_path(call: Callable[[str], object], path: str) -> None:
    """``call(address)`` (a socket's ``connect`` or ``bind``) with an address for ``path`` that fits
    ``sun_path`` (``short_address``), the folder descriptor closed afterwards."""
    address, fd = short_address(path)
    try:
        call(address)
    finally:
        if fd is not None:
            os.close(fd)


def peer_uid(sock: socket.socket) -> int | None:
    """The user id of the process at the other end (Linux ``SO_PEERCRED``; None where there is none)."""
    return peer(sock)[1]


def peer(sock: socket.socket) -> tuple[int | None, int | None]:
    """``(pid, uid)`` of the process at the other end (Linux ``SO_PEERCRED``; Nones where there is none)."""
    import socket  # loaded by the caller already: here so that importing this module does not load it

    if not hasattr(socket, "SO_PEERCRED"):
        return None, None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return int(pid), int(uid)


# -- frames ------------------------------------------------------------------------------------------------
def send(sock: socket.socket, message: Mapping[str, Any]) -> None:
    """Send one frame; ProtocolError (nothing sent) when ``message`` holds text that is not UTF-8 (a lone
    surrogate: a command-line argument or a file name in another encoding)."""
    try:
        data = json.dumps(message, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        raise ProtocolError(f"text that is not UTF-8: {exc.reason}") from None
    sock.sendall(_HEADER.pack(len(data)) + data)


def receive(sock: socket.socket, limit: int, deadline: float | None = None) -> dict[str, Any]:
    """One framed JSON object; ProtocolError when it is over ``limit`` bytes, cut short (``Closed``) or not
    a JSON object (garbage, too deeply nested, an integer too long to convert...). With a ``deadline``
    (``time.monotonic()``), TimeoutError when the whole frame has not come by then, however the peer
    trickles it; without one, the socket's own timeout applies to each read."""
    size = _HEADER.unpack(_read(sock, _HEADER.size, deadline))[0]
    if size > limit:
        raise ProtocolError(f"a message of {size} bytes is over the limit of {limit}")
    data = _read(sock, size, deadline)
    try:
        message = json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ProtocolError(f"not JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(message, dict):
        raise ProtocolError("not a JSON object")
    return message


def _read(sock: socket.socket, size: int, deadline: float | None) -> bytes:
    chunks, left = [], size
    while left:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no whole message in time ({size - left} of {size} bytes came)")
            sock.settimeout(remaining)
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise Closed(f"the connection closed {left} bytes short")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
