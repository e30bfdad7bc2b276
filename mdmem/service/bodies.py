"""Request bodies: read as they stream in, within ``service.maxBodyBytes``, and parsed as JSON this service takes.

The proxy sends a conversation whole, twice in a retain (``request_original`` and ``request_effective``): a
1.2 MB conversation is a 2.4 MB retain body, and the proxy never retries one that was refused. So the limit
bounds what is *read* generously (64 MiB by default; 413 only past it, also for a chunked body without a
``Content-Length``), and what is *stored* is bounded elsewhere (the turn, each message within
``service.maxMessageChars``: mdmem.files.retained).

Memory and the event loop: a body is held as text and then as parsed objects, about four times its size at
its peak. Bodies over ``LARGE_BODY_BYTES`` take one of ``LARGE_BODIES_AT_ONCE`` places from the moment they
are known to be large (their ``Content-Length``, else when that much has arrived) until their request is
answered; another waits for a place (up to a third of ``service.bodyTimeoutMs``, then 503 "retry"), its bytes
left unread in the socket meanwhile. A large body is decoded as it arrives and parsed in a worker thread whose
parser gives the event loop a turn between objects, so other requests go on being answered.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request

from mdmem.service.contract import MAX_JSON_DEPTH, check_json
from mdmem.service.edge import HttpError

LARGE_BODY_BYTES = 1 << 20
LARGE_BODIES_AT_ONCE = 2


class Bodies:
    """Reads the JSON bodies of requests (see the module docstring); one per service."""

    def __init__(self, limit: int, wait_seconds: float) -> None:
        self.limit = limit
        self.wait_seconds = wait_seconds
        self._places: asyncio.Semaphore | None = None  # made on the event loop, at the first large body

    @contextlib.asynccontextmanager
    async def json(self, request: Request, keep_raw: bool = False) -> AsyncIterator[dict[str, Any]]:
        """The body as a JSON object, for the duration of the block; 413 past the limit, 408 when the client
        goes away or is too slow, 400 naming the problem when it is not JSON this service takes. With
        ``keep_raw`` the bytes are kept in ``request.state.raw`` too (a recall worker parses them again)."""
        length = request.headers.get("content-length")
        size = int(length) if length is not None and length.isdigit() else None
        if size is not None and size > self.limit:
            raise self._too_large()
        held = [False]  # whether this request holds a place for a large body
        try:
            if size is not None and size > LARGE_BODY_BYTES:
                held[0] = await self._take_place()
            try:
                text = await self._read(request, keep_raw, held)
            except ClientDisconnect:
                raise HttpError(
                    408, "the client went away, or sent its body too slowly (service.bodyTimeoutMs)"
                ) from None
            except UnicodeDecodeError as exc:
                raise HttpError(
                    400, f"body: not UTF-8 (at byte {exc.start} of a piece). Fix: send UTF-8 JSON"
                ) from None
            body = await run_in_threadpool(parse, text, True) if held[0] else parse(text)
            del text
            yield body
        finally:
            if held[0]:
                assert self._places is not None
                self._places.release()

    async def _read(self, request: Request, keep_raw: bool, held: list[bool]) -> str:
        """The body's text, decoded as it arrives; a place is taken once more than ``LARGE_BODY_BYTES`` came."""
        decoder = codecs.getincrementaldecoder("utf-8-sig")()
        texts: list[str] = []
        raw: list[bytes] = []
        got = 0
        async for chunk in request.stream():
            got += len(chunk)
            if got > self.limit:
                raise self._too_large()
            if not held[0] and got > LARGE_BODY_BYTES:
                held[0] = await self._take_place()
            texts.append(decoder.decode(chunk))
            if keep_raw:
                raw.append(chunk)
        texts.append(decoder.decode(b"", final=True))
        if keep_raw:
            request.state.raw = b"".join(raw)
        return "".join(texts)

    async def _take_place(self) -> bool:
        if self._places is None:
            self._places = asyncio.Semaphore(LARGE_BODIES_AT_ONCE)
        try:
            await asyncio.wait_for(self._places.acquire(), self.wait_seconds)
        except TimeoutError:
            raise HttpError(
                503,
                f"{LARGE_BODIES_AT_ONCE} request bodies over {LARGE_BODY_BYTES} bytes are being read and handled; "
                "retry shortly",
            ) from None
        return True

    def _too_large(self) -> HttpError:
        return HttpError(
            413,
            f"request body over {self.limit} bytes (service.maxBodyBytes). Fix: raise service.maxBodyBytes "
            "(what is stored of a turn is bounded by service.maxMessageChars, not by the body)",
        )


def parse(text: str, yielding: bool = False) -> dict[str, Any]:
    """``text`` as a JSON object this service takes (``check_json``), else HttpError 400 naming the problem.
    ``yielding``: parse so that other threads get the interpreter between objects (a Python hook per object;
    the C parser alone holds it for the whole text)."""
    try:
        if yielding:
            body = json.loads(text, parse_constant=_constant, object_pairs_hook=_object)
        else:
            body = json.loads(text, parse_constant=_constant)
    except RecursionError:
        raise HttpError(400, f"body: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise HttpError(400, f"body: invalid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise HttpError(400, "body: expected a JSON object")
    problem = check_json(body)
    if problem is not None:
        raise HttpError(400, problem)
    return body


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return dict(pairs)


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
