"""uvicorn's httptools protocol with the bounds a service reachable by anyone needs.

uvicorn buffers a request's line and headers without limit (an endless header line grows to gigabytes),
waits for them and for a body forever (a connection that sends half a request holds its file descriptor
for good), and accepts connections until the file-descriptor limit, after which every open and accept
fails. Here, per connection:

- the line and headers of a request may take ``max_header_bytes`` (431 past that) and must arrive within
  ``header_seconds`` of the connection opening or of the request's first byte (408, or just closed when
  nothing was sent); the body must follow within ``body_seconds`` (else the connection is closed);
- between requests uvicorn's keep-alive timeout closes an idle connection;
- at most ``Connections.cap`` connections are open: one more is answered 503 and closed at once, so the
  file descriptors the agents' indexes need are never taken by clients (mdmem.service.budget).
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

_IDLE, _HEAD, _BODY = 0, 1, 2  # no request begun (or the last one fully read); reading a head; reading a body
_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large", 503: "Service Unavailable"}


@dataclass(frozen=True)
class Limits:
    max_header_bytes: int
    header_seconds: float
    body_seconds: float


class Connections:
    """The open HTTP connections, shared by every connection's protocol (on the event loop) and ``/healthz``."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.open = 0
        self.refused = 0  # since start: connections answered 503 because ``cap`` were open
        self._lock = threading.Lock()

    def admit(self) -> bool:
        with self._lock:
            if self.open >= self.cap:
                self.refused += 1
                return False
            self.open += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.open -= 1


def raw_response(status: int, message: str) -> bytes:
    """A complete ``Connection: close`` response with a JSON error body, written before any app ran."""
    body = json.dumps({"error": message}).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class GuardedHttpTools(HttpToolsProtocol):
    """One connection (see the module docstring). Built by uvicorn with ``functools.partial`` binding
    ``limits`` and ``connections``."""

    def __init__(self, *args: Any, limits: Limits, connections: Connections, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.counter = connections
        self._admitted = False
        self._phase = _IDLE
        self._head_bytes = 0
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.counter.admit():
            self._refuse(503, f"{self.counter.cap} connections are open (service.maxConnections); retry shortly")
            return
        self._admitted = True
        self._arm(self.limits.header_seconds, self._head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._admitted:
            self._admitted = False
            self.counter.leave()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._phase != _BODY:
            self._head_bytes += len(data)
            if self._timer is None:
                self._arm(self.limits.header_seconds, self._head_timeout)
        super().data_received(data)
        if self._phase != _BODY and self._head_bytes > self.limits.max_header_bytes and not self._closing():
            self._refuse(431, f"request line and headers over {self.limits.max_header_bytes} bytes")

    # httptools callbacks (within data_received)
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._phase = _HEAD

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._phase = _BODY
        self._head_bytes = 0
        self._disarm()
        self._arm(self.limits.body_seconds, self._body_timeout)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._phase = _IDLE
        self._disarm()

    # timers
    def _head_timeout(self) -> None:
        self._timer = None
        if self._head_bytes:
            self._refuse(408, f"request line and headers not received within {self.limits.header_seconds:g} s")
        elif not self._closing():
            self.transport.close()

    def _body_timeout(self) -> None:
        self._timer = None
        if not self._closing():
            self.transport.close()  # the route reading the body sees the client gone

    def _arm(self, seconds: float, callback: Any) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` and close; only the close when a response is under way (pipelined requests)."""
        if self._closing():
            return
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(raw_response(status, message))
        self._disarm()
        self.transport.close()
