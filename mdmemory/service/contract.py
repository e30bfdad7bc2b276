"""The cllama memory-plane shapes, pure: request bodies in, our values out.

Followed field for field from cllama ``internal/proxy/memory.go`` (``memoryRecallRequest``,
``memoryRetainRequest``, ``memoryBlock``, the limits ``maxRecallBlocks`` = 8, ``maxRecallTextBytes`` = 8 KiB,
``maxMemoryBlockBytes`` = 16 KiB, the blocked kinds ``raw_transcript`` / ``session_tail`` /
``transcript_tail``) and Clawdapus ``examples/reference-memory/main.go`` (``memoryForgetRequest``: ``agent_id,
pod, metadata, entry_ids, reason``; retain answers 202, forget 204).

What a retained turn keeps: the last user message that has text (OpenAI ``messages[].content`` as a string or
``[{type: "text", text}]``; Anthropic the same plus ``tool_result`` parts, which are dropped) from
``request_original`` (``request_effective`` carries the recalled memory the proxy injected), and the assistant's
final text from ``response.json`` (OpenAI ``choices[0].message``, Anthropic ``content[]``) or ``response.text``
(an SSE stream of either provider), with its tool calls summarised in one line and tool output dropped.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mdmemory.errors import InvalidArgumentError
from mdmemory.redaction import find_secrets

MAX_RECALL_BLOCKS = 8  # memory.go maxRecallBlocks
MAX_RECALL_TEXT_BYTES = 8 * 1024  # memory.go maxRecallTextBytes
MAX_RECALL_BODY_BYTES = 16 * 1024  # memory.go maxMemoryBlockBytes (the proxy reads at most this much)
BLOCKED_KINDS = frozenset({"raw_transcript", "session_tail", "transcript_tail"})  # memoryBlockedKinds
AGENT_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
ENTRY_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
SHORT_QUERY_CHARS = 40  # a latest user message shorter than this takes some of the turn before it
CONTEXT_CHARS = 200  # ... at most this much of it
MAX_QUERY_CHARS = 2000
MAX_JSON_DEPTH = 64  # a proxy entry nests about 10 deep (messages, parts, tool schemas); Python's parser ~1000
_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_REASON_BYTES = 1024  # a forget's reason, kept in sessions/.tombstones.jsonl
EARLIEST = datetime(1, 1, 2, tzinfo=UTC)  # entry.ts: a day inside the years datetime can hold at each end
LATEST = datetime(9999, 12, 30, tzinfo=UTC)
_MEMORY_BLOCK = re.compile(r"--- BEGIN MEMORY \(from [^)]*\) ---.*?--- END MEMORY ---", re.DOTALL)


@dataclass(frozen=True)
class Turn:
    """What retain keeps of one proxy turn."""

    user: str
    assistant: str
    tools: tuple[str, ...] = ()


def bad(field: str, problem: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{field}: {problem}")


def check_agent_id(value: Any, field: str = "agent_id") -> str:
    if not isinstance(value, str) or not value:
        raise bad(field, "required, a string of 1-64 letters, digits, '.', '_' or '-'")
    if not AGENT_ID.fullmatch(value) or value in (".", ".."):
        raise bad(field, f"{value[:80]!r} is not a valid agent id (1-64 of A-Z a-z 0-9 . _ -, not '.' or '..')")
    return value


def check_pod(value: Any, field: str = "pod") -> str | None:
    """A request's pod (cllama: metadata.json's ``pod``, left out when empty): None when absent, null or
    empty; else a name with an agent id's rule (it names folders and index files: ``<id>@<pod>``)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise bad(field, "expected a pod name (a string) or nothing")
    if not AGENT_ID.fullmatch(value) or value in (".", ".."):
        raise bad(field, f"{value[:80]!r} is not a valid pod name (1-64 of A-Z a-z 0-9 . _ -, not '.' or '..')")
    found = find_secrets(value)
    if found:  # a pod shows in telemetry, status and folder names (<id>@<pod>): a token there would leak
        raise bad(field, f"looks like a secret ({found[0][2]}), not a pod name. Fix: send the pod's name")
    return value


def check_object(body: Any, name: str = "body") -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad(name, "expected a JSON object")
    return body


def check_metadata(body: dict[str, Any]) -> dict[str, Any]:
    meta = body.get("metadata")
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise bad("metadata", "expected an object or null")
    tz = meta.get("timezone")
    if tz is not None and not isinstance(tz, str):
        raise bad("metadata.timezone", "expected an IANA time zone name such as 'Europe/Lisbon'")
    return meta


def check_entry(body: dict[str, Any]) -> dict[str, Any]:
    entry = body.get("entry")
    if not isinstance(entry, dict):
        raise bad("entry", "required, one session-history entry object")
    own = entry.get("id")
    if own not in (None, "") and (not isinstance(own, str) or not ENTRY_ID.fullmatch(own.strip())):
        raise bad("entry.id", "expected an id such as hist1_<sha256 hex> (1-128 of A-Z a-z 0-9 . _ : -)")
    if not isinstance(entry.get("ts"), str) or not entry["ts"]:
        raise bad("entry.ts", "required, an RFC 3339 time")
    check_time(entry["ts"], "entry.ts")
    for name in ("version", "status_code"):
        check_int64(entry.get(name), f"entry.{name}")
    usage = entry.get("usage")
    if isinstance(usage, dict):
        for name in ("prompt_tokens", "completion_tokens"):
            check_int64(usage.get(name), f"entry.usage.{name}")
    resp = entry.get("response")
    if resp is not None and not isinstance(resp, dict):
        raise bad("entry.response", 'expected {format: "json"|"sse", json?, text?}')
    if isinstance(resp, dict) and resp.get("format") not in (None, "", "json", "sse"):
        raise bad("entry.response.format", 'expected "json" or "sse"')
    return entry


