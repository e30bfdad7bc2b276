"""Catching up before a search, and starting the background work a search leaves behind.

Before answering, a search (``sync.onSearch``) brings the index up to date as far as it cheaply can:

- an index built for another identity (provider, model, chunking...) than the config says starts a
  rebuild in the background; searches answer from the old index, by keywords, until the swap;
- a small change (``SMALL_CHANGE_FILES`` files, ``SMALL_CHANGE_BYTES``) is synced inline, embeddings too;
- a larger one gets its text indexed inline for up to ``SEARCH_BUDGET_SECONDS`` (no embedding: found by
  keywords at once), and its embeddings and any files left over go to the background.

Background work is a thread in long-lived processes (MCP server, agent runtimes) and a detached worker
process (``mdmemory.engine.worker``) for the command line, whose process ends right after answering. None is
started while ``mdmemory watch`` runs for the agent (it does the work) or while a worker already runs.
Every warning names who is doing the work, so none promises work that will not happen.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from mdmemory.engine import worker
from mdmemory.engine.watchstate import read_watch_state
from mdmemory.index.identity import identity_change
from mdmemory.providers import deadline
from mdmemory.store.health import read_health
from mdmemory.util.errors import EmbeddingsPending, LockError, MdMemoryError, ProviderError, StoreError, WorkspaceError

if TYPE_CHECKING:
    from mdmemory.memory import Memory

SMALL_CHANGE_FILES = 8  # a search syncs up to this many changed files before answering, embeddings included...
SMALL_CHANGE_BYTES = 256 * 1024  # ...totalling at most this much
SEARCH_BUDGET_SECONDS = 1.0  # for a larger change, a search indexes text for this long, then leaves the rest
RECENT_FAILURE_SECONDS = 60.0  # after a failed embedding, searches leave embedding to the background this long


def before_search(mem: Memory) -> tuple[bool, list[str]]:
    """Catch up before answering. Returns (stale, notes); never waits for another writer."""
    if not mem.agent.files_here:
        return _entries(mem)
    stored = mem.store.get_meta("identity")
    if stored is not None and not mem.indexer.identity_matches():
        return True, [f"{identity_change(stored, mem.indexer.identity())}: {start(mem, 'rebuild')}"]
    notes: list[str] = []
    report: dict[str, Any] = {}
    try:  # a transcript past its deltas gets its copy now, indexed below
        failed = mem.indexer.refresh_transcripts().errors
    except OSError as exc:
        failed = [{"path": "sessions/transcripts/", "error": str(exc)}]
    notes += [f"OpenClaw transcripts could not be copied; session results may be stale: {e['error']}" for e in failed]
    changed = mem.indexer.changed_files()
    if changed:
        small = len(changed) <= SMALL_CHANGE_FILES and sum(n for _, _, n in changed) <= SMALL_CHANGE_BYTES
        # while the provider fails, a search does not wait for it again; a caller with a time budget never does
        embed = small and not mem.catch_up_budgeted and not _failing(mem)
        try:
            report = mem._sync(wait=0, embed=embed, budget=_text_budget(mem, small)).to_dict()
        except LockError:
            mem.changed()  # not caught up: the next search tries again (else not before ``catch_up_interval``)
            return True, [f"another process{_busy(mem)} is indexing; results may be a few seconds old"]
        except EmbeddingsPending as exc:
            report = exc.report  # the text is indexed; the note below says what is not embedded
        except WorkspaceError as exc:  # a missing root (mdmemory.files.roots): its files are kept, not indexed
            return True, [str(exc)]
        except ProviderError as exc:
            return True, [f"could not index the changed files; results may be stale: {exc}"]
        except StoreError as exc:  # a full disk or a read-only index: answer from what it holds
            return True, [f"changed files could not be indexed; results may be stale: {exc}"]
        notes.extend(f"{e['path']}: {e['error']}" for e in report.get("errors", []))
    deferred = int(report.get("deferred", 0))
    if deferred:
        mem.changed()  # files left for later: the next search goes on with them
    pending = mem.store.pending_count()
    if deferred or pending:
        notes.append(_leftover_note(mem, deferred, pending))
    return bool(deferred), notes


def _text_budget(mem: Memory, small: bool) -> float | None:
    """Seconds the text of the changed files may take: a small change all it needs, a larger one
    ``SEARCH_BUDGET_SECONDS``; for a budgeted caller never past the deadline in force."""
    budget = None if small else SEARCH_BUDGET_SECONDS
    left = deadline.time_left() if mem.catch_up_budgeted else None
    if left is None:
        return budget
    return max(0.0, left if budget is None else min(budget, left))


def _entries(mem: Memory) -> tuple[bool, list[str]]:
    """A replica without the agent's files: index the database's new entries and tombstones, if any changed
    since this object last did (mdmemory.index.entries); the rest of the index is the agent's host's to keep."""
    log = mem.store.entry_log()
    version = log.version() if log is not None else None
    if version is None or version == mem.entries_seen:
        return False, []
    try:
        report = mem._sync(wait=0).to_dict()
    except LockError:
        return True, [f"another process{_busy(mem)} is indexing; results may be a few seconds old"]
    except EmbeddingsPending as exc:
        report = exc.report
    except (ProviderError, StoreError) as exc:
        return True, [f"retained entries could not be indexed; results may be stale: {exc}"]
    mem.entries_seen = version
    return False, [f"{e['path']}: {e['error']}" for e in report.get("errors", [])]


def _leftover_note(mem: Memory, deferred: int, pending: int) -> str:
    who = start(mem, "index")
    parts = []
    if deferred:
        parts.append(f"{deferred} changed file(s) are being indexed by {who}")
    if pending:
        what = f"{pending} chunk(s) are not embedded yet and are matched by keywords only"
        parts.append(f"{what}; they are being embedded by {who}" if not deferred else what)
    error = read_health(mem.agent.store_path).get("lastError") or mem.last_error
    if pending and error:
        parts.append(f"last error: {error['error']}")
    return "; ".join(parts)


def start(mem: Memory, purpose: str) -> str:
    """Make sure someone does the background work (a sync, or a rebuild); returns who, for a warning."""
    if purpose == "index" and mem.background == "owner":
        return "the background indexer of this process (within about a second)"
    watch = read_watch_state(mem.agent)
    if watch.get("running"):
        pid = watch.get("pid")
        if purpose == "rebuild":
            return (
                f"not rebuilding while `mdmemory watch` (pid {pid}) owns this index; restart it (it rebuilds on "
                "start) or stop it and run `mdmemory index`"
            )
        return f"`mdmemory watch` (pid {pid})"
    info = worker.running(mem.agent.store_path)
    if info is None and mem.background == "worker" and mem.config is not None:
        try:
            info = worker.spawn(mem.agent, mem.config.source, purpose, dict(mem.env))
        except (OSError, MdMemoryError) as exc:
            return f"no one (a background worker could not start: {exc}; run `mdmemory index`)"
    if info is not None:
        return _worker_doing(info, purpose)
    thread = mem._background
    if thread is None or not thread.is_alive():
        thread = threading.Thread(target=_background_sync, args=(mem,), name="mdmemory-search-sync", daemon=True)
        mem._background = thread
        thread.start()
    return "rebuilding in the background" if purpose == "rebuild" else "a background sync in this process"


def _worker_doing(info: worker.WorkerInfo, purpose: str) -> str:
    if purpose != "rebuild":
        return f"a background worker (pid {info.pid})"
    if info.purpose == "rebuild":
        return f"rebuilding (pid {info.pid})"
    return f"waiting for the background worker (pid {info.pid}) to finish; a search after that starts the rebuild"


def mismatch_note(mem: Memory) -> str:
    """What status says about an index built for another identity: who is rebuilding it, or who will."""
    stored = mem.store.get_meta("identity") or {}
    info = worker.running(mem.agent.store_path)
    if info is not None:
        action = _worker_doing(info, "rebuild")
    elif mem._background is not None and mem._background.is_alive():
        action = "rebuilding in the background"
    elif mem.settings.sync.on_search:
        action = "searches answer by keywords only; the next search starts a rebuild (or run `mdmemory index`)"
    else:
        action = "searches answer by keywords only; run `mdmemory index` to rebuild"
    return f"{identity_change(stored, mem.indexer.identity())}: {action}"


def worker_state(mem: Memory) -> dict[str, Any] | None:
    """The background worker process indexing this agent, if one runs: ``{pid, purpose, started}``."""
    info = worker.running(mem.agent.store_path)
    return info.to_dict() if info is not None else None


def _failing(mem: Memory) -> bool:
    """Whether the last sync failed to embed less than ``RECENT_FAILURE_SECONDS`` ago (any process)."""
    error = read_health(mem.agent.store_path).get("lastError") or mem.last_error or {}
    recent = time.time() - float(error.get("at", 0)) < RECENT_FAILURE_SECONDS
    return recent and "pending" in error  # recorded by Memory._sync for EmbeddingsPending


def _busy(mem: Memory) -> str:
    info = worker.running(mem.agent.store_path)
    if info is not None:
        return f" (background worker, pid {info.pid})"
    watch = read_watch_state(mem.agent)
    return f" (`mdmemory watch`, pid {watch['pid']})" if watch.get("running") else ""


def _background_sync(mem: Memory) -> None:
    """A sync on its own connection (this object's keeps serving searches), retried with backoff like the
    worker's while the provider is down; it stops when ``mem`` closes."""
    other = type(mem)(mem.agent, mem.config, choice=mem.choice, env=mem.env)
    other.should_stop = mem._closing.is_set
    try:
        worker.settle(other, worker.PATIENCE_SECONDS, mem._closing.wait)
        mem._last_error = None  # this object's own failed catch-up is resolved: status must not show it
    except MdMemoryError:
        pass  # recorded in the health file as lastError by Memory._sync; status shows it
    except OSError:
        pass
    finally:
        if other._store is not None:
            other._store.close()  # the provider is shared with ``mem``: do not close it
