"""``status()`` of an agent's engine: the truth about one agent's index, computed when asked.

Everything comes from the memory files, the database, the health file beside it and the watcher's state
file, never from a flag set earlier. Status never fails because the index is broken: the store's own
state (``ok``, ``read-only``, ``full``, ``corrupt``...) is one of its fields, and ``mode`` is what a search
would do right now (``keyword`` whenever a search could not use vectors).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from mdmem.config.load import Config
from mdmem.engine.catchup import CatchUp
from mdmem.engine.keeper import IndexKeeper
from mdmem.engine.watchstate import read_watch_state
from mdmem.files import roots
from mdmem.index.indexer import Indexer, is_utf8, printable
from mdmem.index.late import late_in_effect, late_setup
from mdmem.providers.base import EmbeddingProvider
from mdmem.providers.factory import ProviderChoice
from mdmem.search.linkview import broken_links
from mdmem.store.api import IndexStore
from mdmem.store.faults import free_bytes, store_errors, store_fault
from mdmem.store.health import read_health
from mdmem.store.open import describe, local_disk
from mdmem.util.errors import StoreError

STORE_STATES = {
    "full": "full",
    "read-only": "read-only",
    "corrupt": "corrupt",
    "foreign": "foreign",
    "schema": "schema",
    "io": "io-error",
    "unavailable": "unavailable",
}
LOW_SPACE_BYTES = 1 << 20  # less free space than this next to the index is reported as a full disk
_INDEX_FIELDS = (
    "files",
    "chunks",
    "vectors",
    "pendingEmbeddings",
    "cacheEntries",
    "indexProvider",
    "indexModel",
    "lastSync",
)


def build_status(keeper: IndexKeeper, catch: CatchUp, config: Config | None, disabled: str) -> dict[str, Any]:
    """The status of ``keeper``'s index (see the module docstring); ``disabled``: what to say when it is."""
    choice = keeper.providers.choice
    provider = choice.provider
    path = keeper.agent.store_path
    health = read_health(path)
    here = keeper.agent.files_here  # False: a replica without the agent's files (service.remoteAgents)
    warnings = _workspace_warnings(keeper) if here else []
    store: IndexStore | None = None
    fault: StoreError | None = None
    index: dict[str, Any] = {
        **dict.fromkeys(_INDEX_FIELDS),
        "lastSyncSeconds": None,
        "staleFiles": [],
        "otherSources": {},
    }
    matches = True
    try:
        store = keeper.store
        index, matches, legacy_error = _index_fields(keeper, store, provider, warnings)
    except StoreError as exc:
        fault, legacy_error = exc, None
    except store_errors() as exc:
        fault, legacy_error = store_fault(exc, path), None
    if fault is not None:
        keeper.release_store()  # the next use opens it again: it may be repaired or writable by then
    if store is not None and fault is None and here:
        with contextlib.suppress(StoreError, *store_errors()):
            warnings[:0] = roots.warnings(keeper.workspace.missing_roots(), store.files())
    if not keeper.settings.enabled:
        warnings.append(disabled)
    elif choice.hint and choice.hint not in warnings:
        warnings.append(choice.hint)
    if config and config.ignored_keys:
        warnings.append("config keys ignored (not mdmem's): " + ", ".join(config.ignored_keys))
    last_error = _newest(health.get("lastError"), keeper.last_error, legacy_error)
    if last_error is not None and "pending" in last_error and index.get("pendingEmbeddings") == 0:
        last_error = None  # an embedding failure whose chunks all have their vectors now is resolved
    hybrid = keeper.settings.query.hybrid.enabled
    mode = ("hybrid" if hybrid else "vector") if provider is not None and matches else "keyword"
    out: dict[str, Any] = {
        "agent": keeper.agent.id,
        "enabled": keeper.settings.enabled,
        "workspace": str(keeper.workspace.root),
        "sources": list(keeper.settings.sources),  # memorySearch.sources: "memory", and "sessions" when on
        **describe(keeper.agent),  # backend, and where the index is (a PostgreSQL URL without its password)
        "storeState": _store_state(path if local_disk(keeper.agent) else None, store, fault, health, last_error),
        "provider": choice.name,
        "requestedProvider": choice.requested,
        "model": provider.model if provider else None,
        "dims": index.pop("dims", None) or (provider.dims if provider else None),
        "mode": mode if keeper.settings.enabled else "disabled",
        "degraded": _degraded(keeper, catch, choice, index, matches),
        **index,
        "lastError": _shown_error(last_error),
        "watcher": read_watch_state(keeper.agent),
        "worker": catch.worker_state(),
        "warnings": warnings,
    }
    if not here:
        out.update(filesHere=False, staleFiles=[], watcher={"running": False, "reason": "files on another host"})
    log = store.entry_log() if store is not None and fault is None else None
    if log is not None:  # the shared store: what replicas without the files retained and forgot, not in them yet
        with contextlib.suppress(StoreError, *store_errors()):
            out["entries"] = log.stats()
    if choice.fallback:
        out["fallback"] = choice.fallback
    chunking = keeper.settings.chunking
    if provider is not None and provider.token_embeddings is None and chunking.window_vectors == "late":
        late_setup(provider, chunking)  # a remote server is asked once whether it gives token embeddings
    late = late_in_effect(chunking, provider)
    if late is not None:
        out["windowVectors"] = late
    if provider is not None:
        out["breaker"] = (provider.breaker or keeper.providers.breaker_for(provider)).status()
        if out["breaker"]["state"] == "open":
            out["degraded"].append(
                {
                    "reason": "breaker-open",
                    "message": f"embeddings are paused until {out['breaker']['until']} after failures "
                    f"({out['breaker']['reason']}): searches answer from keywords meanwhile",
                }
            )
    return out


