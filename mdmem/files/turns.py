"""What a retained turn is: the user's message and the assistant's answer of one proxy entry (cllama's session
history), read from ``request_original`` and the response (mdmem.files.payloads), and the checks a retained
entry's id and time pass. The session files (mdmem.files.sessionlog, .sessionblocks, .retained) are made of
these; the memory service's request checks (mdmem.service.contract) use them.

Bad values raise ``InvalidArgumentError`` naming the field (the service answers it with 400).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from mdmem.files.payloads import content_text, response_json, response_sse
from mdmem.util.errors import InvalidArgumentError

ENTRY_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


EARLIEST = datetime(1, 1, 2, tzinfo=UTC)  # entry.ts: a day inside the years datetime can hold at each end


LATEST = datetime(9999, 12, 30, tzinfo=UTC)


_MEMORY_BEGIN_LITERAL = "--- BEGIN MEMORY (from "


_MEMORY_BEGIN = re.compile(r"--- BEGIN MEMORY \(from [^)]{0,200}\) ---")


_MEMORY_END = "--- END MEMORY ---"


@dataclass(frozen=True)
class Turn:
    """What retain keeps of one proxy turn."""

    user: str
    assistant: str
    tools: tuple[str, ...] = ()


def bad(field: str, problem: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{field}: {problem}")


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


def _strip_memory(text: str) -> str:
    """``text`` without the memory blocks the proxy injected (``--- BEGIN MEMORY (from …) ---`` to the next
    ``--- END MEMORY ---``); linear in the text, however many unclosed beginnings it holds."""
    if _MEMORY_BEGIN_LITERAL not in text:
        return text.strip()
    out, pos = [], 0
    while (m := _MEMORY_BEGIN.search(text, pos)) is not None:
        end = text.find(_MEMORY_END, m.end())
        if end < 0:
            break
        out.append(text[pos : m.start()])
        pos = end + len(_MEMORY_END)
    out.append(text[pos:])
    return "".join(out).strip()


def texts_from_end(messages: Any) -> Iterator[tuple[int, str, str]]:
    """``(index, role, text)`` of the user and assistant messages with text, last first (tool messages and tool
    results have none); read lazily, so that the last turn of a long conversation costs only itself."""
    if not isinstance(messages, list):
        return
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            continue
        text = _strip_memory(content_text(m.get("content")))
        if text:
            yield i, m["role"], text


def message_texts(messages: Any) -> list[tuple[str, str]]:
    """``(role, text)`` of every message with text, in order; tool messages and tool results dropped."""
    return [(role, text) for _, role, text in reversed(list(texts_from_end(messages)))]


def _request(entry: dict[str, Any]) -> dict[str, Any]:
    for name in ("request_original", "request_effective"):
        req = entry.get(name)
        if isinstance(req, dict) and isinstance(req.get("messages"), list):
            return req
    return {}


def turn_of(entry: dict[str, Any]) -> Turn:
    """The last user message and the assistant's final text of a session-history entry."""
    messages = _request(entry).get("messages")
    user = _user_text(messages) or next((text for _, role, text in texts_from_end(messages) if role == "user"), "")
    resp: dict[str, Any] = entry["response"] if isinstance(entry.get("response"), dict) else {}
    text = resp["text"] if isinstance(resp.get("text"), str) else ""
    if resp.get("format") == "sse" or (not resp.get("format") and text):
        assistant, tools = response_sse(text)
    else:
        assistant, tools = response_json(resp.get("json"))
    return Turn(user, assistant, tuple(dict.fromkeys(tools)))


def _user_text(messages: Any) -> str:
    """The text of the user messages after the last assistant message (two sent in a row are both new), or ""
    when they have none (a tool result answering the assistant: the question is the last user text before)."""
    if not isinstance(messages, list):
        return ""
    texts: list[str] = []
    for m in reversed(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "assistant":
            break
        if role == "user" and (text := _strip_memory(content_text(m.get("content")))):
            texts.append(text)
    return "\n\n".join(reversed(texts))


def empty_turn(entry: dict[str, Any]) -> InvalidArgumentError:
    """The error for an entry whose turn holds nothing to retain, saying what is missing where."""
    where = []
    if not _request(entry):
        where.append("entry.request_original has no messages")
    else:
        where.append("entry.request_original.messages has no user message with text")
    resp = entry.get("response")
    if not resp:
        where.append("entry.response is missing")
    else:
        where.append("entry.response holds no assistant text or tool call")
    return bad(
        "entry",
        f"nothing to retain ({'; '.join(where)}). Fix: send the turn's request and response, as the proxy's "
        "session history records them",
    )
