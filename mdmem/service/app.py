"""The HTTP edge (Starlette): parse, authorise, call the core in a worker thread, answer. No decisions here.

Routes (the Clawdapus memory plane; descriptor as ``examples/reference-memory/.claw-describe.json``):
``GET /.claw-describe.json``, ``GET /healthz`` (both open), ``POST /recall``, ``POST /retain`` (202),
``POST /forget`` (204), ``POST /remember`` (200; not the proxy's: a fact written into the agent's memory files,
mdmem.service.remembering), ``GET /agents/{agent_id}/status[?pod=P]`` (bearer token, mdmem.service.auth).
Every request first passes the edge rules (mdmem.service.edge). A body's ``pod`` picks the agent with its
id (mdmem.service.pods). Errors are ``{"error": ...}`` with 400 (naming the field), 401, 403 (also: the
agent serves another pod), 404, 408, 409 (``/remember``), 413, 415 or 503.
"""

from __future__ import annotations

import contextlib
import errno
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mdmem.files.retained import Prepared, prepare
from mdmem.providers import deadline
from mdmem.service import contract
from mdmem.service.agents import Agent, Agents, AgentsBusy, UnknownAgent
from mdmem.service.auth import Auth
from mdmem.service.bodies import Bodies
from mdmem.service.budget import Budget, open_fds
from mdmem.service.edge import EdgeRules, HttpError, error
from mdmem.service.pods import PodRefused
from mdmem.service.recall import recall_answer
from mdmem.service.recallpool import NoWorkerInTime, RecallPool
from mdmem.service.remembering import check_files_here, check_remember, notes, refusal
from mdmem.service.startup import Starting, Startup
from mdmem.service.telemetry import Telemetry, recall_sizes
from mdmem.service.timebox import CATCH_UP_SHARE, EMBED_SHARE, START_SHARE, Dropped, Timebox, race_client
from mdmem.util.errors import InvalidArgumentError, MdMemoryError

if TYPE_CHECKING:
    from mdmem.service.protocol import Connections

WORKER_BODY_BYTES = 256 * 1024  # a recall body past this goes to a worker with only the messages it reads
# A retain answers once its turn's text is indexed (waiting at most RETAIN_TEXT_SECONDS for that) and its
# vectors are in, or at RETAIN_SECONDS, whichever comes first: within the proxy's retain budget (cllama: 2 s).
RETAIN_TEXT_SECONDS = 0.5
RETAIN_SECONDS = 1.0

DESCRIPTOR: dict[str, Any] = {
    "version": 2,
    "description": "mdmem: Markdown memory with hybrid search and context packs (recall, retain, forget)",
    "memory": {"recall": {"path": "/recall"}, "retain": {"path": "/retain"}, "forget": {"path": "/forget"}},
    "auth": {"type": "bearer", "env": "MEMORY_API_TOKEN"},
}


