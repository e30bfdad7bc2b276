"""Bounded HTTP for the remote provider: a hard wall-clock deadline per request and a response size cap.

The openai SDK's timeouts apply per phase (connect, each read), so a server that trickles one byte a second
never times out. Here each request is a coroutine of the SDK's *async* client, run on one event loop thread
per provider under ``asyncio.wait_for``: at the deadline the coroutine is cancelled, which closes its
connection wherever it was (connecting, waiting for headers, reading a trickling body), and the calling
thread, which only waits for the result, gets ``TimeoutError``. ``LoopThread.close`` stops the loop and joins
its thread.

Size: the body of a successful response is streamed and counted, and refused once it passes the cap, or at
once when its Content-Length announces more. An error response never reaches the SDK's reader (which would
read and parse any body, holding the GIL while it parses): ``error_guard``, an httpx response hook, reads at
most ``ERROR_BODY_CAP`` bytes of it and raises ``ErrorResponse`` with the status, headers and that much body.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

T = TypeVar("T")

CANCEL_GRACE_SECONDS = 0.25
"""How long past its deadline the caller waits for a cancelled request to finish closing its connection."""
CLOSE_SECONDS = 5.0
ERROR_BODY_CAP = 1024 * 1024


class ResponseTooLarge(Exception):
    """The response body is larger than the cap; ``declared`` when its Content-Length said so up front."""

    def __init__(self, size: int, cap: int, declared: bool) -> None:
        self.size, self.cap, self.declared = size, cap, declared
        got = f"announced {size} bytes" if declared else f"sent more than {cap} bytes"
        super().__init__(f"the response {got}, over the cap of {cap} bytes")


class ErrorResponse(Exception):
    """An HTTP error status; ``body`` holds at most ``ERROR_BODY_CAP`` bytes of what the server sent."""

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body
        super().__init__(f"HTTP {status}")


class LoopThread:
    """An asyncio event loop on a daemon thread, started on first use; ``close()`` stops and joins it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``coro`` on the loop; when ``timeout`` seconds pass, cancel it and raise ``TimeoutError``."""
        with self._lock:
            alive = self._loop is not None and self._thread is not None and self._thread.is_alive()
            loop = self._loop if alive and self._loop is not None else self._start()
            future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, max(0.0, timeout)), loop)
        try:
            return future.result(max(0.0, timeout) + CANCEL_GRACE_SECONDS)
        except TimeoutError:  # from wait_for (already cancelled) or from our own wait (cancel now)
            future.cancel()
            raise

    def close(self, last: Callable[[], Awaitable[Any]] | None = None) -> None:
        """Run ``last()`` on the loop (closing the client), stop the loop and join its thread. Idempotent."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        if last is not None:

            async def finish() -> None:
                await last()

            try:
                asyncio.run_coroutine_threadsafe(finish(), loop).result(CLOSE_SECONDS)
            except Exception:  # noqa: BLE001 - closing must not fail; the loop is stopped below either way
                pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_SECONDS)

    def _start(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=_serve, args=(loop,), name=self.name, daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread
        return loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())  # joins the name-resolution threads
    finally:
        loop.close()


async def read_capped(response: Any, cap: int) -> bytes:
    """The body of a streaming ``response`` (the SDK's or httpx's), refused with ``ResponseTooLarge`` once past
    ``cap`` bytes."""
    declared = _content_length(response.headers)
    if declared is not None and declared > cap:
        raise ResponseTooLarge(declared, cap, declared=True)
    chunks: list[bytes] = []
    total = 0
    stream = response.aiter_bytes() if hasattr(response, "aiter_bytes") else response.iter_bytes()  # httpx; SDK
    async for chunk in stream:
        total += len(chunk)
        if total > cap:
            raise ResponseTooLarge(total, cap, declared=False)
        chunks.append(chunk)
        await asyncio.sleep(0)  # let the deadline's timer run even while data keeps arriving
    return b"".join(chunks)


async def error_guard(response: Any) -> None:
    """httpx response hook: turn an error status into ``ErrorResponse``, reading at most ``ERROR_BODY_CAP``."""
    if response.status_code < 400:
        return
    declared = _content_length(response.headers)
    chunks: list[bytes] = []
    total = 0
    if declared is None or declared <= ERROR_BODY_CAP:
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            total += len(chunk)
            if total >= ERROR_BODY_CAP:
                break
            await asyncio.sleep(0)
    raise ErrorResponse(response.status_code, response.headers, b"".join(chunks)[:ERROR_BODY_CAP])


def _content_length(headers: Any) -> int | None:
    try:
        value = int(headers.get("content-length", ""))
    except ValueError:
        return None
    return value if value >= 0 else None


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms``, else ``Retry-After`` (seconds or HTTP-date)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000
            if math.isfinite(value) and value >= 0:
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
        return value if math.isfinite(value) and value >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
