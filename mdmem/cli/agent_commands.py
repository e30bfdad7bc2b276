"""Agent-integration subcommands: ``pack``, ``tools``, ``mcp``, ``flush check|done|compacted|reset``,
``context``, ``remember``. ``register`` adds them to the ``mdmem`` parser; like every command in ``cli.py`` each
handler takes ``(args, mem)`` and returns ``(result, formatter)``, and ``cli.main`` prints the result as
JSON (``--json``) or through the formatter.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mdmem import agent  # its functions load on first use: each command imports only its own module
from mdmem.agent.context import KINDS
from mdmem.agent.schemas import FORMATS, PACK_KINDS, tool_definitions

if TYPE_CHECKING:
    from mdmem.memory import Memory

Result = tuple[dict[str, Any], Callable[[dict[str, Any]], str]]

# `flush check` without --context-window: the window of the Claude models Clawdbot runs by default. A runtime
# knows its model's; the output says which one was used and where it came from.
DEFAULT_CONTEXT_WINDOW = 200_000


def register(sub: argparse._SubParsersAction[Any], common: argparse.ArgumentParser) -> None:
    """Add the agent-integration subcommands to ``sub`` (the ``mdmem`` subparsers); ``common`` is the
    parent parser holding ``--config``, ``--agent`` and ``--json``."""
    p = sub.add_parser("pack", parents=[common], help="a cited context bundle within a token budget (memory_pack)")
    p.add_argument("query")
    p.add_argument("--budget-tokens", type=int, default=1000, metavar="N", help="default: 1000")
    p.add_argument("--max-items", type=int, default=None, metavar="N", help="default: no cap")
    p.add_argument("--source", dest="sources", action="append", choices=PACK_KINDS, help="only these kinds")
    p.add_argument("--trace", action="store_true", help="add a receipt for every candidate (no memory text)")
    p.add_argument("--neighbors", type=int, default=0, metavar="0|1", help="1: consider the notes matches link to/from")
    p.add_argument("--include-archive", action="store_true", help="also pack from memory/archive/ (archived files)")
    p.set_defaults(func=cmd_pack, check=check_pack)

    p = sub.add_parser("tools", parents=[common], help="print the tool definitions for an agent runtime")
    p.add_argument("--format", dest="tool_format", choices=FORMATS, default="openai", help="default: openai")
    p.add_argument("--write", action="store_true", help="add memory_remember, which writes the memory files")
    p.set_defaults(func=cmd_tools, needs_memory=False)

    p = sub.add_parser("mcp", parents=[common], help="serve the memory tools over MCP (stdio)")
    p.add_argument("--kind", choices=KINDS, default="main", help="session kind served: main or group (citations)")
    p.add_argument("--read-only", action="store_true", help="leave out memory_remember: the tools only read")
    p.set_defaults(func=cmd_mcp)

    flush = sub.add_parser("flush", help="pre-compaction memory flush: check, record, reset")
    fsub = flush.add_subparsers(dest="flush_command", required=True, parser_class=type(flush))
    p = fsub.add_parser("check", parents=[common], help="is the silent flush turn due now?")
    p.add_argument("session_key", metavar="SESSION_KEY", help="the runtime's session key")
    p.add_argument(
        "--total-tokens",
        "--tokens",
        dest="total_tokens",
        type=int,
        required=True,
        metavar="N",
        help="the session's current context size estimate, in tokens",
    )
    p.add_argument(
        "--context-window",
        type=int,
        default=None,
        metavar="N",
        help=f"the model's context window in tokens (default: {DEFAULT_CONTEXT_WINDOW}, Claude's)",
    )
    p.add_argument("--read-only", action="store_true", help="the workspace is read-only here: skip the flush")
    p.add_argument("--today", metavar="YYYY-MM-DD", help="date for the prompts (default: today)")
    p.set_defaults(func=cmd_flush_check)
    for name, func, text in (
        ("done", cmd_flush_done, "record that the flush turn ran"),
        ("compacted", cmd_flush_compacted, "record that the runtime compacted the session"),
        ("reset", cmd_flush_reset, "the session was reset: clear its flush and compaction records"),
    ):
        p = fsub.add_parser(name, parents=[common], help=text)
        p.add_argument("session_key", metavar="SESSION_KEY", help="the runtime's session key")
        p.set_defaults(func=func)

    p = sub.add_parser("context", parents=[common], help="session-start context: recent daily logs (+ MEMORY.md)")
    p.add_argument("--kind", choices=KINDS, default="main", help="main (private, gets MEMORY.md) or group")
    p.add_argument("--today", metavar="YYYY-MM-DD", help="default: today in agents.defaults.userTimezone")
    p.add_argument("--max-chars", type=int, metavar="N", help="default: sessionContext.maxChars")
    p.set_defaults(func=cmd_context)

    p = sub.add_parser("remember", parents=[common], help="append a timestamped note to today's log")
    p.add_argument("text", nargs="+", metavar="TEXT")
    p.add_argument("--long-term", action="store_true", help="append to MEMORY.md instead")
    p.add_argument(
        "--supersedes",
        metavar="REF",
        help="the note replaces this line (path#L<n>), which gets marked with a link to it",
    )
    p.set_defaults(func=cmd_remember)


# -- handlers ----------------------------------------------------------------------------------------------


def check_pack(args: argparse.Namespace) -> None:
    """memory_pack's bounds, checked before the config or the index is opened."""
    from mdmem.pack.arguments import check_pack_arguments  # here: the pack modules are for this command only

    names = {"query": "QUERY", "budgetTokens": "--budget-tokens", "maxItems": "--max-items", "sources": "--source"}
    args.query, args.budget_tokens, args.max_items, _ = check_pack_arguments(
        args.query, args.budget_tokens, args.max_items, args.sources, names
    )
    from mdmem.search.arguments import check_neighbors

    check_neighbors(args.neighbors, "--neighbors")


