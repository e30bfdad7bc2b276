"""The bodies cllama sends to a memory service, byte for byte, rebuilt in Python from its Go source.

Read from github.com/mostlydev/cllama (the tree the harness runs; ``file:line`` below are in it):

- ``internal/proxy/memory.go`` — ``memoryRecallRequest`` (47-53), ``memoryRetainRequest`` (55-60), the
  recall (74-99) and retain (203-274) calls, ``memoryMetadata`` (477-493), the retain scrubbing
  ``applyRetainMemoryPolicy`` / ``scrubMemoryJSON`` / ``scrubMemoryText`` (372-468) with
  ``memorySecretPattern`` / ``memoryBearerPattern`` (43-44), and on the way back ``applyRecallMemoryPolicy``
  (333-370) and ``formatMemoryBlocks`` (296-331) with the limits (20-25);
- ``internal/sessionhistory/recorder.go`` (``Entry``, 21-77) and ``id.go`` (``EnsureID``, ``IDFromJSON``);
- ``internal/proxy/handler.go`` — what the entry holds (``recordResponse`` 1343, the entry 1379-1417), what
  reaches the upstream (``handleOpenAI`` 655-720, ``handleAnthropicMessages`` 750-816, ``ensureStreamUsage``
  1491); ``internal/proxy/runtime_context.go`` (``joinRuntimeContext`` 7) and ``time_context.go`` (the
  ``Current time:`` line, 12-42); ``internal/feeds/inject.go`` (``AppendLateContext`` 220,
  ``AppendAnthropicLateContext`` 253); the entry's ``usage`` is tests/cllama_usage.py's;
- ``internal/agentctx/agentctx.go`` — metadata.json is read on every request (``Load`` 132) and
  ``MetadataString`` (215) keeps only string values.

Go's ``encoding/json`` is followed exactly: a decoded ``any`` is re-encoded with sorted object keys and
every number as a float64; a ``json.RawMessage`` is compacted, keeping key order and number literals;
strings escape ``<>&`` and U+2028/9. ``tests/test_cllama_shapes.py`` checks all of it against bodies
recorded from the real proxy (``tests/fixtures/cllama/``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from tests.cllama_usage import Usage, usage_for
from tests.gojson import go_compact, go_int, go_marshal, go_string

# --- scrubbing (memory.go 43-44, 372-468) ---------------------------------------------------------------

SECRET_RE = re.compile(r"sk-[A-Za-z0-9_-]{6,}")  # memorySecretPattern
# memoryBearerPattern: (?i)\bBearer[ \t]+[A-Za-z0-9._-]{8,} — RE2's \b is ASCII-only, hence re.ASCII
BEARER_RE = re.compile(r"\bBearer[ \t]+[A-Za-z0-9._-]{8,}", re.I | re.ASCII)


def scrub_text(text: str) -> tuple[str, int]:
    """``scrubMemoryText`` (memory.go:449): ``sk-…`` → ``[redacted-secret]``, then ``Bearer xxxxxxxx…`` →
    ``<Bearer as written> [redacted]``; the count of replacements. On an SSE stream this runs over the raw
    text, so a token cut by an event boundary is only redacted up to it (or not at all under 8 chars)."""
    removed = 0

    def secret(_: re.Match[str]) -> str:
        nonlocal removed
        removed += 1
        return "[redacted-secret]"

    def bearer(m: re.Match[str]) -> str:
        nonlocal removed
        removed += 1
        return m.group(0).split()[0] + " [redacted]"

    text = SECRET_RE.sub(secret, text)
    return BEARER_RE.sub(bearer, text), removed


def _scrub_value(value: Any) -> tuple[Any, int]:
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        total = 0
        for key in value:
            value[key], n = _scrub_value(value[key])
            total += n
        return value, total
    if isinstance(value, list):
        total = 0
        for i, child in enumerate(value):
            value[i], n = _scrub_value(child)
            total += n
        return value, total
    return value, 0


def scrub_json(raw: bytes) -> tuple[bytes, int]:
    """``scrubMemoryJSON`` (memory.go:407): decode, scrub every string (keys are kept), re-encode."""
    if not raw.strip():
        return raw, 0
    value, removed = _scrub_value(json.loads(raw))
    return go_marshal(value).encode(), removed


# --- metadata and the recall body (memory.go 74-99, 477-493) ---------------------------------------------


def memory_metadata(agent_meta: dict[str, Any], path: str, requested_model: str) -> dict[str, Any]:
    """``memoryMetadata``: ``service`` and ``type`` from the agent's metadata.json (``""`` when absent or not
    a string: ``MetadataString``), ``path`` is ``"openai"`` / ``"anthropic"`` for a recall and ``"retain"``
    for a retain, ``timezone`` passed on as written (cllama never validates it here; only its time line falls
    back to ``TZ`` then UTC, time_context.go:24), ``requested_model`` when not empty."""

    def s(key: str) -> str:
        v = agent_meta.get(key)
        return v if isinstance(v, str) else ""

    meta: dict[str, Any] = {"service": s("service"), "type": s("type"), "path": path}
    if s("timezone"):
        meta["timezone"] = s("timezone")
    if requested_model:
        meta["requested_model"] = requested_model
    return meta


def recall_body(agent_id: str, agent_meta: dict[str, Any], api: str, request: dict[str, Any]) -> bytes:
    """The ``/recall`` body for the agent's decoded request (``api``: ``"openai"`` or ``"anthropic"``).
    ``pod`` is metadata.json's ``pod`` (not ``CLAW_POD``), left out when empty; ``messages`` is the request's
    own (before cllama injects anything), ``system`` only on the Anthropic path; both left out when absent."""
    model = request.get("model")
    requested = model.strip() if isinstance(model, str) else ""
    parts = [f'"agent_id":{go_string(agent_id)}']
    pod = agent_meta.get("pod")
    if isinstance(pod, str) and pod:
        parts.append(f'"pod":{go_string(pod)}')
    if request.get("messages") is not None:
        parts.append(f'"messages":{go_marshal(request["messages"])}')
    if api == "anthropic" and request.get("system") is not None:
        parts.append(f'"system":{go_marshal(request["system"])}')
    parts.append(f'"metadata":{go_marshal(memory_metadata(agent_meta, api, requested))}')
    return ("{" + ",".join(parts) + "}").encode()


# --- the entry (sessionhistory/recorder.go 21-77, id.go) -------------------------------------------------


@dataclass
class Entry:
    """One ``sessionhistory.Entry`` as cllama builds it in ``recordResponse``. The raw fields are bytes:
    the agent's body as received, the body sent upstream, the upstream's reply as captured."""

    ts: str
    claw_id: str
    path: str
    requested_model: str
    effective_provider: str
    effective_model: str
    request_original: bytes
    request_effective: bytes
    response: bytes
    stream: bool
    usage: Usage = field(default_factory=Usage)
    status_code: int = 200
    version: int = 1
    status: str = ""
    id: str = ""

    def _encode(self, fields: dict[str, bytes], *, with_id: bool, raw: bool) -> bytes:
        def enc(b: bytes) -> str:
            return (go_compact(b) if raw else b).decode("utf-8", "surrogateescape")

        parts = [f'"version":{go_int(self.version)}']
        if with_id and self.id:
            parts.append(f'"id":{go_string(self.id)}')
        if self.status:
            parts.append(f'"status":{go_string(self.status)}')
        parts += [
            f'"ts":{go_string(self.ts)}',
            f'"claw_id":{go_string(self.claw_id)}',
            f'"path":{go_string(self.path)}',
            f'"requested_model":{go_string(self.requested_model)}',
            f'"effective_provider":{go_string(self.effective_provider)}',
            f'"effective_model":{go_string(self.effective_model)}',
            f'"status_code":{go_int(self.status_code)}',
            f'"stream":{"true" if self.stream else "false"}',
        ]
        for name in ("request_original", "request_effective"):
            if fields[name]:
                parts.append(f'"{name}":{enc(fields[name])}')
        if self.stream:
            text = fields["response"].decode("utf-8", "surrogateescape")
            response = '{"format":"sse"' + (f',"text":{go_string(text)}' if text else "") + "}"
        else:
            response = '{"format":"json"' + (f',"json":{enc(fields["response"])}' if fields["response"] else "") + "}"
        parts += [f'"response":{response}', f'"usage":{self.usage.go()}']
        return ("{" + ",".join(parts) + "}").encode("utf-8", "surrogateescape")

    def raw_fields(self) -> dict[str, bytes]:
        return {
            "request_original": self.request_original,
            "request_effective": self.request_effective,
            "response": self.response,
        }

    def history_line(self) -> bytes:
        """The ``history.jsonl`` line (``Recorder.Record``: ``json.Marshal(e)``), id included."""
        return self._encode(self.raw_fields(), with_id=True, raw=True)

    def ensure_id(self) -> str:
        """``EnsureID``: ``hist1_`` + sha256 of the entry marshalled without ``id`` (id.go)."""
        if not self.id.strip():
            canonical = self._encode(self.raw_fields(), with_id=False, raw=True)
            self.id = "hist1_" + hashlib.sha256(canonical).hexdigest()
        return self.id

    def scrubbed(self) -> tuple[dict[str, bytes], int]:
        """``applyRetainMemoryPolicy``: the three raw fields scrubbed (JSON ones re-encoded), and the count."""
        original, n1 = scrub_json(self.request_original)
        effective, n2 = scrub_json(self.request_effective)
        if self.stream:
            text, n3 = scrub_text(self.response.decode("utf-8", "surrogateescape"))
            response = text.encode("utf-8", "surrogateescape")
        else:
            response, n3 = scrub_json(self.response)
        return {"request_original": original, "request_effective": effective, "response": response}, n1 + n2 + n3


def retain_body(agent_id: str, agent_meta: dict[str, Any], entry: Entry) -> bytes:
    """The ``/retain`` body (memory.go:203-241): the entry gets its id from the raw fields first (cllama
    hashes before it scrubs), then is scrubbed; ``metadata.policy_removed`` is the number of replacements
    when there were any."""
    entry.ensure_id()
    fields, removed = entry.scrubbed()
    meta = memory_metadata(agent_meta, "retain", entry.requested_model)
    if removed > 0:
        meta["policy_removed"] = removed
    parts = [f'"agent_id":{go_string(agent_id)}']
    pod = agent_meta.get("pod")
    if isinstance(pod, str) and pod:
        parts.append(f'"pod":{go_string(pod)}')
    parts.append(f'"metadata":{go_marshal(meta)}')
    entry_json = entry._encode(fields, with_id=True, raw=False).decode("utf-8", "surrogateescape")
    parts.append(f'"entry":{entry_json}')
    return ("{" + ",".join(parts) + "}").encode("utf-8", "surrogateescape")


# --- what reaches the upstream (handler.go 654-815, feeds/inject.go) -------------------------------------

LATE_CONTEXT_WRAPPER = (
    "[Runtime context for this invocation. This is not a user instruction. "
    "Use it only as infrastructure-provided context for the next reply.]"
)


def runtime_context(*sections: str) -> str:
    """``joinRuntimeContext``: the non-blank sections, trimmed, joined by a blank line (memory block first,
    then context blocks, feeds, and the ``Current time: …`` line)."""
    return "\n\n".join(s.strip() for s in sections if s.strip())


def effective_request(request: dict[str, Any], api: str, upstream_model: str, context: str) -> bytes:
    """The body cllama sends upstream (and records as ``request_effective``) for a decoded agent request,
    without managed tools or policy: the runtime context as a late system message before the last user
    message (OpenAI) or a user text block after it (Anthropic), ``stream_options.include_usage`` on a
    streamed OpenAI request, the provider prefix dropped from ``model``; sorted keys, float64 numbers."""
    payload = json.loads(json.dumps(request))
    messages = payload.get("messages")
    if context.strip() and isinstance(messages, list):
        text = LATE_CONTEXT_WRAPPER + "\n\n" + context
        users = [i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"]
        if api == "openai":
            at = users[-1] if users else len(messages)
            messages.insert(at, {"role": "system", "content": text})
        else:
            at = users[-1] + 1 if users else len(messages)
            messages.insert(at, {"role": "user", "content": [{"type": "text", "text": text}]})
    if api == "openai" and payload.get("stream") is True:
        opts = payload.get("stream_options") if isinstance(payload.get("stream_options"), dict) else {}
        payload["stream_options"] = {**opts, "include_usage": True}
    payload["model"] = upstream_model
    return go_marshal(payload).encode()


# --- what comes back from recall (memory.go 296-370) -----------------------------------------------------

MAX_RECALL_BLOCKS = 8
MAX_RECALL_TEXT_BYTES = 8 * 1024
MAX_RECALL_BODY_BYTES = 16 * 1024  # maxMemoryBlockBytes: a bigger answer is dropped whole (status failed)
RECALL_TIMEOUT_MS = 300  # defaultRecallTimeout, unless memory.json's recall.timeout_ms is > 0
RETAIN_TIMEOUT_MS = 2000  # defaultRetainTimeout; no retry
_BLOCKED_SOURCES = {"raw_transcript", "session_tail"}
_BLOCKED_KINDS = {"raw_transcript", "session_tail", "transcript_tail"}


def apply_recall_memory_policy(memories: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Blocked kinds/sources dropped, each text trimmed and scrubbed, empty ones dropped, then at most 8
    blocks and 8 KiB of text (UTF-8 bytes; a block that would pass it is dropped, later smaller ones may
    still fit). Returns the kept blocks and how many were removed."""
    kept: list[dict[str, Any]] = []
    removed = total = 0
    for m in memories:
        if str(m.get("source") or "").strip().lower() in _BLOCKED_SOURCES:
            removed += 1
            continue
        if str(m.get("kind") or "").strip().lower() in _BLOCKED_KINDS:
            removed += 1
            continue
        text, _ = scrub_text(str(m.get("text") or "").strip())
        size = len(text.encode())
        if not text or len(kept) >= MAX_RECALL_BLOCKS or total + size > MAX_RECALL_TEXT_BYTES:
            removed += 1
            continue
        kept.append({**m, "text": text})
        total += size
    return kept, removed


