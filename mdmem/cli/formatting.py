"""How the command line shows results as text: one formatter per command's result (``--json`` prints them as is)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mdmem.store.faults import human_size
from mdmem.util.display import display_name


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
        lines.append(f"kept {r['held']} indexed file(s) whose folder is missing (see `mdmem status`)")
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
        low += f"  (via {display_name(hit['via'])})" if hit.get("via") else ""
        low += "  (superseded)" if hit.get("superseded") else ""
        where = f"{display_name(hit['path'])}:{hit['startLine']}-{hit['endLine']}"
        out.append(f"\n{i}. {where}  score {hit['score']:.3f}{low}")
        out.extend("   " + line for line in hit["snippet"].splitlines())
        out.extend(_superseded_lines(hit))
    for note in r.get("warnings", []):
        out.append(f"\nnote: {note}")
    if r.get("fallback"):
        out.append(f"note: fell back from {r['fallback']['from']}: {r['fallback']['reason']}")
    return "\n".join(out)


def _superseded_lines(hit: dict[str, Any]) -> list[str]:
    """A line per superseded line of a result: which, since when, by what (``implicit``: grouped, not marked)."""
    out = []
    for e in hit.get("supersededBy", []):
        by = f" by {display_name(e['by'])}" if e.get("by") else ""
        when = f" on {e['date']}" if e.get("date") else ""
        out.append(
            f"   ↳ line {e['line']} superseded{when}{by}{' (not marked in the file)' if e.get('implicit') else ''}"
        )
    return out


def format_pull(r: dict[str, Any]) -> str:
    if not r["alreadyPresent"]:
        return f"{r['uri']} -> {r['path']} ({human_size(r['bytes'])})"
    where = "" if r["path"] == r["uri"] else f" at {r['path']}"
    return f"{r['uri']}: the model is already there{where} ({human_size(r['bytes'])}); nothing to download"


def format_status(s: dict[str, Any]) -> str:
    """Every field of ``mdmem status --json`` on a labelled line (``STATUS_LABELS``), empty ones as ``none``;
    a field this module does not know yet is printed under its JSON name."""
    said = {d["message"] for d in s.get("degraded", [])}
    s = {**s, "warnings": [w for w in s.get("warnings", []) if w not in said]}  # once is loud enough
    lines: list[str] = []
    shown: set[str] = set()
    for keys, label, render in _STATUS_LINES:
        shown.update(keys)
        if keys[0] not in s:  # an optional field (fallback, breaker, entries) that this status has not
            continue
        lines += [text if text.startswith("  ") else f"{label:<11} {text}" for text in render(s)]
    for key, value in s.items():
        if key not in shown:
            lines += [f"{key:<11} {text}" for text in _plain(value) or ["none"]]
    return "\n".join(lines)


def _provider_line(s: dict[str, Any]) -> list[str]:
    text = s["provider"]
    if s.get("model"):
        dims = f"{s['dims']} dims" if s.get("dims") else "dimensions known after the first index"
        text += f" ({s['model']}, {dims})"
    mode = "search disabled" if s["mode"] == "disabled" else f"{s['mode']} search"
    return [f"{text} · {mode} · requested {s['requestedProvider']}"]


def _indexed_line(s: dict[str, Any]) -> list[str]:
    if s["files"] is None:
        return ["unknown (the index cannot be read)"]
    return [f"{s['files']} files, {s['chunks']} chunks, {s['vectors']} vectors, {s['cacheEntries']} cached embeddings"]


def _stale_lines(s: dict[str, Any]) -> list[str]:
    if s["files"] is None:
        return ["unknown"]
    return [f"{len(s['staleFiles'])} file(s)"] + [f"  {f['state']:9} {f['path']}" for f in s["staleFiles"]]


def _index_line(s: dict[str, Any]) -> list[str]:
    if not s.get("indexProvider"):
        return ["not built yet" if not s.get("files") else "built by an unknown provider"]
    return ["built by " + s["indexProvider"] + (f" ({s['indexModel']})" if s.get("indexModel") else "")]


def _store_line(s: dict[str, Any]) -> list[str]:
    backend = s.get("backend", "sqlite")
    return [f"{s['store']} (sqlite)" if backend == "sqlite" else f"{backend}: {s['store']}"]


def _workspace_line(s: dict[str, Any]) -> list[str]:
    away = " (the files are on another host)" if s.get("filesHere") is False else ""
    return [f"{s['workspace']}{away}"]


def _other_sources_lines(other: dict[str, Any]) -> list[str]:
    if not other:
        return ["none"]
    return [
        f"{source}: {n.get('files')} files, {n.get('chunks')} chunks (indexed, not searched with this config)"
        for source, n in other.items()
    ]


def _optional(
    key: str, render: Callable[[Any], list[str]], empty: str = "none"
) -> Callable[[dict[str, Any]], list[str]]:
    """A line for field ``key``: ``render`` of its value, or ``empty`` when it is null or empty."""

    def line(s: dict[str, Any]) -> list[str]:
        value = s.get(key)
        return [empty] if value in (None, [], {}, "") else render(value) or [empty]

    return line


def _broken_link_lines(b: dict[str, Any]) -> list[str]:
    more = f" (the first {len(b['shown'])} below)" if b["count"] > len(b["shown"]) else ""
    shown = [f"{display_name(k['ref'])} → {display_name(k['to'])}: {k['reason']}" for k in b["shown"]]
    return [f"{b['count']} broken (never followed; fix or remove them){more}", *shown]


def _store_state_lines(state: dict[str, Any]) -> list[str]:
    head = state["state"] + (f": {state['message']}" if state.get("message") else "")
    if state.get("freeBytes") is not None:
        head += f" ({human_size(state['freeBytes'])} free{' now' if state['state'] == 'full' else ''})"
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
        return [f"not here ({w['reason']}: the agent's host runs `mdmem watch`)"]
    if w.get("lastPid"):
        return [f"not running (pid {w['lastPid']} last seen {_iso(w.get('lastHeartbeat') or 0)})"]
    return ["not running (`mdmem watch` keeps the index fresh)"]


def _plain(value: Any) -> list[str]:
    """Any other status value as text: a list item per line, a dict as key=value pairs."""
    if isinstance(value, list):
        return [t for item in value for t in _plain(item)]
    if isinstance(value, dict):
        return [", ".join(f"{k}={v}" for k, v in value.items() if v not in (None, "", [], {}))]
    return [str(value)]


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(ts)))


# The text status, in order: (the JSON fields a line shows, its label, its text). A field whose first key is
# absent from the status (the optional ones) has no line; every other field has one, ``none`` when empty.
_STATUS_LINES: list[tuple[tuple[str, ...], str, Callable[[dict[str, Any]], list[str]]]] = [
    (("agent",), "agent", lambda s: [s["agent"]]),
    (("enabled",), "enabled", lambda s: ["yes" if s["enabled"] else "no (memorySearch.enabled is false)"]),
    (("workspace", "filesHere"), "workspace", _workspace_line),
    (("sources",), "sources", lambda s: [", ".join(s["sources"]) or "none"]),
    (("store", "backend"), "store", _store_line),
    (("storeState",), "store state", _optional("storeState", _store_state_lines)),
    (("provider", "requestedProvider", "model", "dims", "mode"), "provider", _provider_line),
    (("files", "chunks", "vectors", "cacheEntries"), "indexed", _indexed_line),
    (
        ("windowVectors",),
        "window vectors",
        _optional("windowVectors", lambda w: [f"{w['inEffect']} (configured {w['configured']}): {w['why']}"]),
    ),
    (("brokenLinks",), "links", _optional("brokenLinks", lambda b: _broken_link_lines(b) if b["count"] else [])),
    (
        ("pendingEmbeddings",),
        "pending",
        lambda s: [
            f"{s['pendingEmbeddings']} chunk(s) waiting for embeddings (found by keywords meanwhile)"
            if s.get("pendingEmbeddings")
            else "none (every chunk has its vectors)"
            if s.get("pendingEmbeddings") == 0
            else "unknown"
        ],
    ),
    (("indexProvider", "indexModel"), "index", _index_line),
    (
        ("lastSync", "lastSyncSeconds"),
        "last sync",
        lambda s: [
            (s["lastSync"] or "never")
            + (f" ({s['lastSyncSeconds']:.2f} s)" if s.get("lastSyncSeconds") is not None else "")
        ],
    ),
    (("staleFiles",), "stale", _stale_lines),
    (("otherSources",), "other sources", _optional("otherSources", _other_sources_lines)),
    (("entries",), "entries", _optional("entries", _plain)),
    (("lastError",), "last error", _optional("lastError", lambda e: [f"{e['at']} {e['error']}"])),
    (("watcher",), "watcher", _optional("watcher", _watcher_lines)),
    (("worker",), "worker", _optional("worker", lambda w: [f"pid {w['pid']} ({w['purpose']}) in the background"])),
    (("fallback",), "fallback", _optional("fallback", lambda f: [f"from {f['from']}: {f['reason']}"])),
    (
        ("breaker",),
        "breaker",
        _optional(
            "breaker",
            lambda b: ["closed"] if b.get("state") == "closed" else [f"{b['state']} until {b['until']}: {b['reason']}"],
        ),
    ),
    (("usage",), "usage", _optional("usage", lambda u: _usage_lines(u))),
    (("lifecycle",), "lifecycle", _optional("lifecycle", lambda life: _lifecycle_lines(life))),
    (("degraded",), "degraded", _optional("degraded", lambda items: [d["message"] for d in items])),
    (("warnings",), "warning", _optional("warnings", lambda items: [str(w) for w in items])),
]


def _usage_lines(u: dict[str, Any]) -> list[str]:
    if "files" not in u:
        return [str(u.get("error") or "unknown")]
    out = [
        f"{u['used']} of {u['files']} files used" + (f", {u['waiting']} use(s) not written yet" if u["waiting"] else "")
    ]
    out += [f"  hot  {f['path']} ({f['uses']})" for f in u["hottest"]]
    out += [f"  cold {f['path']} ({f['uses']})" for f in u["coldest"]]
    if u.get("dropped"):
        out.append(f"  {u['dropped']} use(s) dropped: the index is read-only")
    return out


def _lifecycle_lines(life: dict[str, Any]) -> list[str]:
    if not life["runs"]:
        return ["never run (mdmem lifecycle plan)"]
    last = life["last"][-1]
    archived = sum(n for by in last.get("archived", {}).values() for n in by.values())
    revived = sum(last.get("revived", {}).values())
    skipped = sum(last.get("skipped", {}).values())
    return [f"{life['runs']} run(s); last {last['action']}: {archived} archived, {revived} revived, {skipped} skipped"]


STATUS_LABELS: dict[str, str] = {key: label for keys, label, _ in _STATUS_LINES for key in keys}
"""The label of the text line showing each JSON field of the status."""
