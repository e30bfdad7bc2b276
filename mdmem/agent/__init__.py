"""Agent-runtime integration: tool definitions and a safe dispatcher, the MCP server's tools, the
pre-compaction memory flush, session-start context and ``remember``.

Each module takes the agent's ``AgentConfig`` (or a ``Memory`` for the search tools) so ``Memory`` can
delegate to them in one line. Nothing here imports an embedding backend. The names below are imported
on first use (PEP 562): a command needs one of these modules, not all of them.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Imported now, unlike the others: the submodule shares the function's name, and importing it (as any
# caller may) would otherwise leave the module, not the function, as ``mdmem.agent.remember``.
from mdmem.agent.remember import remember

if TYPE_CHECKING:
    from mdmem.agent.context import SessionKind, session_context
    from mdmem.agent.dispatch import call_tool
    from mdmem.agent.flush import (
        FlushDecision,
        SessionStore,
        check_flush,
        record_compaction,
        record_flush,
        reset_session,
    )
    from mdmem.agent.schemas import tool_definitions

_HOMES = {
    "SessionKind": "context",
    "session_context": "context",
    "FlushDecision": "flush",
    "SessionStore": "flush",
    "check_flush": "flush",
    "record_compaction": "flush",
    "record_flush": "flush",
    "reset_session": "flush",
    "call_tool": "dispatch",
    "tool_definitions": "schemas",
}

__all__ = [
    "FlushDecision",
    "SessionKind",
    "SessionStore",
    "call_tool",
    "check_flush",
    "record_compaction",
    "record_flush",
    "remember",
    "reset_session",
    "session_context",
    "tool_definitions",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'mdmem.agent' has no attribute {name!r}")
    return getattr(import_module(f"mdmem.agent.{home}"), name)
