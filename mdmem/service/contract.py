"""The cllama memory-plane shapes, pure: request bodies in, our values out.

Followed field for field from cllama ``internal/proxy/memory.go`` (``memoryRecallRequest``,
``memoryRetainRequest``, ``memoryBlock``, the limits ``maxRecallBlocks`` = 8, ``maxRecallTextBytes`` = 8 KiB,
``maxMemoryBlockBytes`` = 16 KiB, the blocked kinds ``raw_transcript`` / ``session_tail`` /
``transcript_tail``) and Clawdapus ``examples/reference-memory/main.go`` (``memoryForgetRequest``: ``agent_id,
pod, metadata, entry_ids, reason``; retain answers 202, forget 204).

What a retained turn keeps: the user messages since the last assistant message (else, in a tool loop, the last
user message that has text; OpenAI ``messages[].content`` as a string or ``[{type: "text", text}]``; Anthropic
the same plus ``tool_result`` parts, which are dropped) from ``request_original`` (``request_effective`` carries
the recalled memory the proxy injected), and the assistant's final text from ``response.json`` (OpenAI
``choices[0].message``, Anthropic ``content[]``) or ``response.text`` (an SSE stream of either provider), with
its tool calls summarised in one line and tool output dropped.
"""

from __future__ import annotations

import math
import re
from typing import Any

from mdmem.files.turns import ENTRY_ID, bad, check_time, texts_from_end
from mdmem.util.redaction import find_secrets

MAX_RECALL_BLOCKS = 8  # memory.go maxRecallBlocks
MAX_RECALL_TEXT_BYTES = 8 * 1024  # memory.go maxRecallTextBytes
MAX_RECALL_BODY_BYTES = 16 * 1024  # memory.go maxMemoryBlockBytes (the proxy reads at most this much)
BLOCKED_KINDS = frozenset({"raw_transcript", "session_tail", "transcript_tail"})  # memoryBlockedKinds
AGENT_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
SHORT_QUERY_CHARS = 40  # a latest user message shorter than this takes some of the turn before it
CONTEXT_CHARS = 200  # ... at most this much of it
MAX_QUERY_CHARS = 2000
MAX_JSON_DEPTH = 64  # a proxy entry nests about 10 deep (messages, parts, tool schemas); Python's parser ~1000
_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_REASON_BYTES = 1024  # a forget's reason, kept in sessions/.tombstones.jsonl


def check_agent_id(value: Any, field: str = "agent_id") -> str:
    if not isinstance(value, str) or not value:
        raise bad(field, "required, a string of 1-64 letters, digits, '.', '_' or '-'")
    if not AGENT_ID.fullmatch(value) or value in (".", ".."):
        raise bad(field, f"{value[:80]!r} is not a valid agent id (1-64 of A-Z a-z 0-9 . _ -, not '.' or '..')")
    found = find_secrets(value)
    if found:  # an id shows in telemetry, status and folder names: a token there would leak everywhere
        raise bad(field, f"looks like a secret ({found[0][2]}), not an agent id. Fix: send the agent's name")
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


# Fields the proxy always sends with these types (cllama memory.go ``memoryMetadata``, sessionhistory ``Entry``):
# another type is a client's mistake, answered 400 naming the field. Provider payloads inside the entry
# (request bodies, responses) vary by provider and stay tolerant (mdmem.files.payloads).
_METADATA_STRINGS = ("service", "type", "path", "requested_model", "timezone")
_ENTRY_STRINGS = ("ts", "claw_id", "path", "requested_model", "effective_provider", "effective_model", "status")
_ENTRY_OBJECTS = {
    "request_original": "the request body the agent sent, a JSON object",
    "request_effective": "the request body sent upstream, a JSON object",
    "response": '{format: "json"|"sse", json?, text?}',
    "usage": "{prompt_tokens?, completion_tokens?, reported_cost_usd?}",
}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return _number(value) and (isinstance(value, int) or (math.isfinite(value) and value.is_integer()))


