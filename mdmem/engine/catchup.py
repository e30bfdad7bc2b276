"""Catching up before a search, and starting the background work a search leaves behind.

Before answering, a search (``sync.onSearch``) brings the index up to date as far as it cheaply can:

- an index built for another identity (provider, model, chunking...) than the config says starts a
  rebuild in the background; searches answer from the old index, by keywords, until the swap;
- a small change (``SMALL_CHANGE_FILES`` files, ``SMALL_CHANGE_BYTES``) is synced inline, embeddings too;
- a larger one gets its text indexed inline for up to ``SEARCH_BUDGET_SECONDS`` (no embedding: found by
  keywords at once), and its embeddings and any files left over go to the background.

Background work is a thread in long-lived processes (MCP server, agent runtimes) and a detached worker
process (``mdmem.engine.worker``) for the command line, whose process ends right after answering. None is
started while ``mdmem watch`` runs for the agent (it does the work) or while a worker already runs.
Every warning names who is doing the work, so none promises work that will not happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

from mdmem.config.load import AgentConfig, Config
from mdmem.engine.keeper import IndexKeeper
from mdmem.engine.watchstate import read_watch_state
from mdmem.providers import deadline
from mdmem.store.health import read_health
from mdmem.util.errors import EmbeddingsPending, LockError, MdMemoryError, ProviderError, StoreError, WorkspaceError

# Imported where they are used: a command that never searches (``mdmem get``) pays for none of them.
if TYPE_CHECKING:
    from collections.abc import Mapping

    from mdmem.engine.background import BackgroundWork
    from mdmem.engine.worker import WorkerInfo

SMALL_CHANGE_FILES = 8  # a search syncs up to this many changed files before answering, embeddings included...
SMALL_CHANGE_BYTES = 256 * 1024  # ...totalling at most this much
SEARCH_BUDGET_SECONDS = 1.0  # for a larger change, a search indexes text for this long, then leaves the rest
RECENT_FAILURE_SECONDS = 60.0  # after a failed embedding, searches leave embedding to the background this long
Background = Literal["thread", "worker", "owner"]


class Sibling(Protocol):
    """A second engine on the same agent (its own connection, the same provider) a background sync runs on."""

    def sync(self) -> dict[str, Any]: ...

    def close(self, *, provider: bool = True) -> None: ...


class CatchUp:
    """What a search does first, and who does the work it leaves (see the module docstring).

    ``background``: who does that work — ``"thread"`` (long-lived processes), ``"worker"`` (the command
    line), or ``"owner"``: the engine's owner embeds what waits itself (the service's indexer) and only a
    rebuild gets a thread. ``interval``: a long-lived caller answering many searches a second (the service)
    sets it, and a search then catches up at most once per interval; ``changed()`` makes the next one catch
    up. ``enabled``: False for a second reader of an index another object keeps up to date. ``budgeted``:
    True for a caller answering within a time budget (the service): a catch-up then indexes text only, stops
    at the deadline in force (``deadline.until``), and leaves the rest, and every vector, to the background.
    """

    def __init__(
        self,
        keeper: IndexKeeper,
        config: Config | None,
        env: Mapping[str, str],
        sibling: Callable[[Callable[[], bool]], Sibling],
    ) -> None:
        self.keeper = keeper
        self.agent: AgentConfig = keeper.agent
        self.config = config
        self.env = env
        self.sibling = sibling  # (should_stop) -> a second engine for a background sync
        self.background: Background = "thread"
        self.interval = 0.0
        self.enabled = True
        self.budgeted = False
        self.entries_seen: tuple[int, int] | None = None  # the EntryLog version this replica last indexed
        self._changes = 0  # bumped by changed(): a catch-up that began before a write does not cover it
        self._caught_up: tuple[float, int, tuple[bool, list[str]]] | None = None
        self._work: BackgroundWork | None = None

    # -- when -----------------------------------------------------------------------------------------
    def changed(self) -> None:
        """Something wrote to the memory files: the next search catches up, whatever ``interval``."""
        self._changes += 1

    @property
    def announced(self) -> bool:
        """Whether ``changed()`` was called (or nothing caught up yet) since the last catch-up began."""
        last = self._caught_up
        return last is None or last[1] != self._changes

    def due(self) -> bool:
        """Whether the next search would catch up with the files (see ``interval``)."""
        last = self._caught_up
        return last is None or last[1] != self._changes or time.monotonic() - last[0] >= self.interval

    def run(self) -> tuple[bool, list[str]]:
        """Catch up before answering, unless done within ``interval``: (stale, notes)."""
        if not self.enabled:
            return False, []
        last = self._caught_up
        if last is not None and not self.due():
            return last[2][0], list(last[2][1])
        now, changes = time.monotonic(), self._changes  # what this catch-up covers
        result = self.before_search()
        self._caught_up = (now, changes, result) if self.interval > 0 else None
        return result

    # -- what -----------------------------------------------------------------------------------------
    def before_search(self) -> tuple[bool, list[str]]:
        """Catch up before answering. Returns (stale, notes); never waits for another writer."""
        if not self.agent.files_here:
            return self._entries()
        stored = self.keeper.store.get_meta("identity")
        if stored is not None and not self.keeper.indexer.identity_matches():
            from mdmem.index.identity import identity_change

            return True, [f"{identity_change(stored, self.keeper.indexer.identity())}: {self.start('rebuild')}"]
        notes: list[str] = []
        report: dict[str, Any] = {}
        try:  # a transcript past its deltas gets its copy now, indexed below
            failed = self.keeper.indexer.refresh_transcripts().errors
        except OSError as exc:
            failed = [{"path": "sessions/transcripts/", "error": str(exc)}]
        notes += [
            f"OpenClaw transcripts could not be copied; session results may be stale: {e['error']}" for e in failed
        ]
        changed = self.keeper.indexer.changed_files()
        if changed:
            small = len(changed) <= SMALL_CHANGE_FILES and sum(n for _, _, n in changed) <= SMALL_CHANGE_BYTES
            # while the provider fails, a search does not wait for it again; a caller with a time budget never does
            embed = small and not self.budgeted and not self._failing()
            try:
                report = self.keeper.sync(wait=0, embed=embed, budget=self._text_budget(small)).to_dict()
            except LockError:
                self.changed()  # not caught up: the next search tries again (else not before ``catch_up_interval``)
                return True, [f"another process{self._busy()} is indexing; results may be a few seconds old"]
            except EmbeddingsPending as exc:
                report = exc.report  # the text is indexed; the note below says what is not embedded
            except WorkspaceError as exc:  # a missing root (mdmem.files.roots): its files are kept, not indexed
                return True, [str(exc)]
            except ProviderError as exc:
                return True, [f"could not index the changed files; results may be stale: {exc}"]
            except StoreError as exc:  # a full disk or a read-only index: answer from what it holds
                return True, [f"changed files could not be indexed; results may be stale: {exc}"]
            notes.extend(f"{e['path']}: {e['error']}" for e in report.get("errors", []))
        deferred = int(report.get("deferred", 0))
        if deferred:
            self.changed()  # files left for later: the next search goes on with them
        pending = self.keeper.store.pending_count()
        if deferred or pending:
            notes.append(self._leftover_note(deferred, pending))
        return bool(deferred), notes

    def _text_budget(self, small: bool) -> float | None:
        """Seconds the text of the changed files may take: a small change all it needs, a larger one
        ``SEARCH_BUDGET_SECONDS``; for a budgeted caller never past the deadline in force."""
        budget = None if small else SEARCH_BUDGET_SECONDS
        left = deadline.time_left() if self.budgeted else None
        if left is None:
            return budget
        return max(0.0, left if budget is None else min(budget, left))

    def _entries(self) -> tuple[bool, list[str]]:
        """A replica without the agent's files: index the database's new entries and tombstones, if any changed
        since this object last did (mdmem.index.entries); the rest of the index is the agent's host's to keep."""
        log = self.keeper.store.entry_log()
        version = log.version() if log is not None else None
        if version is None or version == self.entries_seen:
            return False, []
        try:
            report = self.keeper.sync(wait=0).to_dict()
        except LockError:
            return True, [f"another process{self._busy()} is indexing; results may be a few seconds old"]
        except EmbeddingsPending as exc:
            report = exc.report
        except (ProviderError, StoreError) as exc:
            return True, [f"retained entries could not be indexed; results may be stale: {exc}"]
        self.entries_seen = version
        return False, [f"{e['path']}: {e['error']}" for e in report.get("errors", [])]

    def _leftover_note(self, deferred: int, pending: int) -> str:
        who = self.start("index")
        parts = []
        if deferred:
            parts.append(f"{deferred} changed file(s) are being indexed by {who}")
        if pending:
            what = f"{pending} chunk(s) are not embedded yet and are matched by keywords only"
            parts.append(f"{what}; they are being embedded by {who}" if not deferred else what)
        error = read_health(self.agent.store_path).get("lastError") or self.keeper.last_error
        if pending and error:
            parts.append(f"last error: {error['error']}")
        return "; ".join(parts)

    def start(self, purpose: str) -> str:
        """Make sure someone does the background work (a sync, or a rebuild); returns who, for a warning."""
        from mdmem.engine import worker

        if purpose == "index" and self.background == "owner":
            return "the background indexer of this process (within about a second)"
        watch = read_watch_state(self.agent)
        if watch.get("running"):
            pid = watch.get("pid")
            if purpose == "rebuild":
                return (
                    f"not rebuilding while `mdmem watch` (pid {pid}) owns this index; restart it (it rebuilds on "
                    "start) or stop it and run `mdmem index`"
                )
            return f"`mdmem watch` (pid {pid})"
        info = worker.running(self.agent.store_path)
        if info is None and self.background == "worker" and self.config is not None:
            try:
                info = worker.spawn(self.agent, self.config.source, purpose, dict(self.env))
            except (OSError, MdMemoryError) as exc:
                return f"no one (a background worker could not start: {exc}; run `mdmem index`)"
        if info is not None:
            return self._worker_doing(info, purpose)
        if self._work is None or not self._work.is_alive():
            self._start_work()
        return "rebuilding in the background" if purpose == "rebuild" else "a background sync in this process"

    @staticmethod
    def _worker_doing(info: WorkerInfo, purpose: str) -> str:
        if purpose != "rebuild":
            return f"a background worker (pid {info.pid})"
        if info.purpose == "rebuild":
            return f"rebuilding (pid {info.pid})"
        return f"waiting for the background worker (pid {info.pid}) to finish; a search after that starts the rebuild"

    def mismatch_note(self) -> str:
        """What status says about an index built for another identity: who is rebuilding it, or who will."""
        from mdmem.engine import worker
        from mdmem.index.identity import identity_change

        stored = self.keeper.store.get_meta("identity") or {}
        info = worker.running(self.agent.store_path)
        if info is not None:
            action = self._worker_doing(info, "rebuild")
        elif self._work is not None and self._work.is_alive():
            action = "rebuilding in the background"
        elif self.keeper.settings.sync.on_search:
            action = "searches answer by keywords only; the next search starts a rebuild (or run `mdmem index`)"
        else:
            action = "searches answer by keywords only; run `mdmem index` to rebuild"
        return f"{identity_change(stored, self.keeper.indexer.identity())}: {action}"

    def worker_state(self) -> dict[str, Any] | None:
        """The background worker process indexing this agent, if one runs: ``{pid, purpose, started}``."""
        from mdmem.engine import worker

        info = worker.running(self.agent.store_path)
        return info.to_dict() if info is not None else None

    def _failing(self) -> bool:
        """Whether the last sync failed to embed less than ``RECENT_FAILURE_SECONDS`` ago (any process)."""
        error = read_health(self.agent.store_path).get("lastError") or self.keeper.last_error or {}
        recent = time.time() - float(error.get("at", 0)) < RECENT_FAILURE_SECONDS
        return recent and "pending" in error  # recorded by IndexKeeper.sync for EmbeddingsPending

    def _busy(self) -> str:
        from mdmem.engine import worker

        info = worker.running(self.agent.store_path)
        if info is not None:
            return f" (background worker, pid {info.pid})"
        watch = read_watch_state(self.agent)
        return f" (`mdmem watch`, pid {watch['pid']})" if watch.get("running") else ""

    def _start_work(self) -> None:
        """A sync on a connection of its own (this engine's keeps serving searches), retried with the worker's
        backoff while the provider is down or another process writes; it stops when this engine closes."""
        from mdmem.engine import worker
        from mdmem.engine.background import WORKER_BACKOFF, BackgroundWork

        other: Sibling | None = None

        def job() -> dict[str, Any]:
            nonlocal other
            if other is None:
                other = self.sibling(lambda: work.stopping)
            return other.sync()

        def finished() -> None:
            if other is not None:
                other.close(provider=False)  # the provider is shared with this engine: do not close it

        work = BackgroundWork(
            job,
            name="mdmemory-search-sync",
            patience=worker.PATIENCE_SECONDS,
            retry=(EmbeddingsPending, LockError),
            backoff=WORKER_BACKOFF,
            on_done=lambda _: self.keeper.resolved(),  # this engine's own failed catch-up is resolved
            on_exit=finished,
        )  # a failure that ends it is in the health file (lastError) already: status shows it
        self._work = work
        work.start()

    def stop(self) -> None:
        """Stop the background sync (between files) and join it."""
        if self._work is not None:
            self._work.stop(60)
