"""The daemon's side of the command-line socket (protocol and addresses: mdmem.runtime.ipc_protocol).

``mdmem watch`` and ``mdmem serve`` start an ``IpcServer`` for the agents they serve. For each agent
it binds ``<index>.sock`` (0600) and links it from the rendezvous folder; one thread accepts on every
socket and each connection gets a thread of its own (at most ``MAX_CONNECTIONS``; beyond that a connection
is closed and that client runs the command itself). A request is the client's argv: it is parsed and run by
the command line the server is given (``CommandLine``: mdmem.cli.commands.SocketCommands, injected by
``mdmem watch`` and ``mdmem serve``, so this module never imports the command line) on a ``Memory`` the
server keeps open for the agent, so the reply (stdout, stderr, exit code) is what the command would have
printed in-process.
A request it takes is acknowledged at once with the seconds it will answer within (``reply_seconds``:
the agent's search budget and a margin); the client gives up after them, so a request still waiting
for the agent (one request runs per agent at a time) when they are over is dropped, not run.

The server refuses (the client then runs the command itself) a request for another config (its
fingerprint differs from the one pinned at start), another agent, a command other than ``search``, ``get``
and ``pack``, arguments its parser rejects (the client prints argparse's own message), and anything
malformed or over ``ipc.MAX_REQUEST_BYTES``. Nothing a client sends stops the server; an unexpected error
is logged as an event and refused. ``stop()`` closes the sockets, removes the files it made and joins
every thread.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import selectors
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from mdmem.config import paths as configpath
from mdmem.config.load import AgentConfig, Config, load_config
from mdmem.engine import catchup
from mdmem.memory import Memory
from mdmem.runtime import ipc_protocol as ipc
from mdmem.util.errors import ConfigError

if TYPE_CHECKING:
    from mdmem.providers.factory import ProviderChoice

COMMANDS = ("search", "get", "pack")
MAX_CONNECTIONS = 8
REQUEST_SECONDS = 5.0  # a client has this long to send its whole request
REPLY_SECONDS = 30.0  # and to take the reply
MARGIN_SECONDS = 1.0  # beyond the search budget and the text catch-up: the query, the pack, the reply
ACCEPT_POLL_SECONDS = 0.2  # how often the accept loop looks at the stop flag
Emit = Callable[[dict[str, Any]], None]
SharedChoice = Callable[[str], "ProviderChoice | None"]


class CommandLine(Protocol):
    """The command line as this server runs it: ``parse`` raises ``ipc_protocol.Refused`` for arguments the
    client's own command line should report; ``execute`` runs a parsed command on the ``Memory`` that
    ``memory()`` enters and returns (exit code, stdout, stderr)."""

    def parse(self, argv: list[str]) -> argparse.Namespace: ...

    def execute(
        self, args: argparse.Namespace, memory: Callable[[], contextlib.AbstractContextManager[Memory]]
    ) -> tuple[int, str, str]: ...


_Refused = ipc.Refused


class _Late(Exception):
    """The request waited for its agent past the time the client was promised: the client has left."""


def reply_seconds(agent: AgentConfig) -> float:
    """How long a command may take here: the search budget (``query.embedTimeoutMs``), the text a search
    catches up on first (``catchup.SEARCH_BUDGET_SECONDS``) and a margin. The client waits no longer."""
    budget = agent.memory_search.query.embed_timeout_ms / 1000
    return budget + catchup.SEARCH_BUDGET_SECONDS + MARGIN_SECONDS


def load_pinned(path: str | None, env: Mapping[str, str] | None = None) -> tuple[Config, str | None]:
    """The config and the fingerprint of exactly what was loaded (None when the file kept changing)."""
    env = os.environ if env is None else env
    for _ in range(5):
        source, _ = configpath.config_file(path, env, configpath.home_dir(env))
        before = ipc.fingerprint(source, env)
        config = load_config(path, env)
        if before is not None and ipc.fingerprint(source, env) == before:
            return config, before
    return config, None


@dataclass
class _Served:
    """One agent: its listening socket, the links to it, and the ``Memory`` that answers."""

    agent: AgentConfig
    listener: socket.socket
    path: str
    inode: int
    links: list[str]
    lock: threading.Lock = field(default_factory=threading.Lock)
    memory: Memory | None = None
    owns_choice: bool = False  # the memory built its own provider (none was shared): close it at the end


class IpcServer:
    """Answers ``search``/``get``/``pack`` for ``agents`` of ``config`` (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        fingerprint: str,
        agents: Sequence[AgentConfig],
        emit: Emit,
        commands: CommandLine,
        shared_choice: SharedChoice | None = None,
    ) -> None:
        self.config = config
        self.fingerprint = fingerprint
        self.agents = list(agents)
        self.emit = emit
        self.shared_choice = shared_choice or (lambda _agent_id: None)
        self._served: list[_Served] = []
        self._stop = threading.Event()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._threads: set[threading.Thread] = set()
        self._threads_lock = threading.Lock()
        self._other_configs: set[str] = set()  # fingerprints already reported (see _report_other_config)
        self.commands = commands
        self._accepter: threading.Thread | None = None
        self._stopped = False

    # -- life ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Bind every agent's socket (an agent whose socket cannot be made is logged and left to the CLI)."""
        for agent in self.agents:
            try:
                served = self._bind(agent)
            except OSError as exc:
                self.emit({"event": "error", "agent": agent.id, "error": f"command-line socket: {exc}"})
                continue
            if served is not None:
                self._served.append(served)
                self.emit({"event": "socket", "agent": agent.id, "path": served.path})
        if self._served:
            self._accepter = threading.Thread(target=self._accept_loop, name="mdmemory-ipc", daemon=True)
            self._accepter.start()

    def stop(self) -> None:
        """Close the sockets, remove the files this server made, join its threads, close its memories."""
        if self._stopped:
            return
        self._stopped = True
        self._stop.set()
        if self._accepter is not None:
            self._accepter.join()
        with self._threads_lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(REPLY_SECONDS)
        for served in self._served:
            served.listener.close()
            for link in served.links:
                with contextlib.suppress(OSError):
                    if os.readlink(link) == served.path:
                        os.unlink(link)
            with contextlib.suppress(OSError):
                if os.lstat(served.path).st_ino == served.inode:
                    os.unlink(served.path)
            with served.lock:
                self._close_memory(served)

    def socket_of(self, agent_id: str) -> str | None:
        """The socket this server answers ``agent_id`` on, if it does."""
        return next((s.path for s in self._served if s.agent.id == agent_id), None)

    # -- sockets -------------------------------------------------------------------------------------------
    def _bind(self, agent: AgentConfig) -> _Served | None:
        path = ipc.socket_path(agent.store_path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if _answers(path):
            self.emit(
                {
                    "event": "error",
                    "agent": agent.id,
                    "error": f"another daemon answers on {path}; this one leaves the command line to it",
                }
            )
            return None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a socket left by a daemon that was killed
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bound = False
        try:
            ipc.on_path(listener.bind, path)
            bound = True
            os.chmod(path, 0o600)  # before listen(): no connection is accepted until then
            listener.listen(16)
            listener.setblocking(False)
            inode = os.lstat(path).st_ino
            links = self._link(agent, path)
        except BaseException:
            listener.close()
            if bound:
                with contextlib.suppress(OSError):
                    os.unlink(path)  # bound but not served: no client may find it
            raise
        return _Served(agent, listener, path, inode, links)

    def _link(self, agent: AgentConfig, path: str) -> list[str]:
        """Link the rendezvous names of ``agent`` to its socket (atomically replacing stale links)."""
        home = str(self.config.home)
        folder = ipc.run_dir(home)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.stat(folder)
        if info.st_uid != os.getuid():
            raise OSError(f"{folder} belongs to another user; remove it (mdmem recreates it with mode 0700)")
        if stat.S_IMODE(info.st_mode) & 0o077:
            os.chmod(folder, 0o700)
        source = str(self.config.source) if self.config.source else None
        names = [agent.id] + ([None] if agent.id == self.config.agent().id else [])
        links = []
        for name in names:
            link = ipc.rendezvous(home, source, name)
            tmp = f"{link}.{os.getpid()}.tmp"
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            os.symlink(path, tmp)
            os.replace(tmp, link)
            links.append(link)
        return links

    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as selector:
            for served in self._served:
                selector.register(served.listener, selectors.EVENT_READ, served)
            while not self._stop.is_set():
                for key, _ in selector.select(ACCEPT_POLL_SECONDS):
                    served = key.data
                    try:
                        conn, _ = served.listener.accept()
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError as exc:
                        self.emit({"event": "error", "agent": served.agent.id, "error": f"command-line socket: {exc}"})
                        continue
                    self._dispatch(conn, served)

    def _dispatch(self, conn: socket.socket, served: _Served) -> None:
        if self._stop.is_set() or not self._slots.acquire(blocking=False):
            conn.close()  # busy or stopping: the client runs the command itself
            return
        thread = threading.Thread(target=self._handle, args=(conn, served), name="mdmemory-ipc-conn", daemon=True)
        with self._threads_lock:
            self._threads.add(thread)
        thread.start()

    def _handle(self, conn: socket.socket, served: _Served) -> None:
        try:
            with conn:
                conn.setblocking(True)
                conn.settimeout(REQUEST_SECONDS)
                if ipc.peer_uid(conn) not in (None, os.getuid()):  # None: no SO_PEERCRED; the 0600 socket guards
                    return
                try:
                    request = ipc.receive(conn, ipc.MAX_REQUEST_BYTES, time.monotonic() + REQUEST_SECONDS)
                    args = self._accept(request, served)
                except (ipc.ProtocolError, _Refused) as exc:
                    ipc.send(conn, {"refused": str(exc)})
                    return
                seconds = reply_seconds(served.agent)
                ipc.send(conn, {"accepted": seconds})
                reply = self._run(args, served, time.monotonic() + seconds)
                conn.settimeout(REPLY_SECONDS)
                try:
                    ipc.send(conn, reply)
                except ipc.ProtocolError as exc:  # output the client could not print either: it runs the command
                    ipc.send(conn, {"refused": f"the output cannot be sent: {exc}"})
        except (OSError, _Late):
            pass  # the client left (or was killed, or gave up): nothing to answer
        except Exception as exc:  # noqa: BLE001 - no request may stop the daemon; say what happened
            self.emit({"event": "error", "agent": served.agent.id, "error": f"command-line socket: {exc!r}"})
        finally:
            self._slots.release()
            with self._threads_lock:
                self._threads.discard(threading.current_thread())

    # -- answers -------------------------------------------------------------------------------------------
    def _accept(self, request: dict[str, Any], served: _Served) -> argparse.Namespace:
        """The parsed command of a request this server answers for ``served``; _Refused says why not."""
        if request.get("v") != ipc.PROTOCOL:
            raise _Refused(f"protocol version {request.get('v')!r}; this daemon speaks {ipc.PROTOCOL}")
        if request.get("fingerprint") != self.fingerprint:
            self._report_other_config(served, str(request.get("fingerprint")))
            raise _Refused("the configuration differs from the one this daemon loaded (restart it to serve it)")
        argv = request.get("argv")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise _Refused("argv must be a list of strings")
        args = self.commands.parse(argv)
        if args.command not in COMMANDS:
            raise _Refused(f"the daemon answers {', '.join(COMMANDS)}, not {args.command}")
        if args.config != request.get("config") or args.agent != request.get("agent"):
            raise _Refused("--config or --agent as parsed differ from what the client connected with")
        try:
            agent_id = self.config.agent(args.agent).id
        except ConfigError as exc:
            raise _Refused(str(exc)) from None
        if agent_id != served.agent.id:
            raise _Refused(f"this socket serves agent {served.agent.id!r}, not {agent_id!r}")
        return args

    def _run(self, args: argparse.Namespace, served: _Served, deadline: float) -> dict[str, Any]:
        """Run the command on the agent's memory, unless it is still waiting for it at ``deadline``."""
        code, out, err = self.commands.execute(args, lambda: self._memory(served, deadline))
        return {"code": code, "stdout": out, "stderr": err}

    def _report_other_config(self, served: _Served, fingerprint: str) -> None:
        """Log once per configuration that a command line asked with another one than this daemon's."""
        with self._threads_lock:
            if fingerprint in self._other_configs:
                return
            self._other_configs.add(fingerprint)
        reason = (
            "a command asked with another configuration than this daemon loaded (the config file or its "
            "environment changed) and ran in its own process; restart the daemon to serve it again"
        )
        self.emit({"event": "refused", "agent": served.agent.id, "reason": reason})

    @contextlib.contextmanager
    def _memory(self, served: _Served, deadline: float) -> Iterator[Memory]:
        """The agent's ``Memory``, one request at a time, on the provider the daemon already has loaded;
        _Late when the request would only get it after ``deadline``."""
        if not served.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise _Late
        try:
            mem = served.memory
            if mem is None:
                mem = served.memory = Memory(served.agent, self.config)
            shared = self.shared_choice(served.agent.id)
            if shared is not None and mem.current_choice is not shared:
                self._drop_own_choice(served)
                mem.engine.providers.adopt(shared)
            try:
                yield mem
            finally:
                served.owns_choice = mem.current_choice is not None and mem.current_choice is not shared
        finally:
            served.lock.release()

    def _drop_own_choice(self, served: _Served) -> None:
        mem = served.memory
        own = mem.current_choice if mem is not None and served.owns_choice else None
        if own is not None and own.provider is not None:
            own.provider.close()
        served.owns_choice = False

    def _close_memory(self, served: _Served) -> None:
        mem = served.memory
        if mem is None:
            return
        self._drop_own_choice(served)
        mem.close(provider=False)  # a shared provider belongs to the daemon, which closes it
        served.memory = None


def _answers(path: str) -> bool:
    """Whether a live process accepts on the socket ``path`` (a stale file refuses at once)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        ipc.on_path(probe.connect, path)
    except OSError:
        return False
    else:
        return True
    finally:
        probe.close()
