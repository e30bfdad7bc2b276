"""``mdmem store migrate --to postgres|sqlite``: copy an agent's index to the other store.

Nothing is embedded again: chunks, vectors (whole chunks and windows), pending chunks and the embedding
cache are copied (``mdmem.store.copy``). The copy replaces the target's index at once, as a rebuild
does, so the target's readers see its old index until the copy is complete. The configuration is not
changed: set ``memorySearch.store.backend`` afterwards to use the copy.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mdmem.util.errors import InvalidArgumentError, StoreError

if TYPE_CHECKING:
    from mdmem.memory import Memory

BACKENDS = ("postgres", "sqlite")
LOCK_WAIT_SECONDS = 60.0


def register(sub: argparse._SubParsersAction[Any], common: argparse.ArgumentParser, parser_class: type) -> None:
    store = sub.add_parser("store", help="move an agent's index between SQLite and PostgreSQL")
    ssub = store.add_subparsers(dest="store_command", required=True, parser_class=parser_class)
    p = ssub.add_parser(
        "migrate",
        parents=[common],
        help="copy the agent's index to the other store, vectors and embedding cache included (no re-embedding)",
    )
    p.add_argument("--to", required=True, choices=BACKENDS, help="the store to copy the index into")
    p.set_defaults(func=cmd_migrate)


def cmd_migrate(args: argparse.Namespace, mem: Memory) -> tuple[dict[str, Any], Callable[[dict[str, Any]], str]]:
    from mdmem.store.copy import copy_index
    from mdmem.store.open import describe, open_store

    target_backend = args.to
    source_backend = next(b for b in BACKENDS if b != target_backend)
    agent = mem.agent
    if source_backend == "sqlite" and not agent.store_path.exists():
        raise InvalidArgumentError(
            f"there is no SQLite index of agent {agent.id!r} at {agent.store_path} to copy: run `mdmem index` "
            'with memorySearch.store.backend "sqlite" first, or index straight into PostgreSQL'
        )
    started = time.monotonic()
    source = open_store(agent, source_backend)
    try:
        if not source.files() and source.get_meta("identity") is None:
            raise StoreError(
                f"the {source_backend} index of agent {agent.id!r} ({source.path}) is empty: nothing to copy "
                f"(run `mdmem index` on it first)",
                kind="error",
            )
        target = open_store(agent, target_backend)
        try:
            counts = copy_index(source, target, wait=LOCK_WAIT_SECONDS)
            where = {"from": _where(source_backend, source), "to": _where(target_backend, target)}
        finally:
            target.close()
    finally:
        source.close()
    configured = describe(agent)["backend"]
    result: dict[str, Any] = {"agent": agent.id, **where, **counts, "seconds": round(time.monotonic() - started, 3)}
    if configured != target_backend:
        result["next"] = f'set memorySearch.store.backend to "{target_backend}" to use the copy'
    return result, _format


def _where(backend: str, store: Any) -> dict[str, str]:
    return {"backend": backend, "store": str(store.path)}


def _format(r: dict[str, Any]) -> str:
    lines = [
        f"copied the index of agent {r['agent']} from {r['from']['backend']} ({r['from']['store']}) to "
        f"{r['to']['backend']} ({r['to']['store']}) in {r['seconds']:.2f} s:",
        f"{r['files']} files, {r['chunks']} chunks ({r['pending']} waiting for vectors), {r['vectors']} vectors, "
        f"{r['cacheEntries']} embedding cache entries; nothing was embedded again",
    ]
    if r.get("next"):
        lines.append(f"next: {r['next']}")
    return "\n".join(lines)