def format_memory_blocks(service: str, memories: list[dict[str, Any]]) -> str:
    """``formatMemoryBlocks``: what goes into the prompt (its UTF-8 length is the log's ``memory_bytes``)."""
    if not memories:
        return ""
    out = [f"--- BEGIN MEMORY (from {service}) ---\n"]
    for m in memories:
        text = str(m.get("text") or "").strip()
        if not text:
            continue
        prefix = [f"{k}={m[k]}" for k in ("kind", "source", "ts") if m.get(k)]
        if m.get("score"):
            prefix.append(f"score={float(m['score']):.2f}")
        if prefix:
            out.append("[" + ", ".join(prefix) + "]\n")
        out.append(text if text.endswith("\n") else text + "\n")
    out.append("--- END MEMORY ---")
    return "".join(out)


# --- one turn, end to end -----------------------------------------------------------------------------


@dataclass
class Turn:
    recall: bytes
    retain: bytes
    entry: Entry


def turn(
    agent_id: str,
    agent_meta: dict[str, Any],
    request: bytes,
    response: bytes,
    *,
    ts: str,
    provider_model: str,
    sse: bool,
    context: str = "",
) -> Turn:
    """Both bodies cllama sends for one agent request: ``request`` is the agent's body as sent,
    ``response`` the upstream's reply, ``provider_model`` e.g. ``"openai/gpt-4o-mini"`` or
    ``"anthropic/claude-haiku-4-5"``; ``context`` the runtime context put into the upstream request."""
    decoded = json.loads(request)
    provider, _, model = provider_model.partition("/")
    api = "anthropic" if provider == "anthropic" else "openai"
    effective = effective_request(decoded, api, model, context)
    entry = Entry(
        ts=ts,
        claw_id=agent_id,
        path="/v1/messages" if api == "anthropic" else "/v1/chat/completions",
        requested_model=str(decoded.get("model", "")).strip(),
        effective_provider=provider,
        effective_model=model,
        request_original=request,
        request_effective=effective,
        response=response,
        stream=sse,
        usage=usage_for(provider, model, response, sse),
    )
    return Turn(recall_body(agent_id, agent_meta, api, decoded), retain_body(agent_id, agent_meta, entry), entry)
