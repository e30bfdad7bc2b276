"""``mdmem mcp``: memory_search, memory_get, memory_pack, memory_truth, memory_status and the write tool
memory_remember over MCP on stdio; ``--read-only`` leaves memory_remember out (and refuses a call of it).

Uses the official MCP Python SDK (``pip install 'mdmem[mcp]'``, SDK 2.x low-level ``Server``). The tools
are the ones ``mdmem tools --format mcp --write`` prints (without ``--write`` when read-only) and every call
goes through ``call_tool``, so a call never fails at the protocol level: a tool error comes back as a result
with ``isError`` and an ``error`` field. Each result carries the JSON object both as ``structuredContent`` and
as one text block.

Startup is cheap: ``Memory`` opens its index and embedding model on first use, so the model loads on the
first memory_search, not before ``initialize``. Tool calls run one at a time in a worker thread, keeping
the event loop free for pings and cancellations.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from mdmem import __version__
from mdmem.agent.context import KINDS, SessionKind
from mdmem.agent.dispatch import call_tool
from mdmem.agent.schemas import ALL_TOOLS, READ_TOOLS, tool_definitions
from mdmem.util.errors import ConfigError, MdMemoryError

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from mdmem.memory import Memory

INSTALL_HINT = "the MCP server needs the MCP Python SDK 2.x. Fix: pip install 'mdmem[mcp]' (or 'mcp>=2')."


def instructions(memory: Memory, read_only: bool = False) -> str:
    """The server's instructions to the client model."""
    text = (
        f"Long-term memory of agent '{memory.agent.id}' (Markdown files in its workspace). Before answering "
        "about earlier work, decisions, dates, people, preferences or to-dos, call memory_search; then call "
        "memory_get with a result's path and lines to read more, or call memory_pack for a compact cited bundle "
        "of the relevant lines. Cite path#Lstart-Lend."
    )
    if read_only:
        return text
    return text + (
        " To store a new fact call memory_remember; when it replaces a fact already in memory, pass supersedes "
        "with the old line's ref (path#L<n>, from memory_search or memory_truth), so the old line is marked as history."
    )


def served_tools(read_only: bool = False) -> tuple[str, ...]:
    """The tools ``mdmem mcp`` offers: every one, or only those that read (``--read-only``)."""
    return READ_TOOLS if read_only else ALL_TOOLS


def build_server(memory: Memory, session_kind: SessionKind = "main", *, read_only: bool = False) -> Server[Any]:
    """An MCP ``Server`` whose tools answer from ``memory``; nothing is opened or loaded until a call.

    ``session_kind`` is the kind of session this server serves (``main`` or ``group``: one server per
    session kind), which decides memory_search citations under ``query.citations: "auto"``. ``read_only``:
    memory_remember is neither listed nor run (a call of it is answered with an error result).
    """
    try:
        import anyio
        import mcp.types as types
        from mcp.server.lowlevel import Server
    except ImportError:
        raise MdMemoryError(INSTALL_HINT) from None

    names = served_tools(read_only)
    tools = [types.Tool.model_validate(t) for t in tool_definitions("mcp", names)]
    one_at_a_time = anyio.CapacityLimiter(1)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def run_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = params.arguments or {}
        result = await anyio.to_thread.run_sync(
            partial(call_tool, session_kind=session_kind, tools=names),
            memory,
            params.name,
            arguments,
            limiter=one_at_a_time,
        )
        text = json.dumps(result, ensure_ascii=False)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=result,
            is_error="error" in result,
        )

    return Server(
        "mdmem",
        version=__version__,
        instructions=instructions(memory, read_only),
        on_list_tools=list_tools,
        on_call_tool=run_tool,
    )


async def serve(memory: Memory, session_kind: SessionKind = "main", read_only: bool = False) -> None:
    """Serve ``memory`` on stdin/stdout until the client closes the connection."""
    try:
        from mcp.server.stdio import stdio_server
    except ImportError:
        raise MdMemoryError(INSTALL_HINT) from None
    server = build_server(memory, session_kind, read_only=read_only)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def run(memory: Memory, session_kind: SessionKind = "main", *, read_only: bool = False) -> None:
    """Blocking ``serve``: returns when the client disconnects."""
    import anyio

    anyio.run(serve, memory, session_kind, read_only)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mdmem.mcp.server [--config FILE] [--agent ID] [--kind K] [--read-only]``; messages go to
    stderr only."""
    from mdmem.util.threads import single_threaded_blas

    single_threaded_blas()  # before anything imports numpy
    from mdmem.memory import Memory

    parser = argparse.ArgumentParser(prog="mdmem mcp", description="Serve agent memory over MCP (stdio).")
    parser.add_argument("--config", help="config file (default: $MDMEMORY_CONFIG or ~/.mdmemory/config.json5)")
    parser.add_argument("--agent", help="agent id from agents.list (default: the default agent)")
    parser.add_argument("--kind", choices=KINDS, default="main", help="session kind served (citations auto)")
    parser.add_argument("--read-only", action="store_true", help="leave out memory_remember: the tools only read")
    args = parser.parse_args(argv)
    try:
        memory = Memory.open(agent=args.agent, config_path=args.config)
    except ConfigError as exc:
        print(f"mdmem: error: {exc}", file=sys.stderr)
        return 2
    try:
        run(memory, args.kind, read_only=args.read_only)
    except MdMemoryError as exc:
        print(f"mdmem: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        memory.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