def cmd_pack(args: argparse.Namespace, mem: Memory) -> Result:
    result = mem.pack(
        args.query,
        budget_tokens=args.budget_tokens,
        max_items=args.max_items,
        sources=args.sources,
        trace=args.trace,
        neighbors=args.neighbors,
        include_archive=args.include_archive,
    )
    return result, _format_pack


def _format_pack(r: dict[str, Any]) -> str:
    model = f" ({r['model']})" if r.get("model") else ""
    out = [r["bundleText"] or _empty_pack(r), ""]
    out.append(
        f"-- {r['usedTokens']}/{r['budgetTokens']} tokens · {len(r['items'])} item(s) · {r['mode']} · "
        f"provider {r['provider']}{model}"
    )
    for receipt in r.get("trace", []):
        scores = " ".join(
            f"{name} {receipt[key]:.3f}" if receipt[key] is not None else f"{name} -"
            for name, key in (("score", "score"), ("vector", "vectorScore"), ("keyword", "keywordScore"))
        )
        cost = f" · {receipt['tokens']} tokens" if "tokens" in receipt else ""
        out.append(
            f"{receipt['rank']:>3}. {receipt['decision']:8} {receipt['ref']}  {scores}  {receipt['reason']}{cost}"
        )
    if "refreshed" in r:
        refs = ", ".join(x["ref"] for x in r["refreshed"])
        out.append(f"uses refreshed: {len(r['refreshed'])} record(s){': ' + refs if refs else ''}")
    out += [f"note: {note}" for note in r.get("warnings", [])]
    return "\n".join(out)


def _empty_pack(r: dict[str, Any]) -> str:
    """Why a pack holds nothing: no match, or matches that do not fit the budget (and the one that would)."""
    best = r.get("bestLeftOut")
    if best:
        return (
            f"(nothing fits in {r['budgetTokens']} tokens: {r.get('matched')} candidate(s) matched; "
            f"--budget-tokens {best['budgetTokens']} holds the best, {best['ref']})"
        )
    return "(nothing in memory matched)"


def cmd_tools(args: argparse.Namespace, mem: Memory | None) -> Result:
    result = {"format": args.tool_format, "tools": tool_definitions(args.tool_format, write=args.write)}
    return result, lambda r: json.dumps(r["tools"], indent=2, ensure_ascii=False)


def cmd_mcp(args: argparse.Namespace, mem: Memory) -> Result:
    from mdmem.mcp.server import run

    run(mem, args.kind, read_only=args.read_only)
    raise SystemExit(0)  # stdout belonged to the MCP client: print nothing after the session ends


def cmd_flush_check(args: argparse.Namespace, mem: Memory) -> Result:
    writable = False if args.read_only else None
    given = args.context_window is not None
    window = args.context_window if given else DEFAULT_CONTEXT_WINDOW
    decision = agent.check_flush(
        mem.agent, args.session_key, args.total_tokens, window, writable=writable, today=args.today
    )
    result = {
        "sessionKey": args.session_key,
        "totalTokens": args.total_tokens,
        "contextWindow": window,
        "contextWindowSource": "--context-window" if given else "default",
        **decision.to_dict(),
    }
    return result, _format_check


def _format_check(r: dict[str, Any]) -> str:
    window = f"context window {r['contextWindow']} tokens"
    if r["contextWindowSource"] == "default":
        window += " (the default, Claude's: pass --context-window N for your model's)"
    else:
        window += " (--context-window)"
    lines = [f"{'due' if r['due'] else 'not due'}: {r['reason']}", window]
    if r["due"]:
        lines += ["", f"system: {r['systemPrompt']}", f"prompt: {r['prompt']}"]
    return "\n".join(lines)


def cmd_flush_done(args: argparse.Namespace, mem: Memory) -> Result:
    return agent.record_flush(mem.agent, args.session_key), _format_entry


def cmd_flush_compacted(args: argparse.Namespace, mem: Memory) -> Result:
    return agent.record_compaction(mem.agent, args.session_key), _format_entry


def cmd_flush_reset(args: argparse.Namespace, mem: Memory) -> Result:
    result = agent.reset_session(mem.agent, args.session_key)
    return result, lambda r: f"{r['sessionKey']}: cleared {', '.join(r['cleared']) or 'nothing (no records)'}"


def _format_entry(r: dict[str, Any]) -> str:
    at = r.get("memoryFlushAt")
    try:  # the file may hold what another program wrote there
        flushed = "never" if at is None else datetime.fromtimestamp(at / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError, OverflowError, OSError):
        flushed = f"{at!r} (not epoch milliseconds)"
    return f"{r['sessionKey']}: {r.get('compactionCount', 0)} compaction(s), last flush {flushed}" + (
        f" (in compaction cycle {r.get('memoryFlushCompactionCount')})" if at is not None else ""
    )


def cmd_context(args: argparse.Namespace, mem: Memory) -> Result:
    result = agent.session_context(mem.agent, args.kind, args.today, max_chars=args.max_chars)
    return result, lambda r: r["text"] or f"(no memory files for a {r['kind']} session on {r['today']})"


def cmd_remember(args: argparse.Namespace, mem: Memory) -> Result:
    result = mem.remember(" ".join(args.text), long_term=args.long_term, supersedes=args.supersedes)
    return result, _remembered


def _remembered(r: dict[str, Any]) -> str:
    marked = [f"{r['supersedes']}: marked superseded by {r['ref']}"] if r.get("marked") else []
    lines = [f"{r['path']}: {r['line']}", *marked]
    return "\n".join(lines + [f"warning: {w}" for w in r.get("warnings", [])])
