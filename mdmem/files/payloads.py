"""The provider payloads inside a proxy entry, pure: a message's content, and the final text and tool calls of a
response from OpenAI or Anthropic, as JSON or as an SSE stream.

Tolerant by design: these parts vary by provider and by version, so a part of an unexpected shape is read as
absent (a content part that is not text, an event that is not JSON), never an error. What the service
refuses is checked before (mdmem.service.contract: the fields the proxy always sends).
"""

from __future__ import annotations

import json
from typing import Any


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the ``text`` parts of a list (other parts dropped)."""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text") and "text" in part:
                if isinstance(part["text"], str):
                    parts.append(part["text"])
        return "\n".join(p.strip() for p in parts if p.strip())
    return ""


def _dict(value: Any) -> dict[str, Any]:
    """``value`` when it is an object, else an empty one: a body of the wrong shape is read as absent."""
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _tool_line(name: Any) -> str:
    return str(name) if isinstance(name, str) and name else "tool"


def _openai_message(msg: dict[str, Any]) -> tuple[str, list[str]]:
    calls = [c for c in _list(msg.get("tool_calls")) if isinstance(c, dict)]
    tools = [_tool_line(_dict(c.get("function")).get("name")) for c in calls]
    return content_text(msg.get("content")), tools


def _anthropic_content(content: list[Any]) -> tuple[str, list[str]]:
    text = content_text(content)
    tools = [_tool_line(p.get("name")) for p in content if isinstance(p, dict) and p.get("type") == "tool_use"]
    return text, tools


def response_json(resp: Any) -> tuple[str, list[str]]:
    """Final text and tool names of a non-streamed OpenAI or Anthropic response."""
    if not isinstance(resp, dict):
        return "", []
    choices = resp.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        msg = choices[0].get("message")
        return _openai_message(msg) if isinstance(msg, dict) else ("", [])
    if isinstance(resp.get("content"), list):
        return _anthropic_content(resp["content"])
    return "", []


def _sse_events(text: str) -> list[Any]:
    events = []
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if not data or data == "[DONE]":
            continue
        try:
            events.append(json.loads(data))
        except (ValueError, RecursionError):
            continue  # not an event (a line nested past the parser's depth included)
    return events


def response_sse(text: str) -> tuple[str, list[str]]:
    """Final text and tool names of an SSE stream: OpenAI chat chunks or Anthropic message events."""
    parts: list[str] = []
    tools: dict[Any, str] = {}
    for ev in _sse_events(text):
        if not isinstance(ev, dict):
            continue
        if isinstance(ev.get("choices"), list):  # OpenAI chat.completion.chunk
            for choice in ev["choices"]:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if not isinstance(delta, dict):
                    continue
                if isinstance(delta.get("content"), str):
                    parts.append(delta["content"])
                for call in _list(delta.get("tool_calls")):
                    if isinstance(call, dict):
                        key, name = ("o", repr(call.get("index"))), _dict(call.get("function")).get("name")
                        if name or key not in tools:
                            tools[key] = _tool_line(name)
        elif ev.get("type") == "content_block_start":  # Anthropic
            block = _dict(ev.get("content_block"))
            if block.get("type") == "tool_use":
                tools[("a", repr(ev.get("index")))] = _tool_line(block.get("name"))
            elif block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
        elif ev.get("type") == "content_block_delta":
            delta = _dict(ev.get("delta"))
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                parts.append(delta["text"])
    return "".join(parts).strip(), list(tools.values())