def build_app(
    agents: Agents,
    auth: Auth,
    telemetry: Telemetry | None = None,
    pool: RecallPool | None = None,
    *,
    connections: Connections | None = None,
    budget: Budget | None = None,
    startup: Startup | None = None,
    wake: Callable[[], None] | None = None,
) -> Starlette:
    """The routes; with ``pool``, recalls are answered by its worker processes (in-process when none can).
    ``connections`` and ``budget`` are what ``/healthz`` reports on; with ``startup``, recalls wait for it
    to be ready (mdmem.service.startup); with ``wake`` (the background indexer's), a retain waits a
    little for its turn's vectors (mdmem.service.vectorwait)."""
    tel = telemetry or Telemetry()
    svc = agents.config.service
    bodies = Bodies(svc.max_body_bytes, svc.body_timeout_ms / 1000 / 3)
    recall_budget = svc.recall_budget_ms / 1000
    refused = (
        "missing or wrong bearer token. Fix: send Authorization: Bearer <token>, the token being MEMORY_API_TOKEN "
        "or service.token, else the one in state/service-token under the mdmem home (the service's start "
        "line names it)"
    )

    @contextlib.asynccontextmanager
    async def using(agent_id: str, pod: str | None, create: bool = True) -> AsyncIterator[Agent]:
        """The agent that answers ``agent_id`` from ``pod``, held for the request (found, claimed or opened in a
        worker thread when that takes more than a look: it may wait)."""
        key = agents.pods.known(agent_id, pod)
        agent = agents.held(key) if key is not None else None
        if agent is None:
            agent = await run_in_threadpool(agents.acquire, agent_id, create=create, pod=pod)
        try:
            yield agent
        finally:
            agents.release(agent)

    def guarded(
        op: str, handler: Callable[[Request, dict[str, Any]], Awaitable[tuple[Response, dict[str, Any]]]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            start = time.perf_counter()
            request.state.started = time.monotonic()  # a recall's budget counts from here (timebox)
            agent_id, pod = "-", None
            try:
                if not auth.allows(request.headers.get("authorization")):
                    raise HttpError(401, refused)
                async with bodies.json(request, keep_raw=op == "recall") as body:
                    agent_id = contract.check_agent_id(body.get("agent_id"))
                    pod = contract.check_pod(body.get("pod"))
                    response, info = await handler(request, body)
            except Exception as exc:
                response, info = _failure(op, exc, tel), {}
                if isinstance(exc, Dropped):  # not computed: telemetry says why (timed_out, abandoned)
                    info = {"status": exc.outcome}
                elif response.status_code == 503 and agent_id != "-" and not isinstance(exc, (AgentsBusy, Starting)):
                    agents.failed(agent_id, exc)  # /healthz says so until a request for it succeeds
            ok = response.status_code < 300
            if ok:
                agents.succeeded(agent_id)
            ms = (time.perf_counter() - start) * 1000
            status = info.pop("status", None) or ("succeeded" if ok else "failed")
            tel.op(agent_id, op, status, ms, http_status=response.status_code, pod=pod, **info)
            return response

        return endpoint

    async def do_recall(request: Request, body: dict[str, Any]) -> tuple[Response, dict[str, Any]]:
        contract.check_metadata(body)
        contract.check_recall(body)
        if startup is not None:
            startup.check()
        box = Timebox(request.state.started, recall_budget)
        async with using(body["agent_id"], body.get("pod") or None) as agent:
            raw = worker_body(request.state.raw, body) if pool is not None else None
            return await race_client(request, answer_recall(agent, body, raw, box), box)

    async def answer_recall(
        agent: Agent, body: dict[str, Any], raw: bytes | None, box: Timebox
    ) -> tuple[Response, dict[str, Any]]:
        """Within ``box`` (mdmem.service.timebox): catch up, then a worker answers, else this process."""
        if agent.memory.catch_up_due():  # else nothing to do: no thread hop
            await run_in_threadpool(agent.catch_up, box.at(CATCH_UP_SHARE))
        box.check()
        busy = False  # every worker stayed busy: this process answers, by keywords alone
        if pool is not None and raw is not None:  # None: a body the service's process answers itself
            try:
                answered = await pool.recall(agent.config.id, raw, box.at(START_SHARE), box.at(EMBED_SHARE))
            except NoWorkerInTime:
                answered, busy = None, True
            if answered is not None:
                header, payload = answered
                if header["status"] != 200:
                    raise HttpError(header["status"], str(header.get("error") or "recall failed"))
                info = {**recall_sizes(json.loads(payload)["memories"]), "result": header.get("mode")}
                return Response(payload, media_type="application/json"), info

        def run() -> tuple[dict[str, Any], str]:
            box.check()
            with agent.readers.reader() as reader:
                box.check()  # (waited for a read connection)
                with deadline.until(time.monotonic() if busy else box.at(EMBED_SHARE)):
                    return recall_answer(reader, body)

        result, mode = await run_in_threadpool(run)
        payload = json.dumps(result, ensure_ascii=False).encode("utf-8")
        return Response(payload, media_type="application/json"), {**recall_sizes(result["memories"]), "result": mode}

    async def do_retain(request: Request, body: dict[str, Any]) -> tuple[Response, dict[str, Any]]:
        meta = contract.check_metadata(body)
        entry = contract.check_entry(body)
        prepared = await run_in_threadpool(prepare, entry, meta, svc.max_message_chars)
        async with using(body["agent_id"], body.get("pod") or None) as agent:

            def run() -> tuple[str, int | None]:
                return agent.log.store(prepared), agent.log.size_of(prepared.day)

            status, size = await run_in_threadpool(run)
            if status == "retained":
                agent.dirty = True  # its vectors: the background indexer
                agent.memory.changed()
                ticket = agent.vectors.take()  # after changed(): a pass that counts it also indexes its text
                # its text indexed before the answer, so that the next recall finds it by keywords at once
                # (else, when the agent's lock stays taken, that recall's catch-up or the indexer does it)
                started = request.state.started
                with contextlib.suppress(MdMemoryError, OSError):  # the block is durable: answer 202 anyway
                    await run_in_threadpool(agent.catch_up, started + RETAIN_TEXT_SECONDS)
                if wake is not None:  # and its vectors, if they come in time (a paraphrase finds it then)
                    wake()
                    await agent.vectors.wait(ticket, started + RETAIN_SECONDS - time.monotonic())
            limit = agent.config.memory_search.max_file_bytes
        answer = retain_answer(status, prepared)
        notes = list(prepared.notes)
        if size is not None and size > limit:  # stored, but that day's turns are not indexed: never silently
            answer.setdefault("warnings", []).append(
                f"sessions/{prepared.day}.md is {size:,} bytes, over memorySearch.maxFileBytes ({limit:,}): the "
                "turns of that day are kept but not searched or recalled. Fix: raise memorySearch.maxFileBytes"
            )
            notes.append("day_file_over_max_file_bytes")
        return JSONResponse(answer, status_code=202), {"result": status, "warnings": notes or None}

    async def do_forget(request: Request, body: dict[str, Any]) -> tuple[Response, dict[str, Any]]:
        contract.check_metadata(body)
        ids = contract.check_entry_ids(body)
        async with using(body["agent_id"], body.get("pod") or None) as agent:

            def run() -> int:
                removed, changed = agent.log.forget(ids, body.get("reason"))
                agent.memory.changed()
                with agent.lock:  # before answering: no search, pack or recall returns them from now on
                    agent.memory.sync(embed=False)  # the text; the vectors of what else changed follow
                agent.dirty = True
                return removed

            removed = await run_in_threadpool(run)
        return Response(status_code=204), {"removed": removed}

    async def do_remember(request: Request, body: dict[str, Any]) -> tuple[Response, dict[str, Any]]:
        contract.check_metadata(body)
        args = check_remember(body)
        async with using(body["agent_id"], body.get("pod") or None) as agent:
            check_files_here(agent.config)

            def run() -> dict[str, Any]:
                with agent.lock:  # Memory.remember reads the index to find a line a hand edit moved
                    try:
                        return agent.memory.remember(
                            args["text"],
                            long_term=args.get("longTerm", False),
                            supersedes=args.get("supersedes"),
                            redact_secrets=True,
                        )
                    except MdMemoryError as exc:
                        raise refusal(exc) or exc from None

            result = await run_in_threadpool(run)
            agent.dirty = True  # its vectors: the background indexer
            agent.memory.changed()
            ticket = agent.vectors.take()
            started = request.state.started  # its text indexed before the answer, as a retain's
            with contextlib.suppress(MdMemoryError, OSError):  # the line is durable: answer 200 anyway
                await run_in_threadpool(agent.catch_up, started + RETAIN_TEXT_SECONDS)
            if wake is not None:
                wake()
                await agent.vectors.wait(ticket, started + RETAIN_SECONDS - time.monotonic())
        outcome = "superseded" if result.get("marked") else "remembered"
        return JSONResponse(result), {"result": outcome, "warnings": notes(result)}

    async def describe(request: Request) -> Response:
        return JSONResponse(DESCRIPTOR)

    async def healthz(request: Request) -> Response:
        """200 ``{"ok": true, ...}``; 503 ``{"ok": false, "degraded": [why, ...], ...}`` when requests fail or
        are refused for want of resources (see ``health_problems``)."""
        problems = await run_in_threadpool(health_problems, agents, connections, budget)
        body: dict[str, Any] = {"ok": not problems, "agents": agents.ids(), "recallWorkers": pool.alive if pool else 0}
        if startup is not None:
            body["ready"] = startup.ready.is_set()
            if not body["ready"]:  # not ok yet, though nothing is wrong: problems says what is
                body["ok"] = False
                body["starting"] = startup.state()
        body["openAgents"] = len(agents.opened())
        if connections is not None:
            body["connections"] = connections.open
        if problems:
            body["degraded"] = problems
        return JSONResponse(body, status_code=200 if body["ok"] else 503)

    async def status(request: Request) -> Response:
        if not auth.allows(request.headers.get("authorization")):
            return error(401, refused)
        try:
            pod = contract.check_pod(request.query_params.get("pod"), "pod (query parameter)")
            async with using(request.path_params["agent_id"], pod, create=False) as agent:

                def run() -> dict[str, Any]:
                    with agent.lock:
                        state = agent.memory.status()
                    try:
                        sessions = agent.log.stats()
                    except MdMemoryError as exc:  # a missing workspace: the status says so, it does not fail
                        sessions = {"error": f"{type(exc).__name__}: the session files cannot be read now"}
                    try:
                        owner = agents.pods.owner(agent.config)
                        serves: Any = owner.to_dict() if owner is not None else None
                    except (MdMemoryError, OSError) as exc:
                        serves = {"error": f"{type(exc).__name__}: the pod it serves cannot be read now"}
                    pods = {"scope": agents.config.service.pod_scope, "serves": serves}
                    return {**state, "agentId": agent.config.id, "pod": pods, "sessions": sessions}

                return JSONResponse(await run_in_threadpool(run))
        except Exception as exc:
            return _failure("status", exc, tel)

    routes = [
        Route("/.claw-describe.json", describe, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/recall", guarded("recall", do_recall), methods=["POST"]),
        Route("/retain", guarded("retain", do_retain), methods=["POST"]),
        Route("/forget", guarded("forget", do_forget), methods=["POST"]),
        Route("/remember", guarded("remember", do_remember), methods=["POST"]),
        Route("/agents/{agent_id}/status", status, methods=["GET"]),
    ]
    loopback_only = auth.token is None
    return Starlette(routes=routes, middleware=[Middleware(EdgeRules, loopback_only=loopback_only)])


def worker_body(raw: bytes, body: dict[str, Any]) -> bytes | None:
    """What a recall worker gets: the body as sent, or, past ``WORKER_BODY_BYTES`` (a long conversation), the
    body with only the messages the query is made of; None when even that is large (a huge last message: the
    service's process answers it, no frame is sent)."""
    if len(raw) <= WORKER_BODY_BYTES:
        return raw
    trimmed = json.dumps({**body, "messages": contract.recall_messages(body.get("messages"))}).encode()
    return trimmed if len(trimmed) <= 4 * WORKER_BODY_BYTES else None


def retain_answer(status: str, prepared: Prepared) -> dict[str, Any]:
    """``{"status", "id", "warnings"?, "truncated"?, "truncatedParts"?}``: ``truncated`` when the entry's block
    holds a part cut to ``service.maxMessageChars`` (``truncatedParts`` says which and how much was kept)."""
    answer: dict[str, Any] = {"status": status, "id": prepared.entry_id}
    if prepared.warnings:
        answer["warnings"] = list(prepared.warnings)
    if prepared.cuts and status != "forgotten":
        answer["truncated"] = True
        answer["truncatedParts"] = [cut.to_dict() for cut in prepared.cuts]
    return answer


def _failure(op: str, exc: Exception, tel: Telemetry) -> Response:
    """The HTTP answer for an error a route raised: 400 naming the field, 404, 503 saying why, else 500."""
    if isinstance(exc, HttpError):
        return error(exc.status, str(exc))
    if isinstance(exc, InvalidArgumentError):
        return error(400, str(exc))
    if isinstance(exc, UnknownAgent):
        return error(404, str(exc))
    if isinstance(exc, PodRefused):
        return error(403, str(exc))
    if isinstance(exc, MdMemoryError):
        return error(503, f"{type(exc).__name__}: {exc}")
    if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT):
        return error(503, f"{type(exc).__name__}: {exc.strerror}; retry later (GET /healthz says what is short)")
    # a bug: answer 500 without echoing text that may hold memory
    tel.failure(op, exc)
    return error(500, f"internal error ({type(exc).__name__}); see the service log")


def health_problems(agents: Agents, connections: Connections | None, budget: Budget | None) -> list[str]:
    """Why the service cannot serve every request now: file descriptors nearly all in use, every connection
    slot taken (new ones are answered 503), agents that failed to open in the last minute."""
    problems: list[str] = []
    used = open_fds()
    if budget is not None and used is not None and used >= budget.fd_limit * 0.9:
        problems.append(f"file descriptors: {used} of {budget.fd_limit} in use")
    if connections is not None and connections.open >= connections.cap:
        problems.append(
            f"connections: all {connections.cap} in use (service.maxConnections); new ones are answered 503"
        )
    return problems + agents.health()