def _index_fields(
    keeper: IndexKeeper, store: IndexStore, provider: EmbeddingProvider | None, warnings: list[str]
) -> tuple[dict[str, Any], bool, dict[str, Any] | None]:
    """The database's part of the status, whether a search could use its vectors, and an old lastError."""
    store.refresh()  # the index as it is now: another process may have rebuilt it since this one last looked
    identity = store.get_meta("identity") or {}
    last = store.get_meta("lastSync")
    for row in store.files().values():
        if row.encoding_errors:
            warnings.append(
                f"{row.path}: {row.encoding_errors} invalid UTF-8 sequence(s) indexed as U+FFFD; "
                "re-save the file as UTF-8"
            )
    if last and last["report"].get("errors"):
        warnings.extend(f"{e['path']}: {e['error']}" for e in last["report"]["errors"])
    counts = store.counts()
    indexer = Indexer(store, keeper.workspace, keeper.settings, provider)
    matches = provider is None or indexer.identity_matches()  # as search decides whether to use vectors
    fields = {
        "dims": store.vec_dims(),
        "files": counts["files"],
        "chunks": counts["chunks"],
        "vectors": counts["vectors"],
        "pendingEmbeddings": store.pending_count(),  # chunks found by keywords, their vectors still missing
        "cacheEntries": counts["cacheEntries"],
        "indexProvider": identity.get("provider"),
        "indexModel": identity.get("model"),
        "lastSync": _iso(last["at"]) if last else None,
        "lastSyncSeconds": last["report"]["seconds"] if last else None,
        "staleFiles": indexer.stale_files(),
        "otherSources": _other_sources(store, keeper.workspace.sources),
        "brokenLinks": broken_links(store),
    }
    return fields, matches, store.get_meta("lastError")


