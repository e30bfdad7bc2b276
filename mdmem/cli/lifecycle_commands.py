"""``usage``: the hottest and coldest memory files; ``lifecycle plan|apply|revive``: archive what the policy
says and bring files back (docs/lifecycle.md). ``register`` adds them to the ``mdmem`` parser; each handler
takes ``(args, mem)`` and returns ``(result, formatter)`` like every command."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mdmem.util.display import display_name as safe_text

if TYPE_CHECKING:
    from mdmem.memory import Memory

Result = tuple[dict[str, Any], Callable[[dict[str, Any]], str]]


def register(sub: argparse._SubParsersAction[Any], common: argparse.ArgumentParser) -> None:
    """Add ``usage`` and ``lifecycle`` to ``sub``; ``common`` holds ``--config``, ``--agent``, ``--json``."""
    p = sub.add_parser("usage", parents=[common], help="the hottest and coldest memory files (searches, packs, gets)")
    p.add_argument("--limit", type=int, default=10, metavar="N", help="files in each list (default: 10)")
    p.set_defaults(func=cmd_usage)

    life = sub.add_parser("lifecycle", help="archive old unused memory files, and bring them back")
    lsub = life.add_subparsers(dest="lifecycle_command", required=True, parser_class=type(life))
    p = lsub.add_parser("plan", parents=[common], help="what apply would move and why (changes nothing)")
    p.set_defaults(func=cmd_lifecycle, action="plan")
    p = lsub.add_parser("apply", parents=[common], help="move what the plan says; one receipt per run")
    p.set_defaults(func=cmd_lifecycle, action="apply")
    p = lsub.add_parser("revive", parents=[common], help="bring an archived file back to memory/")
    p.add_argument("path", metavar="PATH", help="memory/archive/YYYY/... or the memory/ path it came from")
    p.set_defaults(func=cmd_lifecycle, action="revive")


def cmd_usage(args: argparse.Namespace, mem: Memory) -> Result:
    return mem.usage(args.limit), format_usage


def cmd_lifecycle(args: argparse.Namespace, mem: Memory) -> Result:
    result = mem.lifecycle(args.action, getattr(args, "path", None))
    return result, format_plan if args.action == "plan" else format_applied


def _when(at: float | None) -> str:
    if at is None:
        return "never"
    days = (time.time() - at) / 86_400
    return "today" if days < 1 else f"{days:.0f} days ago"


def format_usage(r: dict[str, Any]) -> str:
    out = [f"{r['used']} of {r['files']} indexed files used"]
    for title in ("hottest", "coldest"):
        out.append(f"{title}:")
        for f in r[title]:
            kinds = ", ".join(f"{k} {n}" for k, n in f["byKind"].items()) or "no uses"
            out.append(f"  {safe_text(f['path'])}  {f['uses']} uses ({kinds}), last {_when(f['lastUsedAt'])}")
        if not r[title]:
            out.append("  (none)")
    return "\n".join(out)


def format_plan(r: dict[str, Any]) -> str:
    out = [f"would move {len(r['moves'])} file(s):"]
    out.extend(f"  {safe_text(m['path'])} → {safe_text(m['to'])}  ({m['tier']}: {m['reason']})" for m in r["moves"])
    held = r["counts"]["held"]
    if held:
        out.append("held: " + ", ".join(f"{n} {reason}" for reason, n in sorted(held.items())))
    return "\n".join(out)


def format_applied(r: dict[str, Any]) -> str:
    out = [f"moved {len(r['moved'])} file(s):"]
    out.extend(f"  {safe_text(m['path'])} → {safe_text(m['to'])}  ({m['tier']}: {m['reason']})" for m in r["moved"])
    out.extend(f"skipped {safe_text(m['path'])}: {safe_text(m['why'])}" for m in r["skipped"])
    out.extend(f"warning: {safe_text(w)}" for w in r.get("warnings", []))
    return "\n".join(out)
