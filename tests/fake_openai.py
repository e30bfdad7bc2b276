"""A real OpenAI-compatible embeddings server on 127.0.0.1 for tests, with scriptable faults.

::

    with FakeOpenAIServer(dims=8) as server:
        server.enqueue(Fault.rate_limit(retry_after="2"), Fault.status(500))
        provider = OpenAIEmbeddingProvider(base_url=server.url, api_key="sk-test", dimensions=8)
        provider.embed_documents(["a", "b"])
        server.inputs()  # [["a", "b"], ["a", "b"], ["a", "b"]]: two faults, then success

Faults are consumed one per embeddings request, in order; with the queue empty the server applies the
outage fault if one is set (``server.outage(Fault.hang())`` until ``server.outage(None)``), else answers
normally. Besides HTTP errors and bad bodies it can hang, trickle bytes (headers included) and send huge
bodies, recording how many bytes each response really wrote (``RecordedRequest.sent``). Vectors are
deterministic (``fake_vector``), so tests can compare exact values. The server binds loopback only,
refuses non-loopback peers, and ``stop()`` wakes slow handlers and joins every thread.
Use ``FakeOpenAIServer`` as a context manager, or the ``fake_openai`` fixture (import it into a test
module or list ``"tests.fake_openai"`` in ``pytest_plugins``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import itertools
import json
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

EMBEDDING_PATHS = ("/v1/embeddings", "/embeddings")


def fake_vector(text: str, dims: int) -> list[float]:
    """Deterministic, not normalised vector for ``text``: sha256 stream mapped to [-1, 1)."""
    out: list[float] = []
    counter = 0
    while len(out) < dims:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        out.extend((b - 128) / 128 for b in digest)
        counter += 1
    return out[:dims]


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour, applied to the next embeddings request. Build with the classmethods."""

    kind: str
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    message: str = ""
    delay: float = 0.0
    dims: int | None = None
    count_delta: int = 0
    body: bytes = b""
    content_type: str = "application/json"
    size: int = 0
    declared: bool = True
    interval: float = 0.0

    @classmethod
    def status_error(
        cls, status: int, message: str = "", retry_after: str | None = None, kind: str = "status"
    ) -> Fault:
        """Answer ``status`` with an OpenAI-style error body (and ``Retry-After`` if given)."""
        headers = (("Retry-After", retry_after),) if retry_after is not None else ()
        return cls(kind, status=status, headers=headers, message=message or f"fake error {status}")

    @classmethod
    def rate_limit(cls, retry_after: str | None = "1", retry_after_ms: str | None = None) -> Fault:
        """429 with ``Retry-After`` (seconds or HTTP-date) and/or ``retry-after-ms``."""
        headers = []
        if retry_after is not None:
            headers.append(("Retry-After", retry_after))
        if retry_after_ms is not None:
            headers.append(("retry-after-ms", retry_after_ms))
        return cls("rate_limit", status=429, headers=tuple(headers), message="Rate limit reached")

    @classmethod
    def server_error(cls) -> Fault:
        return cls.status_error(500, "The server had an error while processing your request.")

    @classmethod
    def unavailable(cls, retry_after: str | None = None) -> Fault:
        return cls.status_error(503, "The engine is currently overloaded.", retry_after)

    @classmethod
    def unauthorized(cls) -> Fault:
        """401 whose message echoes the presented key in full (a worst-case server, to test redaction)."""
        return cls("unauthorized", status=401)

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """Wait ``seconds`` (woken early by ``stop()``) before answering normally."""
        return cls("slow", delay=seconds)

    @classmethod
    def hang(cls) -> Fault:
        """Read the request, then never answer (until ``stop()``)."""
        return cls("hang")

    @classmethod
    def trickle(cls, interval: float = 1.0, headers: bool = False) -> Fault:
        """Answer 200 one byte every ``interval`` seconds, forever: the body only, or from the status line on."""
        return cls("trickle_headers" if headers else "trickle", interval=interval)

    @classmethod
    def huge(cls, size: int, declared: bool = True, status: int = 200) -> Fault:
        """A ``status`` answer whose body is ``size`` bytes (a JSON prefix, then padding), with Content-Length
        when ``declared``, else ended by closing the connection. Written in 64 KiB pieces."""
        return cls("huge", status=status, size=size, declared=declared)

    @classmethod
    def malformed(cls, body: bytes = b'{"object": "list", "data": [{"index": 0, "embe') -> Fault:
        """200 ``application/json`` whose body is not valid JSON."""
        return cls("malformed", body=body)

    @classmethod
    def missing_data(cls) -> Fault:
        """200 with valid JSON but no ``data`` list."""
        return cls("missing_data", body=b'{"object": "list", "model": "x"}')

    @classmethod
    def html(cls) -> Fault:
        """200 ``text/html`` page, as when the base URL points at a website."""
        return cls("html", body=b"<!doctype html><html><body>Welcome</body></html>", content_type="text/html")

    @classmethod
    def wrong_dims(cls, dims: int) -> Fault:
        return cls("wrong_dims", dims=dims)

    @classmethod
    def fewer_vectors(cls, missing: int = 1) -> Fault:
        return cls("count", count_delta=-missing)

    @classmethod
    def extra_vectors(cls, extra: int = 1) -> Fault:
        return cls("count", count_delta=extra)

    @classmethod
    def reversed_order(cls) -> Fault:
        """Correct answer with ``data`` listed in reverse (``index`` fields still right)."""
        return cls("reversed")