def check_metadata(body: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` (an object, or absent) and ``pod`` (a string, or absent), the types the proxy sends."""
    pod = body.get("pod")
    if pod is not None and not isinstance(pod, str):
        raise bad("pod", f"expected a string (the pod's name), got {_kind(pod)}")
    meta = body.get("metadata")
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise bad("metadata", f"expected an object ({{service, type, path, timezone?}}), got {_kind(meta)}")
    for key in _METADATA_STRINGS:
        if meta.get(key) is not None and not isinstance(meta[key], str):
            example = " (an IANA time zone name such as 'Europe/Lisbon')" if key == "timezone" else ""
            raise bad(f"metadata.{key}", f"expected a string{example}, got {_kind(meta[key])}")
    if meta.get("policy_removed") is not None and not _integer(meta["policy_removed"]):
        raise bad("metadata.policy_removed", f"expected a count, got {_kind(meta['policy_removed'])}")
    return meta


def check_recall(body: dict[str, Any]) -> None:
    """``messages`` a list (the agent's messages, as its provider takes them) and ``system`` a string or a list
    of blocks, when present."""
    messages = body.get("messages")
    if messages is not None and not isinstance(messages, list):
        raise bad("messages", f"expected a list of messages ({{role, content}}), got {_kind(messages)}")
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise bad("system", f"expected a string or a list of content blocks, got {_kind(system)}")


def check_entry(body: dict[str, Any]) -> dict[str, Any]:
    entry = body.get("entry")
    if not isinstance(entry, dict):
        got = "nothing" if entry is None else _kind(entry)
        raise bad("entry", f"required, one session-history entry object (a history.jsonl line), got {got}")
    own = entry.get("id")
    if own not in (None, "") and (not isinstance(own, str) or not ENTRY_ID.fullmatch(own.strip())):
        raise bad("entry.id", "expected an id such as hist1_<sha256 hex> (1-128 of A-Z a-z 0-9 . _ : -)")
    if not isinstance(entry.get("ts"), str) or not entry["ts"]:
        raise bad("entry.ts", "required, an RFC 3339 time")
    check_time(entry["ts"], "entry.ts")
    for name in _ENTRY_STRINGS:
        if entry.get(name) is not None and not isinstance(entry[name], str):
            raise bad(f"entry.{name}", f"expected a string, got {_kind(entry[name])}")
    for name in ("version", "status_code"):
        if entry.get(name) is not None and not _integer(entry[name]):
            raise bad(f"entry.{name}", f"expected an integer, got {_kind(entry[name])}")
        check_int64(entry.get(name), f"entry.{name}")
    if entry.get("stream") is not None and not isinstance(entry["stream"], bool):
        raise bad("entry.stream", f"expected true or false, got {_kind(entry['stream'])}")
    for name, shape in _ENTRY_OBJECTS.items():
        if entry.get(name) is not None and not isinstance(entry[name], dict):
            raise bad(f"entry.{name}", f"expected {shape}, got {_kind(entry[name])}")
    if entry.get("tool_trace") is not None and not isinstance(entry["tool_trace"], list):
        raise bad("entry.tool_trace", f"expected a list of tool rounds, got {_kind(entry['tool_trace'])}")
    usage = entry.get("usage") or {}
    for name in ("prompt_tokens", "completion_tokens", "reported_cost_usd"):
        if usage.get(name) is not None and not _number(usage[name]):
            raise bad(f"entry.usage.{name}", f"expected a number, got {_kind(usage[name])}")
    for name in ("prompt_tokens", "completion_tokens"):
        check_int64(usage.get(name), f"entry.usage.{name}")
    resp = entry.get("response") or {}
    if resp.get("format") not in (None, "", "json", "sse"):
        raise bad("entry.response.format", 'expected "json" or "sse"')
    if resp.get("text") is not None and not isinstance(resp["text"], str):
        raise bad("entry.response.text", f"expected the SSE stream as a string, got {_kind(resp['text'])}")
    return entry


def _kind(value: Any) -> str:
    """What a JSON value is, for an error message (never the value: it may be memory text)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null" if value is None else type(value).__name__


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


def _query_messages(messages: Any) -> list[tuple[int, str, str]]:
    """What ``recall_query`` reads: the latest user message with text and the text message before it, last
    first (empty without a user message)."""
    found: list[tuple[int, str, str]] = []
    for item in texts_from_end(messages):
        if found or item[1] == "user":
            found.append(item)
        if len(found) == 2:
            break
    return found


def recall_query(body: dict[str, Any]) -> str:
    """The latest user message; when it is short, with a little of the message before it in front."""
    found = _query_messages(body.get("messages"))
    if not found:
        return ""
    query = found[0][2]
    if len(query) < SHORT_QUERY_CHARS and len(found) > 1:
        query = found[1][2][-CONTEXT_CHARS:] + "\n" + query
    return query[-MAX_QUERY_CHARS:]


def recall_messages(messages: Any) -> Any:
    """The end of ``messages`` that ``recall_query`` reads (``recall_query`` of it is the same): what a recall
    worker needs of a long conversation."""
    found = _query_messages(messages)
    return messages[found[-1][0] :] if found else []
