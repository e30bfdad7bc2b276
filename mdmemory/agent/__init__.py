"""Agent-runtime integration: tool definitions and a safe dispatcher, the MCP server's tools, the
pre-compaction memory flush, session-start context and ``remember``.

Each module takes the agent's ``AgentConfig`` (or a ``Memory`` for the search tools) so ``Memory`` can
delegate to them in one line. Nothing here imports an embedding backend.
"""

from mdmemory.agent.context import SessionKind, session_context
from mdmemory.agent.flush import (
    FlushDecision,
    SessionStore,
    check_flush,
    record_compaction,
    record_flush,
    reset_session,
)
from mdmemory.agent.remember import remember
from mdmemory.agent.schemas import call_tool, tool_definitions

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