def check_entry_ids(body: dict[str, Any]) -> list[str]:
    ids = body.get("entry_ids")
    if not isinstance(ids, list) or not ids:
        raise bad("entry_ids", "required, a non-empty list of entry ids")
    out = []
    for i, v in enumerate(ids):
        if not isinstance(v, str) or not ENTRY_ID.fullmatch(v.strip()):
            raise bad(f"entry_ids[{i}]", "expected an entry id such as hist1_<sha256 hex>")
        out.append(v.strip())
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise bad("reason", "expected a string")
    if isinstance(reason, str) and len(reason.encode("utf-8")) > MAX_REASON_BYTES:
        size = len(reason.encode("utf-8"))
        raise bad("reason", f"{size} bytes, over the limit of {MAX_REASON_BYTES}. Fix: say why in a sentence or two")
    return out


def check_time(value: str, field: str) -> datetime:
    """An RFC 3339 time within ``EARLIEST``..``LATEST`` (so that no time zone can move it out of the years a
    date can have); InvalidArgumentError naming ``field`` otherwise."""
    try:
        ts = datetime.fromisoformat(value)
    except ValueError:
        raise bad(field, f"{value[:40]!r} is not an RFC 3339 time such as 2026-11-23T10:00:00Z") from None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    try:
        in_range = EARLIEST <= ts.astimezone(UTC) <= LATEST
    except OverflowError:
        in_range = False
    if not in_range:
        raise bad(field, f"{value[:40]!r} is out of range: expected a time between years 0001 and 9999")
    return ts


def check_int64(value: Any, field: str) -> None:
    """A number the proxy's Go ``int`` can hold (other types are left to the caller's defaults)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        raise bad(field, f"{str(value)[:40]} is out of range: expected a 64-bit integer")


def check_json(body: dict[str, Any]) -> str | None:
    """What makes a parsed body unusable, naming the field (``entry.request_original.messages[0].content``):
    nesting deeper than ``MAX_JSON_DEPTH``, a number that is not finite (``1e400``), a lone UTF-16 surrogate
    (``"\\ud800"``: not text, it cannot be written as UTF-8). None when it is fine."""
    # Each entry: (value, depth, where) with ``where`` = (parent's where, key or index), turned into a field
    # name only for the one reported.
    stack: list[tuple[Any, int, Any]] = [(body, 0, None)]
    while stack:
        value, depth, where = stack.pop()
        if isinstance(value, dict | list):
            if depth >= MAX_JSON_DEPTH:
                return f"{_field(where)}: JSON nested deeper than {MAX_JSON_DEPTH} levels"
            if isinstance(value, dict):  # children pushed last first: the first in the text is reported
                for key, item in reversed(value.items()):
                    if _SURROGATE.search(key):
                        return f"{_field(where)}: a key holds a lone UTF-16 surrogate, which is not text; send UTF-8"
                    stack.append((item, depth + 1, (where, key)))
            else:
                stack.extend((value[i], depth + 1, (where, i)) for i in range(len(value) - 1, -1, -1))
        elif isinstance(value, str):
            if not value.isascii() and _SURROGATE.search(value):
                return f"{_field(where)}: a lone UTF-16 surrogate (such as \\ud800) is not text; send UTF-8"
        elif isinstance(value, float) and not math.isfinite(value):
            return f"{_field(where)}: {value} is not a finite number"
    return None


def _field(where: Any) -> str:
    parts: list[str] = []
    while where is not None:
        where, key = where
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    name = "".join(reversed(parts)).lstrip(".") or "body"
    return name if len(name) <= 100 else f"{name[:60]}...{name[-30:]}"


# -- message text --------------------------------------------------------------------------------------


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


def _strip_memory(text: str) -> str:
    return _MEMORY_BLOCK.sub("", text).strip()


def message_texts(messages: Any) -> list[tuple[str, str]]:
    """``(role, text)`` of every message with text, in order; tool messages and tool results dropped."""
    out: list[tuple[str, str]] = []
    if not isinstance(messages, list):
        return out
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            continue
        text = _strip_memory(content_text(m.get("content")))
        if text:
            out.append((m["role"], text))
    return out


def recall_query(body: dict[str, Any]) -> str:
    """The latest user message; when it is short, with a little of the message before it in front."""
    texts = message_texts(body.get("messages"))
    last = next((i for i in range(len(texts) - 1, -1, -1) if texts[i][0] == "user"), None)
    if last is None:
        return ""
    query = texts[last][1]
    if len(query) < SHORT_QUERY_CHARS and last > 0:
        query = texts[last - 1][1][-CONTEXT_CHARS:] + "\n" + query
    return query[-MAX_QUERY_CHARS:]


def _request(entry: dict[str, Any]) -> dict[str, Any]:
    for name in ("request_original", "request_effective"):
        req = entry.get(name)
        if isinstance(req, dict) and isinstance(req.get("messages"), list):
            return req
    return {}


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


def turn_of(entry: dict[str, Any]) -> Turn:
    """The last user message and the assistant's final text of a session-history entry."""
    texts = message_texts(_request(entry).get("messages"))
    user = next((t for role, t in reversed(texts) if role == "user"), "")
    resp: dict[str, Any] = entry["response"] if isinstance(entry.get("response"), dict) else {}
    text = resp["text"] if isinstance(resp.get("text"), str) else ""
    if resp.get("format") == "sse" or (not resp.get("format") and text):
        assistant, tools = response_sse(text)
    else:
        assistant, tools = response_json(resp.get("json"))
    return Turn(user, assistant, tuple(dict.fromkeys(tools)))