@dataclass
class RecordedRequest:
    """One request the server saw. Header names are lower-case; ``body`` is the parsed JSON or None."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    fault: str | None = None
    sent: int = 0  # bytes of the response written before it ended or the client went away


@dataclass
class _State:
    dims: int
    api_key: str | None
    faults: deque[Fault] = field(default_factory=deque)
    outage: Fault | None = None
    requests: list[RecordedRequest] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        state = self.server.state
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        with state.lock:
            fault = None
            if self.path in EMBEDDING_PATHS:
                fault = state.faults.popleft() if state.faults else state.outage
            headers = {k.lower(): v for k, v in self.headers.items()}
            self.record = RecordedRequest("POST", self.path, headers, body, fault and fault.kind)
            state.requests.append(self.record)
        if self.path not in EMBEDDING_PATHS:
            return self._error(404, f"Invalid URL (POST {self.path})")
        presented = headers.get("authorization", "").removeprefix("Bearer ")
        rejected = state.api_key is not None and presented != state.api_key
        if rejected or (fault is not None and fault.kind == "unauthorized"):
            return self._error(401, f"Incorrect API key provided: {presented}.")
        if fault is not None and fault.kind in _STREAMING:
            return _STREAMING[fault.kind](self, fault)
        if fault is not None:
            if fault.status != 200:
                return self._error(fault.status, fault.message, fault.headers)
            if fault.body:
                return self._send(200, fault.body, fault.content_type)
            if fault.delay and state.stopping.wait(fault.delay):
                return None
        self._embeddings(body, fault)

    def _embeddings(self, body: Any, fault: Fault | None) -> None:
        if not isinstance(body, dict) or "input" not in body:
            return self._error(400, "'input' is a required property")
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dims = self.server.state.dims
        if isinstance(body.get("dimensions"), int):
            dims = body["dimensions"]
        if fault is not None and fault.dims is not None:
            dims = fault.dims
        texts = [str(t) for t in inputs]
        if fault is not None and fault.count_delta < 0:
            texts = texts[: len(texts) + fault.count_delta]
        elif fault is not None and fault.count_delta > 0:
            texts = texts + [f"extra-{i}" for i in range(fault.count_delta)]
        data = [
            {"object": "embedding", "index": i, "embedding": fake_vector(text, dims)} for i, text in enumerate(texts)
        ]
        if fault is not None and fault.kind == "reversed":
            data.reverse()
        tokens = sum(len(t) // 4 + 1 for t in texts)
        payload = {
            "object": "list",
            "data": data,
            "model": body.get("model", "unknown"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        self._send(200, json.dumps(payload).encode())

    def _error(self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        payload = {"error": {"message": message, "type": "fake_error", "param": None, "code": None}}
        self._send(status, json.dumps(payload).encode(), headers=headers)

    def _send(
        self,
        status: int,
        payload: bytes,
        content_type: str = "application/json",
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
            self.record.sent = len(payload)
        except OSError:  # the client gave up (timeout) and closed the socket
            pass

    # -- faults that take their time -----------------------------------------------------------------
    def _hang(self, fault: Fault) -> None:
        self.server.state.stopping.wait()

    def _trickle(self, fault: Fault) -> None:
        head = f"{self.protocol_version} 200 OK\r\nContent-Type: application/json\r\n"
        head += "Content-Length: 4096\r\n\r\n"  # under any size cap: only the clock can stop it
        if fault.kind == "trickle" and not self._write(head.encode()):
            return
        filler = b'{"object": "list", "data": [' + b" " * 64
        stream = itertools.chain(head.encode() if fault.kind == "trickle_headers" else b"", itertools.cycle(filler))
        while not self.server.state.stopping.wait(fault.interval):
            if not self._write(bytes([next(stream)])):
                return

    def _huge(self, fault: Fault) -> None:
        head = f"{self.protocol_version} {fault.status} Fake\r\nContent-Type: application/json\r\n"
        head += f"Content-Length: {fault.size}\r\n" if fault.declared else ""
        if not self._write((head + "Connection: close\r\n\r\n").encode()):
            return
        self.record.sent = 0
        prefix = b'{"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": ['
        piece = prefix + b"0.0, " * ((65536 - len(prefix)) // 5)
        left = fault.size
        while left > 0 and not self.server.state.stopping.is_set():
            chunk = piece[: min(left, len(piece))]
            if not self._write(chunk):
                return
            self.record.sent += len(chunk)
            left -= len(chunk)
            piece = b"0.0, " * (65536 // 5)

    def _write(self, data: bytes) -> bool:
        try:
            self.wfile.write(data)
            self.wfile.flush()
            return True
        except OSError:  # the client closed the connection: what it refused, it refused
            return False


_STREAMING = {"hang": _Handler._hang, "trickle": _Handler._trickle, "trickle_headers": _Handler._trickle}
_STREAMING["huge"] = _Handler._huge


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler thread
    block_on_close = True

    def __init__(self, state: _State) -> None:
        self.state = state
        super().__init__(("127.0.0.1", 0), _Handler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        return ipaddress.ip_address(client_address[0]).is_loopback

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client hanging up mid-response is expected (timeouts); keep test output clean


class FakeOpenAIServer:
    """OpenAI-compatible ``POST /v1/embeddings`` on an ephemeral loopback port.

    ``dims``: vector length when the request has no ``dimensions``. ``api_key``: if set, any other
    bearer token gets a 401 (whose message echoes the token, like a careless server).
    """

    def __init__(self, dims: int = 8, api_key: str | None = None) -> None:
        self._state = _State(dims=dims, api_key=api_key)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL to give the client, e.g. ``http://127.0.0.1:54321/v1``."""
        if self._server is None:
            raise RuntimeError("server not started")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request seen so far (a copy)."""
        with self._state.lock:
            return list(self._state.requests)

    def inputs(self) -> list[list[str]]:
        """The ``input`` list of each embeddings request, in arrival order."""
        out = []
        for req in self.requests:
            if req.path in EMBEDDING_PATHS and isinstance(req.body, dict):
                value = req.body.get("input")
                out.append(value if isinstance(value, list) else [value])
        return out

    def outage(self, fault: Fault | None) -> None:
        """Apply ``fault`` to every embeddings request the queue does not cover, until ``outage(None)``."""
        with self._state.lock:
            self._state.outage = fault

    def enqueue(self, *faults: Fault) -> None:
        """Queue faults for the next requests, one each, in order."""
        with self._state.lock:
            self._state.faults.extend(faults)

    def clear_faults(self) -> None:
        """Drop every queued fault (an outage ends)."""
        with self._state.lock:
            self._state.faults.clear()

    @property
    def pending_faults(self) -> int:
        with self._state.lock:
            return len(self._state.faults)

    def start(self) -> FakeOpenAIServer:
        if self._server is not None:
            return self
        self._state.stopping.clear()
        self._server = _Server(self._state)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Wake slow handlers, stop serving and join all threads. Idempotent."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._state.stopping.set()
        server.shutdown()
        server.server_close()  # joins handler threads
        thread.join(timeout=5)
        if thread.is_alive():
            raise RuntimeError("fake OpenAI server thread did not stop")
        self._server = self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A started ``FakeOpenAIServer`` (dims 8), stopped and joined after the test."""
    with FakeOpenAIServer() as server:
        yield server
