"""What ``mdmem links PATH`` and status say about links (mdmem.files.links): a file's links and backlinks,
resolved, and the links of the workspace that lead nowhere. A broken link is reported, never an error."""

from __future__ import annotations

import posixpath
from typing import Any

from mdmem.files.links import Link, Resolver, fold_name
from mdmem.search.neighbors import LinkReader, heading_line_of
from mdmem.util.redaction import redact_path

__all__ = ["broken_links", "file_links"]

MAX_BROKEN_SHOWN = 20


def _written(link: Link) -> str:
    """The link's target as written (normalised): a path, or a wikilink's name."""
    where = link.target or f"[[{link.name}]]"
    return f"{where}#{link.heading}" if link.heading else where


def file_links(store: LinkReader, path: str) -> dict[str, Any]:
    """``{path, links: [{line, to, ref, broken?}], backlinks: [{ref, to}], aliases}`` of the indexed ``path``."""
    held = store.find_links([path])
    names = {fold_name(posixpath.basename(path))} | {k.name for k in held if k.name}
    into = store.find_links(None, [path], sorted(names))
    resolver = Resolver(store.files(), [k for k in (*held, *into) if k.kind == "alias"])
    links = []
    for link in held:
        if link.kind == "alias":
            continue
        target = resolver.target(link)
        entry: dict[str, Any] = {"line": link.line, "to": redact_path(_written(link))}
        if target is None:
            entry["broken"] = "outside the workspace" if link.kind == "refused" else "no such memory file"
        else:
            line = heading_line_of(store.chunks_of(target), link.heading)
            entry["ref"] = redact_path(f"{target}#L{line}")
            if link.heading and line == 0:
                entry["ref"], entry["broken"] = redact_path(target), f"no heading {link.heading!r} in {target}"
        links.append(entry)
    mine = resolver.names_of(path)
    backlinks = [
        {"ref": redact_path(f"{k.path}#L{k.line}"), "to": redact_path(_written(k))}
        for k in into
        if k.kind == "link" and (resolver.target(k) == path or (not k.target and k.name in mine))
    ]
    aliases = sorted(k.name for k in held if k.kind == "alias")
    return {"path": redact_path(path), "links": links, "backlinks": backlinks, "aliases": aliases}


def broken_links(store: LinkReader) -> dict[str, Any]:
    """``{count, shown: [{ref, to, reason}]}``: the links that resolve to no indexed file (or leave the workspace);
    at most ``MAX_BROKEN_SHOWN`` shown."""
    every = store.find_links()
    resolver = Resolver(store.files(), [k for k in every if k.kind == "alias"])
    broken = [k for k in every if k.kind != "alias" and resolver.target(k) is None]
    shown = [
        {
            "ref": redact_path(f"{k.path}#L{k.line}"),
            "to": redact_path(_written(k)),
            "reason": "outside the workspace" if k.kind == "refused" else "no such memory file",
        }
        for k in broken[:MAX_BROKEN_SHOWN]
    ]
    return {"count": len(broken), "shown": shown}
