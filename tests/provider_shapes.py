"""Replies as OpenAI and Anthropic send them — JSON and SSE, with tool calls and usage — for fake upstreams.

The fields, their order and the event sequence follow the providers' documented and observed output
(OpenAI ``chat.completion`` / ``chat.completion.chunk`` with ``stream_options.include_usage``; Anthropic
``message`` and its ``message_start`` … ``message_stop`` events, ``ping`` included). A reply is a list of
text pieces (one SSE delta each; joined for JSON) and optional tool calls; the ids are derived from the
content, so the same reply gives the same bytes. Used by the cllama harness's upstream and by tests that
need a captured upstream body.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    pieces: int = 2  # how many deltas the arguments' JSON is split into when streamed


@dataclass
class Reply:
    pieces: list[str]  # the text, as the deltas of a stream; "".join(pieces) is the text
    tools: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    model: str = ""

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def completion_tokens(self) -> int:
        return max(1, sum(len(p.split()) for p in self.pieces) + 8 * len(self.tools))


def words(text: str) -> list[str]:
    """Text cut into deltas the way models stream it: a word and the space before it per delta."""
    out: list[str] = []
    for i, w in enumerate(text.split(" ")):
        out.append(w if i == 0 else " " + w)
    return [p for p in out if p]


def _id(prefix: str, reply: Reply, n: int = 24) -> str:
    digest = hashlib.sha256(json.dumps([reply.pieces, [t.name for t in reply.tools]]).encode()).hexdigest()
    return prefix + digest[:n]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _split(s: str, n: int) -> list[str]:
    n = max(1, min(n, len(s)))
    step = -(-len(s) // n)
    return [s[i : i + step] for i in range(0, len(s), step)]


# --- OpenAI ----------------------------------------------------------------------------------------------


def _openai_usage(reply: Reply) -> dict[str, Any]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def openai_json(reply: Reply, created: int = 1764000000) -> bytes:
    calls = [
        {
            "id": _id(f"call_{i}", reply, 20),
            "type": "function",
            "function": {"name": t.name, "arguments": _dumps(t.arguments)},
        }
        for i, t in enumerate(reply.tools)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if calls:
        message["tool_calls"] = calls
    message.update({"refusal": None, "annotations": []})
    body = {
        "id": _id("chatcmpl-", reply),
        "object": "chat.completion",
        "created": created,
        "model": reply.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": _openai_usage(reply),
        "service_tier": "default",
        "system_fingerprint": "fp_7c9a1b2d3e",
    }
    return json.dumps(body, indent=2, ensure_ascii=False).encode()  # OpenAI pretty-prints its JSON replies


def openai_sse(reply: Reply, include_usage: bool, created: int = 1764000000) -> bytes:
    head = {
        "id": _id("chatcmpl-", reply),
        "object": "chat.completion.chunk",
        "created": created,
        "model": reply.model,
        "service_tier": "default",
        "system_fingerprint": "fp_7c9a1b2d3e",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        extra = {"usage": None} if include_usage else {}
        return "data: " + _dumps({**head, "choices": [choice], **extra}) + "\n\n"

    out = [chunk({"role": "assistant", "content": "" if reply.pieces or not reply.tools else None, "refusal": None})]
    out += [chunk({"content": p}) for p in reply.pieces]
    for i, t in enumerate(reply.tools):
        start = {"index": i, "id": _id(f"call_{i}", reply, 20), "type": "function"}
        out.append(chunk({"tool_calls": [{**start, "function": {"name": t.name, "arguments": ""}}]}))
        for piece in _split(_dumps(t.arguments), t.pieces):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    out.append(chunk({}, "tool_calls" if reply.tools else "stop"))
    if include_usage:
        out.append("data: " + _dumps({**head, "choices": [], "usage": _openai_usage(reply)}) + "\n\n")
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


# --- Anthropic -------------------------------------------------------------------------------------------


def _anthropic_usage(reply: Reply, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": reply.prompt_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def anthropic_json(reply: Reply) -> bytes:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.pieces else []
    for i, t in enumerate(reply.tools):
        content.append({"type": "tool_use", "id": _id(f"toolu_0{i}", reply), "name": t.name, "input": t.arguments})
    body = {
        "id": _id("msg_01", reply),
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": "tool_use" if reply.tools else "end_turn",
        "stop_sequence": None,
        "usage": _anthropic_usage(reply, reply.completion_tokens),
    }
    return _dumps(body).encode()


def anthropic_sse(reply: Reply) -> bytes:
    def event(name: str, data: dict[str, Any], raw: str | None = None) -> str:
        return f"event: {name}\ndata: {raw if raw is not None else _dumps(data)}\n\n"

    message = {
        "id": _id("msg_01", reply),
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _anthropic_usage(reply, 1),
    }
    out = [event("message_start", {"type": "message_start", "message": message})]
    index = 0
    if reply.pieces:
        start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        out.append(event("content_block_start", start))
        out.append(event("ping", {}, '{"type": "ping"}'))
        for p in reply.pieces:
            delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}
            out.append(event("content_block_delta", delta))
        out.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    for i, t in enumerate(reply.tools, start=index):
        block = {"type": "tool_use", "id": _id(f"toolu_0{i}", reply), "name": t.name, "input": {}}
        out.append(event("content_block_start", {"type": "content_block_start", "index": i, "content_block": block}))
        for piece in _split(_dumps(t.arguments), t.pieces):
            delta = {"type": "input_json_delta", "partial_json": piece}
            out.append(event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        out.append(event("content_block_stop", {"type": "content_block_stop", "index": i}))
    stop = "tool_use" if reply.tools else "end_turn"
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": reply.completion_tokens},
    }
    out.append(event("message_delta", end))
    out.append(event("message_stop", {"type": "message_stop"}))
    return "".join(out).encode()


def reply_bytes(api: str, reply: Reply, stream: bool, include_usage: bool = True) -> tuple[bytes, str]:
    """The body and its ``Content-Type`` for ``api`` (``"openai"`` / ``"anthropic"``)."""
    if stream:
        body = openai_sse(reply, include_usage) if api == "openai" else anthropic_sse(reply)
        return body, "text/event-stream; charset=utf-8" if api == "openai" else "text/event-stream"
    return (openai_json(reply) if api == "openai" else anthropic_json(reply)), "application/json"
