"""Request bodies in the shapes cllama sends (internal/proxy/memory.go, internal/sessionhistory/recorder.go)."""

from __future__ import annotations

import json
from typing import Any

OPENAI_KEY = "sk-proj-" + "Q7mZp2Xk9LrT4vWb8NcY1dFh6JsA3eGu"  # real-shaped, made up


def openai_entry(
    user: str,
    answer: str,
    *,
    id: str | None = None,
    ts: str = "2026-11-23T14:03:07Z",
    sse: bool = False,
    tool: str | None = None,
) -> dict[str, Any]:
    request = {
        "model": "gpt-4o",
        "stream": sse,
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "earlier question"},
            {"role": "assistant", "content": "earlier answer"},
            {"role": "user", "content": [{"type": "text", "text": user}]},
        ],
    }
    if sse:
        chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
        for word in answer.split(" "):
            chunks.append({"choices": [{"index": 0, "delta": {"content": word + " "}}]})
        if tool:
            chunks.append(
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [
                                    {
                                        "index": 0,
                                        "id": "call_1",
                                        "type": "function",
                                        "function": {"name": tool, "arguments": ""},
                                    }
                                ]
                            },
                        }
                    ]
                }
            )
        text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        response: dict[str, Any] = {"format": "sse", "text": text}
    else:
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        if tool:
            message["tool_calls"] = [
                {"id": "call_1", "type": "function", "function": {"name": tool, "arguments": "{}"}}
            ]
        response = {
            "format": "json",
            "json": {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 12},
            },
        }
    entry: dict[str, Any] = {
        "version": 1,
        "ts": ts,
        "claw_id": "bot-1",
        "path": "/v1/chat/completions",
        "requested_model": "gpt-4o",
        "effective_provider": "openai",
        "effective_model": "gpt-4o-2024-08-06",
        "status_code": 200,
        "stream": sse,
        "request_original": request,
        "request_effective": request,
        "response": response,
        "usage": {"prompt_tokens": 12, "completion_tokens": 7},
    }
    if id is not None:
        entry["id"] = id
    return entry


def anthropic_entry(
    user: str,
    answer: str,
    *,
    id: str | None = None,
    ts: str = "2026-11-23T15:00:00Z",
    sse: bool = False,
    tool: str | None = None,
) -> dict[str, Any]:
    request = {
        "model": "claude-sonnet-4",
        "max_tokens": 1024,
        "system": "Be brief.",
        "stream": sse,
        "messages": [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "TOOL OUTPUT 42"},
                    {"type": "text", "text": user},
                ],
            },
        ],
    }
    if sse:
        events = [
            {"type": "message_start", "message": {"id": "msg_1", "role": "assistant", "content": []}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ]
        for word in answer.split(" "):
            events.append(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": word + " "}}
            )
        events.append({"type": "content_block_stop", "index": 0})
        if tool:
            events.append(
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {"type": "tool_use", "id": "tu1", "name": tool, "input": {}},
                }
            )
            events.append(
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "input_json_delta", "partial_json": '{"q": 1}'},
                }
            )
        events.append({"type": "message_stop"})
        text = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
        response: dict[str, Any] = {"format": "sse", "text": text}
    else:
        content: list[dict[str, Any]] = [{"type": "text", "text": answer}]
        if tool:
            content.append({"type": "tool_use", "id": "tu1", "name": tool, "input": {"q": 1}})
        response = {
            "format": "json",
            "json": {"id": "msg_1", "type": "message", "role": "assistant", "content": content},
        }
    entry: dict[str, Any] = {
        "version": 1,
        "ts": ts,
        "claw_id": "bot-2",
        "path": "/v1/messages",
        "requested_model": "claude-sonnet-4",
        "effective_provider": "anthropic",
        "effective_model": "claude-sonnet-4-20250514",
        "status_code": 200,
        "stream": sse,
        "request_original": request,
        "response": response,
        "usage": {},
    }
    if id is not None:
        entry["id"] = id
    return entry


def retain_body(agent: str, entry: dict[str, Any], timezone: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"service": "mdmemory", "type": "memory", "path": "retain", "requested_model": "gpt-4o"}
    if timezone:
        meta["timezone"] = timezone
    return {"agent_id": agent, "pod": "pod-a", "metadata": meta, "entry": entry}


def recall_body(agent: str, text: str, path: str = "openai") -> dict[str, Any]:
    return {
        "agent_id": agent,
        "pod": "pod-a",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": [{"type": "text", "text": text}]},
        ],
        "metadata": {"service": "mdmemory", "type": "memory", "path": path, "requested_model": "gpt-4o"},
    }
