"""``truth``: what is currently true about a subject, with its history; ``links``: a memory file's links and
backlinks (docs/truth.md). ``register`` adds them to the ``mdmem`` parser; each handler takes ``(args, mem)``
and returns ``(result, formatter)`` like every command."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mdmem.util.display import display_name as safe_text

if TYPE_CHECKING:
    from mdmem.memory import Memory

Result = tuple[dict[str, Any], Callable[[dict[str, Any]], str]]


def register(sub: argparse._SubParsersAction[Any], common: argparse.ArgumentParser) -> None:
    """Add ``truth`` to ``sub`` (the ``mdmem`` subparsers); ``common`` holds ``--config``, ``--agent``,
    ``--json``."""
    p = sub.add_parser(
        "truth", parents=[common], help="what is currently true about a subject, and what it replaced (memory_truth)"
    )
    p.add_argument("subject", nargs="+", metavar="SUBJECT")
    p.add_argument("--max-facts", type=int, default=5, metavar="N", help="default: 5")
    p.set_defaults(func=cmd_truth)

    p = sub.add_parser("links", parents=[common], help="a memory file's links and backlinks, broken ones marked")
    p.add_argument("path", metavar="PATH")
    p.set_defaults(func=cmd_links)


def cmd_truth(args: argparse.Namespace, mem: Memory) -> Result:
    return mem.truth(" ".join(args.subject), max_facts=args.max_facts), format_truth


def cmd_links(args: argparse.Namespace, mem: Memory) -> Result:
    return mem.links(args.path), format_links


def format_links(r: dict[str, Any]) -> str:
    out = [
        f"{safe_text(r['path'])}"
        + (f"  (also: {', '.join(safe_text(a) for a in r['aliases'])})" if r["aliases"] else "")
    ]
    out.append(f"links ({len(r['links'])})")
    for k in r["links"]:
        where = f"broken: {safe_text(k['broken'])}" if k.get("broken") else safe_text(k["ref"])
        out.append(f"  L{k['line']:<5} {safe_text(k['to'])}  → {where}")
    out.append(f"backlinks ({len(r['backlinks'])})")
    out.extend(f"  {safe_text(k['ref'])}  ({safe_text(k['to'])})" for k in r["backlinks"])
    return "\n".join(out)


def format_truth(r: dict[str, Any]) -> str:
    """One block per fact: the current line, then each earlier one, newest first, with dates, refs and support."""
    if r.get("error"):
        return f"error: {safe_text(r['error'])}"
    out = []
    for fact in r["facts"]:
        cur = fact["current"]
        if cur is not None:
            out.append(f"now      {safe_text(cur['text'])}")
            out.append(f"         {cur['date'] or 'undated'} · {safe_text(cur['ref'])}{_support(cur)}")
        else:
            out.append("now      (no current line: the newest one is marked superseded)")
        for old in fact["history"]:
            until = f" → superseded {old['supersededOn']}" if old["supersededOn"] else ""
            out.append(f"before   {safe_text(old['text'])}")
            out.append(f"         {old['date'] or 'undated'}{until} · {safe_text(old['ref'])}{_support(old)}")
        out.append("")
    if not out:
        out.append(f"nothing stored about {safe_text(r['subject'])!r}")
    out.extend(f"warning: {safe_text(w)}" for w in r.get("warnings", []))
    return "\n".join(out).rstrip("\n")


def _support(version: dict[str, Any]) -> str:
    refs = version.get("supportedBy") or []
    return f" · supported by {', '.join(safe_text(x) for x in refs)}" if refs else ""
