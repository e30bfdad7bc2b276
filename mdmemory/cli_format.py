"""How the command line shows results as text: one formatter per command's result (``--json`` prints them as is)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mdmemory.display import display_name
from mdmemory.store.faults import human_size


def format_index(r: dict[str, Any]) -> str:
    if r.get("disabled"):
        return f"nothing indexed: {r['reason']}"
    lines = [
        f"{r['files']} files ({r['indexed']} indexed, {r['unchanged']} unchanged, {r['removed']} removed), "
        f"{r['chunks']} chunks written, {r['embedded']} embedded, {r['fromCache']} from cache, "
        f"{len(r['skipped'])} skipped, {r['seconds']:.2f} s" + (" (full rebuild)" if r["rebuilt"] else "")
    ]
    lines += [f"skipped {display_name(s['path'])}: {s['reason']}" for s in r["skipped"]]
    if r.get("held"):
        lines.append(f"kept {r['held']} indexed file(s) whose folder is missing (see `mdmemory status`)")
    lines += [f"error {display_name(e['path'])}: {e['error']}" for e in r["errors"]]
    if r.get("pending"):
        lines.append(f"{r['pending']} chunk(s) waiting for embeddings (found by keywords meanwhile)")
    if r.get("deferred"):
        lines.append(f"{r['deferred']} changed file(s) left for the next sync")
    if r.get("repaired"):
        lines.append(
            f"repaired: the corrupt index was moved aside to {r['repaired']['path']} and rebuilt from the files"
        )
    if r.get("tookOver"):
        was = r["tookOver"]
        lines.append(f"took the index over from workspace {display_name(was['path'])} on host {was['host']}")
    lines += [f"warning: {w}" for w in r.get("warnings", [])]
    return "\n".join(lines)


def format_search(r: dict[str, Any]) -> str:
    head = f"{len(r['results'])} result(s) · {r['mode']} · provider {r['provider']}"
    if r.get("model"):
        head += f" ({r['model']})"
    out = [head]
    for i, hit in enumerate(r["results"], start=1):
        low = "  (low confidence)" if hit.get("lowConfidence") else ""
        where = f"{display_name(hit['path'])}:{hit['startLine']}-{hit['endLine']}"
        out.append(f"\n{i}. {where}  score {hit['score']:.3f}{low}")
        out.extend("   " + line for line in hit["snippet"].splitlines())
    for note in r.get("warnings", []):
        out.append(f"\nnote: {note}")
    if r.get("fallback"):
        out.append(f"note: fell back from {r['fallback']['from']}: {r['fallback']['reason']}")
    return "\n".join(out)


def format_pull(r: dict[str, Any]) -> str:
    if not r["alreadyPresent"]:
        return f"{r['uri']} -> {r['path']} ({human_size(r['bytes'])})"
    where = "" if r["path"] == r["uri"] else f" at {r['path']}"
    return f"{r['uri']}: the model is already there{where} ({human_size(r['bytes'])}); nothing to download"


def format_status(s: dict[str, Any]) -> str:
    files = "unknown (the index cannot be read)" if s["files"] is None else None
    lines = [
        f"agent       {s['agent']}",
        f"workspace   {s['workspace']}",
        "store       " + (f"{s['backend']}: " if s.get("backend", "sqlite") != "sqlite" else "") + str(s["store"]),
        f"provider    {s['provider']}"
        + (f" ({s['model']}, {s['dims']} dims)" if s["model"] else "")
        + (f", requested {s['requestedProvider']}" if s["requestedProvider"] not in (s["provider"], "auto") else "")
        + f" · {s['mode']} search",
        f"indexed     {files}"
        if files
        else f"indexed     {s['files']} files, {s['chunks']} chunks, {s['vectors']} vectors, "
        f"{s['cacheEntries']} cached embeddings",
        f"last sync   {s['lastSync'] or 'never'}"
        + (f" ({s['lastSyncSeconds']:.2f} s)" if s["lastSyncSeconds"] is not None else ""),
        f"stale       {len(s['staleFiles'])} file(s)" if files is None else "stale       unknown",
    ]
    if s["indexProvider"] and (s["indexProvider"], s["indexModel"]) != (s["provider"], s["model"]):
        built = s["indexProvider"] + (f" ({s['indexModel']})" if s["indexModel"] else "")
        lines.insert(5, f"index       built by {built}")
    lines += [f"  {f['state']:9} {f['path']}" for f in s["staleFiles"]]
    said = {d["message"] for d in s.get("degraded", [])}
    s = {**s, "warnings": [w for w in s.get("warnings", []) if w not in said]}  # once is loud enough
    for key, label, render in _STATUS_FIELDS:
        if s.get(key) not in (None, [], {}, ""):
            lines += [f"{label:<11} {text}" for text in render(s[key])]
    return "\n".join(lines)


def _store_state_lines(state: dict[str, Any]) -> list[str]:
    head = state["state"] + (f": {state['message']}" if state.get("message") else "")
    if state["state"] == "full" and state.get("freeBytes") is not None:
        head += f" ({human_size(state['freeBytes'])} free now)"
    moved = [f"corrupt index moved aside {m['at']} to {m['path']}, rebuilt from the files" for m in state["movedAside"]]
    return [head, *moved]


def _watcher_lines(w: dict[str, Any]) -> list[str]:
    if w.get("running"):
        line = f"running · {w.get('mode')} · pid {w.get('pid')}"
        if w.get("since"):
            line += f" · since {_iso(w['since'])}"
        if w.get("fallbackReason"):
            line += f" (polling because {w['fallbackReason']})"
        if w.get("armed") is False:
            line += f" · NOT watching: waiting for {w.get('waitingFor')} to exist"
        elif w.get("rearms"):
            line += f" · re-armed {w['rearms']} time(s)"
        if w.get("socket"):
            line += " · answers search/get/pack"
        return [line] + ([f"its last sync failed: {w['lastError']}"] if w.get("lastError") else [])
    if w.get("reason"):
        return [f"not here ({w['reason']}: the agent's host runs `mdmemory watch`)"]
    if w.get("lastPid"):
        return [f"not running (pid {w['lastPid']} last seen {_iso(w.get('lastHeartbeat') or 0)})"]
    return ["not running (`mdmemory watch` keeps the index fresh)"]


def _plain(value: Any) -> list[str]:
    """Any other status value as text: a list item per line, a dict as key=value pairs."""
    if isinstance(value, list):
        return [t for item in value for t in _plain(item)]
    if isinstance(value, dict):
        return [", ".join(f"{k}={v}" for k, v in value.items() if v not in (None, "", [], {}))]
    return [str(value)]


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(ts)))


# Optional status fields, printed when present and not empty: (key, label, lines of text). One line per field.
_STATUS_FIELDS: list[tuple[str, str, Callable[[Any], list[str]]]] = [
    ("storeState", "store state", _store_state_lines),
    ("watcher", "watcher", _watcher_lines),
    ("lastError", "last error", lambda e: [f"{e['at']} {e['error']}"]),
    ("degraded", "degraded", lambda items: [d["message"] for d in items]),
    ("fallback", "fallback", lambda f: [f"from {f['from']}: {f['reason']}"]),
    (
        "pendingEmbeddings",
        "pending",
        lambda n: [f"{n} chunk(s) waiting for embeddings (found by keywords meanwhile)"] if n else [],
    ),
    ("worker", "worker", lambda w: [f"pid {w['pid']} ({w['purpose']}) in the background"]),
    (
        "breaker",
        "breaker",
        lambda b: [] if b.get("state") == "closed" else [f"{b['state']} until {b['until']}: {b['reason']}"],
    ),
    ("warnings", "warning", lambda items: [str(w) for w in items]),
]
