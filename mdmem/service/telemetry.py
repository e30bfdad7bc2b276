"""One JSON line per memory operation, with the proxy's field names and meanings, and never any memory text.

Fields follow cllama's ``memory_op`` log entries (``internal/logging`` ``LogMemoryOp``): ``{ts, type:
"memory_op", agent_id, memory_op, memory_status, memory_blocks, memory_bytes, memory_removed, ms}`` and the
request's ``pod`` when it named one; ``memory_status`` is ``succeeded`` or ``failed`` as there. For a recall,
``memory_blocks`` is the number of blocks answered and ``memory_bytes`` the UTF-8 length of the memory block
the proxy puts into the prompt for them (``injected_bytes``: cllama's ``formatMemoryBlocks``, for a service
named ``mdmem`` in the agent's memory.json, which the proxy does not send: another name changes it by the
difference in length), so the two logs can be compared line for line; ``memory_text_bytes`` is the length of
the blocks' texts alone. Ours only: ``memory_result`` (what a retain did), ``status_code`` and
``memory_warnings`` (codes such as ``timezone_unknown`` or ``truncated_user``, never a value the client sent).
"""

from __future__ import annotations

import json
import re
import sys
import threading
from datetime import UTC, datetime
from typing import Any, TextIO

from mdmem.service.contract import BLOCKED_KINDS, MAX_RECALL_BLOCKS, MAX_RECALL_TEXT_BYTES


class Telemetry:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self._lock = threading.Lock()

    def op(
        self,
        agent_id: str,
        op: str,
        status: str,
        ms: float,
        *,
        blocks: int | None = None,
        size: int | None = None,
        removed: int | None = None,
        result: str | None = None,
        http_status: int | None = None,
        text_size: int | None = None,
        warnings: list[str] | None = None,
        pod: str | None = None,
    ) -> None:
        line: dict[str, Any] = {
            "ts": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "type": "memory_op",
            "agent_id": agent_id,
            "memory_op": op,
            "memory_status": status,
            "memory_blocks": blocks,
            "memory_bytes": size,
            "memory_removed": removed,
            "ms": round(ms, 2),
        }
        if text_size is not None:
            line["memory_text_bytes"] = text_size
        if result is not None:
            line["memory_result"] = result
        if warnings:
            line["memory_warnings"] = warnings
        if http_status is not None:
            line["status_code"] = http_status
        if pod is not None:
            line["pod"] = pod
        text = json.dumps(line, ensure_ascii=False)
        with self._lock:
            try:
                self.stream.write(text + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass  # a closed log must not fail the request

    def failure(self, op: str, exc: BaseException) -> None:
        """Where an unexpected error came from: type and stack frames, never the message (it may quote text)."""
        import traceback

        frames = [f"{f.filename}:{f.lineno} {f.name}" for f in traceback.extract_tb(exc.__traceback__)][-8:]
        line = {"type": "memory_error", "memory_op": op, "error": type(exc).__name__, "frames": frames}
        with self._lock:
            try:
                self.stream.write(json.dumps(line) + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass


SERVICE_NAME = "mdmemory"  # the name cllama's block shows (memory.json's ``service``, which it does not send)


def recall_sizes(memories: list[dict[str, Any]], service: str = SERVICE_NAME) -> dict[str, Any]:
    """What a recall's line says of its answer: ``blocks``, ``size`` (``injected_bytes``) and ``text_size``."""
    texts = sum(len(str(m.get("text") or "").encode("utf-8")) for m in memories)
    return {"blocks": len(memories), "size": injected_bytes(memories, service), "text_size": texts}


_BLOCKED_SOURCES = frozenset({"raw_transcript", "session_tail"})
_SECRET = re.compile(r"sk-[A-Za-z0-9_-]{6,}")  # memory.go memorySecretPattern
_BEARER = re.compile(r"\bBearer[ \t]+[A-Za-z0-9._-]{8,}", re.I | re.ASCII)  # memoryBearerPattern (RE2: ASCII \b)


def _scrubbed(text: str) -> str:
    """cllama's ``scrubMemoryText``: what it does to a recalled text before injecting it."""
    text = _SECRET.sub("[redacted-secret]", text)
    return _BEARER.sub(lambda m: m[0].split()[0] + " [redacted]", text)


def injected_bytes(memories: list[dict[str, Any]], service: str) -> int:
    """The UTF-8 length of the memory block cllama builds from ``memories`` (``applyRecallMemoryPolicy`` then
    ``formatMemoryBlocks``, internal/proxy/memory.go): 0 when it injects none."""
    kept: list[str] = []
    total = 0
    for m in memories:
        kind, source = str(m.get("kind") or ""), str(m.get("source") or "")
        text = _scrubbed(str(m.get("text") or "").strip())
        if source.strip().lower() in _BLOCKED_SOURCES or kind.strip().lower() in BLOCKED_KINDS:
            continue
        size = len(text.encode("utf-8"))
        if not text or len(kept) >= MAX_RECALL_BLOCKS or total + size > MAX_RECALL_TEXT_BYTES:
            continue
        total += size
        prefix = [f"{k}={m[k]}" for k in ("kind", "source", "ts") if m.get(k)]
        if m.get("score"):
            prefix.append(f"score={float(m['score']):.2f}")
        kept.append(("[" + ", ".join(prefix) + "]\n" if prefix else "") + text + ("" if text.endswith("\n") else "\n"))
    if not kept:
        return 0
    block = f"--- BEGIN MEMORY (from {service}) ---\n" + "".join(kept) + "--- END MEMORY ---"
    return len(block.encode("utf-8"))
