"""One agent turn as cllama sends it to a memory service: the agent's request as the OpenAI or Anthropic SDK
sends it, the upstream's reply (tests/provider_shapes.py), and the recall, retain and forget bodies cllama
builds from them (tests/cllama_shapes.py)."""

from __future__ import annotations

import json
from typing import Any

from tests import cllama_shapes as cs
from tests import provider_shapes as ps

MODELS = {"openai": "openai/gpt-4o-mini", "anthropic": "anthropic/claude-haiku-4-5"}


def request(api: str, question: str, *, stream: bool = False, history: list[tuple[str, str]] | None = None) -> bytes:
    """The agent's body: ``history`` (user, assistant) pairs, then ``question``."""
    messages: list[dict[str, Any]] = []
    if api == "openai":
        messages.append({"role": "system", "content": "You are a helpful assistant."})
    for q, a in history or []:
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    if api == "anthropic":
        messages.append({"role": "user", "content": [{"type": "text", "text": question}]})
        body: dict[str, Any] = {"model": "claude-haiku-4-5", "max_tokens": 512, "system": "Be brief."}
    else:
        messages.append({"role": "user", "content": question})
        body = {"model": MODELS["openai"]}
    body.update(messages=messages, stream=stream)
    return json.dumps(body).encode()


def turn(
    agent_id: str,
    question: str,
    answer: str,
    *,
    pod: str | None = None,
    api: str = "openai",
    stream: bool = False,
    ts: str = "2026-11-23T14:03:07Z",
    meta: dict[str, Any] | None = None,
) -> cs.Turn:
    """Both bodies cllama sends for one turn of ``agent_id`` (in ``pod`` when given)."""
    agent_meta = {"service": agent_id, "type": "openclaw", **(meta or {})}
    if pod is not None:
        agent_meta["pod"] = pod
    reply, _ = ps.reply_bytes(api, ps.Reply(ps.words(answer), prompt_tokens=40), stream)
    return cs.turn(
        agent_id,
        agent_meta,
        request(api, question, stream=stream),
        reply,
        ts=ts,
        provider_model=MODELS[api],
        sse=stream,
    )


def recall(agent_id: str, question: str, *, pod: str | None = None, api: str = "openai") -> bytes:
    """The recall body cllama sends before the agent's turn asking ``question``."""
    agent_meta: dict[str, Any] = {"service": agent_id, "type": "openclaw"}
    if pod is not None:
        agent_meta["pod"] = pod
    return cs.recall_body(agent_id, agent_meta, api, json.loads(request(api, question)))


def forget(agent_id: str, entry_ids: list[str], *, pod: str | None = None, reason: str = "user request") -> bytes:
    """A forget body as Clawdapus' reference sends it (``memoryForgetRequest``: agent_id, pod, entry_ids, reason)."""
    body: dict[str, Any] = {"agent_id": agent_id}
    if pod is not None:
        body["pod"] = pod
    body.update(entry_ids=entry_ids, reason=reason)
    return json.dumps(body).encode()