def _workspace_warnings(keeper: IndexKeeper) -> list[str]:
    scan = keeper.workspace.scan()
    warnings: list[str] = [special.warning for special in scan.special]
    for mf in scan.files:
        try:
            size = os.lstat(mf.abs).st_size
        except OSError:
            continue  # deleted since discovery
        if not is_utf8(mf.rel):
            warnings.append(f"{printable(mf.rel)}: file name is not valid UTF-8, not indexed; rename the file")
        elif size > keeper.settings.max_file_bytes:
            warnings.append(f"{mf.rel}: skipped, {size} bytes is over maxFileBytes ({keeper.settings.max_file_bytes})")
    return warnings


def _store_state(
    path: Path | None,
    store: IndexStore | None,
    fault: StoreError | None,
    health: dict[str, Any],
    last_error: dict[str, Any] | None,
) -> dict[str, Any]:
    """``{state, message, freeBytes, movedAside}``: can the index be read and written right now? ``path``
    is the index file (None when the index is not on this machine's disk: no free space to report)."""
    state, message = "ok", None
    known = health.get("corrupt")
    if fault is not None:
        state, message = STORE_STATES.get(fault.kind, "error"), str(fault)
    elif store is not None and store.write_fault is not None:
        state, message = STORE_STATES.get(store.write_fault.kind, "read-only"), str(store.write_fault)
    elif store is not None and known and known.get("inode") == store.inode:
        state, message = "corrupt", str(known.get("error"))
    elif last_error and last_error.get("kind") == "full":
        state = "full"
        message = f"the last write failed for lack of space at {_iso(last_error['at'])}; the next sync catches up"
    free = free_bytes(path) if path is not None else None
    if state == "ok" and free is not None and free < LOW_SPACE_BYTES:
        state, message = (
            "full",
            f"the disk holding the index has {free} bytes free: syncs will fail until space is freed",
        )
    moved = [{**m, "at": _iso(m["at"])} for m in health.get("movedAside", []) if isinstance(m, dict)]
    return {"state": state, "message": message, "freeBytes": free, "movedAside": moved}


def _degraded(
    keeper: IndexKeeper, catch: CatchUp, choice: ProviderChoice, index: dict[str, Any], matches: bool
) -> list[dict[str, str]]:
    """Why a search would not be as good as configured: ``[{reason, message}]``, empty when it would be."""
    out: list[dict[str, str]] = []
    if choice.provider is None:
        if keeper.providers.provider_error is not None:
            out.append(
                {"reason": "provider-unavailable", "message": choice.hint or str(keeper.providers.provider_error)}
            )
        elif choice.requested != "none":
            out.append({"reason": "no-provider", "message": choice.hint or "keyword-only search: no provider"})
    elif not matches and index["indexProvider"] is None:
        out.append(
            {
                "reason": "not-indexed",
                "message": "no sync has completed yet: searches use keywords until `mdmem index` (or the first "
                "search, or the watcher) finishes one",
            }
        )
    elif not matches:
        out.append({"reason": "index-mismatch", "message": catch.mismatch_note()})
    if choice.fallback:
        out.append(
            {
                "reason": "fallback",
                "message": f"{choice.name} stands in for {choice.fallback['from']}: {choice.fallback['reason']}",
            }
        )
    return out


def _newest(*entries: dict[str, Any] | None) -> dict[str, Any] | None:
    found = [e for e in entries if isinstance(e, dict) and isinstance(e.get("at"), int | float)]
    return max(found, key=lambda e: float(e["at"])) if found else None


def _shown_error(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    if entry is None:
        return None
    return {"at": _iso(float(entry["at"])), "error": entry.get("error"), "kind": entry.get("kind")}


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _other_sources(store: IndexStore, mine: frozenset[str]) -> dict[str, dict[str, int]]:
    """Files and chunks in the index (counted in ``files``/``chunks``) from sources this config neither
    keeps up to date nor searches, e.g. ``sessions`` rows indexed by ``mdmem serve``."""
    other: dict[str, dict[str, int]] = {}
    for row in store.files().values():
        if row.source not in mine:
            seen = other.setdefault(row.source, {"files": 0, "chunks": 0})
            seen["files"] += 1
            seen["chunks"] += row.chunks
    return other
