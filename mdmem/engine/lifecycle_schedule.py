"""``lifecycle.schedule`` (docs/lifecycle.md): when ``mdmem watch`` and ``mdmem serve`` apply an agent's lifecycle.

An apply is due once the schedule's period has passed since the last apply of the agent, by a person or by a
schedule, as its receipts say (mdmem.engine.archiving): so a restarted daemon does not apply again early, and a
watch and a serve of the same agent do not both apply in one period. A failed apply is tried again
``RETRY_SECONDS`` later. The receipts are read at most once per period (the due time is remembered: an apply
by someone else can only move it later, and it is read again then).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mdmem.engine.archiving import receipts_file

if TYPE_CHECKING:
    from mdmem.config.settings import AgentConfig

SCHEDULE_SECONDS = {"hourly": 3600.0, "daily": 86_400.0, "weekly": 7 * 86_400.0}
RETRY_SECONDS = 600.0  # a scheduled apply that failed waits this long before the next try


def next_due(agent: AgentConfig) -> float:
    """When ``lifecycle.schedule`` asks for the next apply (a ``time.time()`` value): a period after the last
    apply the receipts hold, 0 when none ran yet, infinity when the schedule is ``off``."""
    period = SCHEDULE_SECONDS.get(agent.memory_search.lifecycle.schedule)
    if period is None:
        return math.inf
    try:
        lines = receipts_file(agent).read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0.0
    for line in reversed(lines):
        try:
            receipt = json.loads(line)
        except ValueError:
            continue  # a torn line
        if (
            isinstance(receipt, dict)
            and receipt.get("action") == "apply"
            and isinstance(receipt.get("at"), int | float)
        ):
            return float(receipt["at"]) + period
    return 0.0


class Schedule:
    """One agent's schedule in a long-running process: ``run_if_due`` is called often (every heartbeat or
    background pass) and calls ``apply`` (the agent's ``Memory.lifecycle("apply")``) only when it is due."""

    def __init__(self, agent: AgentConfig, clock: Callable[[], float] = time.time) -> None:
        self.agent = agent
        self.clock = clock
        self.not_before = 0.0

    def run_if_due(self, apply: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        """The event to log when an apply ran or failed (``{"event": "lifecycle", "agent", "archived",
        "revived", "skipped"}`` or ``{"event": "error", "agent", "error"}``), None when none was due."""
        now = self.clock()
        if now < self.not_before:
            return None
        due = next_due(self.agent)
        if now < due:
            self.not_before = due
            return None
        try:
            done = apply()
        except Exception as exc:  # noqa: BLE001 - the process goes on; tried again in RETRY_SECONDS
            self.not_before = now + RETRY_SECONDS
            from mdmem.util.redaction import redact  # a path in the message may name a secret

            return {"event": "error", "agent": self.agent.id, "error": redact(f"lifecycle apply failed: {exc}")}
        self.not_before = 0.0  # its receipt says when the next one is due
        receipt = done["receipt"]
        return {
            "event": "lifecycle",
            "agent": self.agent.id,
            "archived": sum(n for by in receipt["archived"].values() for n in by.values()),
            "revived": sum(receipt["revived"].values()),
            "skipped": sum(receipt["skipped"].values()),
        }
