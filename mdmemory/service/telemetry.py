"""One JSON line per memory operation, with the proxy's field names and never any memory text.

Fields follow cllama's ``memory_op`` log entries (``internal/logging`` ``LogMemoryOp``): ``{ts, type:
"memory_op", agent_id, memory_op, memory_status, memory_blocks, memory_bytes, memory_removed, ms}`` and the
request's ``pod`` when it named one;
``memory_status`` is ``succeeded`` or ``failed`` as there, and ``memory_result`` says what a retain did.
"""

from __future__ import annotations

import json
import sys
import threading
from datetime import UTC, datetime
from typing import Any, TextIO


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
        if result is not None:
            line["memory_result"] = result
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
