"""The watch daemon's state file (``<index>.watch.json``), read back truthfully by ``status``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from mdmem.config.load import AgentConfig

STALE_HEARTBEAT_SECONDS = 15.0


def state_path(agent: AgentConfig) -> Path:
    return Path(f"{agent.store_path}.watch.json")


def read_watch_state(agent: AgentConfig) -> dict[str, Any]:
    """The daemon's view of this agent, checked against reality: a dead pid or old heartbeat is not running."""
    try:
        state = json.loads(state_path(agent).read_bytes())
        alive = pid_alive(int(state.get("pid", 0)))
        fresh = time.time() - float(state.get("heartbeat", 0)) < STALE_HEARTBEAT_SECONDS
    except (OSError, ValueError, RecursionError, TypeError, AttributeError, OverflowError):
        return {"running": False}  # missing, or not what a daemon writes (torn, edited): none is known to run
    if not (alive and fresh):
        return {"running": False, "lastPid": state.get("pid"), "lastHeartbeat": state.get("heartbeat")}
    return {"running": True, **{k: v for k, v in state.items() if k != "heartbeat"}}


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
