"""The HTTP edge (Starlette): parse, authorise, call the core in a worker thread, answer. No decisions here.

Routes (the Clawdapus memory plane; descriptor as ``examples/reference-memory/.claw-describe.json``):
``GET /.claw-describe.json``, ``GET /healthz`` (both open), ``POST /recall``, ``POST /retain`` (202),
``POST /forget`` (204), ``GET /agents/{agent_id}/status`` (bearer token). Errors are ``{"error": ...}``
with 400 (naming the field), 401, 404, 413 or 503.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mdmemory.errors import EmbeddingsPending, InvalidArgumentError, MdMemoryError
from mdmemory.service import contract
from mdmemory.service.agents import Agents, UnknownAgent
from mdmemory.service.recall import recall, recall_info
from mdmemory.service.recallpool import RecallPool
from mdmemory.service.telemetry import Telemetry

DESCRIPTOR: dict[str, Any] = {
    "version": 2,
    "description": "mdmemory: Markdown memory with hybrid search and context packs (recall, retain, forget)",
    "memory": {"recall": {"path": "/recall"}, "retain": {"path": "/retain"}, "forget": {"path": "/forget"}},
    "auth": {"type": "bearer", "env": "MEMORY_API_TOKEN"},
}


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object; 413 past ``limit`` bytes (also for chunked bodies), 400 when not JSON.
    The bytes stay in ``request.state.raw`` (a recall worker parses them again rather than a re-encoding)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise HttpError(413, f"request body over {limit} bytes (service.maxBodyBytes)")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise HttpError(413, f"request body over {limit} bytes (service.maxBodyBytes)")
    request.state.raw = raw = bytes(data)
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise HttpError(400, f"body: invalid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise HttpError(400, "body: expected a JSON object")
    return body


def build_app(
    agents: Agents, token: str | None, telemetry: Telemetry | None = None, pool: RecallPool | None = None
) -> Starlette:
    """The routes; with ``pool``, recalls are answered by its worker processes (in-process when none can)."""
    tel = telemetry or Telemetry()
    limit = agents.config.service.max_body_bytes
    expected = token.encode("utf-8") if token else None

    def authorised(request: Request) -> bool:
        if expected is None:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode("utf-8"), expected)

    def guarded(
        op: str, handler: Callable[[Request, dict[str, Any]], Awaitable[tuple[Response, dict[str, Any]]]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            start = time.perf_counter()
            agent_id = "-"
            try:
                if not authorised(request):
                    raise HttpError(401, "missing or wrong bearer token (Authorization: Bearer $MEMORY_API_TOKEN)")
                body = await read_json(request, limit)
                agent_id = contract.check_agent_id(body.get("agent_id"))
                response, info = await handler(request, body)
            except HttpError as exc:
                response, info = _error(exc.status, str(exc)), {}
            except InvalidArgumentError as exc:
                response, info = _error(400, str(exc)), {}
            except UnknownAgent as exc:
                response, info = _error(404, str(exc)), {}
            except MdMemoryError as exc:
                response, info = _error(503, f"{type(exc).__name__}: {exc}"), {}
            except Exception as exc:  # a bug: answer 500 without echoing text that may hold memory
                response, info = _error(500, f"internal error ({type(exc).__name__}); see the service log"), {}
                tel.failure(op, exc)
            ok = response.status_code < 300
            ms = (time.perf_counter() - start) * 1000
            tel.op(agent_id, op, "succeeded" if ok else "failed", ms, http_status=response.status_code, **info)
            return response

        return endpoint

    async def do_recall(request: Request, body: dict[str, Any]) -> tuple[Response, dict[str, Any]]:
        contract.check_metadata(body)
        agent = agents.get(body["agent_id"])
        if pool is not None:
            if agent.memory.catch_up_due():  # else nothing to do: no thread hop
                await run_in_threadpool(agent.catch_up)
            answered = await pool.recall(agent.config.id, request.state.raw)
            if answered is not None:
                header, payload = answered
                if header["status"] != 200:
                    raise HttpError(header["status"], str(header.get("error") or "recall failed"))
                info = {"blocks": header.get("blocks"), "size": header.get("size")}
                return Response(payload, media_type="application/json"), info

        def run() -> dict[str, Any]:
            agent.catch_up()
            with agent.readers.reader() as reader:
                return recall(reader, body)

        result = await run_in_threadpool(run)
        payload = json.dumps(result, ensure_ascii=False).encode("utf-8")
        return Response(payload, media_type="application/json"), recall_info(result)

    async def do_retain(request: Request, body: dict[str, Any]) -> tuple[Response, dict[str, Any]]:
        meta = contract.check_metadata(body)
        entry = contract.check_entry(body)
        agent = agents.get(body["agent_id"])
        status, eid = await run_in_threadpool(agent.log.retain, entry, meta)
        if status == "retained":
            agent.dirty = True
            agent.memory.changed()
        return JSONResponse({"status": status, "id": eid}, status_code=202), {"result": status}

    async def do_forget(request: Request, body: dict[str, Any]) -> tuple[Response, dict[str, Any]]:
        contract.check_metadata(body)
        ids = contract.check_entry_ids(body)
        agent = agents.get(body["agent_id"])

        def run() -> int:
            removed, changed = agent.log.forget(ids, body.get("reason"))
            agent.memory.changed()
            with agent.lock:
                try:
                    agent.memory.sync()  # before answering: no search, pack or recall returns them from now on
                except EmbeddingsPending:
                    pass  # the text index is in sync (the forgotten chunks are gone); only vectors of others wait
            return removed

        removed = await run_in_threadpool(run)
        return Response(status_code=204), {"removed": removed}

    async def describe(request: Request) -> Response:
        return JSONResponse(DESCRIPTOR)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True, "agents": agents.ids(), "recallWorkers": pool.alive if pool else 0})

    async def status(request: Request) -> Response:
        if not authorised(request):
            return _error(401, "missing or wrong bearer token (Authorization: Bearer $MEMORY_API_TOKEN)")
        try:
            agent = agents.get(request.path_params["agent_id"])
        except InvalidArgumentError as exc:
            return _error(400, str(exc))
        except UnknownAgent as exc:
            return _error(404, str(exc))

        def run() -> dict[str, Any]:
            with agent.lock:
                state = agent.memory.status()
            return {**state, "sessions": agent.log.stats()}

        return JSONResponse(await run_in_threadpool(run))

    routes = [
        Route("/.claw-describe.json", describe, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/recall", guarded("recall", do_recall), methods=["POST"]),
        Route("/retain", guarded("retain", do_retain), methods=["POST"]),
        Route("/forget", guarded("forget", do_forget), methods=["POST"]),
        Route("/agents/{agent_id}/status", status, methods=["GET"]),
    ]
    return Starlette(routes=routes)
