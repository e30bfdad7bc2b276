"""``recall``: the proxy's question in, ``{"memories": [{text, score, kind, source, ts}]}`` out.

Built by the ContextPack (``Memory.pack``) within the proxy's limits (cllama ``internal/proxy/memory.go``:
at most ``maxRecallBlocks`` 8 blocks, ``maxRecallTextBytes`` 8 KiB of text in all, and a response body of at
most ``maxMemoryBlockBytes`` 16 KiB, beyond which the proxy drops the whole answer). Every text ends with its
citation (``Source: path#Lx-Ly``) and passes through redaction; no block has a kind the proxy drops. A
retained turn reads ``**User:** … **Assistant:** …`` as it was said: no entry id, no marker, no escape
(the pack shows session day files so: mdmem.files.sessionview.prompt_text).
"""

from __future__ import annotations

import json
import re
from typing import Any

from mdmem.files.supersession import LINE_LEAD
from mdmem.memory import Memory
from mdmem.service.contract import (
    BLOCKED_KINDS,
    MAX_RECALL_BLOCKS,
    MAX_RECALL_BODY_BYTES,
    MAX_RECALL_TEXT_BYTES,
    recall_query,
)
from mdmem.util.redaction import redact

RECALL_BUDGET_TOKENS = 1500  # about 6 KiB of English: leaves room for the citations within 8 KiB


_EMPTY_BODY = len(b'{"memories": []}')
# What the proxy replaces in each recalled text before it counts the text's bytes (memory.go
# memorySecretPattern, memoryBearerPattern; RE2's \b is ASCII): "sk-" and 6 characters grow to 17.
_PROXY_SCRUBS = (
    (re.compile(r"sk-[A-Za-z0-9_-]{6,}"), "[redacted-secret]"),
    (re.compile(r"\bBearer[ \t]+[A-Za-z0-9._-]{8,}", re.I | re.ASCII), "Bearer [redacted]"),
)


def proxy_size(text: str) -> int:
    """The UTF-8 bytes ``text`` counts for in the proxy's 8 KiB, after its own scrubbing."""
    for pattern, marker in _PROXY_SCRUBS:
        text = pattern.sub(marker, text)
    return len(text.encode("utf-8"))


def _json_size(block: dict[str, Any]) -> int:
    """Bytes ``block`` takes in the response body (``json.dumps`` as the service writes it)."""
    return len(json.dumps(block, ensure_ascii=False).encode("utf-8"))


def memories_of(pack: dict[str, Any]) -> list[dict[str, Any]]:
    """The pack's items as proxy memory blocks, within the limits."""
    out: list[dict[str, Any]] = []
    text_bytes = 0
    body_bytes = _EMPTY_BODY
    for item in pack.get("items", []):
        kind = str(item.get("kind") or "")
        if kind in BLOCKED_KINDS or len(out) >= MAX_RECALL_BLOCKS:
            continue
        body = redact(str(item.get("text", "")).strip())
        if not body:
            continue  # nothing but a session block's heading or closing line: nothing to say
        text = "\n".join([body, *_implicit_notes(item), f"Source: {item.get('ref')}"])
        size = proxy_size(text)
        if text_bytes + size > MAX_RECALL_TEXT_BYTES:
            continue
        block = {"text": text, "score": round(float(item.get("score") or 0.0), 4), "kind": kind}
        block["source"] = str(item.get("source") or "")
        if item.get("date"):
            block["ts"] = str(item["date"])
        grown = body_bytes + _json_size(block) + (2 if out else 0)  # ", " between blocks
        if grown > MAX_RECALL_BODY_BYTES:
            continue
        out.append(block)
        text_bytes += size
        body_bytes = grown
    return out


def _implicit_notes(item: dict[str, Any]) -> list[str]:
    """A line for each line of ``item`` superseded without a mark in the file (mdmem.search.grouping): the block's
    text is all the proxy passes on, and a mark written in the file is already in it."""
    lines = str(item.get("text", "")).split("\n")
    start = int(item.get("startLine") or 1)
    notes = []
    for entry in item.get("supersededBy") or []:
        if not entry.get("implicit"):
            continue
        n = int(entry.get("line") or 0) - start
        said = LINE_LEAD.sub("", lines[n]).strip() if 0 <= n < len(lines) else ""  # no bullet, no stamp
        said = redact(said if len(said) <= 80 else said[:79] + "…")
        when = f" since {entry['date']}" if entry.get("date") else ""
        notes.append(f"Superseded{when} by {entry.get('by')}: {said}")
    return notes


def recall_info(result: dict[str, Any]) -> dict[str, Any]:
    """What telemetry says of a recall: how many blocks and bytes of text (never the text)."""
    memories = result["memories"]
    return {"blocks": len(memories), "size": sum(len(m["text"].encode("utf-8")) for m in memories)}


def recall(memory: Memory, body: dict[str, Any]) -> dict[str, Any]:
    return recall_answer(memory, body)[0]


def recall_answer(memory: Memory, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``recall``, and how its search answered: ``hybrid`` or ``vector``; ``keyword`` when the query could not
    be embedded in time (the deadline in force, ``deadline.until``) or there is no provider; ``empty`` for
    a body without a user message."""
    query = recall_query(body)
    if not query.strip():
        return {"memories": []}, "empty"
    pack = memory.pack(query, budget_tokens=RECALL_BUDGET_TOKENS, max_items=MAX_RECALL_BLOCKS)
    return {"memories": memories_of(pack)}, str(pack.get("mode") or "keyword")


WARM_QUERY = "what do we know about this project and its people?"


def warm_body(agent_id: str) -> dict[str, Any]:
    """A recall body for the one query that loads everything a first recall would."""
    return {"agent_id": agent_id, "messages": [{"role": "user", "content": WARM_QUERY}], "metadata": {}}
