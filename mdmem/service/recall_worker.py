"""A recall worker process: answers ``/recall`` bodies for the service over one socket, one at a time.

Started by mdmem.service.recallpool with one end of a socket pair (``python -m
mdmem.service.recall_worker FD``). The first frame is the pickled ``Config`` of the service; the worker
then opens every agent the service opened at its start (mdmem.service.startup) and answers one query for
each (model, index, vectors in memory: nothing is left for a first recall to load), and only then says it
is ready. Every later frame is a request: a JSON header line ``{"agent", "embedMs"?}`` + the request body
exactly as the proxy sent it (the service has already checked the token, the agent id and the metadata, and
caught the agent's index up with its files); ``embedMs`` is how long the query embedding may still take
(mdmem.service.timebox; past it the search answers from keywords). The reply frame is a JSON header line,
``{"status", "blocks"?, "size"?, "mode"?, "error"?}``, then the response body.

A worker only reads: it opens a read-only ``Memory`` per agent (no catching up, no writes; the service's own
process keeps every index in step with the files), with its own copy of the embedding model and of the
vectors in memory, so recalls of both cores run side by side instead of taking turns on one GIL. It exits
when the service goes away (end of file on its socket), SIGINT is the service's to handle.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import struct
import sys
import time
from collections import OrderedDict
from typing import Any

from mdmem.engine.provider_choice import SharedProviders

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024  # a request body is bounded by service.maxBodyBytes (at most 1 GiB; 2 MiB default)


class Closed(Exception):
    """The other end closed the socket."""


def read_frame(sock: socket.socket) -> bytes:
    size = HEADER.unpack(_read(sock, HEADER.size))[0]
    if size > MAX_FRAME:
        raise Closed(f"a frame of {size} bytes is over {MAX_FRAME}")
    return _read(sock, size)


def write_frame(sock: socket.socket, data: bytes) -> None:
    sock.sendall(HEADER.pack(len(data)) + data)


def _read(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            raise Closed("end of file")
        buf += chunk
    return bytes(buf)


def reply(status: int, payload: bytes = b"", **header: Any) -> bytes:
    return json.dumps({"status": status, **header}).encode() + b"\n" + payload


class WorkerAgents:
    """The read-only ``Memory`` of each agent this worker has answered for, opened on first use; at most
    ``service.maxOpenAgents`` at once (the service sets it to its own cap), the least recently used closed."""

    def __init__(self, config: Any) -> None:
        from mdmem.service.agents import DEFAULT_MAX_OPEN, Agents

        self.config = config
        self._configs = Agents(config)  # only for config_of: the agent's resolved settings, never opened here
        self._open: OrderedDict[str, Any] = OrderedDict()
        self.providers = SharedProviders()  # agents with the same provider settings share one
        self.max_open = config.service.max_open_agents or DEFAULT_MAX_OPEN

    def warm(self, ids: list[str]) -> None:
        """Open the agents the service opened at its start and answer one recall for each (errors are the
        service's to report: it opened them first)."""
        from mdmem.service.recall import recall, warm_body

        for agent_id in ids[: self.max_open]:
            try:
                recall(self.memory(agent_id), warm_body(agent_id))
            except Exception:  # noqa: BLE001, S112 - a real recall for it reports the problem
                continue

    def memory(self, agent_id: str) -> Any:
        from mdmem.config.load import with_sessions
        from mdmem.memory import Memory

        mem = self._open.get(agent_id)
        if mem is not None:
            self._open.move_to_end(agent_id)
            return mem
        while len(self._open) >= self.max_open:
            self._close(self._open.popitem(last=False)[1])
        agent = with_sessions(self._configs.config_of(agent_id))
        mem = Memory(agent, self.config, choice=self.providers.for_agent(agent))
        mem.catches_up = False  # the service's process keeps the index in step with the files
        self.providers.remember(agent, mem.choice)
        self._open[agent_id] = mem
        return mem

    def _close(self, mem: Any) -> None:
        mem.close(provider=not self.providers.owns(mem.current_choice))

    def close(self) -> None:
        for mem in self._open.values():
            self._close(mem)
        self._open.clear()
        self.providers.close()


def answer(agents: WorkerAgents, frame: bytes) -> bytes:
    """One request frame in, one reply frame out; errors become their HTTP status, as the service maps them."""
    from mdmem.providers import deadline
    from mdmem.service.agents import UnknownAgent
    from mdmem.service.recall import recall_answer, recall_info
    from mdmem.util.errors import InvalidArgumentError, MdMemoryError

    line, _, body = frame.partition(b"\n")
    try:
        head = json.loads(line)
        embed_ms = head.get("embedMs")
        until = None if embed_ms is None else time.monotonic() + float(embed_ms) / 1000
        with deadline.until(until):
            result, mode = recall_answer(agents.memory(str(head["agent"])), json.loads(body))
        payload = json.dumps(result, ensure_ascii=False).encode("utf-8")
        return reply(200, payload, mode=mode, **recall_info(result))
    except InvalidArgumentError as exc:
        return reply(400, error=str(exc))
    except UnknownAgent as exc:
        return reply(404, error=str(exc))
    except MdMemoryError as exc:
        return reply(503, error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # a bug: the service answers 500; its log gets where, never the message
        from mdmem.service.telemetry import Telemetry

        Telemetry(sys.stderr).failure("recall", exc)
        return reply(500, error=f"internal error ({type(exc).__name__}); see the service log")


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C reaches the whole group: the service drains
    sock = socket.socket(fileno=int(argv[0]))
    try:
        config, warm = pickle.loads(read_frame(sock))
        agents = WorkerAgents(config)
        agents.warm(warm)
        write_frame(sock, reply(200, str(os.getpid()).encode()))  # ready
        try:
            while True:
                write_frame(sock, answer(agents, read_frame(sock)))
        finally:
            agents.close()
    except (Closed, OSError):
        return 0  # the service went away
    finally:
        sock.close()


if __name__ == "__main__":
    from mdmem.util.threads import single_threaded_blas

    single_threaded_blas()
    sys.exit(main(sys.argv[1:]))
